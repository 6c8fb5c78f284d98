//! The idempotent consumer (ARCHITECTURE.md, invariant 8): alert requests from
//! a NATS JetStream stream, the second front door of the alert service next
//! to `POST /v1/alerts`: the same body, parsed the same way, written by the
//! same `alerts::submit`.
//!
//! **The tenant comes from the subject**, never from the body: a message on
//! `tidings.<tenant id>.alerts` (the `*` token of `TIDINGS_NATS_SUBJECT`) is
//! that tenant's. NATS permissions decide who may publish on which subject
//! (deploy/nats/ shows a configuration where each publisher can write only
//! its own tenant's subject); a body that names another tenant (`tenant_id`)
//! is rejected.
//!
//! Per message, ONE transaction records (tenant, message id) in
//! `inbox_messages` (ON CONFLICT DO NOTHING) and creates the alert; only after
//! commit is the message acked. A redelivery (crash before ack, ack lost, a
//! replayed consumer) finds the id and is acked without effect. Ids are per
//! tenant, so no publisher can pre-claim another tenant's ids.
//!
//! The message id is the `Tidings-Msg-Id` header when the producer set one
//! (so a producer's own retries are recognised, for as long as the inbox
//! keeps the row), else `<stream>:<stream sequence>` (so redeliveries of one
//! stored message are).
//!
//! **Never `Nats-Msg-Id`.** JetStream's duplicate window is per stream, and
//! every tenant publishes into the one stream: a `Nats-Msg-Id` another
//! tenant used first would make JetStream drop this tenant's message before
//! the inbox saw it, while the publisher is told it succeeded. JetStream
//! tracks only messages that carry that header, so a tenant whose publisher
//! never sets it can lose nothing to another tenant's ids. The inbox enforces
//! the convention: a message carrying `Nats-Msg-Id` is rejected (recorded
//! under its `<stream>:<sequence>` id with the reason, and terminated), so a
//! publisher that uses it finds out at once rather than when an id collides.
//!
//! Poison messages (not JSON, unknown fields, invalid alert) are recorded in
//! the inbox with outcome `rejected` and the reason, then terminated
//! (`+TERM`): retrying cannot fix them, and the row lets an operator find
//! them. A subject that names no existing tenant has no tenant to record the
//! message under: it is logged and terminated. Database trouble is transient:
//! the message is nak'ed with a delay.
//!
//! **Limits** (ARCHITECTURE.md, "Limits per tenant"): a message is one of
//! its tenant's writes, as `POST /v1/alerts` is. It takes a token of the
//! tenant's writes bucket and a permit of its pool share before it is
//! handled; refused (bucket empty, or the share all taken now: the consumer
//! serves every tenant in turn and waits for none), it is nak'ed with the
//! delay a refused request is held (`Retry-After`, at most a second), and the
//! consumer moves on to the next message.
//!
//! **A panic is one message's failure, never the consumer's.** The consumer
//! is shared by every tenant: each message is admitted and handled under
//! `catch_unwind`, and one that panics is dead-lettered (recorded as
//! rejected with the reason, when its tenant exists, and terminated) while
//! the consumer goes on with the next.
//!
//! Test-only (feature `test-hooks`, see `crate::app::test_hooks`): the process can
//! be made to abort right after committing a new alert and before acking, and
//! a message can be made to panic in handling, to prove the above.

use std::{panic::AssertUnwindSafe, time::Duration};

use anyhow::Context;
use async_nats::{
    header::IntoHeaderName,
    jetstream::{self, consumer::pull, AckKind},
};
use futures::{FutureExt, StreamExt};
use uuid::Uuid;

pub use crate::alerts::submit::Handled;
use crate::{
    alerts::{submit, AlertRequest},
    app::shutdown::Shutdown,
    app::state::AppState,
    http::alerts::AlertIn,
    tenants::limits::{self, share::SharePermit, AdmitError, Refusal, RequestClass},
};

/// The longest delay before a refused message comes again: as long as a
/// refused request is held at the most by default.
const NAK_MAX: Duration = Duration::from_secs(1);

pub async fn run(state: AppState, mut shutdown: Shutdown) {
    while !shutdown.is_requested() {
        match consume(&state, &mut shutdown).await {
            Ok(()) => break,
            Err(err) => tracing::warn!(error = ?err, "NATS inbox stopped; reconnecting"),
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn consume(state: &AppState, shutdown: &mut Shutdown) -> anyhow::Result<()> {
    let config = &state.settings.alerts;
    let url = config
        .nats_url
        .as_deref()
        .context("no NATS URL configured")?;
    let tenant_token = config.nats_tenant_token()?;
    let client = async_nats::connect(url)
        .await
        .context("connecting to NATS")?;
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: config.nats_stream.clone(),
            subjects: vec![config.nats_subject.clone()],
            ..Default::default()
        })
        .await
        .context("creating the alert stream")?;
    let consumer: jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            &config.nats_durable,
            pull::Config {
                durable_name: Some(config.nats_durable.clone()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(config.nats_ack_wait_secs.max(1)),
                filter_subject: config.nats_subject.clone(),
                ..Default::default()
            },
        )
        .await
        .context("creating the durable consumer")?;
    let mut messages = consumer.messages().await.context("subscribing")?;
    tracing::info!(stream = %config.nats_stream, subject = %config.nats_subject, "NATS inbox consuming");
    loop {
        let next = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            next = messages.next() => next,
        };
        let msg = match next {
            None => anyhow::bail!("message stream ended"),
            Some(Err(err)) => {
                tracing::warn!(error = %err, "NATS pull failed");
                continue;
            }
            Some(Ok(msg)) => msg,
        };
        let tenant = tenant_of(&msg.subject, tenant_token);
        let (message_id, id) = message_id(&config.nats_stream, &msg);
        let handled = AssertUnwindSafe(admit_and_handle(state, tenant, &message_id, id, &msg))
            .catch_unwind()
            .await;
        let ack = match handled {
            Ok(ack) => ack,
            Err(panic) => dead_letter(state, tenant, &message_id, &panic_text(&*panic)).await,
        };
        if let Err(err) = msg.ack_with(ack).await {
            // Not acked: JetStream redelivers it and the inbox recognises it.
            tracing::warn!(%message_id, error = %err, "ack failed");
        }
    }
}

/// One message: its tenant's limits, then the alert; the ack to send.
async fn admit_and_handle(
    state: &AppState,
    tenant: Option<Uuid>,
    message_id: &str,
    id: MessageId,
    msg: &jetstream::Message,
) -> AckKind {
    let _permit = match admit(state, tenant).await {
        Ok(permit) => permit,
        Err(later) => return later,
    };
    #[cfg(feature = "test-hooks")]
    crate::app::test_hooks::panic_if_poisoned(&msg.payload);
    let handled = match (id, tenant) {
        (MessageId::NatsMsgId, Some(tenant)) => {
            submit::reject_inbox_message(&state.pool, tenant, message_id, NATS_MSG_ID_REFUSED)
                .await
                .map_err(anyhow::Error::from)
        }
        _ => handle(state, tenant, message_id, &msg.payload).await,
    };
    match handled {
        Ok(Handled::Created) => {
            #[cfg(feature = "test-hooks")]
            crate::app::test_hooks::crash_if_armed(
                crate::app::test_hooks::CRASH_BEFORE_ACK,
                "after commit, before ack",
            );
            AckKind::Ack
        }
        Ok(Handled::AlreadySeen) => AckKind::Ack,
        Ok(Handled::Rejected) => AckKind::Term,
        Err(err) => {
            tracing::warn!(%message_id, error = ?err, "inbox message failed; will be redelivered");
            AckKind::Nak(Some(Duration::from_secs(1)))
        }
    }
}

/// A message whose handling panicked: recorded as rejected under its
/// tenant when it has one, and terminated, since redelivering it would
/// panic again. Recording may fail (the database is down): it is then
/// nak'ed, like any message whose write failed.
async fn dead_letter(
    state: &AppState,
    tenant: Option<Uuid>,
    message_id: &str,
    panic: &str,
) -> AckKind {
    tracing::error!(%message_id, panic, "handling an inbox message panicked; dead-lettering it");
    crate::app::instruments::inbox_panicked();
    let Some(tenant) = tenant else {
        return AckKind::Term;
    };
    let reason = format!("handling the message panicked: {panic}");
    let recorded = AssertUnwindSafe(submit::reject_inbox_message(
        &state.pool,
        tenant,
        message_id,
        &reason,
    ))
    .catch_unwind()
    .await;
    match recorded {
        Ok(Ok(_)) | Err(_) => AckKind::Term,
        Ok(Err(err)) => {
            tracing::warn!(%message_id, error = %err, "recording a dead letter failed; will be redelivered");
            AckKind::Nak(Some(NAK_MAX))
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The tenant's writes bucket and a permit of its pool share, held while
/// its message is handled; refused, the nak that brings the message back
/// later. A message naming no tenant is admitted (and rejected by `handle`).
async fn admit(state: &AppState, tenant: Option<Uuid>) -> Result<Option<SharePermit>, AckKind> {
    let Some(tenant) = tenant else {
        return Ok(None);
    };
    match state
        .limits
        .admit_without_waiting(&state.pool, tenant, RequestClass::Writes)
        .await
    {
        Ok(permit) => Ok(Some(permit)),
        Err(AdmitError::Refused(refusal)) => {
            let wait = match refusal {
                Refusal::Limited { retry_after, .. } => limits::retry_after_secs(retry_after),
                Refusal::ShareBusy { retry_after } => retry_after,
            };
            Err(AckKind::Nak(Some(wait.min(NAK_MAX))))
        }
        Err(AdmitError::Db(err)) => {
            tracing::warn!(error = %err, "reading the tenant's rate limits failed; will be redelivered");
            Err(AckKind::Nak(Some(NAK_MAX)))
        }
    }
}

/// The header a producer names its message with (see the module's doc).
pub const MESSAGE_ID_HEADER: &str = "Tidings-Msg-Id";

const NATS_MSG_ID_REFUSED: &str = "Nats-Msg-Id is not accepted: JetStream's duplicate window is \
     shared by every tenant of the stream, so another tenant's id could make it drop this \
     tenant's messages; name the message with Tidings-Msg-Id instead";

/// Where a message's id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MessageId {
    /// `Tidings-Msg-Id`.
    Producer,
    /// `<stream>:<sequence>`: the producer named none.
    Sequence,
    /// `<stream>:<sequence>`, and the message carries `Nats-Msg-Id`: rejected.
    NatsMsgId,
}

fn message_id(stream: &str, msg: &jetstream::Message) -> (String, MessageId) {
    // By `HeaderName`: a `&str` names a custom header, never a standard one
    // such as `Nats-Msg-Id`.
    let header = |name: async_nats::header::HeaderName| {
        msg.headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_owned())
            .filter(|v| !v.is_empty())
    };
    let sequence = || {
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
        format!("{stream}:{seq}")
    };
    if header(async_nats::header::NATS_MESSAGE_ID).is_some() {
        return (sequence(), MessageId::NatsMsgId);
    }
    match header(MESSAGE_ID_HEADER.into_header_name()) {
        Some(id) => (id, MessageId::Producer),
        None => (sequence(), MessageId::Sequence),
    }
}

/// The tenant a subject names: its token at the pattern's `*`.
fn tenant_of(subject: &str, tenant_token: usize) -> Option<Uuid> {
    subject
        .split('.')
        .nth(tenant_token)
        .and_then(|t| Uuid::parse_str(t).ok())
}

/// The message body: a `POST /v1/alerts` body. A `tenant_id` field is
/// tolerated only when it names the subject's tenant (publishers written for
/// the earlier format, where the body chose the tenant).
fn parse(tenant: Uuid, payload: &[u8]) -> Result<AlertRequest, String> {
    let mut body: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("body is not JSON: {e}"))?;
    if let Some(nul) = crate::http::json_nul::find_in_value(&body, &mut String::new()) {
        return Err(nul.to_string());
    }
    let object = body.as_object_mut().ok_or("body must be a JSON object")?;
    if let Some(claimed) = object.remove("tenant_id") {
        if claimed.as_str().and_then(|s| Uuid::parse_str(s).ok()) != Some(tenant) {
            return Err("tenant_id in the body differs from the subject's tenant".into());
        }
    }
    let input: AlertIn = serde_json::from_value(body).map_err(|e| format!("invalid alert: {e}"))?;
    input.into_request().map_err(|e| e.to_string())
}

pub async fn handle(
    state: &AppState,
    tenant: Option<Uuid>,
    message_id: &str,
    payload: &[u8],
) -> anyhow::Result<Handled> {
    let pool = &state.pool;
    let Some(tenant) = tenant else {
        tracing::warn!(%message_id, "rejecting a message whose subject names no tenant id");
        return Ok(Handled::Rejected);
    };
    let alert = match parse(tenant, payload) {
        Ok(parsed) => parsed,
        Err(reason) => {
            return Ok(submit::reject_inbox_message(pool, tenant, message_id, &reason).await?)
        }
    };
    let limits = submit::FanoutLimits::from_config(&state.settings.alerts);
    Ok(submit::submit_from_inbox(pool, &limits, message_id, tenant, &alert).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_is_the_subjects_wildcard_token() {
        let t = Uuid::now_v7();
        assert_eq!(tenant_of(&format!("tidings.{t}.alerts"), 1), Some(t));
        assert_eq!(tenant_of("tidings.acme.alerts", 1), None);
        assert_eq!(tenant_of("tidings", 1), None);
    }

    #[test]
    fn a_body_may_not_name_another_tenant() {
        let (t, other) = (Uuid::now_v7(), Uuid::now_v7());
        let body = |tid: Uuid| {
            serde_json::json!({
                "tenant_id": tid, "event_type": "e", "entity_id": "n",
                "recipients": ["ann"], "channels": ["in_app"], "payload": {}
            })
            .to_string()
        };
        assert!(parse(t, body(t).as_bytes()).is_ok());
        assert!(parse(t, body(other).as_bytes()).is_err());
    }
}
