//! Child processes: the role binaries started by the launcher and the test sandbox, with their
//! logs in files, stopped in order, and never outliving their parent (SIGTERM if it dies).
//!
//! A role's stderr is its log file. Its stdout is read to the end by a thread of the parent,
//! which copies every line into the same log (both append) and picks out the listening line:
//! a role that prints, e.g. a Python env's `print`, never fills a pipe nobody reads and stalls.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::telemetry::parse_listening;
use anyhow::{bail, Context};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::oneshot;

/// A running role process.
#[derive(Debug)]
pub struct Role {
    /// Name for messages and logs, e.g. `actor-3`.
    pub name: String,
    child: Child,
    /// The first address the role says it listens on; closed without one if its stdout ends
    /// first. Taken by [`Role::listening_addr`].
    listening: Option<oneshot::Receiver<SocketAddr>>,
}

/// Where the role binaries are: `FLEETRL_BIN_DIR`, else beside this executable (for a test
/// binary in `target/<profile>/deps/` or an example in `target/<profile>/examples/`, the profile
/// directory above it).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("FLEETRL_BIN_DIR") {
        return Ok(dir.into());
    }
    let exe = std::env::current_exe().context("locating the fleetrl executable")?;
    let dir = exe
        .parent()
        .context("the fleetrl executable has no directory")?;
    match dir.file_name() {
        Some(name) if name == "deps" || name == "examples" => {
            Ok(dir.parent().unwrap_or(dir).to_path_buf())
        }
        _ => Ok(dir.to_path_buf()),
    }
}

/// Resident memory of process `pid` in MB (Linux `/proc/PID/status`, VmRSS); `None` where
/// `/proc` cannot tell (the process is gone, or another OS). For the benches.
pub fn resident_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1e3)
}

fn command(binary: &str, args: &[String], log: &Path) -> anyhow::Result<Command> {
    let path = bin_dir()?.join(binary);
    if !path.exists() {
        bail!(
            "{} not found; build it with `cargo build --release --bins` (or set FLEETRL_BIN_DIR)",
            path.display()
        );
    }
    File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let log_file = append_to(log)?;
    let mut cmd = Command::new(&path);
    // The children use this process's token (in their environment, not on a command line
    // that `ps` shows), whatever token file the environment names.
    if let Some(token) = crate::net::auth::token() {
        cmd.env(crate::net::auth::TOKEN_ENV, token.expose())
            .env_remove(crate::net::auth::TOKEN_FILE_ENV);
    }
    // One address cannot serve every role this launcher starts on the host: an address in
    // the environment (meant for one role, as compose sets it) made every role but the first
    // fail to bind and the run end. A role started here gets its own address as an argument
    // (`fleetrl train --metrics-listen`), or serves no metrics.
    cmd.env_remove(crate::telemetry::metrics::LISTEN_ENV);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl and setpgid are async-signal-safe. PDEATHSIG asks the kernel to SIGTERM
    // the child when this process dies, so a killed launcher leaves no orphaned roles behind;
    // the own process group keeps a terminal's Ctrl-C away from the children, so the parent
    // alone decides the shutdown order (checkpoint first, then stop).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    Ok(cmd)
}

impl Role {
    /// Starts `binary` (from [`bin_dir`]) with its stderr in `log`; for servers, follow with
    /// [`Role::listening_addr`].
    pub async fn start(
        name: &str,
        binary: &str,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Role> {
        let mut child = command(binary, args, log)?
            .spawn()
            .with_context(|| format!("starting {binary}"))?;
        let stdout = child.stdout.take().context("the child's stdout is piped")?;
        let listening = copy_stdout(name, stdout, append_to(log)?)?;
        Ok(Role {
            name: name.to_string(),
            child,
            listening: Some(listening),
        })
    }

    /// Waits up to `patience` for the listening line on stdout.
    pub async fn listening_addr(
        &mut self,
        patience: Duration,
        log: &Path,
    ) -> anyhow::Result<SocketAddr> {
        let listening = self
            .listening
            .take()
            .context("the listening address was already asked for")?;
        match tokio::time::timeout(patience, listening).await {
            Ok(Ok(addr)) => Ok(addr),
            Ok(Err(_)) => bail!(
                "{} exited before listening{}",
                self.name,
                quote_log(&self.name, log)
            ),
            Err(_) => bail!(
                "{} did not start listening within {patience:?}; see {}",
                self.name,
                log.display()
            ),
        }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL now, as a crash would (for failure tests).
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid; the worst case is ESRCH if it just exited.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(role = %self.name, "did not stop in time; killing");
            let _ = self.child.kill().await;
        }
    }
}

/// `log` opened to append, as the child's stderr and as the copy of its stdout both write it.
fn append_to(log: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))
}

/// The longest piece of a role's stdout [`copy_stdout`] holds before writing it to the log.
const MAX_LINE: u64 = 64 * 1024;

/// Starts a thread that reads `stdout` until the role closes it, appending each line to `log`;
/// the first listening line's address goes to the returned receiver as well.
fn copy_stdout(
    name: &str,
    stdout: ChildStdout,
    mut log: File,
) -> anyhow::Result<oneshot::Receiver<SocketAddr>> {
    let stdout = File::from(stdout.into_owned_fd().context("the child's stdout")?);
    let (found, listening) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("{name}-stdout"))
        .spawn(move || {
            let mut found = Some(found);
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            // Bytes, not `String`s: output that is not UTF-8 must not stop the copy. A line
            // longer than `MAX_LINE` is copied in pieces, so output without newlines cannot
            // grow the buffer without bound.
            while matches!(
                (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line),
                Ok(n) if n > 0
            ) {
                if let Some(addr) = parse_listening(&String::from_utf8_lossy(&line)) {
                    if let Some(found) = found.take() {
                        let _ = found.send(addr);
                    }
                }
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                // A log that cannot be written must not stall the role either: keep reading.
                let _ = log.write_all(&line);
                line.clear();
            }
        })
        .context("starting the thread that copies a role's stdout")?;
    Ok(listening)
}

/// The end of a message about role `name` that stopped: `":\n"`, its log's first error (see
/// [`first_errors`]) unless the last lines show it, and the last [`LAST_LINES`] lines of its
/// log (stderr and stdout alike), each after the role's name: what it printed as it died
/// (a libtorch abort, a Python env's own message, a signal's last words) even when that is
/// not an `error:` line or a panic. Then where its whole log is.
pub fn quote_log(name: &str, log: &Path) -> String {
    let last = last_lines(log, LAST_LINES);
    let errors = first_errors(log).filter(|errors| {
        let first = errors.lines().next().unwrap_or_default().trim();
        !last.iter().any(|line| line.trim() == first)
    });
    let mut quoted = String::new();
    if let Some(errors) = errors {
        quoted.push_str(&format!("\n{errors}"));
    }
    if !last.is_empty() {
        quoted.push_str(&format!("\nthe last {} lines of its log:", last.len()));
        for line in &last {
            quoted.push_str(&format!("\n  {name}| {line}"));
        }
    }
    let colon = if quoted.is_empty() { "" } else { ":" };
    format!("{colon}{quoted}\n(its whole log: {})", log.display())
}

/// How many of a dead role's last log lines [`quote_log`] quotes.
pub const LAST_LINES: usize = 20;

/// How much of a log's end [`last_lines`] reads: a role that printed megabytes costs no more.
const TAIL_BYTES: u64 = 64 * 1024;

/// The longest line [`last_lines`] quotes, in characters; longer ones end in `…`.
const MAX_QUOTED_LINE: usize = 400;

/// The last `n` non-blank lines of `log`, colour codes removed, each at most
/// [`MAX_QUOTED_LINE`] characters; none if it cannot be read.
fn last_lines(log: &Path, n: usize) -> Vec<String> {
    let Ok(mut file) = File::open(log) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(TAIL_BYTES);
    let mut tail = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut tail).is_err() {
        return Vec::new();
    }
    let text = strip_ansi(&String::from_utf8_lossy(&tail));
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && !lines.is_empty() {
        // The read began inside a line: its start is not there.
        lines.remove(0);
    }
    let kept: Vec<String> = lines
        .iter()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| {
            let l = l.trim_end();
            match l.char_indices().nth(MAX_QUOTED_LINE) {
                Some((cut, _)) => format!("{}…", &l[..cut]),
                None => l.to_string(),
            }
        })
        .collect();
    kept.into_iter().rev().collect()
}

/// The error a role printed before it exited: its log's `error:` line and the `caused by:`
/// lines under it, else its panic (see [`panic_lines`]), colour codes removed; `None` if
/// there is neither.
fn first_errors(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let plain = strip_ansi(&text);
    error_lines(&plain).or_else(|| panic_lines(&plain))
}

/// The longest panic message [`panic_lines`] quotes, in characters.
const MAX_PANIC_MESSAGE: usize = 400;

/// A panic's `thread '…' panicked at FILE:LINE:COL:` line and its message's first line (a
/// libtorch error carries its C++ frames after a `\n`: they are left out), at most
/// [`MAX_PANIC_MESSAGE`] characters of it.
fn panic_lines(plain: &str) -> Option<String> {
    let mut lines = plain
        .lines()
        .skip_while(|l| !(l.starts_with("thread '") && l.contains("panicked at")));
    let first = lines.next()?;
    let message = lines.next().unwrap_or_default();
    let message = message.split("\\n").next().unwrap_or_default();
    let message: String = message.chars().take(MAX_PANIC_MESSAGE).collect();
    Some(format!("  {first}\n  {message}"))
}

/// A log's first `error:` line and the `caused by:` lines under it.
fn error_lines(plain: &str) -> Option<String> {
    let mut lines = plain.lines().skip_while(|l| !l.starts_with("error:"));
    let first = lines.next()?;
    let causes = lines.take_while(|l| l.starts_with("  ")).take(8);
    Some(
        std::iter::once(first)
            .chain(causes)
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_error_is_read_from_its_log() {
        let log = std::env::temp_dir().join(format!("fleetrl-launch-{}.log", std::process::id()));
        std::fs::write(
            &log,
            "\u{1b}[2m2026-11-23\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m starting\n\
             error: unknown environment `CartPol-v1` (did you mean CartPole-v1?)\n\
             \x20 caused by: making the env\n\
             trailing noise\n",
        )
        .unwrap();
        assert_eq!(
            first_errors(&log).unwrap(),
            "  error: unknown environment `CartPol-v1` (did you mean CartPole-v1?)\n    caused by: making the env"
        );
        std::fs::write(
            &log,
            "\u{1b}[32m INFO\u{1b}[0m building the model\n\n\
             thread 'main' (3098) panicked at src/nn/var_store.rs:714:38:\n\
             called `Result::unwrap()` on an `Err` value: Torch(\"DefaultCPUAllocator: can't \
             allocate memory: you tried to allocate 160000000000 bytes.\\nframe #0: c10::\")\n\
             stack backtrace:\n",
        )
        .unwrap();
        assert_eq!(
            first_errors(&log).unwrap(),
            "  thread 'main' (3098) panicked at src/nn/var_store.rs:714:38:\n  called \
             `Result::unwrap()` on an `Err` value: Torch(\"DefaultCPUAllocator: can't allocate \
             memory: you tried to allocate 160000000000 bytes."
        );
        std::fs::write(&log, "\u{1b}[32m INFO\u{1b}[0m nothing wrong\n").unwrap();
        assert_eq!(first_errors(&log), None);
        std::fs::remove_file(&log).ok();
    }

    /// A role that died without an `error:` line or a panic (a libtorch abort, a Python
    /// env's own message) is quoted by its last lines, each after its name; an `error:` line
    /// those lines hold is not quoted twice, and one further up still is.
    #[test]
    fn a_dead_roles_last_lines_are_quoted_with_its_name() {
        let log = std::env::temp_dir().join(format!("fleetrl-last-{}.log", std::process::id()));
        let mut text = "x".repeat(100_000);
        text.push('\n');
        for i in 0..30 {
            text.push_str(&format!("\u{1b}[32m INFO\u{1b}[0m step {i}\n"));
        }
        text.push_str(&format!("{}\n\n", "y".repeat(1000)));
        text.push_str("terminate called after throwing an instance of 'c10::Error'\n");
        std::fs::write(&log, &text).unwrap();
        let quoted = quote_log("learner", &log);
        let lines: Vec<&str> = quoted.lines().collect();
        assert_eq!(lines[0], ":");
        assert_eq!(lines[1], "the last 20 lines of its log:");
        assert_eq!(lines[2], "  learner|  INFO step 12");
        assert!(lines[20].starts_with(&format!("  learner| {}…", "y".repeat(400))));
        assert_eq!(
            lines[21],
            "  learner| terminate called after throwing an instance of 'c10::Error'"
        );
        assert_eq!(lines[22], format!("(its whole log: {})", log.display()));
        assert_eq!(lines.len(), 23);

        // The error is among the last lines: quoted once.
        std::fs::write(&log, "starting\nerror: no such env\n  caused by: typo\n").unwrap();
        let quoted = quote_log("actor-0", &log);
        assert_eq!(quoted.matches("no such env").count(), 1, "{quoted}");
        assert!(
            quoted.contains("  actor-0| error: no such env\n"),
            "{quoted}"
        );
        // An earlier error than the last lines show is quoted above them.
        let mut text = String::from("error: the first failure\n");
        text.push_str(&"later noise\n".repeat(25));
        std::fs::write(&log, text).unwrap();
        let quoted = quote_log("actor-0", &log);
        assert!(
            quoted.starts_with(":\n  error: the first failure\nthe last 20 lines"),
            "{quoted}"
        );
        std::fs::write(&log, "").unwrap();
        assert_eq!(
            quote_log("actor-0", &log),
            format!("\n(its whole log: {})", log.display())
        );
        std::fs::remove_file(&log).ok();
    }

    /// Output with no newline is copied whole, in pieces of at most `MAX_LINE` bytes.
    #[tokio::test]
    async fn a_long_line_is_copied_in_bounded_pieces() {
        let log = std::env::temp_dir().join(format!("fleetrl-longline-{}.log", std::process::id()));
        let mut child = Command::new("sh")
            .args([
                "-c",
                "head -c 200000 /dev/zero | tr '\\0' a; echo; echo done",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let file = File::create(&log).unwrap();
        let _listening = copy_stdout("long", child.stdout.take().unwrap(), file).unwrap();
        child.wait().await.unwrap();
        let started = std::time::Instant::now();
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap();
            if text.ends_with("done\n") || started.elapsed() > Duration::from_secs(30) {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(text.ends_with("done\n"), "the copy did not finish");
        assert_eq!(text.matches('a').count(), 200_000);
        assert!(text.lines().all(|l| l.len() as u64 <= MAX_LINE));
        assert!(text.lines().count() >= 4, "copied in pieces");
        std::fs::remove_file(&log).ok();
    }
}
