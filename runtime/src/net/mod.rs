//! gRPC plumbing shared by the binaries: connecting with retries, message size limits, and
//! the one server builder ([`server`], [`incoming`]) with its connection hygiene ([`conn`]).

use std::time::Duration;

use tonic::transport::Endpoint;

pub mod auth;
pub mod conn;
pub mod health;
pub mod refusals;
pub mod tls;

pub use auth::Channel;
pub use conn::incoming;

/// Largest gRPC message any fleetrl service sends or accepts (weights, stacked batches).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// HTTP/2 flow-control windows and frame size for every fleetrl connection. h2's defaults
/// (64 KiB windows, 16 KiB frames) suit many small RPCs on a WAN; fleetrl moves megabyte
/// batches and weights between machines of one cluster, where a 64 KiB window means a
/// window-update round trip every 64 KiB (measured on loopback: 8 concurrent 7 MB Atari
/// batches crawled at ~110 MB/s with the defaults).
pub const STREAM_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
/// See [`STREAM_WINDOW_BYTES`].
pub const CONNECTION_WINDOW_BYTES: u32 = 32 * 1024 * 1024;
/// See [`STREAM_WINDOW_BYTES`].
pub const MAX_FRAME_BYTES: u32 = 1024 * 1024;

/// How often a server pings a connection, and how long it waits for the answer before it
/// closes it: a peer that vanished (a machine powered off, a partition) frees its connection
/// and its streams within a minute instead of when TCP gives up, hours later.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// See [`KEEPALIVE_INTERVAL`].
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A server builder with fleetrl's HTTP/2 settings that serves TLS when the process has a
/// certificate ([`tls`]), checks the process's token on every call ([`auth::RequireToken`])
/// and pings its peers ([`KEEPALIVE_INTERVAL`]). Serve it with [`incoming`].
pub fn server() -> Result<
    tonic::transport::Server<tower_layer::Stack<auth::RequireToken, tower_layer::Identity>>,
    tls::TlsError,
> {
    let mut builder = tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT));
    if let Some(config) = &tls::load()?.server {
        builder = builder
            .tls_config(config.clone().timeout(conn::HANDSHAKE_TIMEOUT))
            .map_err(|e| tls::TlsError::Setup {
                what: format!(
                    "the server's identity ({} and {})",
                    tls::CERT_ENV,
                    tls::KEY_ENV
                ),
                message: tls::chain(&e),
            })?;
    }
    Ok(builder.layer(auth::RequireToken::from_process()))
}

/// Reads the process's token and TLS settings from the environment; binaries call it first
/// thing, so an unreadable or half-set file is reported at start.
pub fn load_security() -> anyhow::Result<()> {
    auth::load()?;
    tls::load()?;
    conn::max_connections_from_env()?;
    Ok(())
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The address is not a valid URI.
    #[error("invalid address `{addr}`: {message}")]
    BadAddress {
        /// The address as given.
        addr: String,
        /// What the parser said.
        message: String,
    },
    /// The TLS settings are unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The TLS handshake failed: the server's certificate was not trusted, or the server
    /// refused this client's. Not retried.
    #[error("cannot connect to {addr}: {message}")]
    Handshake {
        /// The address.
        addr: String,
        /// What failed, from [`tls::handshake_failure`].
        message: String,
    },
    /// Nothing answered before the deadline.
    #[error("could not reach {addr} within {seconds:.0} s: {message}")]
    Unreachable {
        /// The address.
        addr: String,
        /// How long we tried.
        seconds: f64,
        /// The last error.
        message: String,
    },
}

/// Accepts `host:port` or a full `http://host:port` URI.
pub fn normalize_addr(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// Connects to `addr`, retrying every 100 ms for up to `patience` (servers may still be
/// starting: the launcher, compose and Kubernetes start roles in any order).
pub async fn connect(addr: &str, patience: Duration) -> Result<Channel, ConnectError> {
    connect_endpoint(endpoint(addr)?, addr, patience).await
}

/// [`connect`] for a connection whose bulk traffic is the weight subscription coming in (an
/// actor's link to the learner): hyper's adaptive flow control instead of the fixed windows
/// (it starts at 64 KiB and grows the windows to twice the measured bandwidth-delay product,
/// at most 16 MiB). Measured with `broadcast_bench` (50M f32, loopback, 2 shared cores, load
/// 3.6-6.9, interleaved with the fixed windows): one subscriber received a version faster in
/// 14 of 14 pairs (median 0.13 s vs 0.20 s); 16 subscribers, no difference (8 of 14).
/// Frame size stays at 1 MiB: 16 KiB frames were up to 1.9x slower in the same runs.
pub async fn connect_weights_subscriber(
    addr: &str,
    patience: Duration,
) -> Result<Channel, ConnectError> {
    connect_endpoint(endpoint(addr)?.http2_adaptive_window(true), addr, patience).await
}

/// `addr` with fleetrl's connection settings.
fn endpoint(addr: &str) -> Result<Endpoint, ConnectError> {
    let tls = tls::load()?;
    let uri = match (&tls.client, addr.contains("://")) {
        (Some(_), false) => format!("https://{addr}"),
        _ => normalize_addr(addr),
    };
    let bad = |e: tonic::transport::Error| ConnectError::BadAddress {
        addr: addr.to_string(),
        message: e.to_string(),
    };
    let mut endpoint = Endpoint::from_shared(uri).map_err(bad)?;
    if let Some(config) = &tls.client {
        endpoint = endpoint
            .tls_config(config.clone())
            .map_err(|e| tls::TlsError::Setup {
                what: format!(
                    "the client ({}, {} and {})",
                    tls::CA_ENV,
                    tls::CLIENT_CERT_ENV,
                    tls::CLIENT_KEY_ENV
                ),
                message: tls::chain(&e),
            })?;
    }
    Ok(endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES))
}

/// Connects to `endpoint` (made from `addr`), retrying every 100 ms for up to `patience`.
async fn connect_endpoint(
    endpoint: Endpoint,
    addr: &str,
    patience: Duration,
) -> Result<Channel, ConnectError> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(Channel::new(channel)),
            Err(e) => {
                // A certificate that is not trusted now will not be in 100 ms: say so at once.
                if let Some(message) = tls::handshake_failure(&e) {
                    return Err(ConnectError::Handshake {
                        addr: addr.to_string(),
                        message,
                    });
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(ConnectError::Unreachable {
                        addr: normalize_addr(addr),
                        seconds: patience.as_secs_f64(),
                        message: tls::chain(&e),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
