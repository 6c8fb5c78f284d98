//! Fan-out policy: write one row per recipient now, or store once and join at
//! read time?
//!
//! Transactional alerts always fan out on write: each recipient needs their
//! own notification key, delivery state and retries (invariants 4 and 6).
//! Activity events are stored once and joined to the team's memberships at
//! read time (invariant 1) unless the caller supplies rates that make
//! materialising worthwhile, following Feeding Frenzy (Silberstein et al.,
//! SIGMOD 2010): for a producer/consumer pair, push (materialise into the
//! consumer's feed) when the consumer reads more often than the producer
//! writes, because each write is then amortised over several cheaper reads;
//! pull otherwise. The rates here are per pair, averaged over the audience.
//!
//! "More often" is a cost ratio, `FanoutThresholds::push_above_reads_per_event`:
//! push when reads per second exceed events per second times it. Feeding
//! Frenzy's rule is 1 (the default: a materialised row must be read at least
//! once to pay for itself). The bench measures the break-even of this database
//! (`scripts/bench --only fanout`): in database time alone, materialising to
//! 1,000 recipients pays once a consumer reads more than about once per 300
//! events, i.e. a ratio of about 0.003. That figure leaves out what the write
//! side costs besides time (one row and ~340 B of WAL per recipient and event,
//! retention purges, a transaction held for the whole audience), so it is an
//! input for a deployment that has weighed those, not the default.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendKind {
    /// "Invoice overdue" to named recipients or a team, on chosen channels.
    TransactionalAlert,
    /// "Alice commented on the design doc" to a team's feed.
    ActivityEvent,
}

/// Limits that pick between the strategies. The defaults suit one PostgreSQL
/// primary: a request may insert about a hundred rows in its own transaction
/// within a few milliseconds; beyond that the request would hold locks and a
/// connection too long, so the rest goes to background batches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FanoutThresholds {
    /// Largest audience written inside the request's transaction. Default 100.
    pub inline_max: u64,
    /// Rows per background batch (one transaction each). Default 500: big
    /// enough to amortise round trips, small enough to keep each transaction
    /// short and a retry cheap.
    pub batch_size: u64,
    /// Largest audience for which an activity event may ever be materialised,
    /// whatever the rates say. Default 1000: past that one event's write
    /// amplification outweighs any read savings a notification feed sees.
    pub write_max_for_events: u64,
    /// The cost ratio of the rate rule: an activity event is materialised when
    /// its consumers read more than this many times per producer event
    /// (reads per second > events per second × this). Default 1, Feeding
    /// Frenzy's rule; the module docs say when a smaller one is justified. A
    /// value that is not a finite non-negative number stores once.
    pub push_above_reads_per_event: f64,
}

impl Default for FanoutThresholds {
    fn default() -> Self {
        FanoutThresholds {
            inline_max: 100,
            batch_size: 500,
            write_max_for_events: 1000,
            push_above_reads_per_event: 1.0,
        }
    }
}

/// Average rates for one producer/consumer pair in the audience.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub producer_events_per_sec: f64,
    pub consumer_reads_per_sec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// One row per recipient in the request's own transaction.
    WriteInline,
    /// One row per recipient, written by background jobs `batch_size` at a time.
    WriteInBatches { batch_size: u64 },
    /// One row in total; feeds find it at read time through memberships.
    StoreOnceReadTime,
}

impl Strategy {
    /// Stable snake_case name, as serialised.
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::WriteInline => "write_inline",
            Strategy::WriteInBatches { .. } => "write_in_batches",
            Strategy::StoreOnceReadTime => "store_once_read_time",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub strategy: Strategy,
    /// Human-readable and stable for given inputs: logs and tests may match it.
    pub reason: String,
}

/// Picks a strategy. See the module docs for the rules.
pub fn decide(
    kind: SendKind,
    audience: u64,
    rates: Option<Rates>,
    thresholds: &FanoutThresholds,
) -> Decision {
    match kind {
        SendKind::TransactionalAlert => {
            let (strategy, how) = write_strategy(audience, thresholds);
            Decision {
                strategy,
                reason: format!(
                    "transactional alert: every recipient needs its own key and delivery state, \
                     so fan out on write; {how}"
                ),
            }
        }
        SendKind::ActivityEvent => decide_event(audience, rates, thresholds),
    }
}

fn write_strategy(audience: u64, t: &FanoutThresholds) -> (Strategy, String) {
    if audience <= t.inline_max {
        (
            Strategy::WriteInline,
            format!(
                "audience {audience} <= inline_max {}: written inline",
                t.inline_max
            ),
        )
    } else {
        // A zero batch size would never finish; treat it as one row per batch.
        let batch_size = t.batch_size.max(1);
        (
            Strategy::WriteInBatches { batch_size },
            format!(
                "audience {audience} > inline_max {}: written in background batches of {batch_size}",
                t.inline_max
            ),
        )
    }
}

fn decide_event(audience: u64, rates: Option<Rates>, t: &FanoutThresholds) -> Decision {
    let store_once = |reason: String| Decision {
        strategy: Strategy::StoreOnceReadTime,
        reason,
    };
    let Some(rates) = rates else {
        return store_once(
            "activity event: stored once and joined to memberships at read time (no rates given)"
                .to_string(),
        );
    };
    let valid = |r: f64| r.is_finite() && r >= 0.0;
    if !valid(rates.producer_events_per_sec) || !valid(rates.consumer_reads_per_sec) {
        return store_once(
            "activity event: stored once at read time (rates are not finite non-negative numbers)"
                .to_string(),
        );
    }
    let ratio = t.push_above_reads_per_event;
    if !valid(ratio) {
        return store_once(format!(
            "activity event: stored once at read time (push_above_reads_per_event {ratio:?} is \
             not a finite non-negative number)"
        ));
    }
    if audience > t.write_max_for_events {
        return store_once(format!(
            "activity event: audience {audience} > write_max_for_events {}: stored once at read time",
            t.write_max_for_events
        ));
    }
    // `{:?}` prints the shortest representation that round-trips, the same in
    // every build, so the reason stays stable. At the default ratio (1) the
    // reason names no ratio, as before the ratio was an input.
    let (reads, events) = (rates.consumer_reads_per_sec, rates.producer_events_per_sec);
    let threshold = events * ratio;
    let compared = if ratio == 1.0 {
        format!("producer writes {events:?}/s")
    } else {
        format!(
            "producer writes {events:?}/s × push_above_reads_per_event {ratio:?} = {threshold:?}/s"
        )
    };
    if reads > threshold {
        let (strategy, how) = write_strategy(audience, t);
        Decision {
            strategy,
            reason: format!(
                "activity event: consumers read {reads:?}/s > {compared} (Feeding Frenzy: push); {how}"
            ),
        }
    } else {
        store_once(format!(
            "activity event: consumers read {reads:?}/s <= {compared} \
             (Feeding Frenzy: pull): stored once at read time"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // Named explicitly: proptest's prelude has a `Strategy` trait too.
    use super::Strategy;
    use proptest::prelude::*;

    fn rates(events: f64, reads: f64) -> Option<Rates> {
        Some(Rates {
            producer_events_per_sec: events,
            consumer_reads_per_sec: reads,
        })
    }

    #[test]
    fn alerts_write_inline_up_to_the_threshold_then_in_batches() {
        let t = FanoutThresholds::default();
        let small = decide(SendKind::TransactionalAlert, 100, None, &t);
        assert_eq!(small.strategy, Strategy::WriteInline);
        let big = decide(SendKind::TransactionalAlert, 101, None, &t);
        assert_eq!(big.strategy, Strategy::WriteInBatches { batch_size: 500 });
        assert_eq!(
            big.reason,
            "transactional alert: every recipient needs its own key and delivery state, so fan \
             out on write; audience 101 > inline_max 100: written in background batches of 500"
        );
    }

    #[test]
    fn alerts_fan_out_on_write_even_when_rates_favour_pull() {
        let t = FanoutThresholds::default();
        let d = decide(SendKind::TransactionalAlert, 10, rates(100.0, 0.0), &t);
        assert_eq!(d.strategy, Strategy::WriteInline);
    }

    #[test]
    fn events_are_stored_once_by_default() {
        let t = FanoutThresholds::default();
        for audience in [0, 1, 50, 1_000_000] {
            let d = decide(SendKind::ActivityEvent, audience, None, &t);
            assert_eq!(d.strategy, Strategy::StoreOnceReadTime);
        }
    }

    #[test]
    fn events_follow_feeding_frenzy_for_small_audiences() {
        let t = FanoutThresholds::default();
        let push = decide(SendKind::ActivityEvent, 20, rates(0.01, 0.5), &t);
        assert_eq!(push.strategy, Strategy::WriteInline);
        let push_big = decide(SendKind::ActivityEvent, 800, rates(0.01, 0.5), &t);
        assert_eq!(
            push_big.strategy,
            Strategy::WriteInBatches { batch_size: 500 }
        );
        let pull = decide(SendKind::ActivityEvent, 20, rates(0.5, 0.5), &t);
        assert_eq!(pull.strategy, Strategy::StoreOnceReadTime);
        let too_big = decide(SendKind::ActivityEvent, 1001, rates(0.01, 0.5), &t);
        assert_eq!(too_big.strategy, Strategy::StoreOnceReadTime);
        let nan = decide(SendKind::ActivityEvent, 20, rates(f64::NAN, 0.5), &t);
        assert_eq!(nan.strategy, Strategy::StoreOnceReadTime);
    }

    #[test]
    fn the_cost_ratio_moves_where_events_are_pushed() {
        // A consumer reading once per 100 events: pulled under Feeding
        // Frenzy's ratio of 1, pushed under the bench's DB-time break-even.
        let measured = FanoutThresholds {
            push_above_reads_per_event: 0.003,
            ..FanoutThresholds::default()
        };
        let (events, reads) = (1.0, 0.01);
        let default = decide(
            SendKind::ActivityEvent,
            20,
            rates(events, reads),
            &FanoutThresholds::default(),
        );
        assert_eq!(default.strategy, Strategy::StoreOnceReadTime);
        assert_eq!(
            default.reason,
            "activity event: consumers read 0.01/s <= producer writes 1.0/s (Feeding Frenzy: pull): \
             stored once at read time"
        );
        let pushed = decide(SendKind::ActivityEvent, 20, rates(events, reads), &measured);
        assert_eq!(pushed.strategy, Strategy::WriteInline);
        assert_eq!(
            pushed.reason,
            "activity event: consumers read 0.01/s > producer writes 1.0/s × \
             push_above_reads_per_event 0.003 = 0.003/s (Feeding Frenzy: push); audience 20 <= \
             inline_max 100: written inline"
        );
        // The audience cap holds whatever the ratio.
        let too_big = decide(
            SendKind::ActivityEvent,
            1001,
            rates(events, reads),
            &measured,
        );
        assert_eq!(too_big.strategy, Strategy::StoreOnceReadTime);
        // At the boundary reads must exceed the threshold, as with ratio 1.
        let half = FanoutThresholds {
            push_above_reads_per_event: 0.5,
            ..FanoutThresholds::default()
        };
        let at = decide(SendKind::ActivityEvent, 20, rates(1.0, 0.5), &half);
        assert_eq!(at.strategy, Strategy::StoreOnceReadTime);
    }

    #[test]
    fn a_ratio_that_is_not_a_number_stores_once() {
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let t = FanoutThresholds {
                push_above_reads_per_event: bad,
                ..FanoutThresholds::default()
            };
            let d = decide(SendKind::ActivityEvent, 20, rates(0.01, 0.5), &t);
            assert_eq!(d.strategy, Strategy::StoreOnceReadTime, "{bad}");
            assert!(
                d.reason.contains("push_above_reads_per_event"),
                "{}",
                d.reason
            );
        }
    }

    #[test]
    fn a_zero_batch_size_still_makes_progress() {
        let t = FanoutThresholds {
            batch_size: 0,
            ..FanoutThresholds::default()
        };
        let d = decide(SendKind::TransactionalAlert, 1000, None, &t);
        assert_eq!(d.strategy, Strategy::WriteInBatches { batch_size: 1 });
    }

    #[test]
    fn strategies_serialise_with_a_kind_tag() {
        let json =
            serde_json::to_string(&Strategy::WriteInBatches { batch_size: 3 }).expect("serialise");
        assert_eq!(json, r#"{"kind":"write_in_batches","batch_size":3}"#);
        assert_eq!(Strategy::StoreOnceReadTime.as_str(), "store_once_read_time");
    }

    proptest! {
        #[test]
        fn alerts_never_store_once(audience in any::<u64>(), inline_max in any::<u64>()) {
            let t = FanoutThresholds { inline_max, ..FanoutThresholds::default() };
            let d = decide(SendKind::TransactionalAlert, audience, None, &t);
            prop_assert_ne!(d.strategy, Strategy::StoreOnceReadTime);
            prop_assert_eq!(d.strategy == Strategy::WriteInline, audience <= inline_max);
        }

        #[test]
        fn a_smaller_ratio_never_turns_a_push_into_a_pull(
            audience in 0u64..=1000, events in 0.0f64..10.0, reads in 0.0f64..10.0,
            ratio in 0.0f64..1.0
        ) {
            let t = FanoutThresholds { push_above_reads_per_event: ratio, ..FanoutThresholds::default() };
            let default = decide(SendKind::ActivityEvent, audience, rates(events, reads), &FanoutThresholds::default());
            let smaller = decide(SendKind::ActivityEvent, audience, rates(events, reads), &t);
            if default.strategy != Strategy::StoreOnceReadTime {
                prop_assert_eq!(smaller.strategy, default.strategy);
            }
        }

        #[test]
        fn events_above_the_write_max_are_never_materialised(
            audience in 1001u64.., events in 0.0f64..10.0, reads in 0.0f64..10.0
        ) {
            let d = decide(SendKind::ActivityEvent, audience, rates(events, reads), &FanoutThresholds::default());
            prop_assert_eq!(d.strategy, Strategy::StoreOnceReadTime);
        }
    }
}
