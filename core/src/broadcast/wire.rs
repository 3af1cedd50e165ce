//! The weight stream on the wire with no copy of the weights in user space: plain gRPC
//! (`SubscribeWeights`, the same bytes any gRPC client decodes), framed here instead of by
//! tonic's codec, which copies every message into its own buffer on both ends.
//!
//! - **Learner:** [`LearnerRoutes`] serves `LearnerService` and answers `SubscribeWeights`
//!   itself: each message goes out as two HTTP/2 data frames, a small header (the gRPC prefix,
//!   every field but `chunk`, and `chunk`'s key and length) and the chunk's bytes, which are a
//!   slice of the published version shared by every subscriber.
//! - **Actor:** [`subscribe`] reads the response's data frames as h2 hands them over and
//!   cuts each message out of them without joining them; the chunk stays a list of those
//!   frames' bytes ([`WireWeights`]) until [`super::Receiver::push_wire`] writes it into its
//!   tensor. The only copies left are the kernel's and that last write.
//!
//! Protobuf lets a message's fields come in any order, so putting `chunk` last keeps the
//! stream valid for every decoder; the reader here takes the fields in any order as well.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fleetrl_proto::v1::learner_service_server::{LearnerService, LearnerServiceServer};
use fleetrl_proto::v1::{self, SubscribeWeightsRequest, Weights};
use fleetrl_runtime::net::Channel;
use futures::{Stream, StreamExt};
use http_body::Frame;
use http_body_util::{BodyExt, Limited, StreamBody};
use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::{BoxFuture, Service};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::{Request, Status};

use fleetrl_runtime::net::MAX_MESSAGE_BYTES;

/// The method's HTTP/2 path.
pub const SUBSCRIBE_WEIGHTS_PATH: &str = "/fleetrl.v1.LearnerService/SubscribeWeights";

/// `Weights.chunk`'s field number.
const CHUNK_FIELD: u32 = 5;

/// Largest `SubscribeWeightsRequest` accepted (it is a few bytes).
const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A gRPC message as two frames: the prefix with every field of `msg` but `chunk` (and
/// `chunk`'s key and length), then `chunk`'s bytes themselves, uncopied.
pub fn frames(mut msg: Weights) -> (Bytes, Bytes) {
    let chunk = std::mem::take(&mut msg.chunk);
    let fields = msg.encoded_len();
    let mut chunk_key = BytesMut::new();
    if !chunk.is_empty() {
        encode_key(CHUNK_FIELD, WireType::LengthDelimited, &mut chunk_key);
        encode_varint(chunk.len() as u64, &mut chunk_key);
    }
    let length = fields + chunk_key.len() + chunk.len();
    let mut header = BytesMut::with_capacity(5 + fields + chunk_key.len());
    header.put_u8(0);
    header.put_u32(u32::try_from(length).expect("a weights message is under 4 GiB"));
    msg.encode(&mut header)
        .expect("the buffer was sized for the message");
    header.put_slice(&chunk_key);
    (header.freeze(), chunk)
}

/// `LearnerService` with `SubscribeWeights` framed by [`frames`]; every other method goes to
/// the generated server. Compatible with every gRPC client: the bytes are the same.
pub struct LearnerRoutes<T> {
    inner: LearnerServiceServer<T>,
    service: Arc<T>,
}

impl<T> Clone for LearnerRoutes<T> {
    fn clone(&self) -> Self {
        LearnerRoutes {
            inner: self.inner.clone(),
            service: self.service.clone(),
        }
    }
}

impl<T: LearnerService> LearnerRoutes<T> {
    /// Routes for `service`, with fleetrl's message size limits.
    pub fn new(service: T) -> LearnerRoutes<T> {
        let service = Arc::new(service);
        LearnerRoutes {
            inner: LearnerServiceServer::from_arc(service.clone())
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            service,
        }
    }
}

impl<T> NamedService for LearnerRoutes<T> {
    const NAME: &'static str = <LearnerServiceServer<T> as NamedService>::NAME;
}

impl<T: LearnerService> Service<http::Request<Body>> for LearnerRoutes<T> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != SUBSCRIBE_WEIGHTS_PATH {
            return self.inner.call(request);
        }
        let service = self.service.clone();
        Box::pin(async move {
            Ok(subscribe_response(service, request)
                .await
                .unwrap_or_else(Status::into_http))
        })
    }
}

/// Answers one `SubscribeWeights` call.
async fn subscribe_response<T: LearnerService>(
    service: Arc<T>,
    request: http::Request<Body>,
) -> Result<http::Response<Body>, Status> {
    let (parts, body) = request.into_parts();
    if let Some(encoding) = parts.headers.get("grpc-encoding") {
        if encoding != "identity" {
            return Err(Status::unimplemented(format!(
                "SubscribeWeights takes uncompressed requests, got grpc-encoding {encoding:?}"
            )));
        }
    }
    let bytes = Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
        .map_err(|e| Status::invalid_argument(format!("reading the request: {e}")))?
        .to_bytes();
    let message = match bytes.first() {
        Some(0) if bytes.len() >= 5 && bytes.len() - 5 == be_u32(&bytes[1..5]) as usize => {
            bytes.slice(5..)
        }
        _ => {
            return Err(Status::invalid_argument(format!(
                "SubscribeWeights wants one uncompressed gRPC message, got {} bytes that are not",
                bytes.len()
            )))
        }
    };
    let message = SubscribeWeightsRequest::decode(message)
        .map_err(|e| Status::invalid_argument(format!("decoding SubscribeWeightsRequest: {e}")))?;
    let request = Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        message,
    );
    let (metadata, stream, _) = service.subscribe_weights(request).await?.into_parts();
    let body = StreamBody::new(body_frames(Box::pin(stream)));
    let mut response = http::Response::new(Body::new(body));
    *response.headers_mut() = metadata.into_headers();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

/// The response body for a stream of messages: two data frames a message, then the trailers
/// (`grpc-status` 0 at the stream's end, or the first error's status).
fn body_frames<S>(stream: S) -> impl Stream<Item = Result<Frame<Bytes>, Infallible>> + Send
where
    S: Stream<Item = Result<Weights, Status>> + Send + Unpin + 'static,
{
    futures::stream::unfold(Some(stream), |stream| async move {
        let mut stream = stream?;
        let (frames, next) = match stream.next().await {
            Some(Ok(message)) => {
                let (header, chunk) = frames(message);
                let mut out = vec![Frame::data(header)];
                if !chunk.is_empty() {
                    out.push(Frame::data(chunk));
                }
                (out, Some(stream))
            }
            Some(Err(status)) => (vec![trailers(&status)], None),
            None => (vec![trailers(&Status::ok(""))], None),
        };
        Some((futures::stream::iter(frames.into_iter().map(Ok)), next))
    })
    .flatten()
}

fn trailers(status: &Status) -> Frame<Bytes> {
    let mut headers = http::HeaderMap::new();
    if status.add_header(&mut headers).is_err() {
        headers.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    Frame::trailers(headers)
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One received `Weights` message: every field but the chunk decoded, the chunk as the
/// pieces of the frames it arrived in (in order, uncopied).
#[derive(Debug, Default)]
pub struct WireWeights {
    /// The message with `chunk` empty.
    pub header: Weights,
    /// `chunk`'s bytes.
    pub chunk: Vec<Bytes>,
}

impl WireWeights {
    /// The chunk's length in bytes.
    pub fn chunk_len(&self) -> usize {
        self.chunk.iter().map(Bytes::len).sum()
    }

    /// The whole message, the chunk joined (a copy: for tests and callers that want one).
    pub fn into_weights(self) -> Weights {
        let mut chunk = BytesMut::with_capacity(self.chunk_len());
        for piece in &self.chunk {
            chunk.put_slice(piece);
        }
        Weights {
            chunk: chunk.freeze(),
            ..self.header
        }
    }
}

/// Subscribes to the learner's weights on `channel`. Read the stream with
/// [`WeightStream::message`].
pub async fn subscribe(
    channel: Channel,
    request: SubscribeWeightsRequest,
) -> Result<WeightStream, Status> {
    let mut body = BytesMut::with_capacity(5 + request.encoded_len());
    body.put_u8(0);
    body.put_u32(request.encoded_len() as u32);
    request
        .encode(&mut body)
        .expect("the buffer was sized for the message");
    let mut call = http::Request::new(Body::new(http_body_util::Full::new(body.freeze())));
    *call.method_mut() = http::Method::POST;
    *call.uri_mut() = http::Uri::from_static(SUBSCRIBE_WEIGHTS_PATH);
    let headers = call.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    let mut channel = channel;
    std::future::poll_fn(|cx| Service::poll_ready(&mut channel, cx))
        .await
        .map_err(|e| Status::unavailable(format!("weight subscription: {e}")))?;
    let response = Service::call(&mut channel, call)
        .await
        .map_err(|e| Status::unavailable(format!("weight subscription: {e}")))?;
    if response.status() != http::StatusCode::OK {
        return Err(Status::unavailable(format!(
            "weight subscription answered HTTP {}",
            response.status()
        )));
    }
    // A call refused at once answers with its status in the headers alone.
    if let Some(status) = Status::from_header_map(response.headers()) {
        if status.code() != tonic::Code::Ok {
            return Err(status);
        }
    }
    Ok(WeightStream {
        body: response.into_body(),
        parser: Parser::default(),
        ended: false,
    })
}

/// The messages of one weight subscription.
#[derive(Debug)]
pub struct WeightStream {
    body: Body,
    parser: Parser,
    ended: bool,
}

impl WeightStream {
    /// The next message; `None` when the learner ends the stream cleanly, the learner's
    /// status when it ends it with an error.
    pub async fn message(&mut self) -> Result<Option<WireWeights>, Status> {
        loop {
            if let Some(message) = self.parser.next()? {
                return Ok(Some(message));
            }
            if self.ended {
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.parser.push(data),
                    Err(frame) => {
                        let status = frame
                            .trailers_ref()
                            .and_then(Status::from_header_map)
                            .unwrap_or_else(|| Status::internal("trailers without grpc-status"));
                        if status.code() != tonic::Code::Ok {
                            return Err(status);
                        }
                        self.end()?;
                    }
                },
                Some(Err(status)) => return Err(status),
                None => self.end()?,
            }
        }
    }

    fn end(&mut self) -> Result<(), Status> {
        self.ended = true;
        if self.parser.buffered > 0 {
            return Err(Status::internal(format!(
                "weight stream ended inside a message ({} bytes left over)",
                self.parser.buffered
            )));
        }
        Ok(())
    }
}

/// Cuts gRPC messages out of data frames without joining the frames.
#[derive(Debug, Default)]
struct Parser {
    pieces: Pieces,
    buffered: usize,
    /// The length of the message whose prefix was read.
    length: Option<usize>,
}

impl Parser {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.buffered += data.len();
        self.pieces.0.push_back(data);
    }

    /// The next whole message, if every byte of it is here.
    fn next(&mut self) -> Result<Option<WireWeights>, Status> {
        let length = match self.length {
            Some(length) => length,
            None if self.buffered >= 5 => {
                let mut prefix = [0u8; 5];
                self.pieces.copy_to_slice(&mut prefix);
                self.buffered -= 5;
                if prefix[0] != 0 {
                    return Err(Status::unimplemented(
                        "compressed weights messages are not supported",
                    ));
                }
                let length = be_u32(&prefix[1..]) as usize;
                if length > MAX_MESSAGE_BYTES {
                    return Err(Status::resource_exhausted(format!(
                        "weights message of {length} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
                    )));
                }
                self.length = Some(length);
                length
            }
            None => return Ok(None),
        };
        if self.buffered < length {
            return Ok(None);
        }
        self.length = None;
        self.buffered -= length;
        let message = Pieces(self.pieces.take_pieces(length).into());
        decode(message).map(Some)
    }
}

/// A message's fields in any order: `chunk` kept as pieces, the others re-encoded into one
/// small buffer that prost decodes.
fn decode(mut message: Pieces) -> Result<WireWeights, Status> {
    let bad = |e: prost::DecodeError| Status::internal(format!("decoding Weights: {e}"));
    let mut header = BytesMut::new();
    let mut chunk = Vec::new();
    while message.has_remaining() {
        let (tag, wire_type) = decode_key(&mut message).map_err(bad)?;
        let length = match wire_type {
            WireType::LengthDelimited => decode_varint(&mut message).map_err(bad)? as usize,
            _ => 0,
        };
        if length > message.remaining() {
            return Err(Status::internal(format!(
                "decoding Weights: field {tag} runs {length} bytes past the message's end"
            )));
        }
        if tag == CHUNK_FIELD && wire_type == WireType::LengthDelimited {
            // A repeated scalar field: the last one wins, as in any decoder.
            chunk = message.take_pieces(length);
            continue;
        }
        encode_key(tag, wire_type, &mut header);
        match wire_type {
            WireType::Varint => {
                encode_varint(decode_varint(&mut message).map_err(bad)?, &mut header)
            }
            WireType::ThirtyTwoBit => header.put_u32_le(message.try_get_u32_le().map_err(short)?),
            WireType::SixtyFourBit => header.put_u64_le(message.try_get_u64_le().map_err(short)?),
            WireType::LengthDelimited => {
                encode_varint(length as u64, &mut header);
                for piece in message.take_pieces(length) {
                    header.put_slice(&piece);
                }
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(Status::internal(format!(
                    "decoding Weights: field {tag} uses groups"
                )))
            }
        }
    }
    Ok(WireWeights {
        header: Weights::decode(header.freeze()).map_err(bad)?,
        chunk,
    })
}

fn short(e: bytes::TryGetError) -> Status {
    Status::internal(format!("decoding Weights: {e}"))
}

/// Bytes held as the frames they came in.
#[derive(Debug, Default)]
struct Pieces(VecDeque<Bytes>);

impl Pieces {
    /// The next `n` bytes (at most what is here) as pieces, uncopied.
    fn take_pieces(&mut self, mut n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        while n > 0 {
            let Some(front) = self.0.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                out.extend(self.0.pop_front());
            } else {
                out.push(front.split_to(n));
                n = 0;
            }
        }
        out
    }
}

impl Buf for Pieces {
    fn remaining(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }

    fn chunk(&self) -> &[u8] {
        self.0.iter().find(|p| !p.is_empty()).map_or(&[], |p| p)
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let front = self.0.front_mut().expect("advance within remaining()");
            if front.len() <= n {
                n -= front.len();
                self.0.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
        while self.0.front().is_some_and(Bytes::is_empty) {
            self.0.pop_front();
        }
    }
}

/// A `LearnerService` that serves the weight stream alone, as the learner does (chunked
/// subscriptions of an [`super::EncodedCache`], the newest version whenever a subscriber is
/// ready, a subscriber that reads nothing dropped), and refuses every other call: for
/// benchmarks and tests of the broadcast.
pub struct WeightsOnly {
    weights: tokio::sync::watch::Receiver<Arc<Weights>>,
    cache: Arc<super::EncodedCache>,
    counts: super::Counts,
    stall_timeout: Duration,
}

impl WeightsOnly {
    /// Serves what `weights` holds, in `dtype`; a subscriber that reads nothing for a minute
    /// is dropped.
    pub fn new(
        weights: tokio::sync::watch::Receiver<Arc<Weights>>,
        dtype: crate::config::BroadcastDtype,
    ) -> WeightsOnly {
        WeightsOnly {
            weights,
            cache: Arc::new(super::EncodedCache::new(dtype)),
            counts: super::Counts::default(),
            stall_timeout: Duration::from_secs(60),
        }
    }

    /// Drops a subscriber that reads nothing for `timeout` instead.
    pub fn stall_timeout(self, timeout: Duration) -> WeightsOnly {
        WeightsOnly {
            stall_timeout: timeout,
            ..self
        }
    }

    /// What it counts, shared with the running service.
    pub fn counts(&self) -> super::Counts {
        self.counts.clone()
    }
}

type WeightMessages = std::pin::Pin<Box<dyn Stream<Item = Result<Weights, Status>> + Send>>;

#[tonic::async_trait]
impl LearnerService for WeightsOnly {
    async fn get_run_spec(
        &self,
        _: Request<v1::GetRunSpecRequest>,
    ) -> Result<tonic::Response<v1::RunSpec>, Status> {
        Err(Status::unimplemented("weights only"))
    }

    type SubscribeWeightsStream = WeightMessages;

    async fn subscribe_weights(
        &self,
        request: Request<SubscribeWeightsRequest>,
    ) -> Result<tonic::Response<WeightMessages>, Status> {
        let request = request.into_inner();
        if request.chunk_bytes == 0 {
            return Err(Status::invalid_argument(
                "weights only: chunk_bytes must be set",
            ));
        }
        let framing = super::Framing::Chunked {
            cache: self.cache.clone(),
            chunk_bytes: request.chunk_bytes as usize,
        };
        let stream = super::subscription(
            self.weights.clone(),
            request.after_version,
            framing,
            self.stall_timeout,
            self.counts.open(),
        )
        .map(|m| m.map_err(|e| Status::internal(e.to_string())));
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn report_episodes(
        &self,
        _: Request<v1::ReportEpisodesRequest>,
    ) -> Result<tonic::Response<v1::ReportEpisodesResponse>, Status> {
        Err(Status::unimplemented("weights only"))
    }

    async fn get_status(
        &self,
        _: Request<v1::GetStatusRequest>,
    ) -> Result<tonic::Response<v1::LearnerStatus>, Status> {
        Err(Status::unimplemented("weights only"))
    }

    async fn save_checkpoint(
        &self,
        _: Request<v1::SaveCheckpointRequest>,
    ) -> Result<tonic::Response<v1::SaveCheckpointResponse>, Status> {
        Err(Status::unimplemented("weights only"))
    }

    async fn set_parameter(
        &self,
        _: Request<v1::SetParameterRequest>,
    ) -> Result<tonic::Response<v1::SetParameterResponse>, Status> {
        Err(Status::unimplemented("weights only"))
    }
}

#[cfg(test)]
mod tests;
