//! The one reconnect and retry pause of the background tasks: 250 ms, doubling,
//! at most 5 s, back to the start after a success. Short enough that a blip
//! costs a quarter second, long enough that a database that is down is not
//! hammered by every task of every instance.

use std::time::Duration;

#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Self::FIRST }
    }
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_millis(250);
    pub const MAX: Duration = Duration::from_secs(5);

    /// The pause to take now; the following one is twice as long (capped).
    pub fn next_pause(&mut self) -> Duration {
        let current = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        current
    }

    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_reset() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..7).map(|_| b.next_pause().as_millis() as u64).collect();
        assert_eq!(pauses, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_pause(), Backoff::FIRST);
    }
}
