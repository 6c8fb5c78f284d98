//! Standard Webhooks endpoints: create, list, get, delete, rotate the secret.

use base64::{engine::general_purpose::STANDARD, Engine};
use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Object, OpenApi,
};
use rand::RngCore;
use tidings_core::EventType;
use uuid::Uuid;

use super::ApiTags;
use crate::{
    app::state::AppState,
    deliveries::webhook_endpoints::{self as endpoints, CreateEndpointError, NewEndpoint},
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging::PageRequest,
    store::webhook_endpoints::{self as store, EndpointRow},
    tenants::secrets::Binding,
    workers::channels::ssrf,
};

pub struct WebhookEndpointsApi {
    pub state: AppState,
}

pub const MAX_URL_BYTES: usize = 2048;
pub const MAX_EVENT_TYPES: usize = 100;
pub const MAX_DESCRIPTION_BYTES: usize = 1000;

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct WebhookEndpointIn {
    /// Absolute http(s) URL without credentials. Private, loopback and link-local
    /// targets are refused when delivering (DNS may change), unless allowed by
    /// configuration.
    pub url: String,
    pub description: Option<String>,
    /// Event types this endpoint receives; absent means every event type.
    pub event_types: Option<Vec<String>>,
}

#[derive(Debug, Object)]
pub struct WebhookEndpointOut {
    pub id: Uuid,
    pub url: String,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// While set and in the future, the previous secret still signs (a second
    /// `v1,` signature) after a rotation.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Returned only on creation and rotation: the secret is never listed again.
#[derive(Debug, Object)]
pub struct WebhookEndpointWithSecret {
    #[oai(flatten)]
    pub endpoint: WebhookEndpointOut,
    /// Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes.
    pub secret: String,
}

/// One page of the tenant's endpoints, in creation order.
#[derive(Debug, Object)]
pub struct WebhookEndpointList {
    pub data: Vec<WebhookEndpointOut>,
    /// Pass as `cursor` for the next page; absent when there is none (a page
    /// has a cursor exactly when more endpoints follow).
    pub next_cursor: Option<String>,
}

impl From<EndpointRow> for WebhookEndpointOut {
    fn from(r: EndpointRow) -> Self {
        WebhookEndpointOut {
            id: r.id,
            url: r.url,
            description: r.description,
            event_types: r.event_types,
            previous_secret_expires_at: r.previous_secret_expires_at,
            created_at: r.created_at,
        }
    }
}

/// The row (whose secret is stored sealed) with the secret as issued.
fn with_secret(row: EndpointRow, secret: String) -> WebhookEndpointWithSecret {
    WebhookEndpointWithSecret {
        endpoint: row.into(),
        secret,
    }
}

#[derive(ApiResponse)]
pub enum EndpointCreated {
    #[oai(status = 201)]
    Created(Json<WebhookEndpointWithSecret>),
}

#[derive(ApiResponse)]
pub enum EndpointRotated {
    #[oai(status = 200)]
    Rotated(Json<WebhookEndpointWithSecret>),
}

#[derive(ApiResponse)]
pub enum EndpointResponse {
    #[oai(status = 200)]
    Ok(Json<WebhookEndpointOut>),
}

#[derive(ApiResponse)]
pub enum EndpointListResponse {
    #[oai(status = 200)]
    Ok(Json<WebhookEndpointList>),
}

#[derive(ApiResponse)]
pub enum EndpointDeleted {
    #[oai(status = 204)]
    Deleted,
}

pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("whsec_{}", STANDARD.encode(bytes))
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::unprocessable(ProblemCode::InvalidWebhookEndpoint, detail)
}

/// Rejects what can never be delivered to. Address checks (private, loopback)
/// happen at delivery time, when the name is resolved.
pub fn validate_url(raw: &str) -> ApiResult<url::Url> {
    if raw.len() > MAX_URL_BYTES {
        return Err(invalid(format!("url is longer than {MAX_URL_BYTES} bytes")));
    }
    let url =
        url::Url::parse(raw).map_err(|e| invalid(format!("url is not an absolute URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("url must be http or https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("url must not contain credentials"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("url must have a host"));
    }
    Ok(url)
}

fn validate_event_types(types: &Option<Vec<String>>) -> ApiResult<Option<Vec<String>>> {
    let Some(types) = types else { return Ok(None) };
    if types.is_empty() || types.len() > MAX_EVENT_TYPES {
        return Err(invalid(format!(
            "event_types must list 1 to {MAX_EVENT_TYPES} event types (omit it for all)"
        )));
    }
    let mut unique: Vec<String> = Vec::with_capacity(types.len());
    for t in types {
        EventType::parse_as("event_types[]", t.as_str()).map_err(|e| invalid(e.to_string()))?;
        if !unique.contains(t) {
            unique.push(t.clone());
        }
    }
    Ok(Some(unique))
}

#[OpenApi(tag = "ApiTags::Webhooks")]
impl WebhookEndpointsApi {
    /// Register a webhook endpoint.
    ///
    /// The answer carries its signing secret (Standard Webhooks), shown only
    /// this once. URLs to private, loopback and translated addresses are refused
    /// unless the server allows them.
    #[oai(
        path = "/v1/webhook-endpoints",
        method = "post",
        operation_id = "webhook-endpoints.create"
    )]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        body: Json<WebhookEndpointIn>,
    ) -> ApiResult<EndpointCreated> {
        let url = validate_url(&body.url)?;
        // An address no delivery may reach, under any policy (a translated
        // spelling of loopback or a private network), is the tenant's
        // mistake to hear of at once. The policy itself is the delivering
        // worker's (`TIDINGS_WEBHOOK_ALLOW_PRIVATE`, which may differ from
        // this instance's), so what it alone refuses is refused at delivery.
        ssrf::check_url(url.as_str(), ssrf::AllowPrivate::All).map_err(|refused| {
            ApiError::unprocessable(ProblemCode::WebhookUrlRefused, refused.to_string())
        })?;
        let event_types = validate_event_types(&body.event_types)?;
        if let Some(d) = &body.description {
            if d.len() > MAX_DESCRIPTION_BYTES {
                return Err(invalid(format!(
                    "description is longer than {MAX_DESCRIPTION_BYTES} bytes"
                )));
            }
        }
        let secret = new_secret();
        let id = Uuid::now_v7();
        let sealed = self
            .state
            .secrets
            .seal(&Binding::webhook_secret(auth.0.tenant_id, id), &secret);
        let endpoint = NewEndpoint {
            id,
            url: url.as_str(),
            description: body.description.as_deref(),
            event_types: event_types.as_deref(),
            sealed_secret: &sealed,
        };
        let max = self.state.settings.bounds.max_webhook_endpoints;
        let row = endpoints::create(&self.state.pool, auth.0.tenant_id, endpoint, max)
            .await
            .map_err(|err| match err {
                err @ CreateEndpointError::TooMany { .. } => {
                    ApiError::unprocessable(ProblemCode::WebhookEndpointLimit, err.to_string())
                }
                CreateEndpointError::Db(db) => db.into(),
            })?;
        Ok(EndpointCreated::Created(Json(with_secret(row, secret))))
    }

    /// List webhook endpoints.
    ///
    /// Without secrets, in creation order, a page at a time. A tenant has at
    /// most `TIDINGS_MAX_WEBHOOK_ENDPOINTS` (default 50).
    #[oai(
        path = "/v1/webhook-endpoints",
        method = "get",
        operation_id = "webhook-endpoints.list"
    )]
    async fn list(
        &self,
        auth: ApiKeyAuth,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
        /// 1–100, default 50.
        limit: Query<Option<u32>>,
    ) -> ApiResult<EndpointListResponse> {
        let page = PageRequest::parse(
            cursor.0.as_deref(),
            limit.0,
            endpoints::DEFAULT_LIMIT,
            endpoints::MAX_LIMIT,
        )?;
        let page = endpoints::list(&self.state.pool, auth.0.tenant_id, &page).await?;
        let page = page.map(WebhookEndpointOut::from);
        Ok(EndpointListResponse::Ok(Json(WebhookEndpointList {
            data: page.items,
            next_cursor: page.next_cursor,
        })))
    }

    /// Read a webhook endpoint.
    ///
    /// Without its secret.
    #[oai(
        path = "/v1/webhook-endpoints/:id",
        method = "get",
        operation_id = "webhook-endpoints.get"
    )]
    async fn get(
        &self,
        auth: ApiKeyAuth,
        /// The endpoint's id.
        id: Path<Uuid>,
    ) -> ApiResult<EndpointResponse> {
        let row = store::get_endpoint(&self.state.pool, auth.0.tenant_id, *id)
            .await?
            .ok_or_else(not_found)?;
        Ok(EndpointResponse::Ok(Json(row.into())))
    }

    /// Delete a webhook endpoint.
    ///
    /// Its queued deliveries are not retargeted to another endpoint.
    #[oai(
        path = "/v1/webhook-endpoints/:id",
        method = "delete",
        operation_id = "webhook-endpoints.delete"
    )]
    async fn delete(
        &self,
        auth: ApiKeyAuth,
        /// The endpoint's id.
        id: Path<Uuid>,
    ) -> ApiResult<EndpointDeleted> {
        if store::delete_endpoint(&self.state.pool, auth.0.tenant_id, *id).await? {
            Ok(EndpointDeleted::Deleted)
        } else {
            Err(not_found())
        }
    }

    /// Rotate a webhook endpoint's secret.
    ///
    /// The old one keeps signing (as a second signature) for the configured
    /// grace period (default 24 h), so a receiver can switch without losing a
    /// message; a secret already in its grace period is dropped.
    #[oai(
        path = "/v1/webhook-endpoints/:id/rotate-secret",
        method = "post",
        operation_id = "webhook-endpoints.rotate-secret"
    )]
    async fn rotate_secret(
        &self,
        auth: ApiKeyAuth,
        /// The endpoint's id.
        id: Path<Uuid>,
    ) -> ApiResult<EndpointRotated> {
        let grace = self.state.settings.alerts.webhook_rotation_grace();
        let secret = new_secret();
        let row = store::rotate_endpoint_secret(
            &self.state.pool,
            auth.0.tenant_id,
            *id,
            &self
                .state
                .secrets
                .seal(&Binding::webhook_secret(auth.0.tenant_id, *id), &secret),
            grace,
        )
        .await?
        .ok_or_else(not_found)?;
        Ok(EndpointRotated::Rotated(Json(with_secret(row, secret))))
    }
}

fn not_found() -> ApiError {
    ApiError::not_found(
        ProblemCode::WebhookEndpointNotFound,
        "no such webhook endpoint",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_standard_webhooks_keys() {
        let s = new_secret();
        let raw = STANDARD
            .decode(s.strip_prefix("whsec_").expect("prefix"))
            .expect("base64");
        assert_eq!(raw.len(), 32);
        assert_ne!(new_secret(), s);
    }

    #[test]
    fn only_absolute_http_urls_without_credentials_are_accepted() {
        assert!(validate_url("https://example.com/hook").is_ok());
        assert!(validate_url("http://127.0.0.1:8080/x").is_ok());
        for bad in [
            "/relative",
            "ftp://example.com/",
            "https://user:pw@example.com/",
            "https://user@example.com/",
            "not a url",
            "file:///etc/passwd",
        ] {
            assert!(validate_url(bad).is_err(), "{bad} accepted");
        }
    }
}
