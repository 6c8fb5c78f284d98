//! Digests: a recipient's emails of one event type collected over a window
//! into one email, whose content is decided at the flush, exactly, against
//! the read watermark (ARCHITECTURE.md, "Digests").
//!
//! - **Collect.** An alert whose email rule is a digest, or whose recipient
//!   chose `daily` or `weekly` email, writes the alert's own email delivery
//!   `skipped` ("collected into a digest") and appends the recipient's
//!   in-app item, by reference, to that recipient's open digest of the key,
//!   in the alert's transaction ([`append`]). One open digest per (tenant,
//!   recipient, channel, key): a unique partial index.
//! - **Flush.** When the window ends a worker leases the digest
//!   (`store::digests::claim_digests`, `SKIP LOCKED`: one worker), then in
//!   one transaction ([`decide`]) locks the digest row (new items now wait,
//!   then open the next digest), locks the recipient's `feed_state` row in
//!   share mode (the lock every read path takes exclusively, as for
//!   delayed channels), reads the watermarks and one-by-one reads in later
//!   statements, and lets `tidings_core::decide_digest` keep the items
//!   still unread (unseen). Preferences are resolved again: an opt-out made
//!   during the window skips the email. The decision is recorded with the
//!   watermark it saw, and which items the email holds.
//! - **Send.** A decided digest is sent under the same lease with a
//!   Message-ID derived from the digest's id ([`message_id`]), so a worker
//!   killed after deciding leaves a decided digest that the next lease sends
//!   once, with the same id and the same content; a failed send retries on
//!   the outbox's schedule.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Datelike, NaiveTime, Utc, Weekday};
use chrono_tz::Tz;

use sqlx::PgConnection;
use tidings_core::{
    decide_digest, Channel, DigestContent, EventType, Fallback, Position, Setting, Unless, UserId,
    Watermarks,
};
use uuid::Uuid;

use crate::{
    alerts::{
        delivery::{DigestRule, WindowEnd},
        plan::{preference_reason, DigestSource, Period, DIGESTED},
        preferences,
        quiet_hours::{at_local, QuietHours},
    },
    db::PrimaryPool,
    deliveries::fallback::{SKIPPED_READ, SKIPPED_SEEN},
    store::{
        digests::{self as store, ClaimedDigest, Decision, DigestRow},
        feed::{item_reads, marks},
        paging::{Page, PageRequest},
        users as users_store,
    },
};

/// The reason of a `send_first` digest that collected nothing after the
/// first item (whose email went at once).
pub const NOTHING_MORE: &str = "nothing arrived after the first item, which was sent at once";

/// Whether the schema has digests (migration 0028); false only in a test
/// build standing in for the version before it.
pub fn in_schema() -> bool {
    !crate::db::stands_in_for_previous_version()
}

/// The Message-ID of a digest's email: the same on every attempt and in
/// every process, what a receiver deduplicates on.
pub fn message_id(tenant: Uuid, id: i64) -> String {
    format!("<digest-{}-{id}@tidings>", tenant.simple())
}

/// The local time a daily or weekly digest is sent at, in the recipient's
/// time zone (UTC when unset); a weekly one on Mondays.
pub const PERIODIC_AT: NaiveTime = match NaiveTime::from_hms_opt(8, 0, 0) {
    Some(t) => t,
    None => panic!("08:00 is a time"),
};

/// Items listed by a daily or weekly digest (the email states the total).
pub const PERIODIC_MAX_ITEMS: u32 = 50;

/// When a `period` digest opened at `now` for a user in `zone` is sent: the
/// first instant after `now` at which the local clock reads
/// [`PERIODIC_AT`] (on a Monday, for weekly). A daylight-saving change
/// neither skips a day nor gives it two: each local date has one such
/// instant (`quiet_hours::at_local` says which, for a time a change skips
/// or repeats).
pub fn next_periodic_flush(now: DateTime<Utc>, zone: Tz, period: Period) -> DateTime<Utc> {
    next_flush_at(now, zone, period, periodic_at())
}

/// The local time periodic digests are sent at: [`PERIODIC_AT`], or in a
/// test build the one `test_hooks::PERIODIC_AT` names.
fn periodic_at() -> NaiveTime {
    #[cfg(feature = "test-hooks")]
    if let Some(at) = crate::app::test_hooks::periodic_at() {
        return at;
    }
    PERIODIC_AT
}

fn next_flush_at(now: DateTime<Utc>, zone: Tz, period: Period, local: NaiveTime) -> DateTime<Utc> {
    let mut date = now.with_timezone(&zone).date_naive();
    loop {
        let due = period == Period::Daily || date.weekday() == Weekday::Mon;
        if due {
            let at = at_local(zone, date, local);
            if at > now {
                return at;
            }
        }
        date = date.succ_opt().unwrap_or(date);
    }
}

/// The alert and rule a fan-out collects emails for.
pub struct Collect<'a> {
    pub tenant: Uuid,
    pub alert_id: Uuid,
    pub event_type: &'a EventType,
    pub payload: &'a serde_json::Value,
    /// The alert's digest rule, if any.
    pub rule: Option<&'a DigestRule>,
    /// The alert's category key: what a daily or weekly digest collects.
    pub category: Option<&'a str>,
}

/// Appends one alert's in-app items to its recipients' open digests (in the
/// alert's transaction): the rule's digest, or the recipient's daily or
/// weekly one. `items`: each collected recipient, its item, and which digest.
/// Answers the recipients whose email was queued again instead: the first
/// item of a `send_first` digest goes at once.
pub async fn append(
    conn: &mut PgConnection,
    alert: &Collect<'_>,
    mut items: Vec<(String, Position, DigestSource)>,
) -> sqlx::Result<Vec<String>> {
    let mut released = Vec::new();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items.dedup_by(|a, b| a.0 == b.0);
    let by_rule: Vec<(String, Position)> = items
        .iter()
        .filter(|i| i.2 == DigestSource::Rule)
        .map(|i| (i.0.clone(), i.1))
        .collect();
    if let (Some(rule), false) = (alert.rule, by_rule.is_empty()) {
        let key = rule.digest_key(alert.event_type.as_str(), alert.payload);
        let shape = Shape {
            first_due_secs: rule.first_due_secs(),
            end: rule.window_end(),
            send_first: rule.send_first,
            max_items: rule.max_items,
            unless: rule.unless,
        };
        let first_sent = append_group(conn, alert, &key, &shape, by_rule, None).await?;
        if !first_sent.is_empty() {
            store::release_collected_emails(
                &mut *conn,
                alert.tenant,
                alert.alert_id,
                &first_sent,
                DIGESTED,
            )
            .await?;
        }
        released = first_sent;
    }
    for period in [Period::Daily, Period::Weekly] {
        let group: Vec<(String, Position)> = items
            .iter()
            .filter(|i| i.2 == DigestSource::Periodic(period))
            .map(|i| (i.0.clone(), i.1))
            .collect();
        if group.is_empty() {
            continue;
        }
        let users: Vec<String> = group.iter().map(|g| g.0.clone()).collect();
        let zones: HashMap<String, Tz> =
            users_store::list_user_timezones(&mut *conn, alert.tenant, &users)
                .await?
                .into_iter()
                .map(|(user, zone)| {
                    // Stored zones were checked when written; unset is UTC.
                    let zone = zone.and_then(|z| z.parse::<Tz>().ok()).unwrap_or(Tz::UTC);
                    (user, zone)
                })
                .collect();
        let now = Utc::now();
        let flush_at = users
            .iter()
            .map(|u| {
                let zone = zones.get(u).copied().unwrap_or(Tz::UTC);
                Some(next_periodic_flush(now, zone, period))
            })
            .collect();
        let key = format!(
            "{}/{}",
            period.as_str(),
            alert.category.unwrap_or(alert.event_type.as_str())
        );
        let shape = Shape {
            first_due_secs: 0,
            end: WindowEnd::Set,
            send_first: false,
            max_items: PERIODIC_MAX_ITEMS,
            unless: Some(Unless::Read),
        };
        append_group(conn, alert, &key, &shape, group, Some(flush_at)).await?;
    }
    Ok(released)
}

/// What a digest opened by a group of items looks like.
struct Shape {
    first_due_secs: u32,
    end: WindowEnd,
    send_first: bool,
    max_items: u32,
    unless: Option<Unless>,
}

async fn append_group(
    conn: &mut PgConnection,
    alert: &Collect<'_>,
    digest_key: &str,
    shape: &Shape,
    items: Vec<(String, Position)>,
    flush_at: Option<Vec<Option<DateTime<Utc>>>>,
) -> sqlx::Result<Vec<String>> {
    let n = items.len();
    let secs = |s: u32| i32::try_from(s).unwrap_or(i32::MAX);
    let (end_mode, window_secs, max_wait_secs) = match shape.end {
        WindowEnd::Fixed { window_secs } => ("fixed", window_secs, 0),
        WindowEnd::Sliding {
            window_secs,
            max_wait_secs,
        } => ("sliding", window_secs, max_wait_secs),
        WindowEnd::Set => ("set", 0, 0),
    };
    let append = store::Append {
        tenant: alert.tenant,
        alert_id: alert.alert_id,
        event_type: alert.event_type.as_str(),
        digest_key,
        first_due_secs: secs(shape.first_due_secs),
        end_mode,
        window_secs: secs(window_secs),
        max_wait_secs: secs(max_wait_secs),
        send_first: shape.send_first,
        max_items: secs(shape.max_items),
        unless: shape.unless.map(Unless::as_str),
        item_tx: items.iter().map(|(_, p)| p.tx).collect(),
        item_id: items.iter().map(|(_, p)| p.id).collect(),
        flush_at: flush_at.unwrap_or_else(|| vec![None; n]),
        recipients: items.into_iter().map(|(r, _)| r).collect(),
    };
    store::append_items(&mut *conn, &append).await
}

/// Decides a claimed open digest's content, in a transaction of its own.
/// Answers whether there is an email to send; `false` also when this claim
/// no longer holds the digest (its lease ended and another took it).
pub async fn decide(pool: &PrimaryPool, digest: &ClaimedDigest) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let decided = decide_in(&mut tx, digest).await?;
    tx.commit().await?;
    Ok(decided)
}

async fn decide_in(conn: &mut PgConnection, digest: &ClaimedDigest) -> sqlx::Result<bool> {
    let Some(open) =
        store::lock_open_digest(&mut *conn, digest.tenant_id, digest.id, digest.attempts).await?
    else {
        return Ok(false);
    };
    let tenant = digest.tenant_id;
    let user = digest.recipient_id.clone();
    // Inside the recipient's quiet hours: decided (and sent) at their end,
    // still collecting meanwhile.
    if let Some(until) = quiet_until(conn, tenant, &user).await? {
        store::postpone_open_digest(&mut *conn, tenant, digest.id, until).await?;
        return Ok(false);
    }
    let locked =
        marks::lock_marks_shared(&mut *conn, &[tenant], std::slice::from_ref(&user)).await?;
    let marks = locked
        .first()
        .map(|m| Watermarks {
            seen: Position::new(m.seen_tx, m.seen_id),
            read: Position::new(m.read_tx, m.read_id),
        })
        .unwrap_or_default();
    // Read after the locks, in statements of their own: every item appended
    // and every read committed before them is seen.
    let items = store::list_digest_items(&mut *conn, tenant, digest.id).await?;
    let read_one_by_one: HashSet<i64> = if items.is_empty() {
        HashSet::new()
    } else {
        let n = items.len();
        item_reads::find_item_reads(
            &mut *conn,
            &vec![tenant; n],
            &vec![user.clone(); n],
            &items.iter().map(|&(_, id)| id).collect::<Vec<_>>(),
        )
        .await?
        .into_iter()
        .map(|(_, _, id)| id)
        .collect()
    };
    #[cfg(feature = "test-hooks")]
    if let Some(pause) = crate::app::test_hooks::decision_pause() {
        tokio::time::sleep(pause).await;
    }
    let unless = open.unless_mark.as_deref().and_then(Unless::parse);
    let positions: Vec<(Position, bool)> = items
        .iter()
        .map(|&(tx, id)| (Position::new(tx, id), read_one_by_one.contains(&id)))
        .collect();
    let content = match unless {
        // A send-first digest that collected nothing after its first item.
        _ if positions.is_empty() => DigestContent::Empty(Fallback::Send),
        Some(unless) => decide_digest(&positions, unless, &marks),
        None => DigestContent::Send((0..positions.len()).collect()),
    };
    let mark = unless.map(|u| {
        let m = u.mark(&marks);
        (m.tx, m.id)
    });
    let opted_out = opted_out(conn, tenant, &digest.event_type, &user).await?;
    let decision = match (&content, opted_out) {
        (DigestContent::Send(_), Some(reason)) => Decision {
            status: "skipped",
            mark,
            reason: Some(reason),
            included_tx: Vec::new(),
            included_id: Vec::new(),
        },
        (DigestContent::Send(keep), None) => Decision {
            status: "decided",
            mark,
            reason: None,
            included_tx: keep.iter().map(|&i| items[i].0).collect(),
            included_id: keep.iter().map(|&i| items[i].1).collect(),
        },
        (DigestContent::Empty(why), _) => Decision {
            status: "empty",
            mark,
            reason: Some(match why {
                Fallback::SkipSeen => SKIPPED_SEEN,
                Fallback::SkipRead => SKIPPED_READ,
                Fallback::Send => NOTHING_MORE,
            }),
            included_tx: Vec::new(),
            included_id: Vec::new(),
        },
    };
    store::record_decision(&mut *conn, tenant, digest.id, &decision).await?;
    Ok(decision.status == "decided")
}

/// The end of the recipient's quiet hours, when now is inside them.
async fn quiet_until(
    conn: &mut PgConnection,
    tenant: Uuid,
    user: &str,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    if !crate::alerts::quiet_hours::in_schema() {
        return Ok(None);
    }
    let Some(row) = users_store::get_user(&mut *conn, tenant, user).await? else {
        return Ok(None);
    };
    let (Some(start), Some(end)) = (row.quiet_start, row.quiet_end) else {
        return Ok(None);
    };
    // Stored zones were checked when written; unset is UTC.
    let zone = row
        .timezone
        .and_then(|z| z.parse::<Tz>().ok())
        .unwrap_or(Tz::UTC);
    Ok(QuietHours { start, end }.release(Utc::now(), zone))
}

/// The reason the recipient's email setting for this event type is off now,
/// if it is (the level that decided, as at fan-out).
async fn opted_out(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    user: &str,
) -> sqlx::Result<Option<&'static str>> {
    let (Ok(event_type), Ok(user)) = (EventType::parse(event_type), UserId::parse(user)) else {
        return Ok(None);
    };
    if !preferences::in_schema() {
        return Ok(None);
    }
    let category =
        match preferences::category_for_alert(&mut *conn, tenant, None, &event_type).await {
            Ok(category) => category,
            Err(preferences::PreferencesError::Db(err)) => return Err(err),
            Err(_) => None,
        };
    let settings = preferences::settings_for_fanout(
        &mut *conn,
        tenant,
        &event_type,
        category.as_ref(),
        std::slice::from_ref(&user),
        &[Channel::Email],
    )
    .await?;
    Ok(settings
        .get(&(user, Channel::Email))
        .filter(|r| r.setting == Setting::Off)
        .map(|r| preference_reason(r.level)))
}

/// One page of a recipient's digests in id order: what each collected, and
/// what its flush decided and why.
pub async fn list(
    pool: &PrimaryPool,
    tenant: Uuid,
    recipient: &UserId,
    page: &PageRequest<i64>,
) -> sqlx::Result<Page<DigestRow>> {
    let rows = store::list_recipient_digests(
        pool,
        tenant,
        recipient.as_str(),
        page.after,
        page.fetch_limit(),
    )
    .await?;
    Ok(page.page(rows, |row| &row.id))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// The schedule at [`PERIODIC_AT`], whatever a test hook says.
    fn next_flush_at_8(now: DateTime<Utc>, zone: Tz, period: Period) -> DateTime<Utc> {
        next_flush_at(now, zone, period, PERIODIC_AT)
    }

    use chrono::{Duration, NaiveDate, TimeZone};

    use super::*;

    fn berlin() -> Tz {
        "Europe/Berlin".parse().expect("zone")
    }

    /// Every 10 minutes across a change: each opened digest is due at 08:00
    /// local, after it was opened, within a day and the change's hour, and
    /// each local date gets exactly one due instant: none skipped, none twice.
    fn one_per_local_day(from: DateTime<Utc>, days: i64) {
        let zone = berlin();
        let mut per_date: BTreeMap<NaiveDate, DateTime<Utc>> = BTreeMap::new();
        let mut at = from;
        while at < from + Duration::days(days) {
            let due = next_flush_at(at, zone, Period::Daily, PERIODIC_AT);
            let local = due.with_timezone(&zone);
            assert_eq!(local.time(), PERIODIC_AT, "{at} → {local}");
            assert!(due > at && due - at <= Duration::hours(25), "{at} → {due}");
            if let Some(other) = per_date.insert(local.date_naive(), due) {
                assert_eq!(other, due, "two instants for {}", local.date_naive());
            }
            at += Duration::minutes(10);
        }
        let dates: Vec<NaiveDate> = per_date.keys().copied().collect();
        for pair in dates.windows(2) {
            assert_eq!(
                pair[0].succ_opt(),
                Some(pair[1]),
                "a day skipped: {dates:?}"
            );
        }
        // From noon to noon `days` later: `days` mornings, and the one after.
        assert_eq!(dates.len() as i64, days + 1, "{dates:?}");
    }

    #[test]
    fn a_daily_digest_is_due_once_a_day_at_eight_local_across_both_changes() {
        // Summer time ends on 25 October 2026 (03:00 CEST → 02:00 CET).
        one_per_local_day(Utc.with_ymd_and_hms(2026, 10, 22, 12, 0, 0).unwrap(), 6);
        // It begins on 29 March 2026 (02:00 CET → 03:00 CEST).
        one_per_local_day(Utc.with_ymd_and_hms(2026, 3, 26, 12, 0, 0).unwrap(), 6);
        // 08:00 in Berlin is 06:00 UTC in summer and 07:00 in winter.
        let zone = berlin();
        let saturday = Utc.with_ymd_and_hms(2026, 10, 24, 9, 0, 0).unwrap();
        let sunday = next_flush_at_8(saturday, zone, Period::Daily);
        assert_eq!(sunday, Utc.with_ymd_and_hms(2026, 10, 25, 7, 0, 0).unwrap());
        let before = Utc.with_ymd_and_hms(2026, 10, 24, 5, 59, 0).unwrap();
        assert_eq!(
            next_flush_at_8(before, zone, Period::Daily),
            Utc.with_ymd_and_hms(2026, 10, 24, 6, 0, 0).unwrap()
        );
    }

    #[test]
    fn a_weekly_digest_is_due_on_the_next_monday_at_eight_local() {
        let zone = berlin();
        // Thursday 22 October 2026 → Monday 26 October, after the change.
        let thursday = Utc.with_ymd_and_hms(2026, 10, 22, 12, 0, 0).unwrap();
        let due = next_flush_at_8(thursday, zone, Period::Weekly);
        assert_eq!(due, Utc.with_ymd_and_hms(2026, 10, 26, 7, 0, 0).unwrap());
        // Monday after 08:00 → the next Monday.
        let monday_noon = Utc.with_ymd_and_hms(2026, 10, 26, 11, 0, 0).unwrap();
        assert_eq!(
            next_flush_at_8(monday_noon, zone, Period::Weekly),
            Utc.with_ymd_and_hms(2026, 11, 2, 7, 0, 0).unwrap()
        );
        // Without a zone: UTC.
        assert_eq!(
            next_flush_at_8(monday_noon, Tz::UTC, Period::Daily),
            Utc.with_ymd_and_hms(2026, 10, 27, 8, 0, 0).unwrap()
        );
    }
}
