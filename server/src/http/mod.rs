//! The HTTP surface: one `…Api` struct per resource, combined into one
//! `OpenApiService`. Handlers parse, call one store or service function, map.

pub mod auth;
pub mod error;
pub mod json_nul;
pub mod listener;
pub mod request_id;

pub mod admin;
mod admission;
pub mod alerts;
mod body_limit;
mod cors;
pub mod deliveries;
mod direct_json;
mod document;
pub mod event_types;
pub mod events;
pub mod feed;
pub mod health;
pub mod inbox_page;
mod input_guard;
pub mod metrics;
mod observe;
pub mod preferences;
mod request_log;
pub mod stream;
pub mod teams;
pub mod templates;
pub mod unsubscribe;
pub mod user_tokens;
pub mod users;
pub mod webhook_endpoints;

use poem::{Endpoint, EndpointExt, Route};
use poem_openapi::{Enum, OpenApiService, Tags};
use tidings_core::Channel;

use crate::app::state::AppState;

#[derive(Tags)]
pub enum ApiTags {
    /// Liveness and readiness.
    Health,
    /// Operator endpoints: tenants and API keys (admin token).
    Admin,
    /// Credentials for front ends.
    Auth,
    /// Team memberships (API key): who sees a team's events.
    Teams,
    /// Activity events (API key): stored once per team.
    Events,
    /// A user's feed, badges and seen/read watermarks (user token).
    Feed,
    /// Transactional alerts: fan-out on write, one notification per key.
    Alerts,
    /// The outbox seen by operators: delivery states, re-queueing.
    Deliveries,
    /// Recipients' contact data.
    Users,
    /// Standard Webhooks endpoints and their signing secrets.
    Webhooks,
    /// Categories, users' preferences and the tenant's defaults.
    Preferences,
    /// What emails and in-app items say: templates per event type, channel and locale.
    Templates,
}

pub const TITLE: &str = "Tidings";

// The core's `Channel` in the API schema (the core cannot derive poem's
// traits: it depends on nothing of the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, serde::Serialize, serde::Deserialize)]
#[oai(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum ChannelName {
    InApp,
    Email,
    Webhook,
}

impl From<ChannelName> for Channel {
    fn from(c: ChannelName) -> Self {
        match c {
            ChannelName::InApp => Channel::InApp,
            ChannelName::Email => Channel::Email,
            ChannelName::Webhook => Channel::Webhook,
        }
    }
}

impl From<Channel> for ChannelName {
    fn from(c: Channel) -> Self {
        match c {
            Channel::InApp => ChannelName::InApp,
            Channel::Email => ChannelName::Email,
            Channel::Webhook => ChannelName::Webhook,
        }
    }
}

fn api_tuple(state: &AppState) -> impl poem_openapi::OpenApi {
    (
        health::HealthApi {
            state: state.clone(),
        },
        admin::AdminApi {
            state: state.clone(),
        },
        user_tokens::UserTokensApi {
            state: state.clone(),
        },
        (
            teams::TeamsApi {
                state: state.clone(),
            },
            events::EventsApi {
                state: state.clone(),
            },
            feed::FeedApi {
                state: state.clone(),
            },
            stream::StreamApi {
                state: state.clone(),
            },
        ),
        (
            alerts::AlertsApi {
                state: state.clone(),
            },
            deliveries::DeliveriesApi {
                state: state.clone(),
            },
            users::UsersApi {
                state: state.clone(),
            },
            webhook_endpoints::WebhookEndpointsApi {
                state: state.clone(),
            },
            preferences::PreferencesApi {
                state: state.clone(),
            },
            templates::TemplatesApi {
                state: state.clone(),
            },
            event_types::EventTypesApi {
                state: state.clone(),
            },
        ),
    )
}

pub fn service(state: &AppState) -> OpenApiService<impl poem_openapi::OpenApi, ()> {
    OpenApiService::new(api_tuple(state), TITLE, env!("CARGO_PKG_VERSION"))
        .description(
            "Activity feeds computed at read time, race-free seen/read watermarks, and \
             transactional alerts that are never sent twice. Errors are RFC 9457 problem \
             documents (`application/problem+json`).",
        )
        .license(
            poem_openapi::LicenseObject::new("Apache-2.0")
                .url("https://www.apache.org/licenses/LICENSE-2.0"),
        )
}

/// The OpenAPI document, exactly as `tidings openapi` prints and `/openapi.json` serves.
pub fn openapi_json() -> String {
    let spec = service(&AppState::offline()).spec();
    let mut json = document::publish(&spec).expect("poem-openapi generates valid JSON");
    json.push('\n');
    json
}

pub fn routes(state: &AppState) -> impl Endpoint {
    let api = service(state);
    let spec = openapi_json();
    // Swagger UI with the published document in place of poem's own.
    let docs = api.swagger_ui_html().replace(&api.spec(), &spec);
    // Built once; each response shares the buffer (a reference count, no
    // copy), so a client that asks for /docs (1.8 MB) and never reads the
    // answer holds no copy of its own (bench/findings/health-and-http.md,
    // "Clients that stop reading").
    let (spec, docs) = (bytes::Bytes::from(spec), bytes::Bytes::from(docs));
    let mut route = Route::new();
    if state.settings.inbox_page {
        route = route.nest("/inbox", inbox_page::routes());
    }
    if state.settings.ops.metrics_on_api_listener() {
        route = route.at(metrics::PATH, poem::get(metrics::metrics));
    }
    route
        .nest("/u", unsubscribe::routes())
        .at(
            "/openapi.json",
            poem::endpoint::make_sync(move |_| {
                poem::Response::builder()
                    .content_type("application/json")
                    .body(spec.clone())
            }),
        )
        .at(
            "/docs",
            poem::endpoint::make_sync(move |_| {
                poem::Response::builder()
                    .content_type("text/html; charset=utf-8")
                    .body(docs.clone())
            }),
        )
        .nest("/", api)
        .with(input_guard::InputGuard)
        .with(body_limit::BodyLimit {
            max_bytes: state.settings.max_body_bytes,
            timeout: state.settings.body_timeout,
        })
        // Outside the body's reading: a request over its rate is refused
        // before its body is read.
        .with(admission::Admission {
            state: state.clone(),
        })
        // Behind one reference count: the state goes into every request's
        // data, and cloning it moved a dozen.
        .data(std::sync::Arc::new(state.clone()))
        .with(observe::Observe {
            trusted_proxies: (state.settings.trusted_proxies != Default::default())
                .then(|| std::sync::Arc::new(state.settings.trusted_proxies.clone())),
        })
        // Outermost, so problem bodies carry the CORS headers too.
        .with(cors::Cors::new(
            &state.settings.cors_origins,
            crate::app::config::defaults::CORS_MAX_AGE_SECS,
        ))
}
