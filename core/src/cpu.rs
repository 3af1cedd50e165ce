//! CPU settings for the threads and process that train: what libtorch on a CPU is slow at by
//! default for the small networks RL uses, measured on this project's 2-core machine.

/// The cores this process may run on (1 when the system will not say).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Makes this thread's float arithmetic treat subnormal numbers as zero (x86-64's FTZ and DAZ
/// bits; PyTorch's `torch.set_flush_denormal(True)`). Call it on every thread that trains.
///
/// Adam's moment of a weight whose gradient went to zero (a dead ReLU unit: 41% of a 256x256
/// DQN's weights after 3,000 updates of `core/examples/offpolicy_timing`) decays geometrically
/// through the subnormal range, and every elementwise op on a subnormal takes a microcode
/// assist: measured, Adam's `lerp_` on 67k moments took 211 us instead of 20. The values
/// flushed are below 1.2e-38, far under anything that moves a weight.
pub fn flush_denormals() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: only sets the FTZ (bit 15) and DAZ (bit 6) flags of this thread's MXCSR; no
    // memory is touched, and no Rust code here relies on subnormal results.
    #[allow(deprecated)]
    unsafe {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        _mm_setcsr(_mm_getcsr() | 0x8040);
    }
}

/// Keeps freed tensor memory (up to 32 MiB a block) in the process's heap for the next
/// allocation instead of returning it to the system (glibc only; elsewhere nothing changes).
///
/// glibc hands blocks over its mmap threshold (128 KiB at first, then moving) straight back
/// to the kernel, so a fresh 256x256 gradient or a 67k-float temporary was page-faulted in
/// again on every update: measured, a 256x256 DQN update in the learner took 1.34-1.47 ms
/// with glibc's defaults and 1.20-1.32 ms with this (2 runs each, in turns). The price is a
/// heap that keeps what it once held, which for a learner is its working set anyway.
pub fn keep_tensor_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation thresholds (under glibc's own lock);
    // memory already allocated is not affected.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// The variable libgomp (libtorch's OpenMP) reads once, as it loads, for how its idle threads
/// wait for the next parallel region.
pub const OPENMP_WAIT_POLICY: &str = "OMP_WAIT_POLICY";

/// Where libtorch runs `threads` intra-op threads (more than one), makes its OpenMP threads
/// sleep while they wait instead of spinning. Returns at once when `threads` is 1 or the
/// user set [`OPENMP_WAIT_POLICY`] themselves; otherwise runs this program again in this
/// process with the variable set to `PASSIVE` (`exec`: same pid, arguments, environment and
/// open files), because libgomp read its settings before `main`. It returns only the error of
/// an `exec` that failed. Call it before any thread that trains starts.
///
/// Spinning is libgomp's default, and it collapses beside a busy neighbour: a team's threads
/// spin at every barrier for one that the kernel has descheduled. Measured on the 2-core VM
/// beside a pip install and a release build, the PEARL update of `point-robot-sparse-pearl`
/// (`THREADS=2 core/examples/pearl_update`) took 147-389 ms spinning and 7.6-9.0 ms passive
/// (one thread: 14-16 ms).
pub fn wait_passively(threads: u32) -> std::io::Result<()> {
    if threads <= 1 || std::env::var_os(OPENMP_WAIT_POLICY).is_some() {
        return Ok(());
    }
    use std::os::unix::process::CommandExt;
    tracing::info!(threads, "starting again with {OPENMP_WAIT_POLICY}=PASSIVE");
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(std::env::current_exe()?);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    Err(command.args(args).env(OPENMP_WAIT_POLICY, "PASSIVE").exec())
}
