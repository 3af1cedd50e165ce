//! Every RPC of the `fleetrl.v1` protos, found in their descriptors
//! ([`fleetrl_proto::FILE_DESCRIPTOR_SET`]) rather than in a hand-written list, and a caller
//! that sends any bytes to any of them: a new RPC is called by every test that walks
//! [`methods`] the day it is added to a `.proto`.
//!
//! Every method is called the same way whatever its streaming kind: on the wire a unary call is a
//! stream of one message, so one message goes out and the first answer (a message or a status)
//! comes back.

use std::error::Error as _;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};
use rand::{RngCore, SeedableRng};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, Service};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// How long one call may take to answer before it counts as a hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Which fleetrl binary serves each service. The actor serves only `grpc.health.v1`.
const SERVED_BY: &[(&str, Server)] = &[
    ("fleetrl.v1.LearnerService", Server::Learner),
    ("fleetrl.v1.ReplayService", Server::Replay),
    ("fleetrl.v1.DemoService", Server::Replay),
    ("fleetrl.v1.PolicyService", Server::Serve),
];

/// A binary that serves fleetrl services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `fleet-learner`.
    Learner,
    /// `fleet-replay-server`.
    Replay,
    /// `fleet-serve`.
    Serve,
}

/// One RPC as the descriptors declare it.
#[derive(Debug, Clone)]
pub struct Method {
    /// `/package.Service/Method`, the HTTP/2 path.
    pub path: String,
    /// The binary that serves it.
    pub server: Server,
    /// Whether the client sends a stream.
    pub client_streaming: bool,
    /// Whether the server answers with a stream.
    pub server_streaming: bool,
    /// The request message's descriptor.
    input: DescriptorProto,
}

/// Every method of every service in the fleetrl protos.
///
/// # Panics
/// On a service that [`SERVED_BY`] does not map to a binary, so that a new service is never
/// left out of the tests that walk every RPC.
pub fn methods() -> Vec<Method> {
    let set = FileDescriptorSet::decode(fleetrl_proto::FILE_DESCRIPTOR_SET)
        .expect("the build script's descriptor set decodes");
    let messages: Vec<(String, &DescriptorProto)> = set
        .file
        .iter()
        .flat_map(|f| {
            f.message_type
                .iter()
                .map(move |m| (format!(".{}.{}", f.package(), m.name()), m))
        })
        .collect();
    let mut methods = Vec::new();
    for file in &set.file {
        for service in &file.service {
            let name = format!("{}.{}", file.package(), service.name());
            let server = server_of(&name);
            for method in &service.method {
                let input = messages
                    .iter()
                    .find(|(full, _)| full == method.input_type())
                    .map(|(_, m)| (*m).clone())
                    .unwrap_or_else(|| panic!("{name}: no message {}", method.input_type()));
                methods.push(Method {
                    path: format!("/{name}/{}", method.name()),
                    server,
                    client_streaming: method.client_streaming(),
                    server_streaming: method.server_streaming(),
                    input,
                });
            }
        }
    }
    methods
}

fn server_of(service: &str) -> Server {
    SERVED_BY
        .iter()
        .find(|(name, _)| *name == service)
        .map(|(_, server)| *server)
        .unwrap_or_else(|| {
            panic!(
                "service {service} is in the protos but no binary is known to serve it: add it \
                 to SERVED_BY in tests/src/rpc.rs (and serve it)"
            )
        })
}

impl Method {
    /// Request payloads no well-behaved client sends, each with what it is: random bytes, a
    /// valid request cut short, and the empty message.
    pub fn garbage(&self) -> Vec<(&'static str, Bytes)> {
        // Seeded by the path, so a failure names bytes that can be sent again.
        let mut hasher = std::hash::DefaultHasher::new();
        self.path.hash(&mut hasher);
        let mut random = vec![0u8; 64];
        rand::rngs::SmallRng::seed_from_u64(hasher.finish()).fill_bytes(&mut random);
        let mut truncated = self.valid_request();
        truncated.truncate(truncated.len().saturating_sub(1));
        vec![
            ("64 random bytes", random.into()),
            ("a truncated request", truncated.freeze()),
            ("the empty message", Bytes::new()),
        ]
    }

    /// A request that sets every field of the input message once, with the first field the
    /// descriptor names of the right wire type, so that dropping its last byte truncates it.
    fn valid_request(&self) -> BytesMut {
        let mut buf = BytesMut::new();
        for field in &self.input.field {
            let number = field.number() as u32;
            match field.r#type() {
                Type::Double | Type::Fixed64 | Type::Sfixed64 => {
                    encode_key(number, WireType::SixtyFourBit, &mut buf);
                    buf.put_u64_le(1);
                }
                Type::Float | Type::Fixed32 | Type::Sfixed32 => {
                    encode_key(number, WireType::ThirtyTwoBit, &mut buf);
                    buf.put_u32_le(1);
                }
                Type::String | Type::Bytes => {
                    encode_key(number, WireType::LengthDelimited, &mut buf);
                    encode_varint(1, &mut buf);
                    buf.put_u8(b'x');
                }
                // proto3 has no groups; an empty nested message, which cut short loses its length.
                Type::Message | Type::Group => {
                    encode_key(number, WireType::LengthDelimited, &mut buf);
                    encode_varint(0, &mut buf);
                }
                _ => {
                    encode_key(number, WireType::Varint, &mut buf);
                    encode_varint(1, &mut buf);
                }
            }
        }
        if buf.is_empty() {
            // A message with no fields: an unknown length-delimited field still has to be
            // skipped whole.
            encode_key(1, WireType::LengthDelimited, &mut buf);
            encode_varint(2, &mut buf);
            buf.put_slice(b"xy");
        }
        buf
    }
}

/// gRPC frames whose 5-byte prefix lies, each with what it is.
pub fn bad_frames() -> Vec<(&'static str, Bytes)> {
    let frame = |flag: u8, length: u32| {
        let mut buf = BytesMut::new();
        buf.put_u8(flag);
        buf.put_u32(length);
        buf.put_slice(&[0x0a; 16]);
        buf.freeze()
    };
    vec![
        ("a length prefix of 4 GiB", frame(0, u32::MAX)),
        (
            "a length prefix of 16 MiB on a 16-byte body",
            frame(0, 16 << 20),
        ),
        ("the compressed flag with no encoding", frame(1, 16)),
    ]
}

/// Sends `message` to `method` on `channel` (with `authorization: Bearer <token>` when given)
/// and returns the code of the server's first answer (`Ok` for a message). An error means the
/// server gave no gRPC answer: the connection broke or nothing came in [`ANSWER_WITHIN`].
pub async fn call(
    channel: &Channel,
    method: &Method,
    token: Option<&str>,
    message: Bytes,
) -> Result<Code, String> {
    let mut grpc = tonic::client::Grpc::new(channel.clone())
        .max_decoding_message_size(fleetrl_runtime::net::MAX_MESSAGE_BYTES);
    let mut request = Request::new(tokio_stream::once(message));
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        request.metadata_mut().insert("authorization", value);
    }
    let path = PathAndQuery::try_from(method.path.as_str()).map_err(|e| e.to_string())?;
    let answer = async {
        grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
        match grpc.streaming(request, path, RawCodec).await {
            Ok(response) => match response.into_inner().message().await {
                Ok(_) => Ok(Code::Ok),
                Err(status) => server_code(status),
            },
            Err(status) => server_code(status),
        }
    };
    tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .unwrap_or_else(|_| Err(format!("no answer in {ANSWER_WITHIN:?}")))
}

/// Sends `body` as the whole request body of `method`, so that its gRPC framing is whatever
/// `body` says ([`bad_frames`]), and returns the status code the server answers with.
pub async fn call_framed(
    channel: &Channel,
    method: &Method,
    token: &str,
    body: Bytes,
) -> Result<Code, String> {
    let request = http::Request::post(method.path.as_str())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        .body(tonic::body::Body::new(Full::new(body)))
        .map_err(|e| e.to_string())?;
    let mut channel = channel.clone();
    let answer = async {
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(|e| format!("not ready: {e}"))?;
        let response = channel
            .call(request)
            .await
            .map_err(|e| format!("the connection broke: {e}"))?;
        if let Some(status) = Status::from_header_map(response.headers()) {
            return Ok(status.code());
        }
        // The first message or the trailers: a streaming method may answer with messages first.
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("the response broke: {e}"))?;
            if frame.is_data() {
                return Ok(Code::Ok);
            }
            if let Some(status) = frame.trailers_ref().and_then(Status::from_header_map) {
                return Ok(status.code());
            }
        }
        Err("the response ended without a grpc-status".to_string())
    };
    tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .unwrap_or_else(|_| Err(format!("no answer in {ANSWER_WITHIN:?}")))
}

/// The code of a status the server sent; a status tonic made of a transport error carries that
/// error as its source.
fn server_code(status: Status) -> Result<Code, String> {
    match status.source() {
        None => Ok(status.code()),
        Some(_) => Err(format!("the connection broke: {status:?}")),
    }
}

/// Messages as the bytes they are on the wire, in both directions.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}
