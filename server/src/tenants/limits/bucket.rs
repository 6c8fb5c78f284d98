//! One token bucket: `governor`'s GCRA limiter (a token bucket kept as one
//! timestamp, updated with a compare-and-swap), with the state the
//! `RateLimit` headers report.

use std::{num::NonZeroU32, time::Duration};

use governor::{
    clock::{Clock, DefaultClock},
    middleware::StateInformationMiddleware,
    state::{InMemoryState, NotKeyed},
    Quota, RateLimiter,
};

use crate::app::config::Rate;

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

pub struct Bucket {
    limiter: Limiter,
    rate: Rate,
}

/// What one bucket said about one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    /// Tokens left after this request (0 when refused).
    pub remaining: u32,
    /// Until the bucket is full again (refused: until the next token).
    pub wait: Duration,
    pub allowed: bool,
}

impl Bucket {
    /// A full bucket; `None` for an unlimited or invalid rate. A rate out of
    /// range (a row stored before ranges were checked) is held to the
    /// nearest in range ([`Rate::clamped`]): never unlimited, never a panic.
    pub fn new(rate: Rate) -> Option<Bucket> {
        if rate.unlimited() || !rate.valid() {
            return None;
        }
        let rate = rate.clamped();
        let burst = NonZeroU32::new(rate.burst)?;
        // governor's rate is "one token every period"; rates too fast for a
        // nanosecond period are as good as unlimited.
        let period = Duration::try_from_secs_f64(1.0 / rate.per_second).ok()?;
        let quota = Quota::with_period(period)?.allow_burst(burst);
        Some(Bucket {
            limiter: RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>(),
            rate,
        })
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one token if there is one.
    pub fn take(&self) -> Taken {
        match self.limiter.check() {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                let missing = self.rate.burst.saturating_sub(remaining);
                Taken {
                    remaining,
                    wait: Duration::from_secs_f64(f64::from(missing) / self.rate.per_second),
                    allowed: true,
                }
            }
            Err(not_until) => Taken {
                remaining: 0,
                wait: not_until.wait_time_from(self.limiter.clock().now()),
                allowed: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_burst_through_then_refuses_with_the_wait_for_one_token() {
        let bucket = Bucket::new(Rate {
            per_second: 1.0,
            burst: 3,
        })
        .expect("a limited rate");
        let taken: Vec<Taken> = (0..3).map(|_| bucket.take()).collect();
        assert!(taken.iter().all(|t| t.allowed));
        assert_eq!(
            taken.iter().map(|t| t.remaining).collect::<Vec<_>>(),
            [2, 1, 0]
        );
        let refused = bucket.take();
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert!(
            refused.wait > Duration::from_millis(500) && refused.wait <= Duration::from_secs(1),
            "{:?}",
            refused.wait
        );
    }

    #[test]
    fn a_stored_rate_below_the_range_makes_a_bucket_that_refuses_and_never_panics() {
        // Rows written before the admin API checked ranges may hold these.
        for per_second in [1e-11, 1e-300, f64::MIN_POSITIVE] {
            let bucket = Bucket::new(Rate {
                per_second,
                burst: 1_000_000,
            })
            .expect("a limited rate, however slow");
            assert!(bucket.take().allowed, "{per_second}");
            let bucket = Bucket::new(Rate {
                per_second,
                burst: 1,
            })
            .expect("a limited rate, however slow");
            assert!(bucket.take().allowed, "{per_second}");
            assert!(!bucket.take().allowed, "{per_second}");
        }
    }

    #[test]
    fn unlimited_and_invalid_rates_make_no_bucket() {
        for (per_second, burst) in [(0.0, 10), (f64::NAN, 10), (-1.0, 10), (1.0, 0)] {
            assert!(Bucket::new(Rate { per_second, burst }).is_none());
        }
    }
}
