//! Email over SMTP (lettre). The Message-ID is derived from the notification
//! key, `<{key}@tidings>`, so every retry of one notification is the same
//! message to the receiving side, which can then drop the copies.
//!
//! An email of a non-critical category carries a one-click unsubscribe
//! (RFC 8058) when `TIDINGS_PUBLIC_URL` is set: `List-Unsubscribe:
//! <{url}/u/{token}>`, `List-Unsubscribe-Post: List-Unsubscribe=One-Click`
//! and a `List-Id` per (category, tenant). The token
//! (`alerts::preferences::token`) names the tenant, the recipient and the
//! category; `POST /u/{token}` turns that category's email off. DKIM, which
//! receivers want covering both headers, is the relay's job.
//!
//! Every email is `multipart/alternative`, text then HTML: rendered by the
//! event type's template when the delivery recorded one
//! (docs/design/templates.md), else the plain rendering below with its HTML
//! part the same text, escaped.

use std::time::Duration;

use anyhow::Context;
use lettre::{
    message::{
        header::{HeaderName, HeaderValue},
        Mailbox, MultiPart,
    },
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
};
use tidings_core::{Channel, UserId};

use super::{error_chain, Outcome};
use crate::{
    alerts::preferences::token::{TokenKeys, Unsubscribe},
    alerts::templates::{email::html_from_text, RenderedEmail},
    store::outbox::ClaimedDelivery,
};

/// Where unsubscribe links point and how their tokens are signed.
#[derive(Debug)]
pub struct ListUnsubscribe {
    /// `TIDINGS_PUBLIC_URL`, without a trailing slash.
    pub public_url: String,
    pub keys: TokenKeys,
}

impl ListUnsubscribe {
    /// The host of the public URL: the domain part of every List-Id.
    fn list_domain(&self) -> String {
        url::Url::parse(&self.public_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "tidings".into())
    }

    /// The one-click link that turns `category`'s email off for
    /// `recipient`: the `List-Unsubscribe` target and a template's
    /// `unsubscribe_url`.
    pub fn url(&self, tenant: uuid::Uuid, recipient: &UserId, category: &str) -> String {
        let token = self.keys.sign(&Unsubscribe {
            tenant,
            user: recipient.clone(),
            category: category.to_owned(),
            channel: Channel::Email,
        });
        format!("{}/u/{token}", self.public_url)
    }

    /// `(name, value)` of the three list headers of an email to `recipient`
    /// about `category`.
    pub fn headers(
        &self,
        tenant: uuid::Uuid,
        recipient: &UserId,
        category: &str,
    ) -> [(&'static str, String); 3] {
        // A List-Id is a dot-atom (RFC 2919): the category's key kept to
        // letters, digits and hyphens, then the tenant and this service.
        let label: String = category
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        [
            (
                "List-Unsubscribe",
                format!("<{}>", self.url(tenant, recipient, category)),
            ),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click".into()),
            (
                "List-Id",
                format!("<{label}.{}.{}>", tenant.simple(), self.list_domain()),
            ),
        ]
    }
}

/// `text` without any occurrence of `url` or of its password.
fn redact_text(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &crate::app::config::redact_url(url));
    if let Some(password) = url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_owned))
    {
        out = out.replace(&password, "…");
    }
    out
}

/// One email ready to go out.
pub struct OutgoingEmail<'a> {
    pub tenant: uuid::Uuid,
    pub recipient_id: &'a str,
    pub address: &'a str,
    /// The non-critical category whose one-click unsubscribe headers it
    /// carries (when links are on).
    pub list_category: Option<&'a str>,
    /// Stable across retries and processes: what a receiver deduplicates on.
    pub message_id: String,
    pub subject: String,
    pub text: String,
    pub html: String,
}

pub struct EmailSender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    timeout: Duration,
    /// `None` without `TIDINGS_PUBLIC_URL`: no list headers.
    pub unsubscribe: Option<ListUnsubscribe>,
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
                    crate::app::config::redact_url(url),
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
            unsubscribe: None,
        })
    }

    pub async fn send(
        &self,
        delivery: &ClaimedDelivery,
        rendered: Option<&RenderedEmail>,
    ) -> Outcome {
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
        let (subject, text, html) = match rendered {
            Some(email) => (
                email.subject.clone(),
                email.text.clone(),
                email.html.clone(),
            ),
            None => {
                let subject = delivery
                    .subject
                    .clone()
                    .unwrap_or_else(|| event_type.clone());
                let text = render_text(&subject, event_type, delivery, &payload.0);
                let html = html_from_text(&text);
                (subject, text, html)
            }
        };
        self.send_message(OutgoingEmail {
            tenant: delivery.tenant_id,
            recipient_id: &delivery.recipient_id,
            address,
            list_category: delivery.list_category.as_deref(),
            message_id: message_id(&delivery.notification_key),
            subject,
            text,
            html,
        })
        .await
    }

    /// Sends one email as given: a notification's or a digest's.
    pub async fn send_message(&self, email: OutgoingEmail<'_>) -> Outcome {
        let address = email.address;
        let to: Mailbox = match address.parse() {
            Ok(to) => to,
            Err(err) => {
                return Outcome::permanent(format!("recipient email {address:?} is invalid: {err}"))
            }
        };
        let mut message = Message::builder();
        if let (Some(list), Some(category)) = (&self.unsubscribe, email.list_category) {
            if let Ok(recipient) = UserId::parse(email.recipient_id) {
                for (name, value) in list.headers(email.tenant, &recipient, category) {
                    message = message.raw_header(HeaderValue::new(
                        HeaderName::new_from_ascii_str(name),
                        value,
                    ));
                }
            }
        }
        let message = message
            .from(self.from.clone())
            .to(to)
            .subject(email.subject)
            .message_id(Some(email.message_id))
            .multipart(MultiPart::alternative_plain_html(email.text, email.html));
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
