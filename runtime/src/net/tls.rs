//! TLS on every fleetrl connection, with rustls through tonic; off unless the environment names
//! the files (read once per process, like the token):
//!
//! - a server with `FLEETRL_TLS_CERT` and `FLEETRL_TLS_KEY` (PEM) serves TLS only, and with
//!   `FLEETRL_TLS_CLIENT_CA` also requires client certificates signed by that CA (mTLS);
//! - a client with `FLEETRL_TLS_CA` connects with TLS only, trusting servers signed by that CA
//!   (by the host name or IP address it dials), and with `FLEETRL_TLS_CLIENT_CERT` and
//!   `FLEETRL_TLS_CLIENT_KEY` presents its own certificate.
//!
//! `deploy/tls/make-certs.sh` makes a CA and certificates for a test cluster.

use std::sync::OnceLock;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// A server's certificate chain (PEM).
pub const CERT_ENV: &str = "FLEETRL_TLS_CERT";
/// A server's private key (PEM).
pub const KEY_ENV: &str = "FLEETRL_TLS_KEY";
/// The CA a server requires client certificates from (mTLS).
pub const CLIENT_CA_ENV: &str = "FLEETRL_TLS_CLIENT_CA";
/// The CA a client trusts servers from; turns TLS on for clients.
pub const CA_ENV: &str = "FLEETRL_TLS_CA";
/// A client's certificate chain (PEM), for servers that require one.
pub const CLIENT_CERT_ENV: &str = "FLEETRL_TLS_CLIENT_CERT";
/// A client's private key (PEM).
pub const CLIENT_KEY_ENV: &str = "FLEETRL_TLS_CLIENT_KEY";

/// Why the TLS settings cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path} ({var}): {message}")]
    Read {
        /// The variable that names it.
        var: &'static str,
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// One half of a pair is set without the other.
    #[error("{set} is set but {missing} is not: both are needed")]
    Half {
        /// The variable that is set.
        set: &'static str,
        /// The one that is missing.
        missing: &'static str,
    },
    /// tonic refused the configuration.
    #[error("TLS setup failed: {0}")]
    Setup(String),
}

/// The process's TLS settings: what it serves with and what it connects with.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// Set when it serves TLS.
    pub server: Option<ServerTlsConfig>,
    /// Set when it connects with TLS.
    pub client: Option<ClientTlsConfig>,
}

fn read(var: &'static str) -> Result<Option<Vec<u8>>, TlsError> {
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    std::fs::read(&path).map(Some).map_err(|e| TlsError::Read {
        var,
        path: path.to_string_lossy().into_owned(),
        message: e.to_string(),
    })
}

fn pair(cert: &'static str, key: &'static str) -> Result<Option<Identity>, TlsError> {
    match (read(cert)?, read(key)?) {
        (Some(c), Some(k)) => Ok(Some(Identity::from_pem(c, k))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(TlsError::Half {
            set: cert,
            missing: key,
        }),
        (None, Some(_)) => Err(TlsError::Half {
            set: key,
            missing: cert,
        }),
    }
}

/// The TLS settings the environment names.
pub fn from_env() -> Result<Tls, TlsError> {
    let server = pair(CERT_ENV, KEY_ENV)?.map(|identity| ServerTlsConfig::new().identity(identity));
    let server = match (server, read(CLIENT_CA_ENV)?) {
        (Some(s), Some(ca)) => Some(s.client_ca_root(Certificate::from_pem(ca))),
        (Some(s), None) => Some(s),
        (None, Some(_)) => {
            return Err(TlsError::Half {
                set: CLIENT_CA_ENV,
                missing: CERT_ENV,
            })
        }
        (None, None) => None,
    };
    let identity = pair(CLIENT_CERT_ENV, CLIENT_KEY_ENV)?;
    let client = match (read(CA_ENV)?, identity) {
        (Some(ca), identity) => {
            let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            Some(match identity {
                Some(identity) => config.identity(identity),
                None => config,
            })
        }
        (None, Some(_)) => {
            return Err(TlsError::Half {
                set: CLIENT_CERT_ENV,
                missing: CA_ENV,
            })
        }
        (None, None) => None,
    };
    Ok(Tls { server, client })
}

static TLS: OnceLock<Result<Tls, TlsError>> = OnceLock::new();

/// The process's TLS settings, read from the environment on first use (binaries call this
/// first thing, so a missing file is reported at start).
pub fn load() -> Result<&'static Tls, TlsError> {
    TLS.get_or_init(from_env).as_ref().map_err(Clone::clone)
}
