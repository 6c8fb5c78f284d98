//! Delayed channels with a condition: "email me in 15 minutes only if I have
//! not read it" (ARCHITECTURE.md, "Delayed channels"), decided exactly.
//!
//! A delayed delivery is written by the alert's transaction, due at the end
//! of its delay, with what it waits on (`read` or `seen`) and the position of
//! the in-app item it follows. The worker decides it right after claiming
//! it, in a transaction of its own ([`claim_and_decide`]): it locks the recipients'
//! `feed_state` rows in share mode, in (tenant, user) order, reads the
//! watermarks and the items read one by one under those locks, and lets
//! `tidings_core::decide_fallback` say send or skip. Every path that marks
//! something read or seen (mark all read, mark all seen, one item read) takes
//! the same row exclusively, so each of them commits either before the
//! decision (which then sees it) or after the decision commits. The decision
//! records the watermark it saw, so `GET /v1/alerts/{id}` says why no email
//! was sent; a retry is claimed, and so decided, again.
//!
//! Preferences are resolved again at the decision: an opt-out made during the
//! delay skips the send, with the same reason as at fan-out.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::PgConnection;
use tidings_core::{
    decide_fallback, Category, Channel, EventType, Fallback, Position, Setting, Unless, UserId,
    Watermarks,
};
use uuid::Uuid;

use crate::{
    alerts::{plan::preference_reason, preferences},
    db::PrimaryPool,
    store::{
        feed::{item_reads, marks},
        outbox::{self as store, ClaimedDelivery, Decisions},
    },
};

/// The skip reason of a delayed delivery whose item was read before the
/// decision (by a watermark or one by one).
pub const SKIPPED_READ: &str = "read";
/// The skip reason of a delayed delivery waiting on `seen` whose item was
/// seen (and not read) before the decision.
pub const SKIPPED_SEEN: &str = "seen";

/// Claims a batch as `store::outbox::claim_deliveries` does, then decides
/// its delayed deliveries (those with a condition) in a transaction of their
/// own. Answers what to send: the batch without the deliveries that were
/// skipped. A batch without delayed deliveries costs the autocommit claim
/// alone, as before delays existed.
///
/// The decision needs no transaction shared with the claim: the claim only
/// leases the rows, and nothing is sent before the decision commits. A
/// decision that fails leaves its rows leased; they are claimed, and decided,
/// again when the lease ends.
pub async fn claim_and_decide(
    pool: &PrimaryPool,
    batch: u32,
    lease_ms: u64,
    channels: &[Channel],
) -> sqlx::Result<Vec<ClaimedDelivery>> {
    let batch = store::claim_deliveries(pool, batch, lease_ms, channels).await?;
    if !batch.iter().any(|d| d.unless_mark.is_some()) {
        return Ok(batch);
    }
    let mut tx = pool.begin().await?;
    let batch = decide(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(batch)
}

/// A delayed delivery of the batch: its condition and its item.
struct Delayed {
    index: usize,
    unless: Unless,
    item: Option<Position>,
}

async fn decide(
    conn: &mut PgConnection,
    batch: Vec<ClaimedDelivery>,
) -> sqlx::Result<Vec<ClaimedDelivery>> {
    let delayed: Vec<Delayed> = batch
        .iter()
        .enumerate()
        .filter_map(|(index, d)| {
            let unless = Unless::parse(d.unless_mark.as_deref()?)?;
            let item = match (d.item_tx, d.item_id) {
                (Some(tx), Some(id)) => Some(Position::new(tx, id)),
                _ => None,
            };
            Some(Delayed {
                index,
                unless,
                item,
            })
        })
        .collect();

    // The recipients of delayed deliveries that follow an item, locked in
    // share mode in (tenant, user) order (the statement sorts).
    let mut users: Vec<(Uuid, String)> = delayed
        .iter()
        .filter(|d| d.item.is_some())
        .map(|d| {
            (
                batch[d.index].tenant_id,
                batch[d.index].recipient_id.clone(),
            )
        })
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    users.sort();
    let (tenants, user_ids): (Vec<Uuid>, Vec<String>) = users.into_iter().unzip();
    let watermarks: HashMap<(Uuid, String), Watermarks> = if tenants.is_empty() {
        HashMap::new()
    } else {
        marks::lock_marks_shared(&mut *conn, &tenants, &user_ids)
            .await?
            .into_iter()
            .map(|m| {
                (
                    (m.tenant_id, m.user_id),
                    Watermarks {
                        seen: Position::new(m.seen_tx, m.seen_id),
                        read: Position::new(m.read_tx, m.read_id),
                    },
                )
            })
            .collect()
    };
    let (mut read_tenants, mut read_users, mut read_items) = (Vec::new(), Vec::new(), Vec::new());
    for d in &delayed {
        if let Some(item) = d.item {
            let delivery = &batch[d.index];
            read_tenants.push(delivery.tenant_id);
            read_users.push(delivery.recipient_id.clone());
            read_items.push(item.id);
        }
    }
    let read_one_by_one: HashSet<(Uuid, String, i64)> = if read_items.is_empty() {
        HashSet::new()
    } else {
        item_reads::find_item_reads(&mut *conn, &read_tenants, &read_users, &read_items)
            .await?
            .into_iter()
            .collect()
    };
    let opted_out = opted_out(conn, &batch, &delayed).await?;
    #[cfg(feature = "test-hooks")]
    if let Some(pause) = crate::app::test_hooks::decision_pause() {
        tokio::time::sleep(pause).await;
    }

    let mut decisions = Decisions::default();
    let mut skipped = HashSet::new();
    for d in &delayed {
        let delivery = &batch[d.index];
        let user = (delivery.tenant_id, delivery.recipient_id.clone());
        let marks = watermarks.get(&user).copied().unwrap_or_default();
        let by_condition = match d.item {
            Some(item) => {
                let one_by_one = read_one_by_one.contains(&(user.0, user.1.clone(), item.id));
                decide_fallback(item, d.unless, &marks, one_by_one)
            }
            // No in-app item (its channel was off for the recipient): there
            // is nothing to read, so the delay alone applies.
            None => Fallback::Send,
        };
        let reason = match by_condition {
            Fallback::SkipRead => Some(SKIPPED_READ.to_owned()),
            Fallback::SkipSeen => Some(SKIPPED_SEEN.to_owned()),
            Fallback::Send => opted_out.get(&d.index).map(|r| (*r).to_owned()),
        };
        let mark = d.item.map(|_| d.unless.mark(&marks));
        if reason.is_some() {
            skipped.insert(d.index);
        }
        decisions.tenant_ids.push(delivery.tenant_id);
        decisions.ids.push(delivery.id);
        decisions.attempts.push(delivery.attempts);
        decisions.skip_reasons.push(reason);
        decisions.mark_tx.push(mark.map(|m| m.tx));
        decisions.mark_id.push(mark.map(|m| m.id));
    }
    store::record_decisions(&mut *conn, &decisions).await?;
    Ok(batch
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !skipped.contains(i))
        .map(|(_, d)| d)
        .collect())
}

/// The delayed deliveries of `batch` whose channel the recipient's
/// preferences turn off now, with the reason naming the deciding level (as
/// at fan-out). A batch's alerts are many (a delayed email is often one
/// alert's only delivery), so the statements do not follow them: one for
/// the categories of all of them, then one for the settings of each (tenant,
/// event type, category) among them, with all its recipients.
async fn opted_out(
    conn: &mut PgConnection,
    batch: &[ClaimedDelivery],
    delayed: &[Delayed],
) -> sqlx::Result<HashMap<usize, &'static str>> {
    let mut out = HashMap::new();
    if !preferences::in_schema() || delayed.is_empty() {
        return Ok(out);
    }
    let mut alerts: Vec<(Uuid, Uuid)> = delayed
        .iter()
        .map(|d| (batch[d.index].tenant_id, batch[d.index].alert_id))
        .collect();
    alerts.sort();
    alerts.dedup();
    let categories = preferences::categories_of_stored_alerts(&mut *conn, &alerts).await?;
    // (tenant, event type, category key) → its category and deliveries.
    type Group = (Option<Category>, Vec<usize>);
    let mut groups: BTreeMap<(Uuid, String, Option<String>), Group> = BTreeMap::new();
    for d in delayed {
        let delivery = &batch[d.index];
        // The alert is gone (retention): the sender skips it anyway.
        let Some(event_type) = delivery.event_type.clone() else {
            continue;
        };
        let category = categories.get(&(delivery.tenant_id, delivery.alert_id));
        groups
            .entry((
                delivery.tenant_id,
                event_type,
                category.map(|c| c.key.clone()),
            ))
            .or_insert_with(|| (category.cloned(), Vec::new()))
            .1
            .push(d.index);
    }
    for ((tenant, event_type, _), (category, indexes)) in groups {
        let Ok(event_type) = EventType::parse(event_type) else {
            continue;
        };
        let mut recipients: Vec<UserId> = indexes
            .iter()
            .filter_map(|&i| UserId::parse(batch[i].recipient_id.as_str()).ok())
            .collect();
        recipients.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        recipients.dedup();
        let mut channels: Vec<Channel> = indexes.iter().map(|&i| batch[i].channel).collect();
        channels.sort_by_key(|c| c.as_str());
        channels.dedup();
        let settings = preferences::settings_for_fanout(
            &mut *conn,
            tenant,
            &event_type,
            category.as_ref(),
            &recipients,
            &channels,
        )
        .await?;
        for i in indexes {
            let d = &batch[i];
            let Ok(user) = UserId::parse(d.recipient_id.as_str()) else {
                continue;
            };
            if let Some(resolution) = settings
                .get(&(user, d.channel))
                .filter(|r| r.setting == Setting::Off)
            {
                out.insert(i, preference_reason(resolution.level));
            }
        }
    }
    Ok(out)
}
