use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::broadcast::{chunked, encode, test_weights as weights, Receiver};
use crate::config::BroadcastDtype;

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.61).cos() * 3.0).collect()
}

fn messages(dtype: BroadcastDtype, chunk: usize) -> Vec<Weights> {
    chunked(
        &encode(&weights(9, &values(3000)), dtype).unwrap(),
        chunk,
        4,
    )
}

/// The bytes of `messages` as they go on the wire.
fn wire_bytes(messages: &[Weights]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        let (header, chunk) = frames(m.clone());
        out.extend_from_slice(&header);
        out.extend_from_slice(&chunk);
    }
    out
}

/// Everything `bytes`, cut into pieces of `sizes` (cycled), parses into.
fn parse(bytes: &[u8], sizes: &[usize]) -> Vec<WireWeights> {
    let mut parser = Parser::default();
    let mut out = Vec::new();
    let mut at = 0;
    for &size in sizes.iter().cycle() {
        if at == bytes.len() {
            break;
        }
        let end = (at + size).min(bytes.len());
        parser.push(Bytes::copy_from_slice(&bytes[at..end]));
        at = end;
        while let Some(m) = parser.next().unwrap() {
            out.push(m);
        }
    }
    assert_eq!(parser.buffered, 0, "nothing left over");
    out
}

#[test]
fn frames_are_the_message_any_grpc_decoder_reads() {
    for m in messages(BroadcastDtype::F32, 1000) {
        let (header, chunk) = frames(m.clone());
        assert_eq!(header[0], 0, "uncompressed");
        let length = be_u32(&header[1..5]) as usize;
        assert_eq!(length, header.len() - 5 + chunk.len());
        assert_eq!(chunk.as_ptr(), m.chunk.as_ptr(), "the chunk is not copied");
        let mut joined = header[5..].to_vec();
        joined.extend_from_slice(&chunk);
        assert_eq!(Weights::decode(joined.as_slice()).unwrap(), m);
    }
}

#[test]
fn messages_are_cut_out_of_frames_split_anywhere() {
    let sent: Vec<Weights> = messages(BroadcastDtype::F16, 777)
        .into_iter()
        .chain(messages(BroadcastDtype::F32, 4000))
        .chain([weights(10, &[1.0, 2.0])]) // whole params, no chunk
        .collect();
    let bytes = wire_bytes(&sent);
    for sizes in [
        &[bytes.len()][..],
        &[1],
        &[2],
        &[3, 5],
        &[7, 1, 1000],
        &[4096, 13],
    ] {
        let got: Vec<Weights> = parse(&bytes, sizes)
            .into_iter()
            .map(WireWeights::into_weights)
            .collect();
        assert_eq!(got, sent, "pieces of {sizes:?}");
    }
}

#[test]
fn a_chunk_in_one_frame_is_handed_over_uncopied() {
    let m = messages(BroadcastDtype::F32, 4000).remove(0);
    let (header, chunk) = frames(m);
    let mut parser = Parser::default();
    parser.push(header);
    assert!(
        parser.next().unwrap().is_none(),
        "the chunk is still to come"
    );
    parser.push(chunk.clone());
    let got = parser.next().unwrap().unwrap();
    assert_eq!(got.chunk.len(), 1);
    assert_eq!(got.chunk[0].as_ptr(), chunk.as_ptr());
}

#[test]
fn fields_in_protobuf_order_decode_too() {
    // prost puts `chunk` (field 5) before `slice` (field 8).
    for m in messages(BroadcastDtype::F32, 1000) {
        let body = m.encode_to_vec();
        let mut bytes = vec![0];
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
        let got = parse(&bytes, &[5, 100]).remove(0).into_weights();
        assert_eq!(got, m);
    }
}

#[test]
fn f16_pieces_split_inside_an_element_widen_like_whole_chunks() {
    let v = values(3000);
    let sent = messages(BroadcastDtype::F16, 1 << 20);
    let mut whole = Receiver::default();
    let mut split = Receiver::default();
    let (mut a, mut b) = (None, None);
    for m in &sent {
        a = whole.push(m.clone()).unwrap().or(a);
    }
    for m in parse(&wire_bytes(&sent), &[333, 1, 2]) {
        assert!(m.chunk.len() > 1 || m.chunk_len() < 333);
        b = split.push_wire(m).unwrap().or(b);
    }
    let flat = |r: &crate::broadcast::Received| {
        r.with_tensors(|t| Vec::<f32>::try_from(&t[0].1.flatten(0, -1)).unwrap())
    };
    let (a, b) = (flat(&a.unwrap()), flat(&b.unwrap()));
    assert_eq!(a, b);
    assert!(a.iter().zip(&v).all(|(x, v)| (x - v).abs() < 2e-3));
}

#[test]
fn bad_streams_are_named() {
    let mut parser = Parser::default();
    parser.push(Bytes::from_static(&[1, 0, 0, 0, 1, 8]));
    let error = parser.next().unwrap_err();
    assert!(error.message().contains("compressed"), "{error}");

    let mut parser = Parser::default();
    parser.push(Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]));
    let error = parser.next().unwrap_err();
    assert!(error.message().contains("over the"), "{error}");

    // A chunk field whose length runs past the message.
    let mut parser = Parser::default();
    parser.push(Bytes::from_static(&[0, 0, 0, 0, 3, 0x2a, 9, 1]));
    let error = parser.next().unwrap_err();
    assert!(error.message().contains("field 5 runs 9 bytes"), "{error}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Any bytes in any frames: whole messages or a status, never a panic; after the first
    /// error the stream is dropped, as the subscriber does.
    #[test]
    fn any_frames_parse_into_messages_or_a_status(
        frames in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..8),
        prefix in proptest::option::of(0u32..64),
    ) {
        let mut parser = Parser::default();
        if let Some(length) = prefix {
            // A believable prefix, so that the bytes after it reach the field decoder.
            let mut head = vec![0u8];
            head.extend_from_slice(&length.to_be_bytes());
            parser.push(head.into());
        }
        'frames: for frame in frames {
            parser.push(frame.into());
            loop {
                match parser.next() {
                    Ok(Some(message)) => { let _ = message.into_weights(); }
                    Ok(None) => break,
                    Err(_) => break 'frames,
                }
            }
        }
    }

    /// A version's messages cut into frames anywhere parse back into the same messages, and
    /// the receiver rebuilds the version from them.
    #[test]
    fn chunked_messages_split_anywhere_parse_back_exactly(
        sizes in proptest::collection::vec(1usize..5000, 1..6),
        chunk in 64usize..8192,
        half in proptest::prelude::any::<bool>(),
    ) {
        let dtype = if half { BroadcastDtype::F16 } else { BroadcastDtype::F32 };
        let sent = messages(dtype, chunk);
        let parsed = parse(&wire_bytes(&sent), &sizes);
        proptest::prop_assert_eq!(parsed.len(), sent.len());
        let mut receiver = Receiver::default();
        let mut version = None;
        for (wire, sent) in parsed.into_iter().zip(&sent) {
            proptest::prop_assert_eq!(&wire.header, &Weights { chunk: Bytes::new(), ..sent.clone() });
            proptest::prop_assert_eq!(wire.chunk_len(), sent.chunk.len());
            version = receiver.push_wire(wire).unwrap().or(version);
        }
        proptest::prop_assert_eq!(version.map(|v| v.version), Some(9));
    }
}

async fn serve(service: WeightsOnly) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        fleetrl_runtime::net::server()
            .expect("no TLS files set")
            .add_service(LearnerRoutes::new(service))
            .serve_with_incoming(fleetrl_runtime::net::incoming(listener)),
    );
    format!("http://{addr}")
}

#[tokio::test]
async fn a_subscriber_receives_versions_over_grpc_and_errors_carry_their_status() {
    let (tx, rx) = watch::channel(Arc::new(weights(0, &values(5000))));
    let addr = serve(WeightsOnly::new(rx, BroadcastDtype::F16)).await;
    let channel = fleetrl_runtime::net::connect_weights_subscriber(&addr, Duration::from_secs(10))
        .await
        .unwrap();

    // A request the service refuses comes back as its status, and the server stays up.
    let refused = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: 0,
        ..Default::default()
    };
    let error = subscribe(channel.clone(), refused).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error}");
    assert!(error.message().contains("chunk_bytes"), "{error}");

    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: 1000,
        ..Default::default()
    };
    let mut stream = subscribe(channel.clone(), request).await.unwrap();
    let mut receiver = Receiver::default();
    let mut versions = Vec::new();
    while versions.len() < 2 {
        let message = stream.message().await.unwrap().expect("an open stream");
        assert!(message.chunk_len() <= 1000);
        if let Some(w) = receiver.push_wire(message).unwrap() {
            assert!(w.with_tensors(|t| t[0].1.kind() == tch::Kind::Float));
            versions.push(w.version);
            tx.send_replace(Arc::new(weights(1, &values(5000))));
        }
    }
    assert_eq!(versions, [0, 1]);

    // The stock tonic client reads the same stream.
    let mut client = fleetrl_proto::v1::learner_service_client::LearnerServiceClient::new(channel);
    let request = SubscribeWeightsRequest {
        after_version: 0,
        chunk_bytes: 1000,
        ..Default::default()
    };
    let mut stock = client
        .subscribe_weights(request)
        .await
        .unwrap()
        .into_inner();
    let mut receiver = Receiver::default();
    let version = loop {
        let message = stock.message().await.unwrap().unwrap();
        if let Some(w) = receiver.push(message).unwrap() {
            break w.version;
        }
    };
    assert_eq!(version, 1);
}

#[tokio::test]
async fn a_request_that_is_not_grpc_is_refused_by_name() {
    let (_tx, rx) = watch::channel(Arc::new(weights(0, &[1.0, 2.0])));
    let addr = serve(WeightsOnly::new(rx, BroadcastDtype::F32)).await;
    let mut channel = fleetrl_runtime::net::connect(&addr, Duration::from_secs(10))
        .await
        .unwrap();
    let mut call = http::Request::new(Body::new(http_body_util::Full::new(Bytes::from_static(
        b"hello",
    ))));
    *call.method_mut() = http::Method::POST;
    *call.uri_mut() = http::Uri::from_static(SUBSCRIBE_WEIGHTS_PATH);
    call.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    std::future::poll_fn(|cx| Service::poll_ready(&mut channel, cx))
        .await
        .unwrap();
    let response = Service::call(&mut channel, call).await.unwrap();
    let status = Status::from_header_map(response.headers()).expect("a trailers-only answer");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("one uncompressed gRPC message"),
        "{status}"
    );
}

/// Over real HTTP/2: a subscriber that reads nothing stops being polled once its stream window
/// (8 MiB) is full, and is still dropped after the stall timeout; a reading subscriber on the
/// same connection gets the whole version meanwhile and stays. Read at last, the stalled stream
/// hands over what it held and ends with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_reads_nothing_is_dropped_over_http2() {
    // 12 MB of f32: more than a stream window, less than the connection's 32 MiB.
    let (_tx, rx) = watch::channel(Arc::new(weights(0, &values(3_000_000))));
    let service =
        WeightsOnly::new(rx, BroadcastDtype::F32).stall_timeout(Duration::from_millis(300));
    let counts = service.counts();
    let addr = serve(service).await;
    let channel = fleetrl_runtime::net::connect(&addr, Duration::from_secs(10))
        .await
        .unwrap();
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: 1 << 20,
        ..Default::default()
    };
    let mut stalled = subscribe(channel.clone(), request.clone()).await.unwrap();
    let mut reading = subscribe(channel, request).await.unwrap();
    let mut receiver = Receiver::default();
    let version = loop {
        let message = reading.message().await.unwrap().expect("an open stream");
        if let Some(w) = receiver.push_wire(message).unwrap() {
            break w.version;
        }
    };
    assert_eq!(version, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while counts.dropped.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled subscriber was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        counts.open.load(Ordering::Relaxed),
        1,
        "the reading subscriber stays"
    );
    let mut held = 0;
    let error = loop {
        match stalled.message().await {
            Ok(Some(_)) => held += 1,
            Ok(None) => panic!("the stalled stream ended without saying why"),
            Err(status) => break status,
        }
    };
    assert!(
        held < 12,
        "the stalled stream was sent the whole version ({held} chunks)"
    );
    assert!(error.message().contains("read nothing"), "{error}");
    drop(reading);
}
