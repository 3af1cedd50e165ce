//! The actor's id: given, or derived from the host name for replicas that share one config.

/// A number, or `auto`: a hash of the host name.
pub(crate) fn parse_actor_id(value: &str) -> Result<u32, String> {
    if value != "auto" {
        return value
            .parse()
            .map_err(|e| format!("expected a number or `auto`: {e}"));
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map_err(|_| "`auto` needs the host name, which cannot be read".to_string())?;
    Ok(id_from_host(host.trim()))
}

/// FNV-1a of the name, in 31 bits: stable across runs and platforms, unlike std's hasher.
fn id_from_host(host: &str) -> u32 {
    let hash = host.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash & 0x7fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_pass_through() {
        assert_eq!(parse_actor_id("7"), Ok(7));
        let err = parse_actor_id("seven").unwrap_err();
        assert!(err.contains("a number or `auto`"), "{err}");
    }

    #[test]
    fn auto_hashes_the_host_name() {
        // Replicas differ only in their host names (container ids, pod names).
        let a = id_from_host("fleetrl-actor-7d9f8-abcde");
        let b = id_from_host("fleetrl-actor-7d9f8-fghij");
        assert_ne!(a, b);
        assert_eq!(a, id_from_host("fleetrl-actor-7d9f8-abcde"));
        assert!(a < 1 << 31);
        assert_eq!(id_from_host(""), 0x811c_9dc5 & 0x7fff_ffff);
        assert!(parse_actor_id("auto").is_ok());
    }
}
