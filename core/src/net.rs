//! gRPC plumbing shared by the binaries: connecting with retries, message size limits.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// Largest gRPC message any fleetrl service sends or accepts (weights, stacked batches).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

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
    let uri = normalize_addr(addr);
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| ConnectError::BadAddress {
            addr: addr.to_string(),
            message: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(ConnectError::Unreachable {
                    addr: uri,
                    seconds: patience.as_secs_f64(),
                    message: e.to_string(),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Accepted connections with `TCP_NODELAY`: weights and batches are small, latency-bound
/// messages that Nagle's algorithm would hold back for a delayed ACK.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Resolves when the process gets SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
