//! tidings-core: the pure logic of Tidings, shared by the server and, compiled
//! to WebAssembly, by front ends — so the browser computes exactly what the
//! server computes.
//!
//! **Architecture invariant:** no IO, no async, no clocks, no randomness of its
//! own (callers pass random numbers in), no dependency on the server. Every
//! function here is deterministic and builds for `wasm32-unknown-unknown`.
//!
//! - [`id`]: ids parsed once (`TeamId`, `UserId`, `EventType`, `EntityId`) and
//!   the rules they are checked by (`validate_id`).
//! - [`key`]: notification keys (readable and SHA-256) and advisory lock keys.
//! - [`position`]: feed positions `(tx, id)` and their opaque cursors.
//! - [`watermark`]: seen/read watermarks, individually read items, badges.
//! - [`fanout`]: write-time or read-time fan-out.
//! - [`retry`]: delivery retry schedule.
//! - [`preferences`]: which setting applies to a notification, and why.
//!
//! Byte-level encodings are pinned by `core/golden.json`.

mod encoding;
pub mod fanout;
pub mod id;
pub mod key;
pub mod position;
pub mod preferences;
pub mod retry;
#[cfg(feature = "wasm")]
pub mod wasm;
pub mod watermark;

pub use fanout::{decide, Decision, FanoutThresholds, Rates, SendKind, Strategy};
pub use id::{
    is_format_character, validate_id, EntityId, EventType, KeyError, TeamId, UserId, MAX_ID_BYTES,
};
pub use key::{stable_lock_key, Channel, NotificationKey};
pub use position::{CursorError, Position};
pub use preferences::{
    resolve, Category, Level, PreferenceError, Resolution, Rule, Scope, Setting, Target,
};
pub use retry::{NextAttempt, RetrySchedule};
pub use watermark::{
    advance, classify, decide_digest, decide_fallback, unread_count, BadgeCount, DigestContent,
    Fallback, ItemState, ReadSet, Unless, WatermarkError, Watermarks, BADGE_CAP,
    MAX_INDIVIDUAL_READS,
};
