//! A docker-compose cluster for scenario tests: builds the runtime image with
//! `deploy/docker/build-local.sh`, runs `deploy/compose.yml` under its own project name, and
//! gives the test the published ports, metrics scrapes and container controls. The project
//! and its volumes are removed on drop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why the Docker scenarios cannot run here, or `None` when they can.
pub fn docker_unavailable() -> Option<String> {
    let info = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    match info {
        Err(e) => return Some(format!("no `docker` command ({e})")),
        Ok(o) if !o.status.success() => {
            return Some(format!(
                "no Docker engine answers `docker info`: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Ok(_) => {}
    }
    if compose_program().is_none() {
        return Some("neither `docker compose` nor `docker-compose` is installed".into());
    }
    None
}

/// `docker compose` (v2 plugin) if present, else `docker-compose` (v1).
fn compose_program() -> Option<Vec<String>> {
    let ok = |cmd: &mut Command| cmd.output().is_ok_and(|o| o.status.success());
    if ok(Command::new("docker").args(["compose", "version"])) {
        return Some(vec!["docker".into(), "compose".into()]);
    }
    if ok(Command::new("docker-compose").arg("version")) {
        return Some(vec!["docker-compose".into()]);
    }
    None
}

/// The repository root (this crate's parent).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the tests crate lives in the repository")
}

/// Builds the runtime image `tag` from the release binaries; returns its size in bytes.
pub fn build_image(tag: &str) -> anyhow::Result<u64> {
    let root = repo_root();
    let bin_dir = fleetrl_runtime::launch::bin_dir()?;
    let out = Command::new("bash")
        .arg(root.join("deploy/docker/build-local.sh"))
        .args(["--tag", tag, "--bin-dir"])
        .arg(&bin_dir)
        .output()
        .context("running deploy/docker/build-local.sh")?;
    check(&out, "deploy/docker/build-local.sh")?;
    let size = Command::new("docker")
        .args(["image", "inspect", tag, "--format", "{{.Size}}"])
        .output()?;
    check(&size, "docker image inspect")?;
    Ok(String::from_utf8_lossy(&size.stdout).trim().parse()?)
}

fn check(out: &Output, what: &str) -> anyhow::Result<()> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Certificates for the cluster (`deploy/tls/make-certs.sh`, readable by the containers' uid),
/// made once per process; this process's clients trust their CA.
fn tls_certificates() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = crate::scratch("fleetrl-compose-tls");
        let made = Command::new("bash")
            .arg(repo_root().join("deploy/tls/make-certs.sh"))
            .arg(&dir)
            .args(["localhost", "127.0.0.1", "replay", "learner"])
            .output()
            .expect("bash runs");
        assert!(
            made.status.success(),
            "make-certs.sh: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        for entry in std::fs::read_dir(&dir)
            .expect("the certificate directory")
            .flatten()
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644));
        }
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        // Before any client of this process connects (the settings are read once).
        std::env::set_var(fleetrl_runtime::net::tls::CA_ENV, dir.join("ca.pem"));
        dir
    })
    .clone()
}

/// A compose project running `deploy/compose.yml` (and any override files); `down -v` on drop.
pub struct Compose {
    program: Vec<String>,
    project: String,
    files: Vec<PathBuf>,
    env: HashMap<String, String>,
}

impl Compose {
    /// A project named `project` with the image `image` and the run config directory
    /// `config_dir` (mounted where the roles read `FLEETRL_PRESET`.toml).
    ///
    /// The roles listen on all interfaces, so they require a token: this process's (made and
    /// installed here, once), which its clients then send.
    pub fn new(project: &str, image: &str, config_dir: &Path, preset: &str) -> Compose {
        use fleetrl_runtime::net::auth;
        let token = auth::token().unwrap_or_else(|| {
            let token = auth::Token::random().expect("a random token");
            auth::install(Some(token.clone()));
            token
        });
        let certs = tls_certificates();
        let env = HashMap::from([
            (auth::TOKEN_ENV.to_string(), token.expose().to_string()),
            ("FLEETRL_TLS_ENV".to_string(), "./tls/on.env".to_string()),
            ("FLEETRL_TLS_DIR".to_string(), certs.display().to_string()),
            ("FLEETRL_IMAGE".to_string(), image.to_string()),
            (
                "FLEETRL_CONFIG_DIR".to_string(),
                config_dir.display().to_string(),
            ),
            ("FLEETRL_PRESET".to_string(), preset.to_string()),
        ]);
        Compose {
            program: compose_program().unwrap_or_else(|| vec!["docker-compose".into()]),
            project: project.to_string(),
            files: vec![repo_root().join("deploy/compose.yml")],
            env,
        }
    }

    /// The same project with `deploy/<file>` laid over `deploy/compose.yml` (`-f` twice).
    pub fn with_override(mut self, file: &str) -> Compose {
        self.files.push(repo_root().join("deploy").join(file));
        self
    }

    /// Runs `compose <args>`, failing with its output if it fails.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.output(args)?;
        check(&out, &format!("compose {}", args.join(" ")))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn output(&self, args: &[&str]) -> anyhow::Result<Output> {
        let (program, first) = self.program.split_first().expect("a compose program");
        let mut command = Command::new(program);
        command.args(first).args(["-p", &self.project]);
        for file in &self.files {
            command.arg("-f").arg(file);
        }
        command
            .args(args)
            .envs(&self.env)
            .output()
            .with_context(|| format!("running {}", self.program.join(" ")))
    }

    /// The host address a service's container port is published on (`index` counts from 1
    /// among the service's replicas).
    pub fn port(&self, service: &str, index: u32, port: u16) -> anyhow::Result<SocketAddr> {
        let index = format!("--index={index}");
        let out = self.run(&["port", &index, service, &port.to_string()])?;
        let text = out.trim().replace("0.0.0.0", "127.0.0.1");
        text.parse()
            .with_context(|| format!("`compose port {service} {port}` printed `{text}`"))
    }

    /// Container ids of a service's replicas.
    pub fn containers(&self, service: &str) -> anyhow::Result<Vec<String>> {
        let out = self.run(&["ps", "-q", service])?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// A service's logs so far.
    pub fn logs(&self, service: &str) -> anyhow::Result<String> {
        self.run(&["logs", "--no-color", service])
    }

    /// Every service's logs, for failure messages.
    pub fn all_logs_tail(&self) -> String {
        self.output(&["logs", "--no-color", "--tail=40"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.output(&["down", "-v", "--timeout", "60"]);
    }
}

/// Kills a container's main process (its init, under `init: true`, and with it the role) with
/// SIGKILL from the host, as the kernel's OOM killer would: unlike `docker kill`, which tells
/// Docker the container was stopped on purpose, this leaves its restart policy to act. Needs
/// permission to signal the container's processes (root, as the Docker engine here runs).
pub fn crash(container: &str) -> anyhow::Result<()> {
    let pid: i32 = inspect(container, "{{.State.Pid}}")?
        .parse()
        .context("docker inspect's .State.Pid")?;
    anyhow::ensure!(pid > 0, "container {container} is not running");
    // SAFETY: kill(2) with a pid and a signal number has no memory-safety preconditions.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        bail!(
            "SIGKILL to container {container}'s process {pid}: {} (the crash scenario needs \
             permission to signal the Docker engine's processes: run it as root)",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// `docker inspect` one field of a container (a Go template such as `{{.State.StartedAt}}`).
pub fn inspect(container: &str, template: &str) -> anyhow::Result<String> {
    let out = Command::new("docker")
        .args(["inspect", "--format", template, container])
        .output()?;
    check(&out, "docker inspect")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `GET /metrics` from `addr`: the exposition text.
pub async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: fleetrl\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .with_context(|| format!("scraping {addr} timed out"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("malformed HTTP response from {addr}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{addr}/metrics answered {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_string())
}

/// One value from `addr`'s metrics (see [`fleetrl_runtime::telemetry::metrics::parse_value`]).
pub async fn metric(addr: SocketAddr, series: &str) -> anyhow::Result<f64> {
    let text = scrape(addr).await?;
    fleetrl_runtime::telemetry::metrics::parse_value(&text, series)
        .with_context(|| format!("{addr}/metrics has no `{series}`"))
}

/// Waits up to `timeout` until `series` at `addr` reaches `min`.
pub async fn metric_at_least(
    addr: SocketAddr,
    series: &str,
    min: f64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let what = format!("{series} >= {min} at {addr}");
    poll(&what, timeout, || async move {
        Ok((metric(addr, series).await? >= min).then_some(()))
    })
    .await
}

/// Polls `probe` every 500 ms until it returns `Some`, failing after `timeout` with `what`
/// and the last error. Errors count as "not yet" (servers restart during the scenarios).
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let started = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last = format!("{error:#}"),
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
