//! A port of this checkout's own, for the private PostgreSQL clusters that
//! tests and the bench start: clusters are found by port, so two checkouts on
//! one machine must not share one. Included by tests/src/cluster.rs and
//! bench/src/main.rs (`#[path]`), so both derive it the same way.

/// 20000–31999 in steps of 8 (two clusters of four ports), from the path:
/// below 32768, outside Linux's ephemeral range.
pub fn checkout_port(path: &str) -> u16 {
    // FNV-1a: stable across builds and Rust versions, unlike `DefaultHasher`.
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    20000 + (hash % 1500) as u16 * 8
}
