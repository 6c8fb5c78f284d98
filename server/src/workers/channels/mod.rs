//! Senders: one per channel. Each takes a claimed delivery and says what
//! happened; none touches the database (the worker records the outcome).

pub mod email;
pub mod ssrf;
pub mod webhook;

use tidings_core::Channel;

use crate::alerts::templates::RenderedEmail;
use crate::store::outbox::ClaimedDelivery;

/// What a send attempt achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// `permanent`: retrying cannot help (refused URL, invalid address, SMTP 5xx).
    Failed {
        error: String,
        permanent: bool,
    },
    /// There is nothing to deliver to; not an error of the delivery.
    Skipped {
        reason: String,
    },
}

impl Outcome {
    pub fn transient(error: impl Into<String>) -> Self {
        Outcome::Failed {
            error: error.into(),
            permanent: false,
        }
    }

    pub fn permanent(error: impl Into<String>) -> Self {
        Outcome::Failed {
            error: error.into(),
            permanent: true,
        }
    }
}

/// The senders this process has. Email is optional: a worker without an SMTP
/// server leaves email deliveries to one that has it.
pub struct Channels {
    pub webhook: webhook::WebhookSender,
    pub email: Option<email::EmailSender>,
}

impl Channels {
    /// The channels this process claims deliveries of.
    pub fn claimable(&self) -> Vec<Channel> {
        let mut channels = vec![Channel::Webhook, Channel::InApp];
        if self.email.is_some() {
            channels.push(Channel::Email);
        }
        channels
    }

    /// Sends `delivery`; `endpoint` is its webhook endpoint as
    /// [`webhook::WebhookSender::endpoint`] made it (`None` for other channels
    /// and for a deleted endpoint); `rendered` its email as its template
    /// rendered it (`None`: no template, the plain rendering).
    pub async fn deliver(
        &self,
        delivery: &ClaimedDelivery,
        endpoint: Option<&webhook::Endpoint>,
        rendered: Option<&RenderedEmail>,
    ) -> Outcome {
        match delivery.channel {
            Channel::Webhook => self.webhook.send(delivery, endpoint).await,
            Channel::Email => match &self.email {
                Some(email) => email.send(delivery, rendered).await,
                None => Outcome::transient(
                    "no SMTP server configured on this worker (TIDINGS_SMTP_URL)",
                ),
            },
            // In-app alerts are delivered by being written (the feed reads
            // them); one that reaches the outbox anyway has nothing left to do.
            Channel::InApp => Outcome::Sent,
        }
    }
}

/// An error with its causes, "outer: inner: innermost", for last_error.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
