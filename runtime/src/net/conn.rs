//! Connection hygiene for every fleetrl server: what a peer that opens sockets and then does
//! nothing useful can hold. [`incoming`] caps the open connections of a server (below the
//! process's file-descriptor limit, so a flood can never make `accept` fail with EMFILE and
//! lock out the real clients), and every accepted connection ([`Conn`]) is closed when
//!
//! - it has not sent the 24 bytes of an HTTP/2 preface (or a TLS ClientHello) within
//!   [`HANDSHAKE_TIMEOUT`], or
//! - it has had no open stream for [`IDLE_TIMEOUT`]: an actor's weight subscription or insert
//!   stream, open for hours, keeps its connection however quiet it is.
//!
//! [`track`] counts each connection's open streams, and puts the peer's [`TcpConnectInfo`] in
//! every request, as tonic's own listener does.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming, TlsConnectInfo};

/// How long a new connection has to send its first 24 bytes (an HTTP/2 client sends its
/// preface, a TLS client its ClientHello, as soon as it connects); TLS also has this long to
/// finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection without an open stream is kept. A tonic client reconnects on its
/// next call, so closing an idle one costs a client at most a reconnect.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The most connections a server keeps open, unless [`MAX_CONNECTIONS_ENV`] says otherwise;
/// always at most the file-descriptor limit less [`RESERVED_FDS`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Environment variable overriding [`DEFAULT_MAX_CONNECTIONS`] (a positive integer).
pub const MAX_CONNECTIONS_ENV: &str = "FLEETRL_MAX_CONNECTIONS";
/// File descriptors left for everything but connections: checkpoints, logs, the metrics
/// endpoint, outgoing connections.
pub const RESERVED_FDS: usize = 64;
/// Bytes of the HTTP/2 connection preface (`PRI * HTTP/2.0...`).
const PREFACE_BYTES: usize = 24;
/// How long to wait after `accept` ran out of file descriptors or memory before the next try
/// (the listener stays readable, so retrying at once would spin).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A bad value for [`MAX_CONNECTIONS_ENV`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{MAX_CONNECTIONS_ENV}={value} is not a positive number of connections")]
pub struct MaxConnectionsError {
    /// The value given.
    pub value: String,
}

/// The connection cap the environment asks for ([`MAX_CONNECTIONS_ENV`]), before the
/// file-descriptor limit is applied.
pub fn max_connections_from_env() -> Result<usize, MaxConnectionsError> {
    let Ok(value) = std::env::var(MAX_CONNECTIONS_ENV) else {
        return Ok(DEFAULT_MAX_CONNECTIONS);
    };
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(MaxConnectionsError { value }),
    }
}

/// The process's soft limit on open files, if it has one.
fn fd_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass and reads nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as usize)
}

/// `wanted`, lowered to leave [`RESERVED_FDS`] of `fds` free (but never below 16).
fn connection_cap(wanted: usize, fds: Option<usize>) -> usize {
    match fds {
        Some(fds) => wanted.min(fds.saturating_sub(RESERVED_FDS).max(16)),
        None => wanted,
    }
}

/// A warning that is logged at most once per `every`, with how many were held back.
#[derive(Debug)]
pub struct Throttled {
    every: Duration,
    last: Mutex<Option<Instant>>,
    held_back: AtomicU64,
}

impl Throttled {
    /// Logs at most once per `every`.
    pub const fn new(every: Duration) -> Throttled {
        Throttled {
            every,
            last: Mutex::new(None),
            held_back: AtomicU64::new(0),
        }
    }

    /// Calls `log` with the number of events held back since the last call that logged, if
    /// `every` has passed since; otherwise counts this event as held back.
    pub fn log(&self, log: impl FnOnce(u64)) {
        let now = Instant::now();
        let mut last = self.last.lock().expect("throttle lock poisoned");
        if last.is_some_and(|t| now.duration_since(t) < self.every) {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        drop(last);
        log(self.held_back.swap(0, Ordering::Relaxed));
    }
}

static REFUSED_LOG: Throttled = Throttled::new(Duration::from_secs(10));

/// The open connections of one server, against its cap.
#[derive(Debug)]
struct Slots {
    open: AtomicUsize,
    cap: usize,
}

impl Slots {
    fn take(self: &Arc<Self>) -> bool {
        let took = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            });
        took.is_ok()
    }
}

/// Accepted connections, each with `TCP_NODELAY` (weights and batches are latency-bound
/// messages that Nagle's algorithm would hold back for a delayed ACK) and TCP keepalive, at
/// most the server's cap open at once: one beyond it is closed as soon as it is accepted.
pub fn incoming(listener: tokio::net::TcpListener) -> Incoming {
    let wanted = max_connections_from_env().unwrap_or(DEFAULT_MAX_CONNECTIONS);
    Incoming::new(listener, connection_cap(wanted, fd_limit()))
}

/// The stream [`incoming`] returns.
pub struct Incoming {
    inner: TcpIncoming,
    slots: Arc<Slots>,
    backoff: Option<Pin<Box<Sleep>>>,
}

impl Incoming {
    fn new(listener: tokio::net::TcpListener, cap: usize) -> Incoming {
        let inner = TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(Duration::from_secs(60)));
        let slots = Arc::new(Slots {
            open: AtomicUsize::new(0),
            cap,
        });
        Incoming {
            inner,
            slots,
            backoff: None,
        }
    }
}

/// `accept` failed for want of resources, not because of one connection.
fn out_of_resources(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(backoff) = self.backoff.as_mut() {
                std::task::ready!(backoff.as_mut().poll(cx));
                self.backoff = None;
            }
            let stream = match std::task::ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                None => return Poll::Ready(None),
                Some(Ok(stream)) => stream,
                Some(Err(error)) if out_of_resources(&error) => {
                    REFUSED_LOG.log(
                        |held_back| tracing::warn!(%error, held_back, "cannot accept connections"),
                    );
                    self.backoff = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
                    continue;
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
            };
            if self.slots.take() {
                return Poll::Ready(Some(Ok(Conn::new(stream, self.slots.clone()))));
            }
            let cap = self.slots.cap;
            let peer = stream.peer_addr().ok();
            REFUSED_LOG.log(|held_back| {
                tracing::warn!(?peer, cap, held_back, "refused a connection: at the cap")
            });
        }
    }
}

/// What a connection's requests and its socket share: its open streams and when it was last
/// busy. Dropping it frees the connection's slot.
#[derive(Debug)]
struct ConnState {
    opened: Instant,
    open_streams: AtomicUsize,
    /// Milliseconds after `opened` when the last stream closed.
    last_busy_ms: AtomicU64,
    slots: Arc<Slots>,
}

impl ConnState {
    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }
}

impl Drop for ConnState {
    fn drop(&mut self) {
        self.slots.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a request learns about its connection ([`Connected::ConnectInfo`] of [`Conn`]).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    tcp: TcpConnectInfo,
    state: Arc<ConnState>,
}

/// An accepted connection that closes itself when it does not handshake in time or stays
/// without a stream too long (see the module doc).
pub struct Conn {
    io: TcpStream,
    info: ConnInfo,
    preface_seen: usize,
    check: Pin<Box<Sleep>>,
}

/// Why a connection is closed, or when to look again.
enum Verdict {
    Close(&'static str),
    LookAt(tokio::time::Instant),
}

impl Conn {
    fn new(io: TcpStream, slots: Arc<Slots>) -> Conn {
        let tcp = TcpConnectInfo {
            local_addr: io.local_addr().ok(),
            remote_addr: io.peer_addr().ok(),
        };
        let state = Arc::new(ConnState {
            opened: Instant::now(),
            open_streams: AtomicUsize::new(0),
            last_busy_ms: AtomicU64::new(0),
            slots,
        });
        Conn {
            io,
            info: ConnInfo { tcp, state },
            preface_seen: 0,
            check: Box::pin(tokio::time::sleep(HANDSHAKE_TIMEOUT)),
        }
    }

    fn verdict(&self) -> Verdict {
        let state = &self.info.state;
        let opened = tokio::time::Instant::from_std(state.opened);
        let now = tokio::time::Instant::now();
        if self.preface_seen < PREFACE_BYTES {
            return match now >= opened + HANDSHAKE_TIMEOUT {
                true => Verdict::Close("no handshake"),
                false => Verdict::LookAt(opened + HANDSHAKE_TIMEOUT),
            };
        }
        if state.open_streams.load(Ordering::Acquire) > 0 {
            return Verdict::LookAt(now + IDLE_TIMEOUT);
        }
        let idle_since = opened + Duration::from_millis(state.last_busy_ms.load(Ordering::Acquire));
        match now >= idle_since + IDLE_TIMEOUT {
            true => Verdict::Close("idle"),
            false => Verdict::LookAt(idle_since + IDLE_TIMEOUT),
        }
    }

    /// Fails once the connection is to be closed; otherwise arms the timer for the next look.
    fn poll_check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        while self.check.as_mut().poll(cx).is_ready() {
            match self.verdict() {
                Verdict::LookAt(at) => self.check.as_mut().reset(at),
                Verdict::Close(why) => {
                    tracing::debug!(peer = ?self.info.tcp.remote_addr, why, "closing a connection");
                    return Err(io::Error::new(io::ErrorKind::TimedOut, why));
                }
            }
        }
        Ok(())
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_check(cx)?;
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if read.is_ready() {
            self.preface_seen += buf.filled().len() - before;
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        // A peer that reads nothing blocks the writes, and with them the reads: look here too.
        self.poll_check(cx)?;
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_check(cx)?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The connection a request came in on, with or without TLS.
pub fn conn_info<B>(request: &http::Request<B>) -> Option<&ConnInfo> {
    let extensions = request.extensions();
    extensions.get::<ConnInfo>().or_else(|| {
        extensions
            .get::<TlsConnectInfo<ConnInfo>>()
            .map(|tls| tls.get_ref())
    })
}

impl ConnInfo {
    /// The peer's address.
    pub fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.remote_addr
    }
}

/// One open stream of a connection; the connection is busy until the last one is dropped.
pub(crate) struct StreamGuard(Arc<ConnState>);

impl StreamGuard {
    fn open(state: &Arc<ConnState>) -> StreamGuard {
        state.open_streams.fetch_add(1, Ordering::AcqRel);
        StreamGuard(state.clone())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0
            .last_busy_ms
            .store(self.0.now_ms(), Ordering::Release);
        self.0.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its stream counted as open until it is sent or dropped.
struct Tracked {
    body: Body,
    _guard: StreamGuard,
}

impl tonic::codegen::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Counts `request` as an open stream of its connection (for [`IDLE_TIMEOUT`]) until the
/// guard is dropped, and gives it its peer's [`TcpConnectInfo`] (`Request::remote_addr`).
/// [`super::auth::RequireToken`], the layer every call passes, calls it.
pub(crate) fn track<B>(request: &mut http::Request<B>) -> Option<StreamGuard> {
    let info = conn_info(request)?.clone();
    request.extensions_mut().insert(info.tcp);
    Some(StreamGuard::open(&info.state))
}

/// `response` whose stream stays counted as open until its body is sent or dropped.
pub(crate) fn keep_open(
    response: http::Response<Body>,
    guard: Option<StreamGuard>,
) -> http::Response<Body> {
    match guard {
        Some(guard) => response.map(|body| {
            Body::new(Tracked {
                body,
                _guard: guard,
            })
        }),
        None => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_the_rest() {
        assert_eq!(connection_cap(4096, Some(256)), 192);
        assert_eq!(connection_cap(100, Some(1 << 20)), 100);
        assert_eq!(connection_cap(4096, Some(10)), 16);
        assert_eq!(connection_cap(7, None), 7);
    }

    #[test]
    fn a_throttled_log_counts_what_it_held_back() {
        let throttle = Throttled::new(Duration::from_secs(3600));
        let mut logged = Vec::new();
        for _ in 0..5 {
            throttle.log(|held_back| logged.push(held_back));
        }
        assert_eq!(logged, vec![0]);
        assert_eq!(throttle.held_back.load(Ordering::Relaxed), 4);
    }
}
