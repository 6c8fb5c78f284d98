//! Test harness for the black-box integration tests (zero2prod's
//! `tests/api/helpers.rs`, grown up): each test gets a fresh, migrated
//! PostgreSQL database and a real `tidings serve` process on a free port, and
//! talks to it over HTTP through a typed client.
//!
//! - [`TestApp`]: `tidings serve` on a fresh database ([`TestDb`]), with
//!   [`TestApp::create_tenant`] and [`TestApp::user_token`] for credentials;
//!   [`TenantFixture`]: a server, its database and one tenant ([`member_of`]:
//!   with a member and a token); [`jwt`] for tokens signed by hand.
//! - [`alert`]: the one builder of an alert's body; [`post_event`] and
//!   [`post_served_event`] for events.
//! - [`client`]: one method per operation, grouped by credential
//!   (`app.admin()`, `app.tenant(&t)`, `app.user(&token)`, `app.public()`), each
//!   call stating its expected status; [`TestApp::raw`] for malformed input.
//!   Every request goes through one path, where answers are checked against
//!   `openapi/openapi.json` ([`openapi`]). [`client::position`] and
//!   [`client::item_ids`] read feed answers.
//! - [`TidingsProcess`]: the one wrapper for a `tidings` process, `serve` or
//!   `worker`.
//! - [`webhook_fixture`]: a server, a tenant and a webhook receiver that trusts
//!   the tenant's endpoints; [`Receiver`] for webhooks and SMTP.
//! - [`sse`]: a Server-Sent Events reader for the live stream.
//! - [`sql`]: the only SQL tests run, where SQL is the point (looking at what
//!   was stored, holding a lock, staging a state no caller reaches in time).
//!
//! The database server comes from `TIDINGS_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); `scripts/test` makes sure one runs.

mod app;
pub mod client;
mod cluster;
mod db;
mod fixtures;
pub mod openapi;
mod process;
mod receivers;
pub mod sql;
pub mod sse;
mod webhooks;

use std::time::Duration;

pub use app::{
    jwt, jwt_with_kid, unix_now, AppOptions, TestApp, TestTenant, ADMIN_TOKEN, METRICS_TOKEN,
};
pub use cluster::{checkout_port, Cluster, HaCluster, HaNode, HaTopology};
pub use db::{admin_url, TestDb};
pub use fixtures::{
    alert, kolkata, member_of, member_of_with, post_event, post_served_event, user_with_email,
    AlertBody, TenantFixture,
};
pub use process::{tidings_bin, TidingsProcess};
pub use receivers::Receiver;
pub use webhooks::{
    create_endpoint, post_to_recipients, recipients, webhook_fixture, without_workers, worker_env,
    Endpoint, WebhookFixture,
};

/// An RFC 3339 timestamp of an answer, as UTC; panics on anything else.
pub fn timestamp(value: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    value
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(|| panic!("not a timestamp: {value}"))
}

/// Polls `check` every 100 ms until it is true; false after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
