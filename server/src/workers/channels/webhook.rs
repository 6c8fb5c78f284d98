//! Webhooks per the Standard Webhooks specification: a JSON POST signed with
//! HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`.
//!
//! `webhook-id` is the notification key, the same on every retry, so a
//! receiver dedupes with it. The body is the same on every retry too (its
//! timestamp is the alert's); only `webhook-timestamp` and the signature change.

use std::{sync::Arc, time::Duration};

use base64::{
    alphabet,
    engine::{general_purpose::STANDARD, DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
    Engine,
};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use super::{
    error_chain,
    ssrf::{check_url, AllowPrivate, GuardedResolver, Refused},
    Outcome,
};
use crate::store::outbox::ClaimedDelivery;

/// At most this much of a failed response's body goes into the operator's
/// log. None of it goes into `last_error`, which the tenant reads: what a
/// URL answered is exactly what an SSRF probe wants to see.
const RESPONSE_SNIPPET_BYTES: usize = 2048;

/// Secrets are `whsec_` + base64; tolerate missing padding as the reference
/// libraries do.
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

pub struct WebhookSender {
    client: reqwest::Client,
    policy: AllowPrivate,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    alert_id: uuid::Uuid,
    entity_id: &'a str,
    recipient_id: &'a str,
    subject: Option<&'a str>,
    /// The alert's payload as PostgreSQL's jsonb text: embedded as it is,
    /// never decoded into a tree and written out again.
    payload: &'a serde_json::value::RawValue,
    key: &'a str,
}

/// What every delivery of a batch to one endpoint shares, worked out once per
/// endpoint and batch instead of once per delivery: the URL parsed and checked
/// against the address guard, and the HMAC key of each (opened) secret decoded
/// and keyed.
pub struct Endpoint {
    url: Result<url::Url, Refused>,
    signers: Result<Vec<Hmac<Sha256>>, String>,
}

impl WebhookSender {
    pub fn new(policy: AllowPrivate, timeout: Duration) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            // A 3xx is an answer, not a success: following it would let an
            // endpoint bounce us to an address the guard never saw.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            // A proxy would resolve names itself, behind the guard's back.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { policy }))
            .user_agent(concat!("Tidings-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebhookSender { client, policy })
    }

    /// The endpoint of `url` signing with the opened `secrets` (the current
    /// one, then the previous one during a rotation's grace period).
    pub fn endpoint<'a>(&self, url: &str, secrets: impl IntoIterator<Item = &'a str>) -> Endpoint {
        Endpoint {
            url: check_url(url, self.policy),
            signers: secrets.into_iter().map(signer).collect(),
        }
    }

    /// Sends `delivery` to `endpoint`, which must be the endpoint of the
    /// delivery's URL and opened secrets (`None`: the endpoint was deleted).
    pub async fn send(&self, delivery: &ClaimedDelivery, endpoint: Option<&Endpoint>) -> Outcome {
        let Some(endpoint) = endpoint else {
            return Outcome::Skipped {
                reason: "webhook endpoint was deleted".into(),
            };
        };
        let (Some(event_type), Some(entity_id), Some(payload)) =
            (&delivery.event_type, &delivery.entity_id, &delivery.payload)
        else {
            return Outcome::Skipped {
                reason: "alert was deleted".into(),
            };
        };
        let url = match &endpoint.url {
            Ok(url) => url.clone(),
            Err(refused) => return refusal(delivery, refused.clone()),
        };
        let body = Body {
            event_type,
            timestamp: delivery
                .alert_created_at
                .unwrap_or_else(chrono::Utc::now)
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            data: Data {
                alert_id: delivery.alert_id,
                entity_id,
                recipient_id: &delivery.recipient_id,
                subject: delivery.subject.as_deref(),
                payload: &payload.0,
                key: &delivery.notification_key,
            },
        };
        let body = match serde_json::to_vec(&body) {
            Ok(body) => body,
            Err(err) => {
                return Outcome::permanent(format!("cannot encode the webhook body: {err}"))
            }
        };
        let timestamp = chrono::Utc::now().timestamp();
        let msg_id = &delivery.notification_key;
        let signers = match &endpoint.signers {
            Ok(signers) => signers,
            Err(err) => return Outcome::permanent(err.clone()),
        };
        let timestamp_text = timestamp.to_string();
        let mut signatures = String::with_capacity(48 * signers.len());
        for signer in signers {
            if !signatures.is_empty() {
                signatures.push(' ');
            }
            signatures.push_str(&signature(signer.clone(), msg_id, &timestamp_text, &body));
        }
        let request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", msg_id)
            .header("webhook-timestamp", timestamp_text)
            .header("webhook-signature", signatures)
            .body(body);
        match request.send().await {
            Ok(response) => judge_response(delivery, response).await,
            Err(err) => match find_refused(&err) {
                Some(refused) => refusal(delivery, refused),
                None => {
                    // The tenant learns the kind of failure; the chain (which
                    // may name resolved addresses) goes to the operator's log.
                    let public = if err.is_timeout() {
                        "webhook request timed out"
                    } else if err.is_connect() {
                        "could not connect to the webhook URL"
                    } else {
                        "webhook request failed"
                    };
                    tracing::warn!(
                        delivery_id = delivery.id, tenant_id = %delivery.tenant_id,
                        error = %error_chain(&err), "webhook request failed"
                    );
                    Outcome::transient(public)
                }
            },
        }
    }
}

/// `last_error` names the host and the class of address; the log adds the
/// address itself.
fn refusal(delivery: &ClaimedDelivery, refused: Refused) -> Outcome {
    if let Refused::Address { ip, .. } = &refused {
        tracing::warn!(
            delivery_id = delivery.id, tenant_id = %delivery.tenant_id, %ip,
            "webhook refused by the address guard"
        );
    }
    Outcome::permanent(refused.to_string())
}

/// `last_error` gets the status only; the location of a redirect and the
/// start of the body go to the operator's log.
async fn judge_response(delivery: &ClaimedDelivery, mut response: reqwest::Response) -> Outcome {
    let status = response.status();
    if status.is_success() {
        return Outcome::Sent;
    }
    if status.is_redirection() {
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .unwrap_or("(no location)")
            .to_owned();
        tracing::warn!(
            delivery_id = delivery.id, tenant_id = %delivery.tenant_id, %status, %location,
            "webhook answered with a redirect; not followed"
        );
        return Outcome::transient(format!("HTTP {status}: redirect not followed"));
    }
    let mut snippet = Vec::new();
    while snippet.len() < RESPONSE_SNIPPET_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => snippet.extend_from_slice(&chunk),
            _ => break,
        }
    }
    snippet.truncate(RESPONSE_SNIPPET_BYTES);
    tracing::warn!(
        delivery_id = delivery.id, tenant_id = %delivery.tenant_id, %status,
        body = %String::from_utf8_lossy(&snippet).trim(),
        "webhook answered with an error"
    );
    Outcome::transient(format!("HTTP {status}"))
}

/// The resolver's refusal, if that is why the request failed.
fn find_refused(err: &reqwest::Error) -> Option<Refused> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return Some(refused.clone());
        }
        source = cause.source();
    }
    None
}

/// The HMAC keyed with a `whsec_` secret, ready to sign (cloned per message).
fn signer(secret: &str) -> Result<Hmac<Sha256>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = SECRET_BASE64
        .decode(encoded)
        .map_err(|e| format!("the endpoint's secret is not valid base64 after whsec_: {e}"))?;
    if key.is_empty() {
        return Err("the endpoint's secret is empty".into());
    }
    Hmac::<Sha256>::new_from_slice(&key).map_err(|e| e.to_string())
}

fn signature(mut mac: Hmac<Sha256>, msg_id: &str, timestamp: &str, body: &[u8]) -> String {
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let mut text = String::with_capacity(47);
    text.push_str("v1,");
    STANDARD.encode_string(mac.finalize().into_bytes(), &mut text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `v1,<base64 HMAC-SHA256>` signature from a stored secret: the
    /// sender's two steps (`signer` once per endpoint, `signature` per message).
    fn sign(secret: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> Result<String, String> {
        Ok(signature(
            signer(secret)?,
            msg_id,
            &timestamp.to_string(),
            body,
        ))
    }

    /// The example of the Standard Webhooks specification's test suite.
    #[test]
    fn signature_matches_the_specification_example() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signature.as_deref(),
            Ok("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn unpadded_secrets_decode_and_bad_ones_are_errors() {
        assert!(sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "id", 1, b"{}").is_ok());
        assert!(sign("whsec_YWJj", "id", 1, b"{}").is_ok());
        assert!(sign("whsec_YWI", "id", 1, b"{}").is_ok());
        assert!(sign("whsec_!!!", "id", 1, b"{}").is_err());
        assert!(sign("whsec_", "id", 1, b"{}").is_err());
    }
}
