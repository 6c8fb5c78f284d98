//! The delivery tests' world: a server, a tenant, and a real webhook receiver
//! that trusts every endpoint the tenant creates through the API
//! ([`webhook_fixture`]); outbox rows are written by `POST /v1/alerts`, exactly
//! as callers write them.

use std::{collections::HashMap, time::Duration};

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::{
    alert,
    client::TenantApi,
    eventually,
    sql::{self, DeliveryRow},
    AppOptions, Receiver, TestApp, TestDb, TestTenant, TidingsProcess,
};

/// Environment for outbox workers under test: loopback webhooks allowed, a
/// short retry schedule (100, 200, 400 ms; 4 attempts), a short lease, fast
/// polls; `extra` overrides.
pub fn worker_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: HashMap<&str, &str> = [
        ("TIDINGS_WEBHOOK_ALLOW_PRIVATE", "loopback"),
        ("TIDINGS_OUTBOX_POLL_MS", "200"),
        ("TIDINGS_OUTBOX_LEASE_SECS", "5"),
        ("TIDINGS_DELIVERY_TIMEOUT_MS", "2000"),
        ("TIDINGS_RETRY_BASE_MS", "100"),
        ("TIDINGS_RETRY_FACTOR", "2"),
        ("TIDINGS_RETRY_MAX_DELAY_MS", "1000"),
        ("TIDINGS_RETRY_MAX_ATTEMPTS", "4"),
        ("TIDINGS_RETRY_JITTER", "0"),
    ]
    .into_iter()
    .collect();
    for &(k, v) in extra {
        env.insert(k, v);
    }
    env.into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `serve` without outbox workers: the test starts `tidings worker` itself, or
/// claims with the store's functions.
pub fn without_workers() -> AppOptions {
    AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")])
}

/// `prefix-0`, `prefix-1`, …
pub fn recipients(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// A webhook endpoint created through the API.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub id: String,
    pub secret: String,
}

/// Creates an endpoint for `url`, subscribed to `event_type` only, or to every
/// event type.
pub async fn create_endpoint(api: &TenantApi<'_>, url: &str, event_type: Option<&str>) -> Endpoint {
    let mut body = json!({ "url": url });
    if let Some(event_type) = event_type {
        body["event_types"] = json!([event_type]);
    }
    let created = api.create_endpoint(&body).expect(201).await;
    Endpoint {
        id: created["id"].as_str().expect("id").to_owned(),
        secret: created["secret"].as_str().expect("secret").to_owned(),
    }
}

/// Posts `alert` (its recipients replaced) for `recipients`, in posts of at most 1,000 (the API's limit),
/// and returns each recipient's notification key in the order of `recipients`.
/// Every key must be new and go to exactly one subscribed endpoint.
pub async fn post_to_recipients(
    api: &TenantApi<'_>,
    alert: &Value,
    recipients: &[String],
) -> Vec<String> {
    let mut keys: HashMap<String, String> = HashMap::new();
    for chunk in recipients.chunks(1000) {
        let mut body = alert.clone();
        body["recipients"] = json!(chunk);
        let accepted = api.create_alert(&body).expect(202).await;
        let deliveries = accepted["deliveries"].as_array().expect("deliveries");
        assert_eq!(deliveries.len(), chunk.len(), "{accepted}");
        for d in deliveries {
            assert_eq!(d["status"], "created", "{d}");
            keys.insert(
                d["recipient_id"].as_str().expect("recipient").to_owned(),
                d["key"].as_str().expect("key").to_owned(),
            );
        }
    }
    recipients.iter().map(|r| keys[r].clone()).collect()
}

/// A server, a tenant, and a webhook receiver that trusts the secret of every
/// endpoint created through the fixture.
pub struct WebhookFixture {
    pub app: TestApp,
    pub tenant: TestTenant,
    pub receiver: Receiver,
    pub database_url: String,
    pub pool: PgPool,
    _db: Option<TestDb>,
}

/// The usual delivery test: a fresh database, `serve` without outbox workers,
/// a tenant and a webhook receiver.
pub async fn webhook_fixture() -> WebhookFixture {
    WebhookFixture::start(None, without_workers()).await
}

impl WebhookFixture {
    /// `serve` started with `opts`, on `database_url` or a fresh database.
    pub async fn start(database_url: Option<&str>, opts: AppOptions) -> WebhookFixture {
        let receiver = Receiver::webhooks(&[]).await;
        let (db, database_url) = match database_url {
            Some(url) => (None, url.to_owned()),
            None => {
                let db = TestDb::create().await.expect("test database");
                let url = db.url.clone();
                (Some(db), url)
            }
        };
        let app = TestApp::spawn_on(&database_url, opts).await.expect("serve");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&database_url)
            .await
            .expect("pool");
        let tenant = app.create_tenant().await;
        WebhookFixture {
            app,
            tenant,
            receiver,
            database_url,
            pool,
            _db: db,
        }
    }

    pub fn api(&self) -> TenantApi<'_> {
        self.app.tenant(&self.tenant)
    }

    /// An endpoint at the receiver, for every event type.
    pub async fn endpoint(&self, path_and_query: &str) -> Endpoint {
        self.endpoint_at(&self.receiver.url(path_and_query), None)
            .await
    }

    /// An endpoint at the receiver, for `event_type` only.
    pub async fn endpoint_for(&self, path_and_query: &str, event_type: &str) -> Endpoint {
        self.endpoint_at(&self.receiver.url(path_and_query), Some(event_type))
            .await
    }

    /// An endpoint at any URL; the receiver trusts its secret.
    pub async fn endpoint_at(&self, url: &str, event_type: Option<&str>) -> Endpoint {
        let endpoint = create_endpoint(&self.api(), url, event_type).await;
        self.receiver.trust(&endpoint.secret).await;
        endpoint
    }

    /// Rotates the endpoint's secret; the receiver trusts the new one.
    pub async fn rotate_secret(&self, endpoint: &Endpoint) -> String {
        let rotated = self
            .api()
            .rotate_endpoint_secret(&endpoint.id)
            .expect(200)
            .await;
        let secret = rotated["secret"].as_str().expect("secret").to_owned();
        self.receiver.trust(&secret).await;
        secret
    }

    /// Webhooks of `event_type` for `recipients` (one alert per 1,000); their
    /// notification keys, in the order of `recipients`.
    pub async fn send(&self, event_type: &str, recipients: &[String]) -> Vec<String> {
        let alert = alert()
            .event_type(event_type)
            .fresh_entity()
            .channels(&["webhook"])
            .build();
        post_to_recipients(&self.api(), &alert, recipients).await
    }

    /// One webhook of `event_type` for `recipient`; its notification key.
    pub async fn send_one(&self, event_type: &str, recipient: &str) -> String {
        self.send(event_type, &[recipient.to_owned()])
            .await
            .remove(0)
    }

    /// `tidings worker` on this database with [`worker_env`]`(extra)`.
    pub async fn worker(&self, extra: &[(&str, &str)]) -> TidingsProcess {
        TidingsProcess::worker(&self.database_url, &worker_env(extra))
            .await
            .expect("worker")
    }

    /// Waits up to `limit` until the delivery of `key` is `status`; fails
    /// with `worker`'s log if it never is.
    pub async fn until_delivery_is(
        &self,
        key: &str,
        status: &str,
        limit: Duration,
        worker: &TidingsProcess,
    ) {
        assert!(
            eventually(limit, || async {
                self.delivery(key).await.status == status
            })
            .await,
            "the delivery of {key} never became {status}: {:?}\n{}",
            self.delivery(key).await,
            worker.log()
        );
    }

    /// The tenant's deliveries by status.
    pub async fn status_counts(&self) -> HashMap<String, i64> {
        sql::status_counts(&self.pool, &self.tenant).await
    }

    /// The delivery of notification `key`.
    pub async fn delivery(&self, key: &str) -> DeliveryRow {
        sql::delivery(&self.pool, &self.tenant, key).await
    }
}
