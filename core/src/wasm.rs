//! JavaScript bindings (feature `wasm`), built into `wasm/pkg/` by
//! `scripts/build-wasm`. Every function delegates to the Rust API so the
//! browser computes exactly what the server does.
//!
//! Conventions for JavaScript:
//! - 64-bit integers (`tx`, `id`, lock keys) are `BigInt`, because JavaScript
//!   numbers lose precision above 2⁵³ and PostgreSQL xids and lock keys use
//!   the full range. Call `.toString()` for the decimal form.
//! - Counts, sizes and milliseconds are plain numbers; they are checked to be
//!   non-negative safe integers (≤ 2⁵³ − 1).
//! - Errors are thrown as `Error` whose `message` is the Rust error's
//!   `Display` text, identical to what the server returns.
//! - Channels, send kinds and strategies are the snake_case strings of the
//!   HTTP API (`"in_app"`, `"transactional_alert"`, `"write_in_batches"`).

use wasm_bindgen::prelude::*;

use crate::fanout::{self, FanoutThresholds, Rates, SendKind};
use crate::id;
use crate::key::{self, Channel, NotificationKey as CoreKey};
use crate::position::{CursorError, Position as CorePosition};
use crate::preferences;
use crate::retry::{NextAttempt, RetrySchedule};
use crate::watermark::{self, ReadSet as CoreReadSet, Watermarks};

/// Input that JavaScript can express but the Rust types cannot.
#[derive(Debug, thiserror::Error)]
enum InputError {
    #[error("{0} must be a non-negative integer no larger than 2^53 - 1")]
    NotASafeInteger(&'static str),
    #[error("unknown send kind {0:?}; expected transactional_alert or activity_event")]
    UnknownSendKind(String),
    #[error("give both producerEventsPerSec and consumerReadsPerSec, or neither")]
    HalfRates,
    #[error("txs and ids must have the same length ({txs} != {ids})")]
    MismatchedLengths { txs: usize, ids: usize },
}

fn throw(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

fn safe_u64(name: &'static str, x: f64) -> Result<u64, JsError> {
    if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= MAX_SAFE_INTEGER {
        Ok(x as u64)
    } else {
        Err(throw(InputError::NotASafeInteger(name)))
    }
}

fn safe_u32(name: &'static str, x: f64) -> Result<u32, JsError> {
    let v = safe_u64(name, x)?;
    u32::try_from(v).map_err(|_| throw(InputError::NotASafeInteger(name)))
}

/// A derived notification key.
#[wasm_bindgen(js_name = NotificationKey, getter_with_clone)]
pub struct JsNotificationKey {
    /// `v1:tenant:event_type:entity_id:recipient_id:channel`, parts escaped.
    #[wasm_bindgen(readonly)]
    pub readable: String,
    /// 64 lowercase hex characters: the database key.
    #[wasm_bindgen(readonly, js_name = digestHex)]
    pub digest_hex: String,
}

/// Derives the key of one notification; throws on an invalid id or channel.
#[wasm_bindgen(js_name = deriveKey)]
pub fn derive_key(
    tenant: &str,
    event_type: &str,
    entity_id: &str,
    recipient_id: &str,
    channel: &str,
) -> Result<JsNotificationKey, JsError> {
    let channel: Channel = channel.parse().map_err(throw)?;
    let k = CoreKey::derive(tenant, event_type, entity_id, recipient_id, channel).map_err(throw)?;
    Ok(JsNotificationKey {
        readable: k.readable().to_owned(),
        digest_hex: k.digest_hex(),
    })
}

/// The parts of a readable key.
#[wasm_bindgen(getter_with_clone)]
pub struct KeyParts {
    #[wasm_bindgen(readonly)]
    pub tenant: String,
    #[wasm_bindgen(readonly, js_name = eventType)]
    pub event_type: String,
    #[wasm_bindgen(readonly, js_name = entityId)]
    pub entity_id: String,
    #[wasm_bindgen(readonly, js_name = recipientId)]
    pub recipient_id: String,
    #[wasm_bindgen(readonly)]
    pub channel: String,
}

/// Inverse of `NotificationKey.readable`; throws on anything else.
#[wasm_bindgen(js_name = parseReadableKey)]
pub fn parse_readable_key(s: &str) -> Result<KeyParts, JsError> {
    let (tenant, event_type, entity_id, recipient_id, channel) =
        CoreKey::parse_readable(s).map_err(throw)?;
    Ok(KeyParts {
        tenant,
        event_type,
        entity_id,
        recipient_id,
        channel: channel.as_str().to_owned(),
    })
}

/// Throws if `value` is not a valid id; `field` names it in the message.
#[wasm_bindgen(js_name = validateId)]
pub fn validate_id(field: &str, value: &str) -> Result<(), JsError> {
    // KeyError names fields with `&'static str`; validate under a fixed name
    // and put the caller's in the message.
    id::validate_id("\u{0}", value).map_err(|e| throw(e.to_string().replace('\u{0}', field)))
}

/// Stable 64-bit advisory lock key of `parts`, as a `BigInt`.
#[wasm_bindgen(js_name = stableLockKey)]
pub fn stable_lock_key(parts: Vec<String>) -> i64 {
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    key::stable_lock_key(&refs)
}

/// A feed position `(tx, id)`, ordered by `tx` then `id`.
#[wasm_bindgen(js_name = Position)]
#[derive(Clone, Copy)]
pub struct JsPosition(CorePosition);

#[wasm_bindgen(js_class = Position)]
impl JsPosition {
    #[wasm_bindgen(constructor)]
    pub fn new(tx: i64, id: i64) -> JsPosition {
        JsPosition(CorePosition::new(tx, id))
    }

    #[wasm_bindgen(getter)]
    pub fn tx(&self) -> i64 {
        self.0.tx
    }

    #[wasm_bindgen(getter)]
    pub fn id(&self) -> i64 {
        self.0.id
    }

    /// Opaque cursor; throws for a negative position, which no cursor can hold.
    #[wasm_bindgen(js_name = toCursor)]
    pub fn to_cursor(&self) -> Result<String, JsError> {
        if self.0.tx < 0 || self.0.id < 0 {
            return Err(throw(CursorError::Negative));
        }
        Ok(self.0.to_cursor())
    }

    /// Parses a cursor; throws with the reason it was refused.
    #[wasm_bindgen(js_name = fromCursor)]
    pub fn from_cursor(s: &str) -> Result<JsPosition, JsError> {
        CorePosition::from_cursor(s).map(JsPosition).map_err(throw)
    }

    /// -1, 0 or 1 as `this` is before, at or after `other`.
    pub fn compare(&self, other: &JsPosition) -> i32 {
        self.0.cmp(&other.0) as i32
    }

    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        self.0.to_string()
    }
}

/// `max(current, min(proposed, head))`: the watermark after a mark request.
#[wasm_bindgen(js_name = advanceWatermark)]
pub fn advance_watermark(
    current: &JsPosition,
    proposed: &JsPosition,
    head: &JsPosition,
) -> JsPosition {
    JsPosition(watermark::advance(current.0, proposed.0, head.0))
}

/// Items read one by one above the read watermark (at most 1000).
#[wasm_bindgen(js_name = ReadSet)]
#[derive(Default)]
pub struct JsReadSet(CoreReadSet);

#[wasm_bindgen(js_class = ReadSet)]
impl JsReadSet {
    #[wasm_bindgen(constructor)]
    pub fn new() -> JsReadSet {
        JsReadSet::default()
    }

    /// True if newly added; throws when full.
    pub fn insert(&mut self, p: &JsPosition) -> Result<bool, JsError> {
        self.0.insert(p.0).map_err(throw)
    }

    pub fn contains(&self, p: &JsPosition) -> bool {
        self.0.contains(p.0)
    }

    /// Drops entries at or below the read watermark.
    pub fn prune(&mut self, read_mark: &JsPosition) {
        self.0.prune(read_mark.0)
    }

    #[wasm_bindgen(getter)]
    pub fn size(&self) -> u32 {
        // Bounded by MAX_INDIVIDUAL_READS, far below u32::MAX.
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }
}

#[wasm_bindgen]
pub struct ItemState {
    #[wasm_bindgen(readonly)]
    pub seen: bool,
    #[wasm_bindgen(readonly)]
    pub read: bool,
}

/// Whether an item is seen and read, given both watermarks and the read set.
#[wasm_bindgen(js_name = classifyItem)]
pub fn classify_item(
    item: &JsPosition,
    seen: &JsPosition,
    read: &JsPosition,
    read_set: &JsReadSet,
) -> ItemState {
    let marks = Watermarks {
        seen: seen.0,
        read: read.0,
    };
    let s = watermark::classify(item.0, &marks, &read_set.0);
    ItemState {
        seen: s.seen,
        read: s.read,
    }
}

#[wasm_bindgen]
pub struct BadgeCount {
    #[wasm_bindgen(readonly)]
    pub count: u32,
    /// True when more than `count` exist: show "count+".
    #[wasm_bindgen(readonly)]
    pub capped: bool,
}

/// Counts the positions `(txs[i], ids[i])` above `mark` and not in `readSet`,
/// stopping at `cap`. `txs` and `ids` are `BigInt64Array`s (or arrays of
/// BigInt) of equal length.
#[wasm_bindgen(js_name = unreadCount)]
pub fn unread_count(
    txs: Vec<i64>,
    ids: Vec<i64>,
    mark: &JsPosition,
    read_set: &JsReadSet,
    cap: u32,
) -> Result<BadgeCount, JsError> {
    if txs.len() != ids.len() {
        return Err(throw(InputError::MismatchedLengths {
            txs: txs.len(),
            ids: ids.len(),
        }));
    }
    let positions = txs
        .into_iter()
        .zip(ids)
        .map(|(tx, id)| CorePosition::new(tx, id));
    let b = watermark::unread_count(positions, mark.0, &read_set.0, cap);
    Ok(BadgeCount {
        count: b.count,
        capped: b.capped,
    })
}

/// The default badge cap (1000).
#[wasm_bindgen(js_name = badgeCap)]
pub fn badge_cap() -> u32 {
    watermark::BADGE_CAP
}

/// The fan-out decision: `strategy` is `"write_inline"`, `"write_in_batches"`
/// (then `batchSize` is set) or `"store_once_read_time"`.
#[wasm_bindgen(js_name = FanoutDecision, getter_with_clone)]
pub struct JsFanoutDecision {
    #[wasm_bindgen(readonly)]
    pub strategy: String,
    #[wasm_bindgen(readonly, js_name = batchSize)]
    pub batch_size: Option<f64>,
    #[wasm_bindgen(readonly)]
    pub reason: String,
}

/// Decides how to fan out a send. `kind` is `"transactional_alert"` or
/// `"activity_event"`; rates are given both or neither; omitted thresholds
/// take the defaults (100, 500, 1000, and a push ratio of 1: see
/// `FanoutThresholds::push_above_reads_per_event`).
#[wasm_bindgen(js_name = decideFanout)]

pub fn decide_fanout(
    kind: &str,
    audience: f64,
    producer_events_per_sec: Option<f64>,
    consumer_reads_per_sec: Option<f64>,
    inline_max: Option<f64>,
    batch_size: Option<f64>,
    write_max_for_events: Option<f64>,
    push_above_reads_per_event: Option<f64>,
) -> Result<JsFanoutDecision, JsError> {
    let kind = match kind {
        "transactional_alert" => SendKind::TransactionalAlert,
        "activity_event" => SendKind::ActivityEvent,
        other => return Err(throw(InputError::UnknownSendKind(other.to_owned()))),
    };
    let audience = safe_u64("audience", audience)?;
    let rates = match (producer_events_per_sec, consumer_reads_per_sec) {
        (Some(p), Some(c)) => Some(Rates {
            producer_events_per_sec: p,
            consumer_reads_per_sec: c,
        }),
        (None, None) => None,
        _ => return Err(throw(InputError::HalfRates)),
    };
    let defaults = FanoutThresholds::default();
    let thresholds = FanoutThresholds {
        inline_max: inline_max.map_or(Ok(defaults.inline_max), |v| safe_u64("inlineMax", v))?,
        batch_size: batch_size.map_or(Ok(defaults.batch_size), |v| safe_u64("batchSize", v))?,
        write_max_for_events: write_max_for_events
            .map_or(Ok(defaults.write_max_for_events), |v| {
                safe_u64("writeMaxForEvents", v)
            })?,
        push_above_reads_per_event: push_above_reads_per_event
            .unwrap_or(defaults.push_above_reads_per_event),
    };
    let d = fanout::decide(kind, audience, rates, &thresholds);
    let batch_size = match d.strategy {
        fanout::Strategy::WriteInBatches { batch_size } => Some(batch_size as f64),
        _ => None,
    };
    Ok(JsFanoutDecision {
        strategy: d.strategy.as_str().to_owned(),
        batch_size,
        reason: d.reason,
    })
}

/// Milliseconds to wait before the next delivery attempt, or `undefined` to
/// give up (the entry goes `dead`). `attempt` is the number of attempts made;
/// `random` a draw from `[0, 1)` such as `Math.random()`. Omitted schedule
/// fields take the defaults (5000 ms, ×4, 3 600 000 ms, 10 attempts, 0.2).
#[wasm_bindgen(js_name = retryNext)]
pub fn retry_next(
    attempt: f64,
    random: f64,
    base_ms: Option<f64>,
    factor: Option<f64>,
    max_delay_ms: Option<f64>,
    max_attempts: Option<f64>,
    jitter: Option<f64>,
) -> Result<Option<f64>, JsError> {
    let d = RetrySchedule::default();
    let schedule = RetrySchedule {
        base_ms: base_ms.map_or(Ok(d.base_ms), |v| safe_u64("baseMs", v))?,
        factor: factor.map_or(Ok(d.factor), |v| safe_u32("factor", v))?,
        max_delay_ms: max_delay_ms.map_or(Ok(d.max_delay_ms), |v| safe_u64("maxDelayMs", v))?,
        max_attempts: max_attempts.map_or(Ok(d.max_attempts), |v| safe_u32("maxAttempts", v))?,
        jitter: jitter.unwrap_or(d.jitter),
    };
    let attempt = safe_u32("attempt", attempt)?;
    // Delays never exceed max_delay_ms, itself a safe integer: exact as f64.
    Ok(match schedule.next(attempt, random) {
        NextAttempt::RetryAfterMs(ms) => Some(ms as f64),
        NextAttempt::GiveUp => None,
    })
}

/// Preference rows for `resolvePreference`: a user's, or a tenant's defaults.
#[wasm_bindgen(js_name = PreferenceRules)]
#[derive(Default)]
pub struct JsPreferenceRules(Vec<preferences::Rule>);

#[wasm_bindgen(js_class = PreferenceRules)]
impl JsPreferenceRules {
    #[wasm_bindgen(constructor)]
    pub fn new() -> JsPreferenceRules {
        JsPreferenceRules::default()
    }

    /// Adds a row. `scope`: `"global"`, `"category"` or `"event_type"`; `key`
    /// omitted for global; `channel`: a channel or `"*"`; `setting`: `"on"`,
    /// `"off"`, `"daily"` or `"weekly"`; `locked` counts on tenant defaults
    /// only. Throws on anything else.
    pub fn add(
        &mut self,
        scope: &str,
        key: Option<String>,
        channel: &str,
        setting: &str,
        locked: Option<bool>,
    ) -> Result<(), JsError> {
        let scope: preferences::Scope = scope.parse().map_err(throw)?;
        let channel = match channel {
            "*" => None,
            c => Some(c.parse::<Channel>().map_err(throw)?),
        };
        let setting: preferences::Setting = setting.parse().map_err(throw)?;
        let rule = preferences::Rule::new(
            scope,
            key.as_deref(),
            channel,
            setting,
            locked.unwrap_or(false),
        )
        .map_err(throw)?;
        self.0.push(rule);
        Ok(())
    }

    #[wasm_bindgen(getter)]
    pub fn size(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }
}

/// A resolved preference: the setting and the level that decided it
/// (`"critical"`, `"locked"`, `"user_event_type"`, … `"fallback"`).
#[wasm_bindgen(js_name = PreferenceResolution, getter_with_clone)]
pub struct JsPreferenceResolution {
    #[wasm_bindgen(readonly)]
    pub setting: String,
    #[wasm_bindgen(readonly)]
    pub level: String,
}

/// Resolves one channel exactly as the server does at fan-out. `eventType`
/// may be omitted (a category × channel cell); `categoryKey` omitted means
/// no category, and then `critical` and `categoryDefault` (the category's
/// default for this channel) are ignored.
#[wasm_bindgen(js_name = resolvePreference)]
pub fn resolve_preference(
    event_type: Option<String>,
    channel: &str,
    category_key: Option<String>,
    critical: bool,
    category_default: Option<String>,
    user: &JsPreferenceRules,
    tenant: &JsPreferenceRules,
) -> Result<JsPreferenceResolution, JsError> {
    let channel: Channel = channel.parse().map_err(throw)?;
    let category = match category_key {
        None => None,
        Some(key) => {
            let mut category = preferences::Category {
                key,
                critical,
                ..preferences::Category::default()
            };
            let default = category_default
                .map(|s| s.parse::<preferences::Setting>())
                .transpose()
                .map_err(throw)?;
            category.set_default(channel, default);
            Some(category)
        }
    };
    let target = preferences::Target {
        event_type: event_type.as_deref(),
        category: category.as_ref(),
        channel,
    };
    let r = preferences::resolve(&target, &user.0, &tenant.0);
    Ok(JsPreferenceResolution {
        setting: r.setting.as_str().to_owned(),
        level: r.level.as_str().to_owned(),
    })
}
