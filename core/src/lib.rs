//! tidings-core: the pure logic of Tidings, shared by the server and, compiled
//! to WebAssembly, by front ends — so the browser computes exactly what the
//! server computes.
//!
//! **Architecture invariant:** no IO, no async, no clocks, no randomness of its
//! own (callers pass random numbers in), no dependency on the server. Every
//! function here is deterministic and builds for `wasm32-unknown-unknown`.
//!
//! - [`id`]: ids parsed once (`TeamId`, `UserId`, `EventType`, `EntityId`).
//! - [`key`]: notification keys (readable and SHA-256) and advisory lock keys.
//! - [`position`]: feed positions `(tx, id)` and their opaque cursors.
//! - [`watermark`]: seen/read watermarks, individually read items, badges.
//! - [`fanout`]: write-time or read-time fan-out.
//! - [`retry`]: delivery retry schedule.
//!
//! Byte-level encodings are pinned by `core/golden.json`.

mod encoding;
pub mod fanout;
pub mod id;
pub mod key;
pub mod position;
pub mod retry;
#[cfg(feature = "wasm")]
pub mod wasm;
pub mod watermark;

pub use fanout::{decide, Decision, FanoutThresholds, Rates, SendKind, Strategy};
pub use id::{EntityId, EventType, TeamId, UserId};
pub use key::{
    is_format_character, stable_lock_key, validate_id, Channel, KeyError, NotificationKey,
    MAX_ID_BYTES,
};
pub use position::{CursorError, Position};
pub use retry::{NextAttempt, RetrySchedule};
pub use watermark::{
    advance, classify, unread_count, BadgeCount, ItemState, ReadSet, WatermarkError, Watermarks,
    BADGE_CAP, MAX_INDIVIDUAL_READS,
};
