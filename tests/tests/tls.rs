//! TLS through the real replay server: with a certificate (`FLEETRL_TLS_CERT`/`_KEY`) it serves
//! TLS only, so a plaintext client fails and a client trusting the CA succeeds; with a client
//! CA (`FLEETRL_TLS_CLIENT_CA`) a client without a certificate fails and one with a
//! certificate signed by that CA succeeds. Certificates come from `deploy/tls/make-certs.sh`
//! (openssl), as a user would make them for a test cluster.
//!
//! The mistakes: a missing, garbled or swapped certificate or key file stops the server at
//! start with the file's path, its variable and what it lacks (before: `TLS setup failed:
//! transport error`), and `fleetrl health` with a CA that did not sign the server's
//! certificate says at once that the certificate was not trusted (before: no health answer
//! within the timeout).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::InfoRequest;
use fleetrl_runtime::net::tls;
use fleetrl_tests::compose::repo_root;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// A replay server with `env` on a free loopback port; killed on drop.
struct Server {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(env: &[(&str, PathBuf)]) -> anyhow::Result<Server> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let child = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleet-replay-server"))
        .args(["--listen", &addr.to_string()])
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let started = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "no server on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Server { child, addr })
}

/// `Info` over `endpoint`: Ok if the call went through.
async fn info(endpoint: Endpoint) -> anyhow::Result<()> {
    let channel = endpoint
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    ReplayServiceClient::new(channel)
        .info(InfoRequest {})
        .await?;
    Ok(())
}

/// Makes a CA and certificates in a fresh `stem` directory with `deploy/tls/make-certs.sh`.
fn make_certs(stem: &str) -> anyhow::Result<PathBuf> {
    let dir = fleetrl_tests::scratch(stem);
    let made = Command::new("bash")
        .arg(repo_root().join("deploy/tls/make-certs.sh"))
        .arg(&dir)
        .output()?;
    anyhow::ensure!(
        made.status.success(),
        "make-certs.sh: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    Ok(dir)
}

/// The stderr of a replay server started with `env` (TLS variables), which must fail at start.
fn refused_at_start(env: &[(&str, PathBuf)]) -> anyhow::Result<String> {
    let run = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleet-replay-server"))
        .args(["--listen", "127.0.0.1:0"])
        .env_remove(tls::CLIENT_CA_ENV)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    anyhow::ensure!(!run.status.success(), "the server started: {stderr}");
    Ok(stderr)
}

fn pem(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).expect("a certificate file")
}

fn trusting(dir: &Path, addr: std::net::SocketAddr) -> (Endpoint, ClientTlsConfig) {
    let endpoint = Endpoint::from_shared(format!("https://localhost:{}", addr.port())).unwrap();
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pem(dir, "ca.pem")))
        .domain_name("localhost");
    (endpoint, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls_on_the_replay_server() -> anyhow::Result<()> {
    let dir = make_certs("fleetrl-tls")?;

    let tls_only = start(&[
        (tls::CERT_ENV, dir.join("server.pem")),
        (tls::KEY_ENV, dir.join("server.key")),
    ])?;
    let plain = Endpoint::from_shared(format!("http://{}", tls_only.addr))?;
    assert!(info(plain).await.is_err(), "a plaintext client was served");
    let (endpoint, config) = trusting(&dir, tls_only.addr);
    info(endpoint.tls_config(config)?).await?;
    // fleetrl's own clients take the CA from the environment (here `fleetrl health`, by the
    // IP address the certificate names).
    let health = |ca: Option<&Path>| {
        let mut cmd = Command::new(fleetrl_runtime::launch::bin_dir().unwrap().join("fleetrl"));
        cmd.args(["health", &tls_only.addr.to_string()]);
        match ca {
            Some(ca) => cmd.env(tls::CA_ENV, ca),
            None => cmd.env_remove(tls::CA_ENV),
        };
        cmd.output().expect("fleetrl health runs")
    };
    let trusted = health(Some(&dir.join("ca.pem")));
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert!(
        !health(None).status.success(),
        "a plaintext health check was served"
    );

    let mutual = start(&[
        (tls::CERT_ENV, dir.join("server.pem")),
        (tls::KEY_ENV, dir.join("server.key")),
        (tls::CLIENT_CA_ENV, dir.join("ca.pem")),
    ])?;
    let (endpoint, config) = trusting(&dir, mutual.addr);
    assert!(
        info(endpoint.clone().tls_config(config.clone())?)
            .await
            .is_err(),
        "a client without a certificate was served"
    );
    let identity = Identity::from_pem(pem(&dir, "client.pem"), pem(&dir, "client.key"));
    info(endpoint.tls_config(config.identity(identity))?).await?;

    // A half-set pair is refused at start, naming what is missing.
    let half = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleet-replay-server"))
        .args(["--listen", "127.0.0.1:0"])
        .env(tls::CERT_ENV, dir.join("server.pem"))
        .env_remove(tls::KEY_ENV)
        .output()?;
    let stderr = String::from_utf8_lossy(&half.stderr);
    assert!(!half.status.success());
    assert!(stderr.contains("FLEETRL_TLS_KEY"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_mistakes_name_the_file_and_the_cause() -> anyhow::Result<()> {
    let dir = make_certs("fleetrl-tls-mistakes")?;
    let cert = dir.join("server.pem");
    let key = dir.join("server.key");
    let garbled = dir.join("garbled.pem");
    std::fs::write(&garbled, "this is not a certificate\n")?;
    let broken = dir.join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n",
    )?;
    let missing = dir.join("no-such.key");
    let shown = |p: &Path| p.display().to_string();

    // A missing key: its path, its variable and the io error.
    let stderr = refused_at_start(&[
        (tls::CERT_ENV, cert.clone()),
        (tls::KEY_ENV, missing.clone()),
    ])?;
    assert!(
        stderr.contains(&shown(&missing))
            && stderr.contains(tls::KEY_ENV)
            && stderr.contains("No such file"),
        "{stderr}"
    );
    // A key file that is no PEM, the certificate and key swapped, a certificate section whose
    // body is not base64, a client CA file that is no certificate: which file, what is wrong.
    let server_pair =
        |c: &Path, k: &Path| vec![(tls::CERT_ENV, c.to_owned()), (tls::KEY_ENV, k.to_owned())];
    let mut with_client_ca = server_pair(&cert, &key);
    with_client_ca.push((tls::CLIENT_CA_ENV, garbled.clone()));
    let cases = [
        (
            server_pair(&cert, &garbled),
            &garbled,
            tls::KEY_ENV,
            "holds no PEM private key",
        ),
        (
            server_pair(&key, &cert),
            &key,
            tls::CERT_ENV,
            "holds no PEM certificate",
        ),
        (
            server_pair(&broken, &key),
            &broken,
            tls::CERT_ENV,
            "is not valid PEM",
        ),
        (
            with_client_ca,
            &garbled,
            tls::CLIENT_CA_ENV,
            "holds no PEM certificate",
        ),
    ];
    for (env, file, var, what) in cases {
        let stderr = refused_at_start(&env)?;
        let expected = format!("{} ({var}) {what}", shown(file));
        assert!(
            stderr.contains(&expected),
            "expected `{expected}`: {stderr}"
        );
    }

    // A client whose CA did not sign the server's certificate: `fleetrl health` says the
    // certificate was not trusted, well before its timeout.
    let server = start(&[(tls::CERT_ENV, cert), (tls::KEY_ENV, key)])?;
    let other = make_certs("fleetrl-tls-other-ca")?;
    let asked = Instant::now();
    let health = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleetrl"))
        .args(["health", &server.addr.to_string(), "--timeout-s", "20"])
        .env(tls::CA_ENV, other.join("ca.pem"))
        .output()?;
    let stderr = String::from_utf8_lossy(&health.stderr);
    assert!(!health.status.success(), "{stderr}");
    assert!(
        stderr.contains("certificate was not trusted")
            && stderr.contains(&shown(&other.join("ca.pem")))
            && !stderr.contains("no health answer"),
        "{stderr}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "an untrusted certificate is not worth retrying: {:?}",
        asked.elapsed()
    );
    // A client CA file that is no certificate is refused by the client too, by name.
    let health = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleetrl"))
        .args(["health", &server.addr.to_string()])
        .env(tls::CA_ENV, &garbled)
        .output()?;
    let stderr = String::from_utf8_lossy(&health.stderr);
    assert!(
        stderr.contains(&format!(
            "{} ({}) holds no PEM certificate",
            shown(&garbled),
            tls::CA_ENV
        )),
        "{stderr}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other);
    Ok(())
}
