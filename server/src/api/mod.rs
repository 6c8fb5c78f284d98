//! The HTTP surface: one `…Api` struct per resource, combined into one
//! `OpenApiService`. Handlers parse, call one store or service function, map.

pub mod admin;
mod body_limit;
pub mod health;
pub mod user_tokens;

use poem::{Endpoint, EndpointExt, Route};
use poem_openapi::{OpenApiService, Tags};

use crate::{error::problem_from_poem_error, state::AppState};

#[derive(Tags)]
pub enum ApiTags {
    /// Liveness and readiness.
    Health,
    /// Operator endpoints: tenants and API keys (admin token).
    Admin,
    /// Credentials for front ends.
    Auth,
}

pub const TITLE: &str = "Tidings";

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
    )
}

pub fn service(state: &AppState) -> OpenApiService<impl poem_openapi::OpenApi, ()> {
    OpenApiService::new(api_tuple(state), TITLE, env!("CARGO_PKG_VERSION"))
        .description(
            "Activity feeds computed at read time, race-free seen/read watermarks, and \
             transactional alerts that are never sent twice. Errors are RFC 9457 problem \
             documents (`application/problem+json`).",
        )
        .license(poem_openapi::LicenseObject::new("Apache-2.0"))
}

/// The OpenAPI document, exactly as `tidings openapi` prints and `/openapi.json` serves.
pub fn openapi_json() -> String {
    let mut json = service(&AppState::offline()).spec();
    json.push('\n');
    json
}

pub fn routes(state: &AppState) -> impl Endpoint {
    let api = service(state);
    let docs = api.swagger_ui();
    let spec = openapi_json();
    Route::new()
        .at(
            "/openapi.json",
            poem::endpoint::make_sync(move |_| {
                poem::Response::builder()
                    .content_type("application/json")
                    .body(spec.clone())
            }),
        )
        .nest("/docs", docs)
        .nest("/", api)
        .with(body_limit::BodyLimit {
            max_bytes: state.settings.max_body_bytes,
        })
        .with(poem::middleware::Tracing)
        .data(state.clone())
        .catch_all_error(problem_from_poem_error)
}
