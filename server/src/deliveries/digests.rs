//! Digests: a recipient's emails of one event type collected over a window
//! into one email, whose content is decided at the flush, exactly, against
//! the read watermark (ARCHITECTURE.md, "Digests").
//!
//! - **Collect.** An alert whose email rule is a digest writes the alert's
//!   own email delivery `skipped` ("collected into a digest") and appends
//!   each recipient's in-app item, by reference, to that recipient's open
//!   digest of the key, in the alert's transaction ([`append`]). One open
//!   digest per (tenant, recipient, channel, key): a unique partial index.
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

use std::collections::HashSet;

use sqlx::PgConnection;
use tidings_core::{
    decide_digest, Channel, DigestContent, EventType, Fallback, Position, Setting, Unless, UserId,
    Watermarks,
};
use uuid::Uuid;

use crate::{
    alerts::{delivery::DigestRule, plan::preference_reason, preferences},
    db::PrimaryPool,
    deliveries::fallback::{SKIPPED_READ, SKIPPED_SEEN},
    store::{
        digests::{self as store, ClaimedDigest, Decision, DigestRow},
        feed::{item_reads, marks},
        paging::{Page, PageRequest},
    },
};

/// The reason of a digest skipped because the recipient has no address.
pub const NO_EMAIL: &str = "recipient has no email address";

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

/// Appends one alert's in-app items to its recipients' open digests (in the
/// alert's transaction). `items`: each digested recipient and its item.
pub async fn append(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert_id: Uuid,
    event_type: &EventType,
    payload: &serde_json::Value,
    rule: &DigestRule,
    mut items: Vec<(String, Position)>,
) -> sqlx::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items.dedup_by(|a, b| a.0 == b.0);
    let digest_key = rule.digest_key(event_type.as_str(), payload);
    let append = store::Append {
        tenant,
        alert_id,
        event_type: event_type.as_str(),
        digest_key: &digest_key,
        window_secs: i32::try_from(rule.window_secs).unwrap_or(i32::MAX),
        max_items: i32::try_from(rule.max_items).unwrap_or(i32::MAX),
        unless: rule.unless.map(Unless::as_str),
        item_tx: items.iter().map(|(_, p)| p.tx).collect(),
        item_id: items.iter().map(|(_, p)| p.id).collect(),
        recipients: items.into_iter().map(|(r, _)| r).collect(),
    };
    store::append_items(&mut *conn, &append).await?;
    Ok(())
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
        Some(unless) => decide_digest(&positions, unless, &marks),
        None if positions.is_empty() => DigestContent::Empty(Fallback::SkipRead),
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
                _ => SKIPPED_READ,
            }),
            included_tx: Vec::new(),
            included_id: Vec::new(),
        },
    };
    store::record_decision(&mut *conn, tenant, digest.id, &decision).await?;
    Ok(decision.status == "decided")
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
