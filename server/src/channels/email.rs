//! Email over SMTP (lettre). The Message-ID is derived from the notification
//! key, `<{key}@tidings>`, so every retry of one notification is the same
//! message to the receiving side, which can then drop the copies.

use std::time::Duration;

use anyhow::Context;
use lettre::{
    message::{header::ContentType, Mailbox},
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
};

use super::{error_chain, Outcome};
use crate::store::outbox::ClaimedDelivery;

/// `text` without any occurrence of `url` or of its password.
fn redact_text(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &crate::config::redact_url(url));
    if let Some(password) = url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_owned))
    {
        out = out.replace(&password, "…");
    }
    out
}

pub struct EmailSender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    timeout: Duration,
}

impl EmailSender {
    /// `url`: smtp://host:port (plain), smtp://host?tls=required (STARTTLS) or
    /// smtps://user:pass@host (TLS), as lettre reads them.
    pub fn new(url: &str, from: &str, timeout: Duration) -> anyhow::Result<Self> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            // lettre's error may quote the URL: it is replaced, not wrapped.
            .map_err(|err| {
                anyhow::anyhow!(
                    "TIDINGS_SMTP_URL {:?} is not a usable SMTP URL: {}",
                    crate::config::redact_url(url),
                    redact_text(&err.to_string(), url)
                )
            })?
            .timeout(Some(timeout))
            .build();
        let from: Mailbox = from
            .parse()
            .with_context(|| format!("TIDINGS_EMAIL_FROM {from:?} is not a mailbox"))?;
        Ok(EmailSender {
            transport,
            from,
            timeout,
        })
    }

    pub async fn send(&self, delivery: &ClaimedDelivery) -> Outcome {
        let Some(address) = delivery
            .recipient_email
            .as_deref()
            .filter(|a| !a.trim().is_empty())
        else {
            return Outcome::Skipped {
                reason: format!("recipient {} has no email address", delivery.recipient_id),
            };
        };
        let (Some(event_type), Some(payload)) = (&delivery.event_type, &delivery.payload) else {
            return Outcome::Skipped {
                reason: "alert was deleted".into(),
            };
        };
        let to: Mailbox = match address.parse() {
            Ok(to) => to,
            Err(err) => {
                return Outcome::permanent(format!("recipient email {address:?} is invalid: {err}"))
            }
        };
        let subject = delivery
            .subject
            .clone()
            .unwrap_or_else(|| event_type.clone());
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject.clone())
            .message_id(Some(message_id(&delivery.notification_key)))
            .header(ContentType::TEXT_PLAIN)
            .body(render_text(&subject, event_type, delivery, &payload.0));
        let message = match message {
            Ok(message) => message,
            Err(err) => return Outcome::permanent(format!("cannot build the email: {err}")),
        };
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Ok(Ok(_)) => Outcome::Sent,
            // 5xx: the server will not take this message, now or later.
            Ok(Err(err)) if err.is_permanent() => {
                Outcome::permanent(format!("SMTP: {}", error_chain(&err)))
            }
            Ok(Err(err)) => Outcome::transient(format!("SMTP: {}", error_chain(&err))),
            Err(_) => Outcome::transient(format!("SMTP: no answer within {:?}", self.timeout)),
        }
    }
}

/// The Message-ID of a notification: stable across retries and processes.
pub fn message_id(notification_key: &str) -> String {
    format!("<{notification_key}@tidings>")
}

/// A plain-text rendering: the subject, the payload's fields one per line
/// (strings unquoted), then where it came from.
fn render_text(
    subject: &str,
    event_type: &str,
    delivery: &ClaimedDelivery,
    payload: &serde_json::value::RawValue,
) -> String {
    let mut text = format!("{subject}\n\n");
    // Decoded as before the payload was carried as text: the fields in the
    // same (sorted) order.
    let payload: serde_json::Value =
        serde_json::from_str(payload.get()).unwrap_or(serde_json::Value::Null);
    match payload {
        serde_json::Value::Object(fields) => {
            for (name, value) in fields {
                match value {
                    serde_json::Value::String(s) => text.push_str(&format!("{name}: {s}\n")),
                    other => text.push_str(&format!("{name}: {other}\n")),
                }
            }
        }
        other => {
            text.push_str(&serde_json::to_string_pretty(&other).unwrap_or_default());
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "\n-- \nEvent {event_type} on {}\nNotification {}\n",
        delivery.entity_id.as_deref().unwrap_or("?"),
        delivery.notification_key
    ));
    text
}
