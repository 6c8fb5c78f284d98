//! One format for test cases shared by Rust and JavaScript: golden vectors
//! (`core/golden.json`, checked by `tests/golden.rs` and `wasm/test/`) and the
//! random cross-check (`examples/crosscheck.rs`).
//!
//! A case is `{"op": …, "input": {…}, "expect": {"ok": …} | {"error": "…"}}`.
//! 64-bit integers travel as decimal strings so JavaScript's JSON parser
//! cannot round them; positions are `{"tx": "…", "id": "…"}`. `wasm/test/run.js`
//! implements the same ops against the WebAssembly package; keep them in step.

#![allow(dead_code)] // Each including target uses part of this module.

use serde_json::{json, Value};
use tidings_core::{
    advance, classify, decide, resolve, stable_lock_key, unread_count, Category, Channel,
    FanoutThresholds, NextAttempt, NotificationKey, Position, Rates, ReadSet, RetrySchedule, Rule,
    Scope, SendKind, Setting, Strategy, Target, Watermarks,
};

pub fn case(op: &str, input: Value) -> Value {
    let expect = match run(op, &input) {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": e }),
    };
    json!({ "op": op, "input": input, "expect": expect })
}

pub fn pos_json(p: Position) -> Value {
    json!({ "tx": p.tx.to_string(), "id": p.id.to_string() })
}

fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.get(name)
        .unwrap_or_else(|| panic!("test case input lacks {name:?}: {v}"))
}

fn text<'a>(v: &'a Value, name: &str) -> &'a str {
    field(v, name)
        .as_str()
        .unwrap_or_else(|| panic!("{name:?} is not a string: {v}"))
}

fn int(v: &Value) -> i64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a decimal i64 string: {v}"))
}

fn uint(v: &Value, name: &str) -> u64 {
    field(v, name)
        .as_u64()
        .unwrap_or_else(|| panic!("{name:?} is not a u64: {v}"))
}

fn float(v: &Value, name: &str) -> f64 {
    field(v, name)
        .as_f64()
        .unwrap_or_else(|| panic!("{name:?} is not a number: {v}"))
}

fn pos(v: &Value) -> Position {
    Position::new(int(field(v, "tx")), int(field(v, "id")))
}

fn positions(v: &Value) -> Vec<Position> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(pos)
        .collect()
}

fn read_set(v: &Value) -> ReadSet {
    ReadSet::try_from(positions(v)).unwrap_or_else(|e| panic!("bad read set: {e}"))
}

/// Evaluates one case with the Rust API: `Ok(value)` or `Err(Display text)`.
pub fn run(op: &str, input: &Value) -> Result<Value, String> {
    let s = |e: &dyn std::fmt::Display| e.to_string();
    match op {
        "derive_key" => {
            let channel: Channel = text(input, "channel").parse().map_err(|e| s(&e))?;
            let k = NotificationKey::derive(
                text(input, "tenant"),
                text(input, "event_type"),
                text(input, "entity_id"),
                text(input, "recipient_id"),
                channel,
            )
            .map_err(|e| s(&e))?;
            Ok(json!({ "readable": k.readable(), "digest_hex": k.digest_hex() }))
        }
        "parse_readable" => {
            let (tenant, event_type, entity_id, recipient_id, channel) =
                NotificationKey::parse_readable(text(input, "readable")).map_err(|e| s(&e))?;
            Ok(json!({
                "tenant": tenant, "event_type": event_type, "entity_id": entity_id,
                "recipient_id": recipient_id, "channel": channel.as_str(),
            }))
        }
        "lock_key" => {
            let parts: Vec<&str> = field(input, "parts")
                .as_array()
                .unwrap_or_else(|| panic!("parts is not an array"))
                .iter()
                .map(|p| p.as_str().unwrap_or_else(|| panic!("part is not a string")))
                .collect();
            Ok(json!(stable_lock_key(&parts).to_string()))
        }
        "encode_cursor" => Ok(json!(pos(input).to_cursor())),
        "decode_cursor" => Position::from_cursor(text(input, "cursor"))
            .map(pos_json)
            .map_err(|e| s(&e)),
        "advance" => Ok(pos_json(advance(
            pos(field(input, "current")),
            pos(field(input, "proposed")),
            pos(field(input, "head")),
        ))),
        "classify" => {
            let marks = Watermarks {
                seen: pos(field(input, "seen")),
                read: pos(field(input, "read")),
            };
            let st = classify(
                pos(field(input, "item")),
                &marks,
                &read_set(field(input, "read_set")),
            );
            Ok(json!({ "seen": st.seen, "read": st.read }))
        }
        "unread_count" => {
            let cap = u32::try_from(uint(input, "cap")).unwrap_or_else(|_| panic!("cap > u32"));
            let b = unread_count(
                positions(field(input, "positions")),
                pos(field(input, "mark")),
                &read_set(field(input, "read_set")),
                cap,
            );
            Ok(json!({ "count": b.count, "capped": b.capped }))
        }
        "fanout" => {
            let kind = match text(input, "kind") {
                "transactional_alert" => SendKind::TransactionalAlert,
                "activity_event" => SendKind::ActivityEvent,
                other => panic!("unknown kind {other}"),
            };
            let rates = match field(input, "rates") {
                Value::Null => None,
                r => Some(Rates {
                    producer_events_per_sec: float(r, "producer_events_per_sec"),
                    consumer_reads_per_sec: float(r, "consumer_reads_per_sec"),
                }),
            };
            let t = field(input, "thresholds");
            let thresholds = FanoutThresholds {
                inline_max: uint(t, "inline_max"),
                batch_size: uint(t, "batch_size"),
                write_max_for_events: uint(t, "write_max_for_events"),
                push_above_reads_per_event: float(t, "push_above_reads_per_event"),
            };
            let d = decide(kind, uint(input, "audience"), rates, &thresholds);
            let batch_size = match d.strategy {
                Strategy::WriteInBatches { batch_size } => json!(batch_size),
                _ => Value::Null,
            };
            Ok(
                json!({ "strategy": d.strategy.as_str(), "batch_size": batch_size, "reason": d.reason }),
            )
        }
        "retry" => {
            let sch = field(input, "schedule");
            let schedule = RetrySchedule {
                base_ms: uint(sch, "base_ms"),
                factor: u32::try_from(uint(sch, "factor")).unwrap_or_else(|_| panic!("factor")),
                max_delay_ms: uint(sch, "max_delay_ms"),
                max_attempts: u32::try_from(uint(sch, "max_attempts"))
                    .unwrap_or_else(|_| panic!("max_attempts")),
                jitter: float(sch, "jitter"),
            };
            let attempt =
                u32::try_from(uint(input, "attempt")).unwrap_or_else(|_| panic!("attempt"));
            Ok(match schedule.next(attempt, float(input, "random")) {
                NextAttempt::RetryAfterMs(ms) => json!(ms),
                NextAttempt::GiveUp => Value::Null,
            })
        }
        "resolve_preference" => resolve_preference(input),
        other => panic!("unknown op {other}"),
    }
}

fn rules(v: &Value) -> Result<Vec<Rule>, String> {
    let s = |e: &dyn std::fmt::Display| e.to_string();
    v.as_array()
        .unwrap_or_else(|| panic!("rules are not an array: {v}"))
        .iter()
        .map(|r| {
            let scope: Scope = text(r, "scope").parse().map_err(|e| s(&e))?;
            let channel = match text(r, "channel") {
                "*" => None,
                c => Some(c.parse::<Channel>().map_err(|e| s(&e))?),
            };
            let setting: Setting = text(r, "setting").parse().map_err(|e| s(&e))?;
            let locked = r.get("locked").and_then(Value::as_bool).unwrap_or(false);
            Rule::new(
                scope,
                r.get("key").and_then(Value::as_str),
                channel,
                setting,
                locked,
            )
            .map_err(|e| s(&e))
        })
        .collect()
}

/// Input: `event_type` (or null), `channel`, `category` (null or `{key,
/// critical, defaults: {channel: setting}}`),
/// `user` and `tenant` rules (`{scope, key?, channel, setting, locked?}`).
fn resolve_preference(input: &Value) -> Result<Value, String> {
    let s = |e: &dyn std::fmt::Display| e.to_string();
    let channel: Channel = text(input, "channel").parse().map_err(|e| s(&e))?;
    let category = match field(input, "category") {
        Value::Null => None,
        c => {
            let mut category = Category {
                key: text(c, "key").to_owned(),
                critical: field(c, "critical")
                    .as_bool()
                    .unwrap_or_else(|| panic!("critical")),
                ..Category::default()
            };
            let default = match field(c, "defaults").get(channel.as_str()) {
                None => None,
                Some(d) => Some(
                    d.as_str()
                        .unwrap_or_else(|| panic!("default"))
                        .parse::<Setting>()
                        .map_err(|e| s(&e))?,
                ),
            };
            category.set_default(channel, default);
            Some(category)
        }
    };
    let user = rules(field(input, "user"))?;
    let tenant = rules(field(input, "tenant"))?;
    let target = Target {
        event_type: field(input, "event_type").as_str(),
        category: category.as_ref(),
        channel,
    };
    let r = resolve(&target, &user, &tenant);
    Ok(json!({ "setting": r.setting.as_str(), "level": r.level.as_str() }))
}

pub fn schedule_json(s: &RetrySchedule) -> Value {
    json!({
        "base_ms": s.base_ms, "factor": s.factor, "max_delay_ms": s.max_delay_ms,
        "max_attempts": s.max_attempts, "jitter": s.jitter,
    })
}

pub fn thresholds_json(t: &FanoutThresholds) -> Value {
    json!({
        "inline_max": t.inline_max, "batch_size": t.batch_size,
        "write_max_for_events": t.write_max_for_events,
        "push_above_reads_per_event": t.push_above_reads_per_event,
    })
}
