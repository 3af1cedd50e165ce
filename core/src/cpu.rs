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
