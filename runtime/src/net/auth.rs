//! Bearer-token authentication for every fleetrl service: one token per run, sent by every
//! client in `authorization: Bearer <token>` and checked by one layer on every server
//! ([`RequireToken`]), before any handler runs. `grpc.health.v1.Health` is exempt so probes
//! keep working without the secret.
//!
//! The token comes from `FLEETRL_TOKEN_FILE` (a file, e.g. a mounted Kubernetes Secret; one
//! line) or `FLEETRL_TOKEN` (the value), read once per process. Without one, a server refuses
//! to listen on anything but loopback unless `FLEETRL_INSECURE=1` says that is intended.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::RwLock;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{self, header::AUTHORIZATION, HeaderValue};
use tonic::codegen::Service;
use tonic::Status;

use super::refusals;

/// Environment variable naming a file that holds the token.
pub const TOKEN_FILE_ENV: &str = "FLEETRL_TOKEN_FILE";
/// Environment variable holding the token itself.
pub const TOKEN_ENV: &str = "FLEETRL_TOKEN";
/// Set to `1` to serve without a token on a non-loopback address.
pub const INSECURE_ENV: &str = "FLEETRL_INSECURE";

/// Fewest characters of a token a server on a non-loopback address accepts: 32 hex digits
/// are 128 bits, what [`Token::random`] makes.
pub const MIN_TOKEN_CHARS: usize = 32;

/// gRPC paths served without a token.
const EXEMPT_PREFIX: &str = "/grpc.health.v1.Health/";

/// Why the token cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file could not be read.
    #[error("cannot read the token file {path} ({TOKEN_FILE_ENV}): {cause}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The token is empty or not printable ASCII.
    #[error("the token from {origin} is unusable: {problem}")]
    Invalid {
        /// Where it came from.
        origin: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The token file can be read by other users.
    #[error(
        "the token file {path} ({TOKEN_FILE_ENV}) has mode {mode:04o}: other users of this \
         machine can read the run's secret. Run `chmod 600 {path}`"
    )]
    Readable {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A server on a non-loopback address has a token too short to resist guessing.
    #[error(
        "refusing to serve on {addr} with a token of {length} characters: a token reachable \
         from the network needs at least {MIN_TOKEN_CHARS} (128 bits as hex; `head -c 16 \
         /dev/urandom | od -An -tx1 | tr -d ' \\n'` makes one), or set {INSECURE_ENV}=1"
    )]
    Short {
        /// The address.
        addr: SocketAddr,
        /// The token's length in characters.
        length: usize,
    },
    /// A server would be open to anyone who can reach it.
    #[error(
        "refusing to serve on {addr} without a token: anyone who can reach it could read the \
         run's config and weights and change its tables. Set {TOKEN_FILE_ENV} (or \
         {TOKEN_ENV}), listen on 127.0.0.1, or set {INSECURE_ENV}=1 to serve openly anyway"
    )]
    Exposed {
        /// The address.
        addr: SocketAddr,
    },
}

/// A run's shared secret. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Checks `value` (trimmed): non-empty printable ASCII without spaces.
    pub fn new(value: &str, origin: &str) -> Result<Token, AuthError> {
        let value = value.trim();
        let invalid = |problem| AuthError::Invalid {
            origin: origin.to_string(),
            problem,
        };
        if value.is_empty() {
            return Err(invalid("it is empty"));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid("it must be printable ASCII without spaces"));
        }
        Ok(Token(value.to_string()))
    }

    /// A fresh random token (128 bits from the OS, hex): what `fleetrl train` makes per run.
    pub fn random() -> std::io::Result<Token> {
        let mut bytes = [0u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token's text, to write into a file for child processes.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn header(&self) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {}", self.0)).expect("checked in Token::new")
    }
}

/// The token as the environment gives it: `FLEETRL_TOKEN_FILE`'s content, else `FLEETRL_TOKEN`.
pub fn from_env() -> Result<Option<Token>, AuthError> {
    if let Some(path) = std::env::var_os(TOKEN_FILE_ENV).filter(|p| !p.is_empty()) {
        let path = path.to_string_lossy().into_owned();
        let read_error = |cause| AuthError::Read {
            path: path.clone(),
            cause,
        };
        // metadata follows symlinks: a Kubernetes Secret mount is a link to the real file.
        check_private(&path, std::fs::metadata(&path).map_err(read_error)?)?;
        let text = std::fs::read_to_string(&path).map_err(read_error)?;
        return Token::new(&text, &path).map(Some);
    }
    match std::env::var(TOKEN_ENV) {
        Ok(value) if !value.is_empty() => Token::new(&value, TOKEN_ENV).map(Some),
        _ => Ok(None),
    }
}

/// Refuses a token file that group or others may read.
fn check_private(path: &str, metadata: std::fs::Metadata) -> Result<(), AuthError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(AuthError::Readable {
            path: path.to_string(),
            mode,
        });
    }
    Ok(())
}

/// The process's token: `None` until read or installed.
static TOKEN: RwLock<Option<Option<Token>>> = RwLock::new(None);

/// Reads the process's token from the environment (once; binaries call it first thing so a
/// bad token file is reported at start) and returns it.
pub fn load() -> Result<Option<Token>, AuthError> {
    if let Some(token) = TOKEN.read().expect("token lock poisoned").clone() {
        return Ok(token);
    }
    let token = from_env()?;
    *TOKEN.write().expect("token lock poisoned") = Some(token.clone());
    Ok(token)
}

/// Sets the process's token (`fleetrl train` makes one per run; tests make their own). Only
/// channels and servers made afterwards use it: install it before anything connects or serves.
pub fn install(token: Option<Token>) {
    *TOKEN.write().expect("token lock poisoned") = Some(token);
}

/// The process's token: installed, or read from the environment on first use.
pub fn token() -> Option<Token> {
    load().unwrap_or_else(|error| panic!("{error}"))
}

/// Fails if a server on `addr`, an address other than loopback, would accept anyone (no token)
/// or a guessed token (one shorter than [`MIN_TOKEN_CHARS`]), unless `FLEETRL_INSECURE=1`.
pub fn check_exposure(addr: SocketAddr) -> Result<(), AuthError> {
    let insecure = std::env::var(INSECURE_ENV).is_ok_and(|v| v == "1");
    if addr.ip().is_loopback() || insecure {
        return Ok(());
    }
    match token() {
        None => Err(AuthError::Exposed { addr }),
        Some(t) if t.0.len() < MIN_TOKEN_CHARS => Err(AuthError::Short {
            addr,
            length: t.0.len(),
        }),
        Some(_) => Ok(()),
    }
}

/// The server layer that checks the token on every call (pass-through without a token).
#[derive(Debug, Clone)]
pub struct RequireToken {
    expected: Option<HeaderValue>,
}

impl RequireToken {
    /// Checks the process's token.
    pub fn from_process() -> RequireToken {
        RequireToken {
            expected: token().map(|t| t.header()),
        }
    }
}

impl<S> tower_layer::Layer<S> for RequireToken {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            inner,
            expected: self.expected.clone(),
        }
    }
}

/// A service behind [`RequireToken`].
#[derive(Debug, Clone)]
pub struct Guarded<S> {
    inner: S,
    expected: Option<HeaderValue>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> Service<http::Request<B>> for Guarded<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let guard = super::conn::track(&mut request);
        if let Some(expected) = &self.expected {
            let exempt = request.uri().path().starts_with(EXEMPT_PREFIX);
            let given = request.headers().get(AUTHORIZATION);
            if !exempt && !given.is_some_and(|g| same(g.as_bytes(), expected.as_bytes())) {
                let reason = match given {
                    None => refusals::Reason::Missing,
                    Some(_) => refusals::Reason::Wrong,
                };
                let path = request.uri().path();
                let peer = super::conn::conn_info(&request)
                    .and_then(|c| c.remote_addr())
                    .map(|a| a.ip());
                let wait = refusals::refused(peer, reason, path);
                let status = Status::unauthenticated(format!(
                    "{path} needs `authorization: Bearer <token>` with this run's token \
                     ({TOKEN_FILE_ENV} or {TOKEN_ENV})"
                ));
                return Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    Ok(status.into_http())
                });
            }
        }
        let response = self.inner.call(request);
        Box::pin(async move { Ok(super::conn::keep_open(response.await?, guard)) })
    }
}

/// Equality whose time does not depend on where the inputs differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A client channel that sends the process's token on every call: what
/// [`super::connect`] returns.
#[derive(Debug, Clone)]
pub struct Channel {
    inner: tonic::transport::Channel,
    header: Option<HeaderValue>,
}

impl Channel {
    pub(super) fn new(inner: tonic::transport::Channel) -> Channel {
        Channel {
            inner,
            header: token().map(|t| t.header()),
        }
    }
}

impl Service<http::Request<Body>> for Channel {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = <tonic::transport::Channel as Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if let Some(header) = &self.header {
            request.headers_mut().insert(AUTHORIZATION, header.clone());
        }
        Service::call(&mut self.inner, request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_never_printed() {
        let t = Token::new("  s3cret-token\n", "test").unwrap();
        assert_eq!(t.expose(), "s3cret-token");
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
        assert!(Token::new(" \n", "f")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(Token::new("a b", "f").is_err());
        assert_eq!(Token::random().unwrap().expose().len(), 32);
        assert_ne!(Token::random().unwrap(), Token::random().unwrap());
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fleetrl-token-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "x").unwrap();
        let mode = |m| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
            check_private("token", std::fs::metadata(&path).unwrap())
        };
        let refused = mode(0o644).unwrap_err().to_string();
        assert!(refused.contains("mode 0644") && refused.contains("chmod 600 token"));
        assert!(mode(0o640).is_err());
        assert!(mode(0o600).is_ok());
        assert!(mode(0o400).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn comparison_needs_every_byte() {
        assert!(same(b"Bearer abc", b"Bearer abc"));
        assert!(!same(b"Bearer abd", b"Bearer abc"));
        assert!(!same(b"Bearer ab", b"Bearer abc"));
    }
}
