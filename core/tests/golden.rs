//! Golden vectors: `core/golden.json` pins the exact bytes of keys, digests,
//! lock keys and cursors (ARCHITECTURE.md, invariant 5), plus sample retry and fan-out
//! decisions. The Node suite in `wasm/test/` checks the WebAssembly build
//! against the same file.
//!
//! A change that alters any of these outputs fails here. If the change is
//! intended (a new encoding version, not an edit of v1), regenerate with
//! `TIDINGS_BLESS=1 cargo test -p tidings-core --test golden` and review the diff.

mod support;

use serde_json::{json, Value};
use support::cases::{case, pos_json, schedule_json, thresholds_json};
use tidings_core::{FanoutThresholds, Position, RetrySchedule};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/golden.json");

fn key(
    tenant: &str,
    event_type: &str,
    entity_id: &str,
    recipient_id: &str,
    channel: &str,
) -> Value {
    case(
        "derive_key",
        json!({
            "tenant": tenant, "event_type": event_type, "entity_id": entity_id,
            "recipient_id": recipient_id, "channel": channel,
        }),
    )
}

fn cases() -> Vec<Value> {
    let mut out = Vec::new();

    // Keys: plain, the classic colon collision pair, escape-lookalikes,
    // Unicode (combining vs precomposed, RTL, CJK), emoji with ZWJ and
    // variation selectors, and parts at exactly 255 bytes.
    let a255 = "a".repeat(255);
    let e255 = format!("{}x", "é".repeat(127));
    let emoji255 = format!("{}abc", "😀".repeat(63));
    let colon255 = ":".repeat(255);
    let keys: Vec<[&str; 5]> = vec![
        ["acme", "invoice.overdue", "inv_123", "user_42", "email"],
        ["acme", "invoice.overdue", "inv_123", "user_42", "in_app"],
        ["acme", "invoice.overdue", "inv_123", "user_42", "webhook"],
        ["acme", "a:b", "c", "r", "in_app"],
        ["acme", "a", "b:c", "r", "in_app"],
        ["t%3A", "50%", "%25", "%3A:%", "webhook"],
        ["v1:", "v1:a:b:c:d:email", ":", "::", "email"],
        [
            "テナント",
            "commentaire.créé",
            "ドキュメント/7",
            "Zoë",
            "in_app",
        ],
        ["acme", "e\u{301}", "\u{e9}", "مرحبا", "webhook"],
        ["🏢", "🔔:new", "📄", "👩\u{1f3fd}", "email"],
        ["❤\u{fe0f}", "🇫🇷", "a b", "\\/\"'", "in_app"],
        [&a255, &e255, &emoji255, &colon255, "webhook"],
    ];
    out.extend(keys.iter().map(|[t, e, n, r, c]| key(t, e, n, r, c)));
    let too_long = "a".repeat(256);
    let errors: Vec<[&str; 5]> = vec![
        ["", "e", "n", "r", "email"],
        ["t", &too_long, "n", "r", "email"],
        ["t", "e", "line\nbreak", "r", "email"],
        ["t", "e", "n", "nel\u{85}", "email"],
        // Format characters (Unicode Cf): zero-width joiner, right-to-left
        // override, zero-width space, byte-order mark.
        ["🏢", "🔔:new", "📄", "👩\u{200d}💻", "email"],
        ["t", "e", "\u{202e}txt.exe", "r", "email"],
        ["t", "adm\u{200b}in", "n", "r", "email"],
        ["\u{feff}t", "e", "n", "r", "email"],
        ["t", "e", "n", "r", "sms"],
        ["t", "e", "n", "r", "Email"],
    ];
    out.extend(errors.iter().map(|[t, e, n, r, c]| key(t, e, n, r, c)));

    for readable in [
        "v1:acme:invoice%3Aoverdue:50%25:u:email",
        "v1:🏢:🔔%3Anew:📄:👩\u{1f3fd}:email",
        "v1:🏢:🔔%3Anew:📄:👩\u{200d}💻:email",
        "v2:acme:e:n:r:email",
        "v1:acme:e:n:email",
        "v1:acme:e%3a:n:r:email",
        "v1:acme:e:n:r:push",
        "v1::e:n:r:email",
    ] {
        out.push(case("parse_readable", json!({ "readable": readable })));
    }

    let lock_parts: Vec<Vec<&str>> = vec![
        vec![],
        vec![""],
        vec!["a", "b"],
        vec!["a:b"],
        vec!["ab"],
        vec!["outbox", "acme", "invoice.overdue"],
        vec!["feed", "テナント", "👩\u{200d}💻"],
        vec![&a255, &emoji255],
    ];
    for parts in lock_parts {
        out.push(case("lock_key", json!({ "parts": parts })));
    }

    for (tx, id) in [
        (0, 0),
        (1, 1),
        (123_456_789, 42),
        (1 << 32, 1 << 31),
        (1, i64::MAX),
        (i64::MAX, i64::MAX),
    ] {
        out.push(case("encode_cursor", pos_json(Position::new(tx, id))));
    }
    let good = Position::new(123_456_789, 42).to_cursor();
    let mut flipped = good.clone().into_bytes();
    flipped[10] ^= 0x01;
    let flipped = String::from_utf8_lossy(&flipped).into_owned();
    for cursor in [
        good.clone(),
        Position::new(i64::MAX, i64::MAX).to_cursor(),
        String::new(),
        "A".repeat(65),
        "not a cursor".to_string(),
        format!("{good}="),
        good[..20].to_string(),
        flipped,
        Position::new(-1, 5).to_cursor(),
        // Version byte 2 with a correct-looking length: refused by version.
        "AgAAAAAHW80VAAAAAAAAACrJrN2x".to_string(),
    ] {
        out.push(case("decode_cursor", json!({ "cursor": cursor })));
    }

    let p = Position::new;
    for (current, proposed, head) in [
        (p(5, 5), p(3, 9), p(9, 9)),
        (p(5, 5), p(7, 1), p(9, 9)),
        (p(5, 5), p(12, 0), p(9, 9)),
        (p(5, 5), p(9, 9), p(4, 0)),
    ] {
        out.push(case(
            "advance",
            json!({ "current": pos_json(current), "proposed": pos_json(proposed), "head": pos_json(head) }),
        ));
    }
    for item in [p(1, 0), p(2, 0), p(4, 0), p(5, 0), p(10, 0)] {
        out.push(case(
            "classify",
            json!({
                "item": pos_json(item), "seen": pos_json(p(4, 0)), "read": pos_json(p(2, 0)),
                "read_set": [pos_json(p(5, 0))],
            }),
        ));
    }
    let items: Vec<Value> = (1..=6).map(|i| pos_json(p(i, i))).collect();
    for (mark, cap) in [
        (p(0, 0), 1000),
        (p(2, 2), 1000),
        (p(2, 2), 3),
        (p(2, 2), 2),
        (p(0, 0), 0),
    ] {
        out.push(case(
            "unread_count",
            json!({
                "positions": items, "mark": pos_json(mark),
                "read_set": [pos_json(p(4, 4))], "cap": cap,
            }),
        ));
    }

    let t = thresholds_json(&FanoutThresholds::default());
    let rates = |events: f64, reads: f64| json!({ "producer_events_per_sec": events, "consumer_reads_per_sec": reads });
    for (kind, audience, r) in [
        ("transactional_alert", 1, Value::Null),
        ("transactional_alert", 100, Value::Null),
        ("transactional_alert", 101, Value::Null),
        ("transactional_alert", 50_000, rates(10.0, 0.0)),
        ("activity_event", 5_000, Value::Null),
        ("activity_event", 20, rates(0.01, 0.5)),
        ("activity_event", 800, rates(0.01, 0.5)),
        ("activity_event", 20, rates(0.5, 0.5)),
        ("activity_event", 1001, rates(0.01, 0.5)),
    ] {
        out.push(case(
            "fanout",
            json!({ "kind": kind, "audience": audience, "rates": r, "thresholds": t }),
        ));
    }
    // The cost ratio as an input: the bench's DB-time break-even (~0.003),
    // zero (push whenever anyone reads) and a ratio above Feeding Frenzy's.
    for ratio in [0.003, 0.0, 2.5] {
        let t = thresholds_json(&FanoutThresholds {
            push_above_reads_per_event: ratio,
            ..FanoutThresholds::default()
        });
        for (audience, r) in [
            (20, rates(1.0, 0.01)),
            (800, rates(1.0, 0.01)),
            (20, rates(0.2, 0.5)),
            (20, rates(1.0, 0.0)),
            (1001, rates(0.01, 0.5)),
        ] {
            out.push(case(
                "fanout",
                json!({ "kind": "activity_event", "audience": audience, "rates": r, "thresholds": t }),
            ));
        }
    }

    let default = schedule_json(&RetrySchedule::default());
    for attempt in 0..=10 {
        for random in [0.0, 0.5, 0.999_999] {
            out.push(case(
                "retry",
                json!({ "schedule": default, "attempt": attempt, "random": random }),
            ));
        }
    }
    let svix_like = RetrySchedule {
        base_ms: 5_000,
        factor: 6,
        max_delay_ms: 36_000_000,
        max_attempts: 8,
        jitter: 1.0,
    };
    for attempt in [1, 4, 7, 8] {
        out.push(case(
            "retry",
            json!({ "schedule": schedule_json(&svix_like), "attempt": attempt, "random": 0.25 }),
        ));
    }
    out
}

fn render() -> String {
    let doc = json!({
        "about": "Golden vectors for tidings-core. Generated by core/tests/golden.rs; \
                  checked byte for byte by Rust and by wasm/test against WebAssembly. \
                  i64 values are decimal strings.",
        "cases": cases(),
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_else(|e| panic!("serialise: {e}"));
    s.push('\n');
    s
}

#[test]
fn current_code_reproduces_golden_json_byte_for_byte() {
    let rendered = render();
    if std::env::var_os("TIDINGS_BLESS").is_some() {
        std::fs::write(GOLDEN, &rendered).unwrap_or_else(|e| panic!("write {GOLDEN}: {e}"));
        return;
    }
    let stored = std::fs::read_to_string(GOLDEN).unwrap_or_else(|e| panic!("read {GOLDEN}: {e}"));
    if stored != rendered {
        let line = stored
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .map_or(stored.lines().count().min(rendered.lines().count()), |i| i);
        panic!(
            "core/golden.json differs from what the code computes (first at line {}):\n  stored:   {}\n  computed: {}\n\
             Keys and cursors are stored and must never change; see the module docs.",
            line + 1,
            stored.lines().nth(line).unwrap_or("<end>"),
            rendered.lines().nth(line).unwrap_or("<end>"),
        );
    }
}

#[test]
fn golden_vectors_pin_the_documented_examples() {
    // Independent of the file: a second witness for the readable form.
    let doc: Value = serde_json::from_str(&render()).unwrap_or_else(|e| panic!("{e}"));
    let first = &doc["cases"][0]["expect"]["ok"];
    assert_eq!(
        first["readable"],
        "v1:acme:invoice.overdue:inv_123:user_42:email"
    );
}
