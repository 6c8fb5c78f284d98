//! When to try a failed delivery again (ARCHITECTURE.md, invariant 6). A pure function
//! of the attempt count and a caller-supplied random number, so the worker, the
//! tests and the browser all compute the same schedule.

use serde::{Deserialize, Serialize};

/// Exponential backoff with a cap, proportional jitter and a bounded number of
/// attempts.
///
/// Defaults: first retry after 5 s, each delay 4× the previous, capped at 1 h,
/// at most 10 attempts, jitter 0.2. The nominal delays after attempts 1..=9 are
/// 5 s, 20 s, 80 s, 5 m 20 s, 21 m 20 s, then 1 h four times: the entry goes
/// `dead` about 4.5 h after the first failure (at least 3.6 h with jitter).
///
/// Compared with others:
/// - Svix retries immediately, then after 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h —
///   about 28 h in all. Webhook consumers are often batch systems; a day is
///   reasonable there.
/// - River waits `attempt⁴` seconds for up to 25 attempts — about three weeks —
///   because a background job usually must eventually run.
///
/// Notifications go stale faster than either: an "invoice overdue" email that
/// arrives a day late is noise, and a receiver down for hours is better handled
/// by an operator replaying `dead` entries than by retries piling up. So the
/// early retries are quick (transient errors — a deploy, a 503 — clear within
/// seconds to minutes) and the tail is hours, not days. The factor 4 reaches
/// the 1 h cap in six steps while keeping the first few retries under two minutes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetrySchedule {
    /// Delay after the first failure, in milliseconds.
    pub base_ms: u64,
    /// Each further delay is this many times the previous one.
    pub factor: u32,
    /// No delay exceeds this.
    pub max_delay_ms: u64,
    /// Total attempts, the first included; after this many, give up.
    pub max_attempts: u32,
    /// Fraction of each delay that is randomised, in `[0, 1]`: the delay is
    /// drawn uniformly from `(d·(1 − jitter), d]`. `0` is deterministic, `0.5`
    /// is "equal jitter", `1` is "full jitter". Jitter spreads the retries of
    /// a burst that failed together (a receiver outage) so they do not all
    /// return at once; subtracting rather than adding keeps the cap a cap.
    pub jitter: f64,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        RetrySchedule {
            base_ms: 5_000,
            factor: 4,
            max_delay_ms: 3_600_000,
            max_attempts: 10,
            jitter: 0.2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "ms", rename_all = "snake_case")]
pub enum NextAttempt {
    RetryAfterMs(u64),
    GiveUp,
}

impl RetrySchedule {
    /// What to do after `attempt` attempts have been made (1 after the first
    /// failure; 0 means nothing was tried yet, so go now). `random` is a
    /// uniform draw from `[0, 1)` made by the caller; values outside are
    /// clamped and NaN counts as 0, so a bad draw cannot break the schedule.
    pub fn next(&self, attempt: u32, random: f64) -> NextAttempt {
        if attempt >= self.max_attempts {
            return NextAttempt::GiveUp;
        }
        if attempt == 0 {
            return NextAttempt::RetryAfterMs(0);
        }
        let nominal = self.nominal_delay_ms(attempt);
        let jitter = clamp_unit(self.jitter);
        let random = clamp_unit(random);
        // IEEE multiplication is exactly rounded everywhere, and wasm has no
        // fused multiply-add here, so Rust and WebAssembly agree to the bit.
        // `as u64` saturates; `min` keeps the result within `[0, nominal]`.
        let reduction = ((nominal as f64) * jitter * random).floor() as u64;
        NextAttempt::RetryAfterMs(nominal - reduction.min(nominal))
    }

    /// `min(base · factor^(attempt−1), max_delay)`, without overflow.
    fn nominal_delay_ms(&self, attempt: u32) -> u64 {
        let mut delay = self.base_ms.min(self.max_delay_ms);
        for _ in 1..attempt {
            if delay >= self.max_delay_ms {
                break;
            }
            delay = delay
                .saturating_mul(u64::from(self.factor))
                .min(self.max_delay_ms);
        }
        delay
    }
}

fn clamp_unit(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delays(s: &RetrySchedule, random: f64) -> Vec<NextAttempt> {
        (0..=s.max_attempts).map(|a| s.next(a, random)).collect()
    }

    #[test]
    fn default_schedule_without_jitter_is_as_documented() {
        use NextAttempt::{GiveUp, RetryAfterMs as After};
        let s = RetrySchedule::default();
        assert_eq!(
            delays(&s, 0.0),
            vec![
                After(0),
                After(5_000),
                After(20_000),
                After(80_000),
                After(320_000),
                After(1_280_000),
                After(3_600_000),
                After(3_600_000),
                After(3_600_000),
                After(3_600_000),
                GiveUp,
            ]
        );
    }

    #[test]
    fn jitter_only_shortens_and_by_at_most_its_fraction() {
        let s = RetrySchedule::default();
        assert_eq!(s.next(1, 0.5), NextAttempt::RetryAfterMs(4_500));
        assert_eq!(s.next(6, 0.999_999), NextAttempt::RetryAfterMs(2_880_001));
    }

    #[test]
    fn bad_random_numbers_are_clamped() {
        let s = RetrySchedule::default();
        assert_eq!(s.next(1, f64::NAN), NextAttempt::RetryAfterMs(5_000));
        assert_eq!(s.next(1, -3.0), NextAttempt::RetryAfterMs(5_000));
        assert_eq!(s.next(1, 7.0), NextAttempt::RetryAfterMs(4_000));
    }

    #[test]
    fn huge_factors_do_not_overflow() {
        let s = RetrySchedule {
            base_ms: u64::MAX / 2,
            factor: u32::MAX,
            max_delay_ms: u64::MAX,
            max_attempts: u32::MAX,
            jitter: 0.0,
        };
        assert_eq!(s.next(40, 0.0), NextAttempt::RetryAfterMs(u64::MAX));
    }

    #[test]
    fn zero_attempts_allowed_means_give_up_at_once() {
        let s = RetrySchedule {
            max_attempts: 0,
            ..RetrySchedule::default()
        };
        assert_eq!(s.next(0, 0.0), NextAttempt::GiveUp);
    }

    proptest! {
        #[test]
        fn delays_never_exceed_the_cap_nor_shrink_nominally(
            base in 0u64..100_000, factor in 0u32..10, cap in 0u64..10_000_000,
            attempt in 1u32..60, random in 0.0f64..1.0, jitter in 0.0f64..=1.0,
        ) {
            let s = RetrySchedule { base_ms: base, factor, max_delay_ms: cap, max_attempts: 100, jitter };
            let NextAttempt::RetryAfterMs(d) = s.next(attempt, random) else {
                return Err(TestCaseError::fail("gave up early"));
            };
            prop_assert!(d <= cap);
            let nominal = s.nominal_delay_ms(attempt);
            prop_assert!(d as f64 >= (nominal as f64) * (1.0 - jitter) - 1.0);
            if factor >= 1 {
                prop_assert!(s.nominal_delay_ms(attempt + 1) >= nominal);
            }
        }
    }
}
