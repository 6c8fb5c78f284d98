//! Quiet hours: a user's daily window, local time in the user's time zone, in
//! which non-critical email and webhook deliveries do not go out. A delivery
//! written due inside the window is due at its end instead; in-app items are
//! never held, and a critical category passes.
//!
//! Applied once, when the fan-out writes the delivery (in its transaction):
//! a change to a user's quiet hours applies to deliveries written after it,
//! and a retry after a failed attempt is not held again.

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::store;

/// A window `[start, end)`; `start > end` crosses midnight (22:00 to 07:00).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    pub start: NaiveTime,
    pub end: NaiveTime,
}

/// Why quiet hours were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidQuietHours {
    #[error("quiet_hours.{0} must be a local time as HH:MM or HH:MM:SS, got {1:?}")]
    Time(&'static str, String),
    #[error("quiet_hours.start and quiet_hours.end must differ")]
    Empty,
}

impl QuietHours {
    pub fn parse(start: &str, end: &str) -> Result<QuietHours, InvalidQuietHours> {
        let time = |field: &'static str, text: &str| {
            NaiveTime::parse_from_str(text, "%H:%M:%S")
                .or_else(|_| NaiveTime::parse_from_str(text, "%H:%M"))
                .ok()
                // No leap second, no fraction: a time a person writes.
                .filter(|t| text.len() <= 8 && t.format("%H:%M:%S").to_string().starts_with(text))
                .ok_or_else(|| InvalidQuietHours::Time(field, text.to_owned()))
        };
        let hours = QuietHours {
            start: time("start", start)?,
            end: time("end", end)?,
        };
        if hours.start == hours.end {
            return Err(InvalidQuietHours::Empty);
        }
        Ok(hours)
    }

    /// When a delivery due at `due` may go out for a user in `zone`: `None`
    /// when `due` is outside the window, else the window's end.
    pub fn release(&self, due: DateTime<Utc>, zone: Tz) -> Option<DateTime<Utc>> {
        let local = due.with_timezone(&zone);
        let (date, time) = (local.date_naive(), local.time());
        let end_on = if self.start < self.end {
            (self.start <= time && time < self.end).then_some(date)
        } else if time >= self.start {
            date.succ_opt()
        } else {
            (time < self.end).then_some(date)
        }?;
        Some(at_local(zone, end_on, self.end))
    }
}

/// The instant a local clock in `zone` reads `time` on `date`: the first of
/// two in the repeated hour of a fall-back change; for a time skipped by a
/// spring-forward change, the instant the clock jumps past it.
pub fn at_local(zone: Tz, date: NaiveDate, time: NaiveTime) -> DateTime<Utc> {
    let wanted = date.and_time(time);
    let mut probe = wanted;
    loop {
        match zone.from_local_datetime(&probe) {
            LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                return at.with_timezone(&Utc);
            }
            // Inside a gap (at most a few hours in any zone): step to its end.
            LocalResult::None => probe += Duration::minutes(1),
        }
    }
}

/// Moves the non-critical email and webhook deliveries of `alert_id` to
/// `recipients` (those the fan-out just queued) that fall in their quiet
/// hours to the hours' end. One probe of an index that holds only users with
/// quiet hours when none of them has any.
pub async fn hold_new_deliveries(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert_id: Uuid,
    recipients: &[&str],
) -> sqlx::Result<u64> {
    if recipients.is_empty() || !in_schema() {
        return Ok(0);
    }
    let candidates =
        store::deliveries::quiet_hours_candidates(&mut *conn, tenant, alert_id, recipients).await?;
    let (ids, releases): (Vec<i64>, Vec<DateTime<Utc>>) = candidates
        .into_iter()
        .filter_map(|c| {
            let hours = QuietHours {
                start: c.quiet_start,
                end: c.quiet_end,
            };
            // Stored zones were checked when written; an unknown one is UTC.
            let zone = c
                .timezone
                .as_deref()
                .and_then(|z| z.parse::<Tz>().ok())
                .unwrap_or(Tz::UTC);
            hours.release(c.due, zone).map(|at| (c.id, at))
        })
        .unzip();
    if ids.is_empty() {
        return Ok(0);
    }
    store::deliveries::delay_deliveries(&mut *conn, tenant, &ids, &releases).await
}

/// Whether the schema has quiet hours (migration 0027). False only in a test
/// build standing in for the version before it
/// (`test_hooks::WITHOUT_LAST_MIGRATION`, the rolling upgrade test).
pub fn in_schema() -> bool {
    !crate::db::stands_in_for_previous_version()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn times_are_hh_mm_with_optional_seconds() {
        let hours = QuietHours::parse("22:00", "07:30:15").unwrap();
        assert_eq!(hours.start, NaiveTime::from_hms_opt(22, 0, 0).unwrap());
        assert_eq!(hours.end, NaiveTime::from_hms_opt(7, 30, 15).unwrap());
        for bad in ["7", "24:00", "07:60", "7:5", "07:00:00.5", "07:00 ", ""] {
            assert!(
                matches!(
                    QuietHours::parse(bad, "08:00"),
                    Err(InvalidQuietHours::Time("start", _))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            QuietHours::parse("08:00", "08:00"),
            Err(InvalidQuietHours::Empty)
        );
    }

    #[test]
    fn a_window_across_midnight_holds_until_the_next_morning() {
        let night = QuietHours::parse("22:00", "07:00").unwrap();
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // 23:30 in Berlin (CET, UTC+1) → 07:00 the next day.
        assert_eq!(
            night.release(utc("2026-01-10T22:30:00Z"), berlin),
            Some(utc("2026-01-11T06:00:00Z"))
        );
        // 03:00 → 07:00 the same day.
        assert_eq!(
            night.release(utc("2026-01-11T02:00:00Z"), berlin),
            Some(utc("2026-01-11T06:00:00Z"))
        );
        // The end itself and the day are outside.
        assert_eq!(night.release(utc("2026-01-11T06:00:00Z"), berlin), None);
        assert_eq!(night.release(utc("2026-01-11T12:00:00Z"), berlin), None);
        // The start is inside.
        assert_eq!(
            night.release(utc("2026-01-11T21:00:00Z"), berlin),
            Some(utc("2026-01-12T06:00:00Z"))
        );
    }

    #[test]
    fn a_window_within_a_day_and_the_users_zone() {
        let lunch = QuietHours::parse("12:00", "13:30").unwrap();
        let tokyo: Tz = "Asia/Tokyo".parse().unwrap();
        // 12:15 in Tokyo (UTC+9).
        assert_eq!(
            lunch.release(utc("2026-03-01T03:15:00Z"), tokyo),
            Some(utc("2026-03-01T04:30:00Z"))
        );
        assert_eq!(lunch.release(utc("2026-03-01T03:15:00Z"), Tz::UTC), None);
    }

    #[test]
    fn daylight_saving_changes_move_the_end_with_the_clock() {
        let night = QuietHours::parse("22:00", "07:00").unwrap();
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // The night of 24-25 October 2026 falls back (03:00 CEST → 02:00
        // CET): 07:00 on the 25th is 06:00 UTC, not 05:00.
        assert_eq!(
            night.release(utc("2026-10-24T21:00:00Z"), berlin),
            Some(utc("2026-10-25T06:00:00Z"))
        );
        // The night of 28-29 March 2026 springs forward: 07:00 CEST is 05:00 UTC.
        assert_eq!(
            night.release(utc("2026-03-28T22:00:00Z"), berlin),
            Some(utc("2026-03-29T05:00:00Z"))
        );
        // An end inside the skipped hour (02:30 on 29 March) is the jump, 03:00 CEST.
        let early = QuietHours::parse("22:00", "02:30").unwrap();
        assert_eq!(
            early.release(utc("2026-03-28T22:00:00Z"), berlin),
            Some(utc("2026-03-29T01:00:00Z"))
        );
        // An end inside the repeated hour (02:30 on 25 October) is its first time.
        assert_eq!(
            early.release(utc("2026-10-24T21:00:00Z"), berlin),
            Some(utc("2026-10-25T00:30:00Z"))
        );
    }
}
