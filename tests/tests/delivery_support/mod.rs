//! Fixtures for the delivery tests: rows the write path (POST /v1/alerts)
//! would create, inserted with SQL so the workers can be tested on their own,
//! and real receivers (Python, tests/receivers/) that record what arrived.

#![allow(dead_code)]

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context};
use base64::Engine;
use serde_json::Value;
use sqlx::PgPool;
use tidings_core::{Channel, NotificationKey};
use uuid::Uuid;

/// A fresh `whsec_` secret, as the endpoints API hands them out.
pub fn new_secret() -> String {
    let bytes: [u8; 24] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

pub async fn create_tenant(pool: &PgPool) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tenants (id, name, signing_secret) VALUES ($1, $2, 'test-signing-secret')",
    )
    .bind(id)
    .bind(format!("tenant {id}"))
    .execute(pool)
    .await
    .expect("insert tenant");
    id
}

/// An endpoint; `previous` = (secret, seconds until it stops signing; negative: expired).
pub async fn create_endpoint(
    pool: &PgPool,
    tenant: Uuid,
    url: &str,
    secret: &str,
    previous: Option<(&str, i64)>,
) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO webhook_endpoints (tenant_id, id, url, secret, previous_secret, previous_secret_expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 second')",
    )
    .bind(tenant)
    .bind(id)
    .bind(url)
    .bind(secret)
    .bind(previous.map(|p| p.0))
    .bind(previous.map(|p| p.1))
    .execute(pool)
    .await
    .expect("insert endpoint");
    id
}

pub async fn create_user(pool: &PgPool, tenant: Uuid, user_id: &str, email: Option<&str>) {
    sqlx::query(
        "INSERT INTO users (tenant_id, user_id, email, display_name) VALUES ($1, $2, $3, $2)",
    )
    .bind(tenant)
    .bind(user_id)
    .bind(email)
    .execute(pool)
    .await
    .expect("insert user");
}

pub struct Alert {
    pub tenant: Uuid,
    pub id: Uuid,
    pub event_type: String,
    pub entity_id: String,
}

pub async fn create_alert(
    pool: &PgPool,
    tenant: Uuid,
    event_type: &str,
    subject: Option<&str>,
    payload: Value,
) -> Alert {
    let id = Uuid::now_v7();
    let entity_id = format!("inv_{}", Uuid::new_v4().simple());
    sqlx::query(
        "INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels)
         VALUES ($1, $2, $3, $4, $5, $6, ARRAY['email', 'webhook'])",
    )
    .bind(tenant)
    .bind(id)
    .bind(event_type)
    .bind(&entity_id)
    .bind(subject)
    .bind(payload)
    .execute(pool)
    .await
    .expect("insert alert");
    Alert {
        tenant,
        id,
        event_type: event_type.into(),
        entity_id,
    }
}

/// Notification rows and pending deliveries for `recipients` on `channel`
/// (webhooks to `endpoint`), then NOTIFY, all in one transaction as the write
/// path does. Returns the notification keys, in the order of `recipients`.
pub async fn enqueue(
    pool: &PgPool,
    alert: &Alert,
    channel: Channel,
    endpoint: Option<Uuid>,
    recipients: &[String],
) -> Vec<String> {
    let tenant = alert.tenant.to_string();
    let mut keys = Vec::with_capacity(recipients.len());
    let mut readable = Vec::with_capacity(recipients.len());
    for r in recipients {
        let key = NotificationKey::derive(&tenant, &alert.event_type, &alert.entity_id, r, channel)
            .expect("valid key");
        keys.push(key.digest_hex());
        readable.push(key.readable().to_owned());
    }
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO notifications (tenant_id, key, readable_key, alert_id, event_type, entity_id, recipient_id, channel)
         SELECT $1, k, rk, $2, $3, $4, r, $5 FROM UNNEST($6::text[], $7::text[], $8::text[]) AS x(k, rk, r)
         ON CONFLICT DO NOTHING",
    )
    .bind(alert.tenant)
    .bind(alert.id)
    .bind(&alert.event_type)
    .bind(&alert.entity_id)
    .bind(channel.as_str())
    .bind(&keys)
    .bind(&readable)
    .bind(recipients)
    .execute(&mut *tx)
    .await
    .expect("insert notifications");
    sqlx::query(
        "INSERT INTO deliveries (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status)
         SELECT $1, k, $2, r, $3, $4, 'pending' FROM UNNEST($5::text[], $6::text[]) AS x(k, r)",
    )
    .bind(alert.tenant)
    .bind(alert.id)
    .bind(channel.as_str())
    .bind(endpoint)
    .bind(&keys)
    .bind(recipients)
    .execute(&mut *tx)
    .await
    .expect("insert deliveries");
    sqlx::query("SELECT pg_notify('tidings_outbox', $1)")
        .bind(&tenant)
        .execute(&mut *tx)
        .await
        .expect("notify");
    tx.commit().await.expect("commit");
    keys
}

pub fn recipients(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Delivery rows of a tenant by status.
pub async fn status_counts(pool: &PgPool, tenant: Uuid) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT status, count(*) FROM deliveries WHERE tenant_id = $1 GROUP BY status",
    )
    .bind(tenant)
    .fetch_all(pool)
    .await
    .expect("status counts")
    .into_iter()
    .collect()
}

#[derive(Debug, sqlx::FromRow)]
pub struct DeliveryRow {
    pub notification_key: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub sent_at_set: bool,
}

pub async fn delivery(pool: &PgPool, tenant: Uuid, key: &str) -> DeliveryRow {
    sqlx::query_as(
        "SELECT notification_key, status, attempts, last_error, sent_at IS NOT NULL AS sent_at_set
         FROM deliveries WHERE tenant_id = $1 AND notification_key = $2",
    )
    .bind(tenant)
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("delivery row")
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

/// Environment for a worker under test: loopback webhooks allowed, a short
/// retry schedule (100, 200, 400 ms; 4 attempts), a short lease, fast polls.
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

fn receivers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("receivers")
}

/// A Python receiver process that prints "listening on PORT" and appends
/// JSON lines to a record file.
pub struct Receiver {
    child: Child,
    pub port: u16,
    record: PathBuf,
}

impl Receiver {
    async fn spawn(script: &str, args: &[String]) -> anyhow::Result<Receiver> {
        let record = std::env::temp_dir().join(format!(
            "tidings-receiver-{}.jsonl",
            Uuid::new_v4().simple()
        ));
        std::fs::write(&record, "")?;
        let mut child = Command::new("python3")
            .arg(receivers_dir().join(script))
            .arg("--record")
            .arg(&record)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting python3 (tests/receivers/requirements.txt must be installed)")?;
        let stdout = child.stdout.take().context("receiver stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(port) = line.strip_prefix("listening on ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                    break;
                }
            }
            for _ in lines {}
        });
        match tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30))).await? {
            Ok(Some(port)) => Ok(Receiver {
                child,
                port,
                record,
            }),
            _ => {
                let _ = child.kill();
                bail!("{script} did not start (is `pip install -r tests/receivers/requirements.txt` done?)")
            }
        }
    }

    /// Webhook receiver verifying with each of `secrets` (indexes in `verified_with`).
    pub async fn webhooks(secrets: &[&str]) -> Receiver {
        let args: Vec<String> = secrets
            .iter()
            .flat_map(|s| ["--secret".to_owned(), (*s).to_owned()])
            .collect();
        Receiver::spawn("webhook_receiver.py", &args)
            .await
            .expect("webhook receiver")
    }

    /// Webhook receiver on a chosen port: for endpoints created through the API,
    /// whose URL must be known before the secret (which the API returns) is.
    pub async fn webhooks_on(port: u16, secrets: &[&str]) -> Receiver {
        let mut args = vec!["--port".to_owned(), port.to_string()];
        for secret in secrets {
            args.extend(["--secret".to_owned(), (*secret).to_owned()]);
        }
        Receiver::spawn("webhook_receiver.py", &args)
            .await
            .expect("webhook receiver")
    }

    /// SMTP server answering 451 to the first `fail_first` tries of each Message-ID.
    pub async fn smtp(fail_first: u32) -> Receiver {
        Receiver::spawn(
            "smtp_receiver.py",
            &["--fail-first".to_owned(), fail_first.to_string()],
        )
        .await
        .expect("smtp receiver")
    }

    /// `http://127.0.0.1:PORT{path_and_query}`
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://127.0.0.1:{}{path_and_query}", self.port)
    }

    pub fn smtp_url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Everything recorded so far.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("record is JSON"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.record);
    }
}
