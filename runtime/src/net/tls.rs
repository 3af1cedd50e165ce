//! TLS on every fleetrl connection, with rustls through tonic; off unless the environment names
//! the files (read once per process, like the token):
//!
//! - a server with `FLEETRL_TLS_CERT` and `FLEETRL_TLS_KEY` (PEM) serves TLS only, and with
//!   `FLEETRL_TLS_CLIENT_CA` also requires client certificates signed by that CA (mTLS);
//! - a client with `FLEETRL_TLS_CA` connects with TLS only, trusting servers signed by that CA
//!   (by the host name or IP address it dials), and with `FLEETRL_TLS_CLIENT_CERT` and
//!   `FLEETRL_TLS_CLIENT_KEY` presents its own certificate.
//!
//! Every file is parsed here before tonic sees it, so a missing, unreadable or garbled file is
//! reported by its path and variable with what it lacks, and a handshake that fails on a
//! certificate says so ([`handshake_failure`]) instead of tonic's `transport error`.
//!
//! `deploy/tls/make-certs.sh` makes a CA and certificates for a test cluster.

use std::error::Error;
use std::sync::OnceLock;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::AlertDescription;
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

/// Why the TLS settings cannot be used. Every variant about a file names it and the variable
/// that names it.
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
    /// A file is not well-formed PEM (a section without its end line, bad base64).
    #[error("{path} ({var}) is not valid PEM: {message}")]
    NotPem {
        /// The variable that names it.
        var: &'static str,
        /// The file.
        path: String,
        /// What the PEM parser said.
        message: String,
    },
    /// A file holds no section of the kind it must hold (a key file without a key, a
    /// certificate file that is something else).
    #[error("{path} ({var}) holds no {lacks}")]
    Lacks {
        /// The variable that names it.
        var: &'static str,
        /// The file.
        path: String,
        /// What it should hold.
        lacks: &'static str,
    },
    /// One half of a pair is set without the other.
    #[error("{set} is set but {missing} is not: both are needed")]
    Half {
        /// The variable that is set.
        set: &'static str,
        /// The one that is missing.
        missing: &'static str,
    },
    /// tonic (rustls) refused files that parse, e.g. a key that is not the certificate's.
    #[error("TLS setup of {what} failed: {message}")]
    Setup {
        /// Which side, with the variables it was made from.
        what: String,
        /// The error and its causes.
        message: String,
    },
}

/// The process's TLS settings: what it serves with and what it connects with.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// Set when it serves TLS.
    pub server: Option<ServerTlsConfig>,
    /// Set when it connects with TLS.
    pub client: Option<ClientTlsConfig>,
}

/// What a certificate file must hold.
const CERTIFICATE: &str = "PEM certificate (a `-----BEGIN CERTIFICATE-----` section)";
/// What a key file must hold.
const PRIVATE_KEY: &str =
    "PEM private key (a `-----BEGIN PRIVATE KEY-----`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` section)";

/// The file `var` names, read; `None` when `var` is unset or empty.
fn read(var: &'static str) -> Result<Option<(String, Vec<u8>)>, TlsError> {
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let shown = path.to_string_lossy().into_owned();
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some((shown, bytes))),
        Err(e) => Err(TlsError::Read {
            var,
            path: shown,
            message: e.to_string(),
        }),
    }
}

/// The certificates (PEM) in the file `var` names, checked to parse and to hold at least one.
fn certificates(var: &'static str) -> Result<Option<Vec<u8>>, TlsError> {
    let Some((path, pem)) = read(var)? else {
        return Ok(None);
    };
    let mut found = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| TlsError::NotPem {
            var,
            path: path.clone(),
            message: e.to_string(),
        })?;
        found += 1;
    }
    if found == 0 {
        return Err(TlsError::Lacks {
            var,
            path,
            lacks: CERTIFICATE,
        });
    }
    Ok(Some(pem))
}

/// The private key (PEM) in the file `var` names, checked to parse.
fn private_key(var: &'static str) -> Result<Option<Vec<u8>>, TlsError> {
    let Some((path, pem)) = read(var)? else {
        return Ok(None);
    };
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(_) => Ok(Some(pem)),
        Err(pem::Error::NoItemsFound) => Err(TlsError::Lacks {
            var,
            path,
            lacks: PRIVATE_KEY,
        }),
        Err(e) => Err(TlsError::NotPem {
            var,
            path,
            message: e.to_string(),
        }),
    }
}

fn pair(cert: &'static str, key: &'static str) -> Result<Option<Identity>, TlsError> {
    match (certificates(cert)?, private_key(key)?) {
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
    let server = match (server, certificates(CLIENT_CA_ENV)?) {
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
    let client = match (certificates(CA_ENV)?, identity) {
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

/// `error` and its causes (`source()`, down to the root), joined by `": "`; a cause whose
/// text its parent already shows is left out. tonic's own text is often only `transport
/// error`: the cause that says what went wrong is further down.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        next = cause.source();
    }
    text
}

/// The rustls error somewhere in `error`'s causes: as a cause itself, or inside the
/// `io::Error` that tokio-rustls wraps it in.
fn rustls_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(cause) = next {
        if let Some(found) = cause.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        let inner = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if inner.is_some() {
            return inner;
        }
        next = cause.source();
    }
    None
}

/// What a failed TLS handshake in `error` (a connection attempt's) means for the person
/// running fleetrl, when the handshake is what failed: the server's certificate was not
/// trusted (the CA and its file named), the server refused this client's certificate, or
/// another handshake error. `None` when no rustls error is among its causes (nothing
/// listening yet, a timeout): those are worth retrying, a handshake error is not.
pub fn handshake_failure(error: &(dyn Error + 'static)) -> Option<String> {
    let found = rustls_error(error)?;
    let ca = std::env::var_os(CA_ENV).map_or_else(
        || "no CA file".to_string(),
        |p| format!("{CA_ENV}={}", p.to_string_lossy()),
    );
    Some(match found {
        rustls::Error::InvalidCertificate(_) => format!(
            "the server's TLS certificate was not trusted ({found}): it must be signed by the \
             CA this client trusts ({ca}) and name the host or address dialled"
        ),
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied),
        ) => format!(
            "the server refused this client's TLS certificate (alert {alert:?}): mutual TLS \
             needs {CLIENT_CERT_ENV} and {CLIENT_KEY_ENV}, signed by the CA the server's \
             {CLIENT_CA_ENV} names"
        ),
        other => format!("the TLS handshake failed: {other}"),
    })
}

static TLS: OnceLock<Result<Tls, TlsError>> = OnceLock::new();

/// The process's TLS settings, read from the environment on first use (binaries call this
/// first thing, so a missing file is reported at start).
pub fn load() -> Result<&'static Tls, TlsError> {
    TLS.get_or_init(from_env).as_ref().map_err(Clone::clone)
}
