//! The typed test client: one method per operation of `openapi/openapi.json`,
//! grouped by the credential that may call it, every call stating the status it
//! expects.
//!
//! ```text
//! let tenant = app.create_tenant().await;
//! let alert = app.tenant(&tenant).create_alert(&body).expect(202).await;
//! let problem = app.tenant(&tenant).create_alert(&bad).problem(422).await;
//! let reply = app.tenant(&tenant).create_alert(&body).idempotency_key("k").reply(202).await;
//! assert_eq!(reply.header("idempotency-replayed"), Some("true"));
//! ```
//!
//! - [`AdminApi`] (the admin token), [`TenantApi`] (a tenant's API key),
//!   [`UserApi`] (a user token) and [`PublicApi`] (no credential) hold the
//!   operations; [`TestApp::bearer`] and [`TestApp::anonymous`] call any of them
//!   with another credential, or none, to test refusals.
//! - A [`Call`] is sent only when the test says what it expects:
//!   [`Call::expect`] (the decoded body), [`Call::reply`] (status, headers and
//!   body), [`Call::problem`] (an RFC 9457 problem) or [`Call::reply_one_of`]
//!   for the races where several answers are right.
//! - [`TestApp::raw`] is the escape hatch for malformed input: any method,
//!   path, headers and bytes, through the same path.
//!
//! Every request of every test goes through [`TestApp::send`]: the one place
//! where answers are checked against the OpenAPI document (see
//! [`crate::openapi`]).
//!
//! Bodies are `serde_json::Value`, in and out: tests send malformed variants of
//! every body, and the answers' shapes are the server's own DTOs, checked
//! against the document rather than written again here. Credentials the harness
//! itself needs are typed ([`crate::TestTenant`]).

use std::{fmt::Display, marker::PhantomData};

use reqwest::{header::HeaderMap, Method};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tidings_core::Position;

use crate::{TestApp, TestTenant, ADMIN_TOKEN};

/// One request, as a test builds it.
pub struct Request {
    pub method: Method,
    /// Path and query, e.g. `/v1/feed?limit=5`.
    pub path: String,
    pub bearer: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

pub enum Body {
    None,
    Json(Value),
    /// Bytes as given, with this content type (none: no header).
    Raw {
        content_type: Option<String>,
        bytes: reqwest::Body,
    },
}

/// The answer to one request, read in full.
#[derive(Debug)]
pub struct Reply {
    /// `METHOD /path?query`, for messages.
    pub request: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (`null` when empty).
    pub fn json(&self) -> Value {
        if self.text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&self.text).unwrap_or_else(|e| {
                panic!("{}: body is not JSON ({e}): {}", self.request, self.text)
            })
        }
    }

    /// The body decoded into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            panic!(
                "{}: body is not a {} ({e}): {}",
                self.request,
                std::any::type_name::<T>(),
                self.text
            )
        })
    }

    fn assert_status(&self, expected: &[u16]) {
        assert!(
            expected.contains(&self.status),
            "{}: expected {}, got {}: {}",
            self.request,
            expected
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(" or "),
            self.status,
            self.text
        );
    }

    /// Asserts this reply is an RFC 9457 problem for its status and returns its body.
    pub fn problem(&self) -> Value {
        let content_type = self.header("content-type").unwrap_or("");
        assert!(
            content_type.starts_with("application/problem+json"),
            "{}: expected a problem body, got content-type {content_type:?}: {}",
            self.request,
            self.text
        );
        let json: Value = serde_json::from_str(&self.text).expect("problem body is JSON");
        assert_eq!(json["status"], self.status, "problem status field: {json}");
        assert!(
            json["type"].as_str().is_some_and(|t| !t.is_empty()),
            "problem type: {json}"
        );
        assert!(json["title"].as_str().is_some(), "problem title: {json}");
        assert!(json["code"].as_str().is_some(), "problem code: {json}");
        json
    }
}

/// What an expected answer decodes into.
pub trait FromReply: Sized {
    fn from_reply(reply: &Reply) -> Self;
}

impl FromReply for Value {
    fn from_reply(reply: &Reply) -> Self {
        reply.json()
    }
}

/// No content (204).
impl FromReply for () {
    fn from_reply(reply: &Reply) -> Self {
        assert!(
            reply.text.is_empty(),
            "{}: expected no body: {}",
            reply.request,
            reply.text
        );
    }
}

/// Not JSON (the docs page).
impl FromReply for String {
    fn from_reply(reply: &Reply) -> Self {
        reply.text.clone()
    }
}

impl FromReply for TestTenant {
    fn from_reply(reply: &Reply) -> Self {
        reply.decode()
    }
}

/// A request not sent yet: it goes out when the test states the status it
/// expects.
#[must_use = "a call is sent only when its expected status is stated: .expect(…), .reply(…), .problem(…)"]
pub struct Call<'a, T = Value> {
    app: &'a TestApp,
    request: Request,
    answer: PhantomData<fn() -> T>,
}

impl<'a, T: FromReply> Call<'a, T> {
    fn new(app: &'a TestApp, method: Method, path: String, bearer: Option<String>) -> Self {
        Call {
            app,
            request: Request {
                method,
                path,
                bearer,
                headers: Vec::new(),
                body: Body::None,
            },
            answer: PhantomData,
        }
    }

    fn with_json(mut self, body: &Value) -> Self {
        self.request.body = Body::Json(body.clone());
        self
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.request.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The `Idempotency-Key` header.
    pub fn idempotency_key(self, key: &str) -> Self {
        self.header("Idempotency-Key", key)
    }

    /// Replaces the credential (raw calls).
    pub fn bearer(mut self, token: &str) -> Self {
        self.request.bearer = Some(token.to_owned());
        self
    }

    /// A JSON body (raw calls).
    pub fn json(self, body: &Value) -> Self {
        self.with_json(body)
    }

    /// A body of raw bytes with this content type, or none (raw calls).
    pub fn body(mut self, content_type: Option<&str>, bytes: impl Into<reqwest::Body>) -> Self {
        self.request.body = Body::Raw {
            content_type: content_type.map(str::to_owned),
            bytes: bytes.into(),
        };
        self
    }

    /// Sends; asserts the status; returns the decoded body.
    pub async fn expect(self, status: u16) -> T {
        T::from_reply(&self.reply(status).await)
    }

    /// Sends; asserts the status; returns the whole reply (headers too).
    pub async fn reply(self, status: u16) -> Reply {
        self.reply_one_of(&[status]).await
    }

    /// Sends; asserts the status is one of `statuses` (races where more than
    /// one answer is right); returns the whole reply.
    pub async fn reply_one_of(self, statuses: &[u16]) -> Reply {
        let reply = self.app.send(self.request).await;
        reply.assert_status(statuses);
        reply
    }

    /// Sends; asserts an RFC 9457 problem with this status; returns its body.
    pub async fn problem(self, status: u16) -> Value {
        self.reply(status).await.problem()
    }
}

/// A credential (or none) to call operations with.
#[derive(Clone)]
pub struct Caller<'a> {
    app: &'a TestApp,
    bearer: Option<String>,
}

impl<'a> Caller<'a> {
    fn call<T: FromReply>(&self, method: Method, path: String) -> Call<'a, T> {
        Call::new(self.app, method, path, self.bearer.clone())
    }

    /// The admin operations, called with this credential.
    pub fn admin(self) -> AdminApi<'a> {
        AdminApi(self)
    }

    /// The server-to-server operations, called with this credential.
    pub fn tenant(self) -> TenantApi<'a> {
        TenantApi(self)
    }

    /// The end-user operations, called with this credential.
    pub fn user(self) -> UserApi<'a> {
        UserApi(self)
    }
}

impl TestApp {
    /// Operations with `token` as the bearer credential, whatever it is.
    pub fn bearer(&self, token: &str) -> Caller<'_> {
        Caller {
            app: self,
            bearer: Some(token.to_owned()),
        }
    }

    /// Operations without any credential.
    pub fn anonymous(&self) -> Caller<'_> {
        Caller {
            app: self,
            bearer: None,
        }
    }

    /// The admin API, with the admin token.
    pub fn admin(&self) -> AdminApi<'_> {
        self.bearer(ADMIN_TOKEN).admin()
    }

    /// The server-to-server API, with `tenant`'s API key.
    pub fn tenant(&self, tenant: &TestTenant) -> TenantApi<'_> {
        self.bearer(&tenant.api_key).tenant()
    }

    /// The end-user API, with a user token.
    pub fn user(&self, token: &str) -> UserApi<'_> {
        self.bearer(token).user()
    }

    /// Health, readiness and the documents: no credential.
    pub fn public(&self) -> PublicApi<'_> {
        PublicApi(self.anonymous())
    }

    /// Any method and path, no credential until [`Call::bearer`]: for malformed
    /// input and routes that do not exist.
    pub fn raw(&self, method: Method, path: &str) -> Call<'_, Value> {
        Call::new(self, method, path.to_owned(), None)
    }

    /// The one request path: sends, reads the whole answer, and checks it
    /// against the OpenAPI document when that check is on.
    pub async fn send(&self, request: Request) -> Reply {
        let described = format!("{} {}", request.method, request.path);
        let mut builder = self.http.request(
            request.method.clone(),
            format!("{}{}", self.base, request.path),
        );
        if let Some(token) = &request.bearer {
            builder = builder.bearer_auth(token);
        }
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        builder = match request.body {
            Body::None => builder,
            Body::Json(json) => builder.json(&json),
            Body::Raw {
                content_type,
                bytes,
            } => {
                if let Some(content_type) = content_type {
                    builder = builder.header("content-type", content_type);
                }
                builder.body(bytes)
            }
        };
        let response = builder
            .send()
            .await
            .unwrap_or_else(|e| panic!("{described}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("{described}: reading the body: {e}"));
        let reply = Reply {
            request: described,
            status,
            headers,
            text,
        };
        crate::openapi::check(&request.method, &request.path, &reply);
        reply
    }
}

/// `/v1/admin/…`: the operator's API (admin token).
pub struct AdminApi<'a>(Caller<'a>);

impl<'a> AdminApi<'a> {
    /// `admin.tenant.create`
    pub fn create_tenant(&self, body: &Value) -> Call<'a, TestTenant> {
        self.0
            .call(Method::POST, "/v1/admin/tenants".into())
            .with_json(body)
    }

    /// `admin.key.create`
    pub fn create_key(&self, tenant_id: impl Display) -> Call<'a> {
        self.0
            .call(Method::POST, format!("/v1/admin/tenants/{tenant_id}/keys"))
    }

    /// `admin.key.revoke`
    pub fn revoke_key(&self, tenant_id: impl Display, key_id: impl Display) -> Call<'a, ()> {
        self.0.call(
            Method::DELETE,
            format!("/v1/admin/tenants/{tenant_id}/keys/{key_id}"),
        )
    }

    /// `admin.tenant.rate_limits.set`
    pub fn set_rate_limits(&self, tenant_id: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(
                Method::PUT,
                format!("/v1/admin/tenants/{tenant_id}/rate-limits"),
            )
            .with_json(body)
    }

    /// `admin.tenant.rate_limits.get`
    pub fn rate_limits(&self, tenant_id: impl Display) -> Call<'a> {
        self.0.call(
            Method::GET,
            format!("/v1/admin/tenants/{tenant_id}/rate-limits"),
        )
    }

    /// `admin.tenant.retention`
    pub fn set_feed_retention(&self, tenant_id: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(
                Method::PUT,
                format!("/v1/admin/tenants/{tenant_id}/retention"),
            )
            .with_json(body)
    }
}

/// The server-to-server API (a tenant's API key). Path parameters are written
/// into the path as given (already percent-encoded where a test needs it).
pub struct TenantApi<'a>(Caller<'a>);

impl<'a> TenantApi<'a> {
    /// `user-token.create`
    pub fn create_user_token(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/user-tokens".into())
            .with_json(body)
    }

    /// `teams.members.put`: 201 when added, 200 when already a member.
    pub fn put_member(&self, team_id: impl Display, user_id: impl Display) -> Call<'a> {
        self.0.call(
            Method::PUT,
            format!("/v1/teams/{team_id}/members/{user_id}"),
        )
    }

    /// `teams.members.delete`
    pub fn delete_member(&self, team_id: impl Display, user_id: impl Display) -> Call<'a, ()> {
        self.0.call(
            Method::DELETE,
            format!("/v1/teams/{team_id}/members/{user_id}"),
        )
    }

    /// `teams.members.list`; `query` is empty or starts with `?`.
    pub fn list_members(&self, team_id: impl Display, query: &str) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/teams/{team_id}/members{query}"))
    }

    /// `events.create`: 201 when stored, 200 for a retry of a stored event.
    pub fn create_event(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/events".into())
            .with_json(body)
    }

    /// `events.create_batch`
    pub fn create_events(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/events/batch".into())
            .with_json(body)
    }

    /// `alerts.create` (202); add [`Call::idempotency_key`] for the header.
    pub fn create_alert(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/alerts".into())
            .with_json(body)
    }

    /// `alerts.get`
    pub fn get_alert(&self, alert_id: impl Display) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/alerts/{alert_id}"))
    }

    /// `alerts.get` with a page of deliveries; `query` is empty or starts with `?`.
    pub fn get_alert_page(&self, alert_id: impl Display, query: &str) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/alerts/{alert_id}{query}"))
    }

    /// `deliveries.list`; `query` is empty or starts with `?`.
    pub fn list_deliveries(&self, query: &str) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/deliveries{query}"))
    }

    /// `deliveries.retry`
    pub fn retry_delivery(&self, id: impl Display) -> Call<'a> {
        self.0
            .call(Method::POST, format!("/v1/deliveries/{id}/retry"))
    }

    /// `event-types.delivery.put`
    pub fn put_event_type_delivery(&self, event_type: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(
                Method::PUT,
                format!("/v1/event-types/{event_type}/delivery"),
            )
            .with_json(body)
    }

    /// `event-types.delivery.get`
    pub fn event_type_delivery(&self, event_type: impl Display) -> Call<'a> {
        self.0.call(
            Method::GET,
            format!("/v1/event-types/{event_type}/delivery"),
        )
    }

    /// `users.put`
    pub fn put_user(&self, user_id: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, format!("/v1/users/{user_id}"))
            .with_json(body)
    }

    /// `categories.put` (201 created, 200 replaced)
    pub fn put_category(&self, key: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, format!("/v1/categories/{key}"))
            .with_json(body)
    }

    /// `categories.digest_template.put`
    pub fn put_digest_template(&self, key: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, format!("/v1/categories/{key}/digest-template"))
            .with_json(body)
    }

    /// `categories.digest_template.get`
    pub fn digest_template(&self, key: impl Display) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/categories/{key}/digest-template"))
    }

    /// `categories.digest_template.delete`
    pub fn delete_digest_template(&self, key: impl Display) -> Call<'a, ()> {
        self.0.call(
            Method::DELETE,
            format!("/v1/categories/{key}/digest-template"),
        )
    }

    /// `categories.list`
    pub fn list_categories(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/categories".into())
    }

    /// `categories.get`
    pub fn get_category(&self, key: impl Display) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/categories/{key}"))
    }

    /// `preferences.get`
    pub fn preferences(&self, user_id: impl Display) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/users/{user_id}/preferences"))
    }

    /// `preferences.patch`
    pub fn patch_preferences(&self, user_id: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PATCH, format!("/v1/users/{user_id}/preferences"))
            .with_json(body)
    }

    /// `preferences.put`
    pub fn put_preferences(&self, user_id: impl Display, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, format!("/v1/users/{user_id}/preferences"))
            .with_json(body)
    }

    /// `preference_defaults.get`
    pub fn preference_defaults(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/preference-defaults".into())
    }

    /// `preference_defaults.put`
    pub fn put_preference_defaults(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, "/v1/preference-defaults".into())
            .with_json(body)
    }

    /// `users.get`
    pub fn get_user(&self, user_id: impl Display) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/users/{user_id}"))
    }

    /// `users.digests.list`
    pub fn list_user_digests(&self, user_id: impl Display) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/users/{user_id}/digests"))
    }

    /// `users.delete`
    pub fn delete_user(&self, user_id: impl Display) -> Call<'a, ()> {
        self.0.call(Method::DELETE, format!("/v1/users/{user_id}"))
    }

    /// `templates.put`; `query` is empty or starts with `?` (`?locale=fr`).
    pub fn put_template(
        &self,
        event_type: impl Display,
        channel: &str,
        query: &str,
        body: &Value,
    ) -> Call<'a> {
        self.0
            .call(
                Method::PUT,
                format!("/v1/templates/{event_type}/{channel}{query}"),
            )
            .with_json(body)
    }

    /// `templates.get`; `query` is empty or starts with `?`.
    pub fn get_template(&self, event_type: impl Display, channel: &str, query: &str) -> Call<'a> {
        self.0.call(
            Method::GET,
            format!("/v1/templates/{event_type}/{channel}{query}"),
        )
    }

    /// `templates.delete`; `query` is empty or starts with `?`.
    pub fn delete_template(
        &self,
        event_type: impl Display,
        channel: &str,
        query: &str,
    ) -> Call<'a, ()> {
        self.0.call(
            Method::DELETE,
            format!("/v1/templates/{event_type}/{channel}{query}"),
        )
    }

    /// `templates.list`; `query` is empty or starts with `?`.
    pub fn list_templates(&self, query: &str) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/templates{query}"))
    }

    /// `templates.preview`
    pub fn preview_template(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/templates/preview".into())
            .with_json(body)
    }

    /// `template-settings.get`
    pub fn template_settings(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/template-settings".into())
    }

    /// `template-settings.put`
    pub fn put_template_settings(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PUT, "/v1/template-settings".into())
            .with_json(body)
    }

    /// `webhook-endpoints.create`
    pub fn create_endpoint(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/webhook-endpoints".into())
            .with_json(body)
    }

    /// `webhook-endpoints.list`
    pub fn list_endpoints(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/webhook-endpoints".into())
    }

    /// `webhook-endpoints.list`, a given page; `query` is empty or starts with `?`.
    pub fn list_endpoints_page(&self, query: &str) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/webhook-endpoints{query}"))
    }

    /// `webhook-endpoints.get`
    pub fn get_endpoint(&self, id: impl Display) -> Call<'a> {
        self.0
            .call(Method::GET, format!("/v1/webhook-endpoints/{id}"))
    }

    /// `webhook-endpoints.delete`
    pub fn delete_endpoint(&self, id: impl Display) -> Call<'a, ()> {
        self.0
            .call(Method::DELETE, format!("/v1/webhook-endpoints/{id}"))
    }

    /// `webhook-endpoints.rotate-secret`
    pub fn rotate_endpoint_secret(&self, id: impl Display) -> Call<'a> {
        self.0.call(
            Method::POST,
            format!("/v1/webhook-endpoints/{id}/rotate-secret"),
        )
    }

    /// `signing-secret.rotate`
    pub fn rotate_signing_secret(&self) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/signing-secret/rotate".to_string())
    }

    /// `user-token.revoke-all`
    pub fn revoke_user_tokens(&self, user_id: impl Display) -> Call<'a> {
        self.0
            .call(Method::POST, format!("/v1/users/{user_id}/revoke-tokens"))
    }
}

/// The end-user API (a user token).
pub struct UserApi<'a>(Caller<'a>);

impl<'a> UserApi<'a> {
    /// `feed.list`; `query` is empty or starts with `?`.
    pub fn feed(&self, query: &str) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/feed{query}"))
    }

    /// `feed.counts`
    pub fn counts(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/feed/counts".into())
    }

    /// `feed.mark_seen`
    pub fn mark_seen(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/feed/seen".into())
            .with_json(body)
    }

    /// `feed.mark_read`
    pub fn mark_read(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::POST, "/v1/feed/read".into())
            .with_json(body)
    }

    /// `feed.items.mark_read`
    pub fn mark_item_read(&self, id: impl Display) -> Call<'a> {
        self.0
            .call(Method::POST, format!("/v1/feed/items/{id}/read"))
    }

    /// `feed.stream`, for answers that end (problems); a live stream is read
    /// as it arrives with [`crate::TestApp::open_stream`].
    pub fn stream(&self, query: &str) -> Call<'a> {
        self.0.call(Method::GET, format!("/v1/feed/stream{query}"))
    }

    /// `feed.stream_tickets.create`
    pub fn create_stream_ticket(&self) -> Call<'a> {
        self.0.call(Method::POST, "/v1/feed/stream-tickets".into())
    }

    /// `me.preferences.get`
    pub fn preferences(&self) -> Call<'a> {
        self.0.call(Method::GET, "/v1/me/preferences".into())
    }

    /// `me.preferences.patch`
    pub fn patch_preferences(&self, body: &Value) -> Call<'a> {
        self.0
            .call(Method::PATCH, "/v1/me/preferences".into())
            .with_json(body)
    }
}

/// The feed position a `cursor` (or `head`) of a feed answer or an event
/// names; positions compare in feed order.
pub fn position(cursor: &Value) -> Position {
    Position::from_cursor(cursor.as_str().expect("cursor string")).expect("valid cursor")
}

/// The ids of a feed page's items, in the page's order.
pub fn item_ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_i64().expect("id"))
        .collect()
}

/// Health and documents (no credential).
pub struct PublicApi<'a>(Caller<'a>);

impl<'a> PublicApi<'a> {
    /// `health.live`
    pub fn live(&self) -> Call<'a> {
        self.0.call(Method::GET, "/healthz".into())
    }

    /// `health.ready`: 200, or 503 while not ready.
    pub fn ready(&self) -> Call<'a> {
        self.0.call(Method::GET, "/readyz".into())
    }

    /// The Swagger UI page (not an operation of the document).
    pub fn docs(&self) -> Call<'a, String> {
        self.0.call(Method::GET, "/docs".into())
    }

    /// The OpenAPI document as served (not an operation of itself).
    pub fn openapi(&self) -> Call<'a> {
        self.0.call(Method::GET, "/openapi.json".into())
    }
}
