//! Crash hooks for the failure tests: every promise about crashes is shown by
//! causing the crash. Compiled only with the `test-hooks` cargo feature, which
//! the tests crate enables; a release build (`cargo build --release -p
//! tidings-server`) has neither the code nor the variable names.

/// `TIDINGS_TEST_CRASH_BEFORE_ACK=1`: the NATS inbox aborts the process right
/// after committing a new alert and before acking its message.
pub const CRASH_BEFORE_ACK: &str = "TIDINGS_TEST_CRASH_BEFORE_ACK";

/// `TIDINGS_TEST_LISTEN_REFUSED=1`: every LISTEN session fails to start, as
/// if the database refused the connection, so readiness can be shown to
/// notice a LISTEN that stays down.
pub const LISTEN_REFUSED: &str = "TIDINGS_TEST_LISTEN_REFUSED";

/// `TIDINGS_TEST_WITHOUT_LAST_MIGRATION=1`: the binary knows every migration
/// but the newest, like the version before it, for the rolling upgrade test.
/// Its outbox workers also record `sent` in place, as the version before
/// migration 0022 did (`outbox::complete`): this version's completion needs
/// that migration's table.
pub const WITHOUT_LAST_MIGRATION: &str = "TIDINGS_TEST_WITHOUT_LAST_MIGRATION";

/// `TIDINGS_TEST_PANIC_ON=<marker>`: the NATS inbox panics while handling
/// any message whose body contains the marker, so the fault-injection test
/// can show that one poisoned message never stops the shared consumer.
pub const PANIC_ON: &str = "TIDINGS_TEST_PANIC_ON";

/// `TIDINGS_TEST_DECISION_PAUSE_MS=<ms>`: the outbox's claim pauses that
/// long between reading the watermarks of its delayed deliveries and
/// recording its decisions (`deliveries::fallback`), widening the window in
/// which a mark could slip between the two if the claim did not hold the
/// users' locks: what lets the race test fail when the lock is missing.
pub const DECISION_PAUSE_MS: &str = "TIDINGS_TEST_DECISION_PAUSE_MS";

/// The pause [`DECISION_PAUSE_MS`] asks for, if any.
pub fn decision_pause() -> Option<std::time::Duration> {
    let ms: u64 = std::env::var(DECISION_PAUSE_MS).ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// `TIDINGS_TEST_DIGEST_SEND_PAUSE_MS=<ms>`: the digest flush pauses that
/// long after its decision committed and before the email is sent, so the
/// crash test can kill the process in between.
pub const DIGEST_SEND_PAUSE_MS: &str = "TIDINGS_TEST_DIGEST_SEND_PAUSE_MS";

/// The pause [`DIGEST_SEND_PAUSE_MS`] asks for, if any.
pub fn digest_send_pause() -> Option<std::time::Duration> {
    let ms: u64 = std::env::var(DIGEST_SEND_PAUSE_MS).ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// `TIDINGS_TEST_PERIODIC_AT=HH:MM:SS`: daily and weekly digests are sent
/// at this local time instead of 08:00, so a test can see one sent.
pub const PERIODIC_AT: &str = "TIDINGS_TEST_PERIODIC_AT";

/// The time [`PERIODIC_AT`] names, if any.
pub fn periodic_at() -> Option<chrono::NaiveTime> {
    let text = std::env::var(PERIODIC_AT).ok()?;
    chrono::NaiveTime::parse_from_str(&text, "%H:%M:%S").ok()
}

/// Panics when [`PANIC_ON`] is set and `payload` contains its marker.
pub fn panic_if_poisoned(payload: &[u8]) {
    let Ok(marker) = std::env::var(PANIC_ON) else {
        return;
    };
    if !marker.is_empty()
        && payload
            .windows(marker.len())
            .any(|w| w == marker.as_bytes())
    {
        panic!("{PANIC_ON}: a poisoned message");
    }
}

/// Whether the hook named `env` is armed in this process.
pub fn armed(env: &str) -> bool {
    std::env::var(env).is_ok_and(|v| v == "1")
}

/// Aborts the process (no unwinding, no shutdown: a crash) when `env` is armed.
pub fn crash_if_armed(env: &str, context: &str) {
    if armed(env) {
        tracing::error!(context, "{env}=1: aborting");
        std::process::abort();
    }
}

/// Logged at start-up, so a binary with hooks is never mistaken for a release.
pub fn announce() {
    tracing::warn!("built with the test-hooks feature: crash hooks are compiled in");
}
