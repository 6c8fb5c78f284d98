//! `PUT` and `GET /v1/event-types/{event_type}/delivery`: an event type's
//! default delivery rules, and the rules' wire shape, which an alert's own
//! `delivery` field shares.

use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::EventType;

use super::ApiTags;
use crate::{
    alerts::delivery::{self, ChannelRule, DeliveryRules, InvalidRules},
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
#[derive(Debug, Clone, Object, serde::Serialize, serde::Deserialize)]
#[oai(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct ChannelRuleIn {
    /// A whole number and a unit: `30s`, `15m`, `2h`, `1d` (1 s to 7 d).
    pub delay: String,
    /// `read` or `seen`.
    pub unless: String,
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
        let rule = |field: &str, r: &Option<ChannelRuleIn>| {
            r.as_ref()
                .map(|r| ChannelRule::parse(field, &r.delay, &r.unless))
                .transpose()
        };
        Ok(DeliveryRules {
            email: rule("delivery.email", &self.email)?,
            webhook: rule("delivery.webhook", &self.webhook)?,
        })
    }

    pub fn of(rules: &DeliveryRules) -> DeliveryRulesIn {
        let out = |r: Option<ChannelRule>| {
            r.map(|r| ChannelRuleIn {
                delay: r.delay_text(),
                unless: r.unless.as_str().to_owned(),
            })
        };
        DeliveryRulesIn {
            email: out(rules.email),
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
