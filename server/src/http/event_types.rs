//! `PUT` and `GET /v1/event-types/{event_type}/delivery`: an event type's
//! default delivery rules, and the rules' wire shape, which an alert's own
//! `delivery` field shares.

use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::EventType;

use super::ApiTags;
use crate::{
    alerts::delivery::{self, ChannelRule, DeliveryRules, DigestRule, InvalidRules},
    app::state::AppState,
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
};

pub struct EventTypesApi {
    pub state: AppState,
}

// One channel's rule as sent and answered. (A plain comment: doc comments
// become the OpenAPI description.)
/// Wait `delay`, then deliver only if the recipient's in-app item of the
/// alert is not `unless` by then. Decided when the delivery is claimed,
/// ordered with every read of that user: a read (on any device, one by one
/// or "mark all") committed before the decision skips it.
///
/// Or, for email, `digest`: collect the recipient's emails of the event type
/// into one, sent when the window ends (not with `delay`).
#[derive(Debug, Clone, Default, Object, serde::Serialize, serde::Deserialize)]
#[oai(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct ChannelRuleIn {
    /// A whole number and a unit: `30s`, `15m`, `2h`, `1d` (1 s to 7 d).
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// `read` or `seen`; required with `delay`.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<String>,
    /// Email only.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestRuleIn>,
}

/// Collect the recipient's emails of this event type (and `key`) from the
/// first one for `window` into one email, sent when the window ends. At the
/// flush, items already `unless` (read or seen, on any device) are left out,
/// decided under the same lock as every read of that user; when none is
/// left no email is sent, and the digest says why
/// (`GET /v1/users/{user_id}/digests`). The email lists the newest
/// `max_items` and states the total count. Critical categories are never
/// digested.
#[derive(Debug, Clone, Object, serde::Serialize, serde::Deserialize)]
#[oai(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct DigestRuleIn {
    /// A whole number and a unit: `30s`, `15m`, `2h`, `1d` (1 s to 7 d),
    /// counted from the digest's first item.
    pub window: String,
    /// Items listed in the email, 1 to 500 (default 50).
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u32>,
    /// `read` or `seen`: leave out items read (seen) before the flush.
    /// Absent: list every item collected.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<String>,
    /// A template over the alert (`{{ payload.project }}`): one digest per
    /// distinct value.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A sliding window: each item moves the end to `window` after it, never
    /// past `max_wait` after the first (at least `window`).
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<String>,
    /// Digest only if a second item arrives within this long of the first
    /// (at most `window`); a lone item is then sent on its own.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_within: Option<String>,
    /// The first item's email goes at once; the window collects the rest
    /// (not with `second_within`).
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_first: Option<bool>,
}

/// Delivery rules per channel. In-app is always delivered at once; a rule
/// needs the alert to have the `in_app` channel, whose item it waits on.
#[derive(Debug, Clone, Default, Object, serde::Serialize, serde::Deserialize)]
#[oai(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRulesIn {
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<ChannelRuleIn>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<ChannelRuleIn>,
}

impl DeliveryRulesIn {
    /// The rules, or the first field that is not valid.
    pub fn parse(&self) -> Result<DeliveryRules, InvalidRules> {
        let delayed = |field: &str, r: &ChannelRuleIn| match (&r.delay, &r.unless, &r.digest) {
            (Some(delay), Some(unless), None) => ChannelRule::parse(field, delay, unless).map(Some),
            (Some(_), None, None) => Err(InvalidRules(format!(
                "{field}.unless is required with {field}.delay (read or seen)"
            ))),
            (None, Some(_), None) => Err(InvalidRules(format!(
                "{field}.delay is required with {field}.unless (e.g. 15m)"
            ))),
            (None, None, None) => Err(InvalidRules(format!(
                "{field} needs delay and unless, or digest"
            ))),
            (_, _, Some(_)) => Ok(None),
        };
        let mut rules = DeliveryRules::default();
        if let Some(r) = &self.email {
            rules.email = delayed("delivery.email", r)?;
            if let Some(d) = &r.digest {
                if r.delay.is_some() || r.unless.is_some() {
                    return Err(InvalidRules(
                        "delivery.email takes digest or delay and unless, not both".into(),
                    ));
                }
                let field = "delivery.email.digest";
                rules.email_digest = Some(
                    DigestRule::parse(
                        field,
                        &d.window,
                        d.max_items,
                        d.unless.as_deref(),
                        d.key.as_deref(),
                    )?
                    .with_options(
                        field,
                        d.max_wait.as_deref(),
                        d.second_within.as_deref(),
                        d.send_first.unwrap_or(false),
                    )?,
                );
            }
        }
        if let Some(r) = &self.webhook {
            if r.digest.is_some() {
                return Err(InvalidRules(
                    "delivery.webhook.digest: only email is digested".into(),
                ));
            }
            rules.webhook = delayed("delivery.webhook", r)?;
        }
        Ok(rules)
    }

    pub fn of(rules: &DeliveryRules) -> DeliveryRulesIn {
        let out = |r: Option<ChannelRule>| {
            r.map(|r| ChannelRuleIn {
                delay: Some(r.delay_text()),
                unless: Some(r.unless.as_str().to_owned()),
                digest: None,
            })
        };
        let digest = rules.email_digest.as_ref().map(|d| ChannelRuleIn {
            digest: Some(DigestRuleIn {
                window: d.window_text(),
                max_items: Some(d.max_items),
                unless: d.unless.map(|u| u.as_str().to_owned()),
                key: d.key.clone(),
                max_wait: d.max_wait_text(),
                second_within: d.second_within_text(),
                send_first: d.send_first.then_some(true),
            }),
            ..ChannelRuleIn::default()
        });
        DeliveryRulesIn {
            email: out(rules.email).or(digest),
            webhook: out(rules.webhook),
        }
    }
}

pub fn invalid_rules(err: InvalidRules) -> ApiError {
    ApiError::unprocessable(ProblemCode::InvalidDelivery, err.to_string())
}

#[derive(ApiResponse)]
pub enum RulesResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryRulesIn>),
}

#[OpenApi(tag = "ApiTags::Alerts")]
impl EventTypesApi {
    /// Set an event type's default delivery rules.
    ///
    /// Alerts of this event type with an `in_app` channel apply them from now on
    /// to each channel their own `delivery` does not name. `{}` clears them.
    /// Critical categories never wait.
    #[oai(
        path = "/v1/event-types/:event_type/delivery",
        method = "put",
        operation_id = "event-types.delivery.put"
    )]
    async fn put(
        &self,
        auth: ApiKeyAuth,
        /// The event type, e.g. `comment.mentioned`.
        event_type: Path<String>,
        body: Json<DeliveryRulesIn>,
    ) -> ApiResult<RulesResponse> {
        let event_type = EventType::parse_as("event_type", event_type.0)?;
        let rules = body.parse().map_err(invalid_rules)?;
        delivery::put_event_type_rules(&self.state.pool, auth.0.tenant_id, &event_type, &rules)
            .await?;
        Ok(RulesResponse::Ok(Json(DeliveryRulesIn::of(&rules))))
    }

    /// Read an event type's default delivery rules.
    ///
    /// `{}` when none are set.
    #[oai(
        path = "/v1/event-types/:event_type/delivery",
        method = "get",
        operation_id = "event-types.delivery.get"
    )]
    async fn get(
        &self,
        auth: ApiKeyAuth,
        /// The event type, e.g. `comment.mentioned`.
        event_type: Path<String>,
    ) -> ApiResult<RulesResponse> {
        let event_type = EventType::parse_as("event_type", event_type.0)?;
        let rules = delivery::get_event_type_rules(&self.state.pool, auth.0.tenant_id, &event_type)
            .await?
            .unwrap_or_default();
        Ok(RulesResponse::Ok(Json(DeliveryRulesIn::of(&rules))))
    }
}
