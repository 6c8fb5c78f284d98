//! The patched sqlx-core (vendor/README.md) is the one the server builds
//! with. An sqlx upgrade leaves a `[patch.crates-io]` entry unused with only
//! a warning, and the patch would be gone without a test failing: this one
//! fails then, and says what to do.

use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `[[package]]` entry of `name` in Cargo.lock, as its lines.
fn locked(lock: &str, name: &str) -> Vec<String> {
    lock.split("[[package]]")
        .find(|entry| entry.lines().any(|l| l == format!("name = \"{name}\"")))
        .unwrap_or_else(|| panic!("{name} is not in Cargo.lock"))
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_server_builds_with_the_vendored_sqlx_core_and_its_patch() {
    let lock = read("Cargo.lock");
    let entry = locked(&lock, "sqlx-core");
    assert!(
        !entry.iter().any(|l| l.starts_with("source = ")),
        "Cargo.lock takes sqlx-core from a registry, so vendor/sqlx-core and its patch are \
         unused (an sqlx upgrade?): re-apply the patch to the new release or drop it, as \
         vendor/README.md says ({entry:?})"
    );
    let vendored = read("vendor/sqlx-core/Cargo.toml");
    let version = entry
        .iter()
        .find_map(|l| l.strip_prefix("version = "))
        .expect("a version");
    assert!(
        vendored.contains(&format!("version = {version}")),
        "vendor/sqlx-core is not the version Cargo.lock names ({version})"
    );
    let sqlx = locked(&lock, "sqlx");
    assert!(
        sqlx.iter().any(|l| l == &format!("version = {version}")),
        "sqlx and the vendored sqlx-core differ in version: {sqlx:?}"
    );
    let patched = read("vendor/sqlx-core/src/pool/connection.rs");
    assert_eq!(
        patched.matches("Tidings patch").count(),
        2,
        "vendor/sqlx-core/src/pool/connection.rs lost a marked change"
    );
    assert!(
        patched.contains("self.raw.flush().await") && !patched.contains("self.raw.ping().await"),
        "the connection goes back to the pool with a ping again"
    );
}
