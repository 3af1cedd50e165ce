//! One process per directory: the launcher's run directory, the learner's `--run-dir`, the
//! replay server's `--checkpoint-dir`. A second process on the same directory would overwrite
//! the first one's checkpoints (and resume from ones it is pruning), so it is refused with the
//! holder's pid instead.

use std::fs::File;
use std::path::Path;

use anyhow::Context;

/// Takes `dir/file` as an exclusive lock for this process, writing its pid there. The lock
/// holds while the returned file stays open and goes with the process however it ends (the
/// kernel drops it; Rust opens files close-on-exec, so children do not inherit it).
///
/// Held by another process: an error `"{dir} is in use by another {holder} (pid N): {advice}"`.
/// A filesystem without `flock` (some network mounts) only gets a warning on stderr: it must
/// not stop the run.
pub fn lock(dir: &Path, file: &str, holder: &str, advice: &str) -> anyhow::Result<File> {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let path = dir.join(file);
    let mut lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut pid = String::new();
            let _ = lock.read_to_string(&mut pid);
            anyhow::bail!(
                "{} is in use by another {holder} (pid {}): {advice}",
                dir.display(),
                pid.trim()
            );
        }
        eprintln!(
            "warning: cannot lock {} ({err}): a second {holder} on this directory would not be \
             refused",
            path.display()
        );
    }
    lock.set_len(0)
        .and_then(|()| writeln!(lock, "{}", std::process::id()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_directory_is_refused_naming_the_holder_until_the_first_goes() {
        let dir = std::env::temp_dir().join(format!("fleetrl-dir-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock(&dir, "x.lock", "learner", "stop it first").unwrap();
        // flock conflicts between open files, so a second open in this process stands in for
        // a second process.
        let err = lock(&dir, "x.lock", "learner", "stop it first").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is in use by another learner (pid {}): stop it first",
                dir.display(),
                std::process::id()
            )
        );
        // Another file in the same directory is another lock.
        let _other = lock(&dir, "y.lock", "replay server", "").unwrap();
        drop(first);
        let _again = lock(&dir, "x.lock", "learner", "stop it first").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
