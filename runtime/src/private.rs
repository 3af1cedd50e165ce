//! Files only their owner reads: checkpoints hold the weights the token protects over gRPC,
//! and configs, logs and TensorBoard events describe the run.

/// Makes every file and directory this process creates from now on private to its user
/// (files 0600, directories 0700) whatever the umask it inherited (commonly 022, which left
/// run directories 0755 and checkpoints 0644, readable by every local user). Every fleetrl
/// binary calls it first; the roles the launcher starts inherit it too.
pub fn private_files() {
    #[cfg(unix)]
    // SAFETY: umask(2) only replaces the process's file mode mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// Under a permissive umask, what is created after the call is the owner's alone.
    #[test]
    fn files_and_directories_are_private_whatever_the_umask() {
        // SAFETY: as above; the test binary's other tests create no files they share.
        unsafe {
            libc::umask(0o022);
        }
        super::private_files();
        let dir = std::env::temp_dir().join(format!("fleetrl-private-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("run")).unwrap();
        std::fs::write(dir.join("run/model.safetensors"), b"weights").unwrap();
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("run"), 0o700);
        assert_eq!(mode("run/model.safetensors"), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
