//! The digest flush loop (`deliveries::digests`): lease the digests due,
//! decide the open ones, send the decided ones, record each result. Runs
//! beside the outbox loops in every process that sends email, sharing their
//! sender, settings and retry schedule; any number of them share the work
//! through the lease (`SKIP LOCKED`). Like the outbox, no transaction or row
//! lock is held while an email is on the network.

use std::{sync::Arc, time::Instant};

use futures::StreamExt;

use tokio::task::JoinHandle;

use tidings_core::Category;

use crate::{
    alerts::plan::NO_EMAIL,
    alerts::preferences::PreferencesError,
    alerts::templates::{
        digest::{self as digest_template, DigestItem, DigestVariables},
        email::html_from_text,
        Recipient,
    },
    app::{config::OutboxConfig, shutdown::Shutdown},
    db::PrimaryPool,
    deliveries::digests,
    store::digests::{self as store, ClaimedDigest, DigestLine},
    store::outbox::Completion,
    workers::{
        backoff::Backoff,
        channels::{
            email::{EmailSender, OutgoingEmail},
            Channels,
        },
    },
};

/// Digests leased per claim.
const BATCH: u32 = 32;
/// Digests of a batch flushed at once: each decision holds a pooled
/// connection for a few statements, and the pool serves requests too.
const FLUSH_CONCURRENCY: usize = 8;

pub fn spawn(
    pool: PrimaryPool,
    config: OutboxConfig,
    channels: Arc<Channels>,
    shutdown: Shutdown,
) -> Option<JoinHandle<()>> {
    if !digests::in_schema() || channels.email.is_none() {
        return None;
    }
    Some(tokio::spawn(async move {
        Flusher {
            pool,
            config,
            channels,
        }
        .run(shutdown)
        .await
    }))
}

struct Flusher {
    pool: PrimaryPool,
    config: OutboxConfig,
    channels: Arc<Channels>,
}

impl Flusher {
    async fn run(&self, mut shutdown: Shutdown) {
        let mut backoff = Backoff::default();
        let lease_ms = u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX);
        while !shutdown.is_requested() {
            let claimed_at = Instant::now();
            let batch = match store::claim_digests(&self.pool, BATCH, lease_ms).await {
                Ok(batch) => batch,
                Err(err) => {
                    tracing::warn!(error = %err, "claiming digests failed; backing off");
                    if shutdown.sleep(backoff.next_pause()).await {
                        break;
                    }
                    continue;
                }
            };
            backoff.reset();
            if batch.is_empty() {
                if shutdown.sleep(self.config.poll).await {
                    break;
                }
                continue;
            }
            // Daily digests fall due together (08:00 in a zone): flushed a
            // few at a time, each holding one connection while it decides.
            let shutdown_now = &shutdown;
            futures::stream::iter(batch)
                .for_each_concurrent(FLUSH_CONCURRENCY, |digest| async move {
                    if let Err(err) = self.flush(&digest, claimed_at, shutdown_now).await {
                        // The lease ends and the digest is claimed again: an
                        // open one is decided again, a decided one sent.
                        tracing::warn!(digest = digest.id, tenant = %digest.tenant_id, error = %err, "flushing a digest failed");
                    }
                })
                .await;
        }
    }

    async fn flush(
        &self,
        digest: &ClaimedDigest,
        claimed_at: Instant,
        shutdown: &Shutdown,
    ) -> sqlx::Result<()> {
        if digest.status == "open" && !digests::decide(&self.pool, digest).await? {
            return Ok(());
        }
        #[cfg(feature = "test-hooks")]
        if let Some(pause) = crate::app::test_hooks::digest_send_pause() {
            tokio::time::sleep(pause).await;
        }
        let result = if shutdown.is_requested()
            || Instant::now() >= self.config.start_deadline(claimed_at)
        {
            Completion::Release
        } else {
            self.send(digest).await?
        };
        if let Completion::Dead { error } = &result {
            tracing::warn!(digest = digest.id, tenant = %digest.tenant_id, %error, "digest is dead");
        }
        let recorded = store::record_result(
            &self.pool,
            digest.tenant_id,
            digest.id,
            digest.attempts,
            &result,
        )
        .await?;
        if !recorded {
            tracing::info!(digest = digest.id, tenant = %digest.tenant_id, "digest result not recorded: its lease had passed to another worker");
        }
        Ok(())
    }

    async fn send(&self, digest: &ClaimedDigest) -> sqlx::Result<Completion> {
        let Some(email) = self.channels.email.as_ref() else {
            return Ok(Completion::Release);
        };
        let summary = store::find_digest_summary(&self.pool, digest.tenant_id, digest.id).await?;
        let Some(address) = summary.address.as_deref().filter(|a| !a.trim().is_empty()) else {
            return Ok(Completion::Skipped {
                reason: NO_EMAIL.into(),
            });
        };
        let lines =
            store::list_digest_lines(&self.pool, digest.tenant_id, digest.id, summary.max_items)
                .await?;
        let category = self.category(digest).await?;
        let template = match &category {
            Some(c) => digest_template::find(&self.pool, digest.tenant_id, &c.key).await?,
            None => None,
        };
        let category_key = category.as_ref().map(|c| c.key.clone()).unwrap_or_default();
        // One-click unsubscribe, for a non-critical category with links on.
        let list_category = category
            .filter(|c| !c.critical && email.unsubscribe.is_some())
            .map(|c| c.key);
        let (subject, text, html) = match template {
            Some((content, _)) => {
                let vars = DigestVariables {
                    more: (summary.total - lines.len() as i64).max(0),
                    total: summary.total,
                    items: lines
                        .into_iter()
                        .map(|l| DigestItem {
                            subject: l.subject,
                            event_type: l.event_type,
                            entity_id: l.entity_id,
                            payload: l.payload.unwrap_or_default(),
                        })
                        .collect(),
                    category: category_key,
                    recipient: Recipient {
                        id: digest.recipient_id.clone(),
                        ..Recipient::default()
                    },
                    unsubscribe_url: self.unsubscribe_url(email, digest, list_category.as_deref()),
                };
                // Under the sandbox's limits, off the async threads.
                let rendered =
                    tokio::task::spawn_blocking(move || digest_template::render(&content, &vars))
                        .await;
                match rendered {
                    Ok(Ok(email)) => (email.subject, email.text, email.html),
                    Ok(Err(err)) => {
                        return Ok(Completion::Dead {
                            error: format!("the category's digest template failed: {err}"),
                        })
                    }
                    Err(err) => {
                        return Ok(Completion::Retry {
                            after_ms: 1_000,
                            error: format!("rendering the digest: {err}"),
                        })
                    }
                }
            }
            None => {
                let (subject, text) = compose(&digest.event_type, summary.total, &lines);
                let html = html_from_text(&text);
                (subject, text, html)
            }
        };
        let outcome = email
            .send_message(OutgoingEmail {
                tenant: digest.tenant_id,
                recipient_id: &digest.recipient_id,
                address,
                list_category: list_category.as_deref(),
                message_id: digests::message_id(digest.tenant_id, digest.id),
                subject,
                html,
                text,
            })
            .await;
        Ok(self.config.completion_of(digest.attempts, outcome))
    }

    /// The category of the digest's event type, if it has one.
    async fn category(&self, digest: &ClaimedDigest) -> sqlx::Result<Option<Category>> {
        let Ok(event_type) = tidings_core::EventType::parse(digest.event_type.as_str()) else {
            return Ok(None);
        };
        let mut conn = self.pool.inner().acquire().await?;
        match crate::alerts::preferences::category_for_alert(
            &mut conn,
            digest.tenant_id,
            None,
            &event_type,
        )
        .await
        {
            Ok(category) => Ok(category),
            Err(PreferencesError::Db(err)) => Err(err),
            Err(_) => Ok(None),
        }
    }

    /// The recipient's one-click unsubscribe link for `category`, when links
    /// are on.
    fn unsubscribe_url(
        &self,
        email: &EmailSender,
        digest: &ClaimedDigest,
        category: Option<&str>,
    ) -> Option<String> {
        let list = email.unsubscribe.as_ref()?;
        let recipient = tidings_core::UserId::parse(digest.recipient_id.as_str()).ok()?;
        Some(list.url(digest.tenant_id, &recipient, category?))
    }
}

/// A digest's subject and text: the subject states the count; the text
/// lists the items given (the newest first, at most the rule's `max_items`)
/// and says how many more there are.
pub fn compose(event_type: &str, total: i64, lines: &[DigestLine]) -> (String, String) {
    let line = |l: &DigestLine| -> String {
        let what = l
            .subject
            .clone()
            .or_else(|| l.event_type.clone())
            .unwrap_or_else(|| event_type.to_owned());
        match &l.entity_id {
            Some(entity) => format!("{what} ({entity})"),
            None => what,
        }
    };
    let subject = match (total, lines.first()) {
        // A lone item (`second_within` passed without a second): its own email.
        (1, Some(first)) => line(first),
        (n, Some(first)) => format!("{n} new notifications: {} and more", line(first)),
        (n, None) => format!("{n} new notifications"),
    };
    let mut text = format!(
        "{total} new notification{}\n\n",
        if total == 1 { "" } else { "s" }
    );
    for l in lines {
        text.push_str(&format!("- {}\n", line(l)));
    }
    let more = total - lines.len() as i64;
    if more > 0 {
        text.push_str(&format!("\nand {more} more.\n"));
    }
    (subject, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(subject: Option<&str>, entity: &str) -> DigestLine {
        DigestLine {
            event_type: Some("comment.created".into()),
            entity_id: Some(entity.into()),
            subject: subject.map(str::to_owned),
            payload: None,
        }
    }

    #[test]
    fn the_subject_states_the_count_and_the_text_says_how_many_more() {
        let lines = [line(Some("Ann replied"), "c-2"), line(None, "c-1")];
        let (subject, text) = compose("comment.created", 5, &lines);
        assert_eq!(subject, "5 new notifications: Ann replied (c-2) and more");
        assert_eq!(
            text,
            "5 new notifications\n\n- Ann replied (c-2)\n- comment.created (c-1)\n\nand 3 more.\n"
        );
        let (subject, text) = compose("comment.created", 1, &lines[..1]);
        assert_eq!(subject, "Ann replied (c-2)");
        assert!(!text.contains("more"), "{text}");
    }
}
