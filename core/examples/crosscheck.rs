//! Prints random test cases with Rust's answers, one JSON object per line, for
//! the WebAssembly build to reproduce (`wasm/test/crosscheck.test.js`):
//!
//! ```text
//! cargo run -q -p tidings-core --example crosscheck -- <seed> <count> > cases.jsonl
//! ```
//!
//! Inputs lean towards the hard parts: separators and escape look-alikes,
//! multi-byte and combining characters, emoji, control characters, ids at the
//! 255-byte limit, mutated cursors and readable keys. The generator is a fixed
//! splitmix64 so a seed names the same cases on every machine.

#[path = "../tests/support/cases.rs"]
mod cases;

use std::io::{BufWriter, Write};

use cases::{case, pos_json, schedule_json, thresholds_json};
use serde_json::{json, Value};
use tidings_core::{FanoutThresholds, NotificationKey, Position, RetrySchedule};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// Uniform in [0, 1), exactly representable, as callers would pass.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const FRAGMENTS: &[&str] = &[
    ":",
    "%",
    "%3A",
    "%3a",
    "%25",
    "%2",
    "v1:",
    "a",
    "Z",
    "0",
    " ",
    "/",
    "\\",
    "\"",
    "é",
    "e\u{301}",
    "ß",
    "ı",
    "Σ",
    "中文",
    "مرحبا",
    "😀",
    "👩\u{200d}💻",
    "🇫🇷",
    "\u{feff}",
    "\u{200b}",
    "\u{fffd}",
    "email",
];

fn any_char(rng: &mut Rng) -> char {
    loop {
        let range = *rng.pick(&[0x80u32, 0x800, 0x1_0000, 0x11_0000]);
        if let Some(c) = char::from_u32(rng.below(u64::from(range)) as u32) {
            // Mostly printable; control characters only now and then, so that
            // most generated ids are valid and reach the encoders.
            if !c.is_control() || rng.chance(3) {
                return c;
            }
        }
    }
}

fn id(rng: &mut Rng) -> String {
    let mut s = String::new();
    if rng.chance(4) {
        // Around the 255-byte limit.
        let target = 250 + rng.below(10) as usize;
        while s.len() < target {
            s.push_str(rng.pick::<&str>(FRAGMENTS));
        }
        return s;
    }
    if rng.chance(2) {
        return s; // empty
    }
    for _ in 0..=rng.below(5) {
        if rng.chance(60) {
            s.push_str(rng.pick::<&str>(FRAGMENTS));
        } else {
            s.push(any_char(rng));
        }
    }
    s
}

fn channel(rng: &mut Rng) -> String {
    let names = [
        "in_app", "email", "webhook", "in_app", "email", "webhook", "sms", "Email", "",
    ];
    rng.pick(&names).to_string()
}

fn big(rng: &mut Rng) -> i64 {
    match rng.below(3) {
        0 => rng.below(100) as i64,
        1 => rng.below(1 << 40) as i64,
        _ => (rng.next() >> 1) as i64,
    }
}

fn small_pos(rng: &mut Rng) -> Position {
    Position::new(rng.below(6) as i64, rng.below(6) as i64)
}

fn small_positions(rng: &mut Rng, max: u64) -> Vec<Value> {
    let mut ps: Vec<Position> = (0..rng.below(max)).map(|_| small_pos(rng)).collect();
    ps.sort();
    ps.dedup();
    ps.into_iter().map(pos_json).collect()
}

fn mutate(rng: &mut Rng, s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return "x".into();
    }
    let at = rng.below(chars.len() as u64) as usize;
    match rng.below(4) {
        0 => {
            chars.remove(at);
        }
        1 => chars.insert(at, *rng.pick(&[':', '%', 'A', '-', '_', '='])),
        2 => chars.truncate(at),
        _ => {
            // Flip one bit of one character, keeping it a valid char.
            let c = chars[at] as u32 ^ (1 << rng.below(7));
            chars[at] = char::from_u32(c).unwrap_or('?');
        }
    }
    chars.into_iter().collect()
}

fn generate(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => case(
            "derive_key",
            json!({
                "tenant": id(rng), "event_type": id(rng), "entity_id": id(rng),
                "recipient_id": id(rng), "channel": channel(rng),
            }),
        ),
        1 => {
            let parts = [id(rng), id(rng), id(rng), id(rng)];
            let ch = channel(rng).parse().unwrap_or(tidings_core::Channel::Email);
            let readable =
                match NotificationKey::derive(&parts[0], &parts[1], &parts[2], &parts[3], ch) {
                    Ok(k) if rng.chance(50) => k.readable().to_owned(),
                    Ok(k) => mutate(rng, k.readable()),
                    Err(_) => format!("v1:{}", parts.join(":")),
                };
            case("parse_readable", json!({ "readable": readable }))
        }
        2 => {
            let parts: Vec<String> = (0..rng.below(5)).map(|_| id(rng)).collect();
            case("lock_key", json!({ "parts": parts }))
        }
        3 => case("encode_cursor", pos_json(Position::new(big(rng), big(rng)))),
        4 => {
            let valid = Position::new(big(rng), big(rng)).to_cursor();
            let cursor = match rng.below(4) {
                0 => valid,
                1 | 2 => mutate(rng, &valid),
                _ => (0..rng.below(40)).map(|_| any_char(rng)).collect(),
            };
            case("decode_cursor", json!({ "cursor": cursor }))
        }
        5 => case(
            "advance",
            json!({
                "current": pos_json(small_pos(rng)), "proposed": pos_json(small_pos(rng)),
                "head": pos_json(small_pos(rng)),
            }),
        ),
        6 => case(
            "classify",
            json!({
                "item": pos_json(small_pos(rng)), "seen": pos_json(small_pos(rng)),
                "read": pos_json(small_pos(rng)), "read_set": small_positions(rng, 6),
            }),
        ),
        7 => case(
            "unread_count",
            json!({
                "positions": small_positions(rng, 30), "mark": pos_json(small_pos(rng)),
                "read_set": small_positions(rng, 8), "cap": rng.below(12),
            }),
        ),
        8 => {
            let kind = *rng.pick(&["transactional_alert", "activity_event"]);
            let audience = if rng.chance(10) {
                rng.below(1 << 53)
            } else {
                rng.below(3000)
            };
            let rates = if rng.chance(30) {
                Value::Null
            } else {
                // Thousandths, so equal rates occur and the boundary is tested.
                json!({
                    "producer_events_per_sec": rng.below(2000) as f64 / 1000.0,
                    "consumer_reads_per_sec": rng.below(2000) as f64 / 1000.0,
                })
            };
            let thresholds = if rng.chance(50) {
                FanoutThresholds::default()
            } else {
                FanoutThresholds {
                    inline_max: rng.below(300),
                    batch_size: rng.below(1000),
                    write_max_for_events: rng.below(3000),
                    // Thousandths up to 2, so the default 1 and the bench's
                    // measured ~0.003 are both in range.
                    push_above_reads_per_event: rng.below(2000) as f64 / 1000.0,
                }
            };
            case(
                "fanout",
                json!({
                    "kind": kind, "audience": audience, "rates": rates,
                    "thresholds": thresholds_json(&thresholds),
                }),
            )
        }
        _ => {
            let schedule = if rng.chance(40) {
                RetrySchedule::default()
            } else {
                RetrySchedule {
                    base_ms: rng.below(100_000),
                    factor: rng.below(10) as u32,
                    max_delay_ms: rng.below(100_000_000),
                    max_attempts: rng.below(30) as u32,
                    jitter: rng.unit(),
                }
            };
            case(
                "retry",
                json!({
                    "schedule": schedule_json(&schedule), "attempt": rng.below(35),
                    "random": rng.unit(),
                }),
            )
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |i: usize, default: u64| {
        args.get(i)
            .map(|a| {
                a.parse()
                    .unwrap_or_else(|_| panic!("usage: crosscheck <seed> <count>"))
            })
            .unwrap_or(default)
    };
    let (seed, count) = (parse(0, 1), parse(1, 1000));
    let mut rng = Rng(seed);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for _ in 0..count {
        let line =
            serde_json::to_string(&generate(&mut rng)).unwrap_or_else(|e| panic!("serialise: {e}"));
        writeln!(out, "{line}").unwrap_or_else(|e| panic!("write: {e}"));
    }
    out.flush().unwrap_or_else(|e| panic!("flush: {e}"));
}
