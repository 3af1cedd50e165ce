//! A role waiting on a peer at startup (a learner rank at the rendezvous, an actor or a policy
//! server for its learner) stops at once on SIGTERM and exits 0: nothing has been trained,
//! collected or served yet. A container's main process is PID 1, which ignores a signal it has
//! no handler for, so a role that listened only once it was running sat out its whole wait
//! under `docker-compose down` (here, not PID 1, it died of the signal instead).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};

use crate::{read_log, wait_exit};

/// What an actor and a policy server following a learner log as they start to wait for it.
pub const WAITING_FOR_THE_LEARNER: &str = "waiting for the learner";

/// How long a role may take to stop after SIGTERM before the test calls it stuck.
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// Starts the fleetrl binary `bin` with `args`, its output to `log_path`; once its log shows
/// `waiting` (at most 60 s after the start) sends it SIGTERM, and checks that it exits 0
/// within [`STOP_LIMIT`], its log saying `stopped`.
pub fn stops_at_once_while_waiting(
    bin: &str,
    args: &[&str],
    log_path: &Path,
    waiting: &str,
    stopped: &str,
) -> anyhow::Result<()> {
    let log = std::fs::File::create(log_path)?;
    let mut child = Command::new(fleetrl_runtime::launch::bin_dir()?.join(bin))
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let started = Instant::now();
    while !read_log(log_path).contains(waiting) {
        if let Some(status) = child.try_wait()? {
            bail!(
                "{bin} exited ({status}) before it waited: {}",
                read_log(log_path)
            );
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("{bin} never logged {waiting:?}: {}", read_log(log_path));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Unsafe: a plain signal to a child this test started and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let (status, _) = wait_exit(&mut child, STOP_LIMIT);
    let _ = child.kill();
    let log = read_log(log_path);
    let Some(status) = status else {
        bail!("{bin} still waits {STOP_LIMIT:?} after SIGTERM: {log}");
    };
    ensure!(status.success(), "{bin} ended with {status}: {log}");
    ensure!(
        log.contains(stopped),
        "{bin} did not log {stopped:?}: {log}"
    );
    Ok(())
}
