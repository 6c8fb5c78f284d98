//! The NATS inbox (ARCHITECTURE.md, invariant 8): alert requests consumed from JetStream
//! are recorded by message id in the alert's own transaction and acked only
//! after commit, so redelivery, duplicates, replays and a crash between commit
//! and ack create nothing new. Needs a NATS server with JetStream
//! (`TIDINGS_TEST_NATS_URL`, default nats://127.0.0.1:4222). Each test uses its
//! own stream and subject pattern, `tidings.test.<id>.*`, whose last token is
//! the tenant.

use std::time::Duration;

use async_nats::jetstream::{self, stream::Config as StreamConfig};
use serde_json::{json, Value};
use tidings_tests::{
    alert,
    sql::{count, wait_for_count, Rows},
    AppOptions, TestApp, TestDb,
};

fn nats_url() -> String {
    std::env::var("TIDINGS_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_string())
}

struct Bus {
    js: jetstream::Context,
    stream: String,
    /// `tidings.test.<id>`: a tenant's subject is `<prefix>.<tenant id>`.
    prefix: String,
}

impl Bus {
    /// A fresh stream whose duplicate window is short, so the test can get past
    /// JetStream's own deduplication and exercise ours.
    async fn new() -> Bus {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let client = async_nats::connect(nats_url())
            .await
            .expect("NATS is running");
        let js = jetstream::new(client);
        let (stream, prefix) = (format!("TIDINGS_TEST_{id}"), format!("tidings.test.{id}"));
        js.create_stream(StreamConfig {
            name: stream.clone(),
            subjects: vec![format!("{prefix}.*")],
            duplicate_window: Duration::from_millis(200),
            ..Default::default()
        })
        .await
        .unwrap();
        Bus { js, stream, prefix }
    }

    /// `serve` consuming this stream with the durable consumer `durable`.
    fn app_options(&self, durable: &str) -> AppOptions {
        AppOptions::env([
            ("TIDINGS_NATS_URL", nats_url()),
            ("TIDINGS_NATS_STREAM", self.stream.clone()),
            ("TIDINGS_NATS_SUBJECT", format!("{}.*", self.prefix)),
            ("TIDINGS_NATS_DURABLE", durable.into()),
            ("TIDINGS_NATS_ACK_WAIT_SECS", "2".into()),
        ])
    }

    /// Publishes `body` on `tenant`'s subject, named `msg_id` by the
    /// inbox's header, `Tidings-Msg-Id`.
    async fn publish(&self, tenant: &str, body: &Value, msg_id: Option<&str>) {
        self.publish_with_header(tenant, body, msg_id.map(|id| ("Tidings-Msg-Id", id)))
            .await;
    }

    /// Publishes `body` on `tenant`'s subject with one header (or none).
    async fn publish_with_header(&self, tenant: &str, body: &Value, header: Option<(&str, &str)>) {
        let subject = format!("{}.{tenant}", self.prefix);
        let payload = serde_json::to_vec(body).unwrap().into();
        let ack = match header {
            Some((name, value)) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(name, value);
                self.js
                    .publish_with_headers(subject, headers, payload)
                    .await
                    .unwrap()
            }
            None => self.js.publish(subject, payload).await.unwrap(),
        };
        ack.await.unwrap();
    }

    /// (messages not yet delivered, delivered but not acked) for a durable consumer.
    async fn pending(&self, durable: &str) -> (u64, usize) {
        let stream = self.js.get_stream(&self.stream).await.unwrap();
        let info = stream.consumer_info(durable).await.unwrap();
        (info.num_pending, info.num_ack_pending)
    }

    async fn wait_all_acked(&self, durable: &str) {
        for _ in 0..150 {
            if let Ok(stream) = self.js.get_stream(&self.stream).await {
                if let Ok(info) = stream.consumer_info(durable).await {
                    if info.num_pending == 0 && info.num_ack_pending == 0 {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "consumer {durable} did not ack everything: {:?}",
            self.pending(durable).await
        );
    }

    async fn delete(&self) {
        let _ = self.js.delete_stream(&self.stream).await;
    }
}

#[tokio::test]
async fn the_same_message_delivered_three_times_and_replayed_creates_one_alert() {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let app = TestApp::spawn_on(&db.url, bus.app_options("first"))
        .await
        .unwrap();
    let tenant = app.create_tenant().await;
    let message = alert()
        .recipients(&["ann", "bob"])
        .payload(json!({"amount_cents": 500}))
        .build();

    // Three copies with one Tidings-Msg-Id, spaced past JetStream's duplicate
    // window (JetStream ignores the header anyway): only our inbox can tell.
    for _ in 0..3 {
        bus.publish(&tenant.id, &message, Some("billing-run-1"))
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut stream = bus.js.get_stream(&bus.stream).await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        3,
        "JetStream stored all three copies"
    );
    bus.wait_all_acked("first").await;
    assert_eq!(count(&pool, Rows::Alerts).await, 1);
    assert_eq!(count(&pool, Rows::Notifications).await, 2);
    assert_eq!(count(&pool, Rows::InboxMessages).await, 1);

    // Poison: recorded with its reason and terminated, not redelivered forever.
    // A subject naming no tenant has nobody to file it under: terminated only.
    bus.publish(&tenant.id, &json!("not an alert"), None).await;
    let mut unknown_tenant = message.clone();
    unknown_tenant["entity_id"] = json!("inv-8");
    bus.publish(&uuid::Uuid::now_v7().to_string(), &unknown_tenant, None)
        .await;
    bus.publish("not-a-tenant", &unknown_tenant, None).await;
    bus.wait_all_acked("first").await;
    wait_for_count(&pool, Rows::RejectedInboxMessages, 1).await;
    assert_eq!(count(&pool, Rows::Alerts).await, 1);

    // A replay of the whole stream by a new consumer (same message ids:
    // Tidings-Msg-Id, or stream:sequence) changes nothing.
    drop(app);
    let replayer = TestApp::spawn_on(&db.url, bus.app_options("second"))
        .await
        .unwrap();
    bus.wait_all_acked("second").await;
    assert_eq!(count(&pool, Rows::Alerts).await, 1);
    assert_eq!(count(&pool, Rows::Notifications).await, 2);
    assert_eq!(count(&pool, Rows::InboxMessages).await, 2);
    drop(replayer);
    bus.delete().await;
}

#[tokio::test]
async fn a_crash_between_commit_and_ack_creates_one_alert_and_the_redelivery_is_acked() {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let mut crashy = bus.app_options("crashy");
    crashy
        .env
        .push(("TIDINGS_TEST_CRASH_BEFORE_ACK".into(), "1".into()));
    let mut app = TestApp::spawn_on(&db.url, crashy).await.unwrap();
    let tenant = app.create_tenant().await;
    let message = alert()
        .recipients(&["ann", "bob"])
        .payload(json!({"amount_cents": 500}))
        .build();
    bus.publish(&tenant.id, &message, None).await;

    // The alert commits, then the process aborts before acking.
    wait_for_count(&pool, Rows::InboxMessages, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.process.kill();
    assert_eq!(count(&pool, Rows::Alerts).await, 1);
    let (_, unacked) = bus.pending("crashy").await;
    assert_eq!(unacked, 1, "the message was committed but never acked");

    // After a restart JetStream redelivers it; the inbox recognises it and acks.
    let restarted = TestApp::spawn_on(&db.url, bus.app_options("crashy"))
        .await
        .unwrap();
    bus.wait_all_acked("crashy").await;
    assert_eq!(count(&pool, Rows::Alerts).await, 1);
    assert_eq!(count(&pool, Rows::Notifications).await, 2);
    assert_eq!(count(&pool, Rows::Deliveries).await, 2);
    assert_eq!(count(&pool, Rows::InboxMessages).await, 1);
    drop(restarted);
    bus.delete().await;
}

#[tokio::test]
async fn the_subject_decides_the_tenant_and_message_ids_are_per_tenant() {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let app = TestApp::spawn_on(&db.url, bus.app_options("tenants"))
        .await
        .unwrap();
    let (a, b) = (app.create_tenant().await, app.create_tenant().await);

    // A publisher on a's subject cannot act as b by naming b in the body.
    let message = alert()
        .recipients(&["ann", "bob"])
        .payload(json!({"amount_cents": 500}))
        .build();
    let mut claims_b = message.clone();
    claims_b["tenant_id"] = json!(b.id);
    bus.publish(&a.id, &claims_b, Some("forged")).await;
    bus.wait_all_acked("tenants").await;
    wait_for_count(&pool, Rows::RejectedInboxMessages, 1).await;
    assert_eq!(count(&pool, Rows::Alerts).await, 0);

    // The same message id from two tenants is two messages: a cannot
    // pre-claim b's ids.
    bus.publish(&a.id, &message, Some("run-1")).await;
    bus.publish(&b.id, &message, Some("run-1")).await;
    bus.wait_all_acked("tenants").await;
    wait_for_count(&pool, Rows::Alerts, 2).await;
    for tenant in [&a, &b] {
        let alerts = app.tenant(tenant).list_deliveries("").expect(200).await;
        assert_eq!(alerts["data"].as_array().map(Vec::len), Some(2), "{alerts}");
    }
    drop(app);
    bus.delete().await;
}

#[tokio::test]
async fn a_tenants_messages_take_its_writes_bucket_and_come_back_once_it_allows() {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let mut options = bus.app_options("limited");
    // One write per 100 s: the bucket cannot refill during the test.
    options.env.extend(
        [
            ("TIDINGS_RATE_LIMITS", "true"),
            ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
            ("TIDINGS_RATE_WRITES_BURST", "1"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let app = TestApp::spawn_on(&db.url, options).await.unwrap();
    let (a, b) = (app.create_tenant().await, app.create_tenant().await);
    // A's one write goes over HTTP: the inbox shares the bucket.
    app.tenant(&a)
        .create_event(&json!({"team_id": "t", "type": "t", "payload": {}}))
        .expect(201)
        .await;
    let message = alert()
        .recipients(&["ann", "bob"])
        .payload(json!({"amount_cents": 500}))
        .build();
    bus.publish(&a.id, &message, Some("a-1")).await;
    bus.publish(&b.id, &message, Some("b-1")).await;
    // B's message is handled while A's keeps coming back refused.
    wait_for_count(&pool, Rows::Alerts, 1).await;
    let refused = tidings_tests::eventually(Duration::from_secs(30), || async {
        let text = app.scrape().await;
        text.lines().any(|l| {
            l.strip_prefix(r#"tidings_limit_refusals_total{limit="writes"} "#)
                .and_then(|n| n.parse::<f64>().ok())
                .is_some_and(|n| n >= 2.0)
        })
    })
    .await;
    assert!(refused, "A's message was refused, and came back");
    let a_alerts = app.tenant(&a).list_deliveries("").expect(200).await;
    assert_eq!(
        a_alerts["data"].as_array().map(Vec::len),
        Some(0),
        "{a_alerts}"
    );

    // Given room, A's message is created on its next delivery.
    app.admin()
        .set_rate_limits(&a.id, &json!({"writes": {"per_second": 100, "burst": 100}}))
        .expect(200)
        .await;
    wait_for_count(&pool, Rows::Alerts, 2).await;
    bus.wait_all_acked("limited").await;
    drop(app);
    bus.delete().await;
}

/// Inbox messages of one tenant, by outcome.
async fn inbox_outcomes(pool: &sqlx::PgPool, tenant: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT outcome::text, error FROM inbox_messages WHERE tenant_id = $1::uuid ORDER BY outcome, error",
    )
    .bind(tenant)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn one_tenants_message_id_never_makes_jetstream_drop_another_tenants_message() {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let app = TestApp::spawn_on(&db.url, bus.app_options("ids"))
        .await
        .unwrap();
    let (a, b) = (app.create_tenant().await, app.create_tenant().await);
    let message = alert().recipients(&["ann"]).build();

    // A names its message by JetStream's header, which JetStream dedupes
    // across the whole stream, every tenant's subjects together: the inbox
    // refuses it, so no publisher keeps using it.
    bus.publish_with_header(&a.id, &message, Some(("Nats-Msg-Id", "run-1")))
        .await;
    // B, at once (inside any duplicate window), with the same id by the
    // inbox's header, twice: JetStream keeps both, and the inbox takes one.
    bus.publish(&b.id, &message, Some("run-1")).await;
    bus.publish(&b.id, &message, Some("run-1")).await;
    // And A's own "run-1" by the inbox's header is A's, not B's.
    bus.publish(&a.id, &message, Some("run-1")).await;
    bus.wait_all_acked("ids").await;

    let a_rows = inbox_outcomes(&pool, &a.id).await;
    assert_eq!(a_rows.len(), 2, "{a_rows:?}");
    assert!(
        a_rows.iter().any(
            |(o, e)| o == "rejected" && e.as_deref().is_some_and(|e| e.contains("Nats-Msg-Id"))
        ),
        "{a_rows:?}"
    );
    assert!(a_rows.iter().any(|(o, _)| o == "created"), "{a_rows:?}");
    let b_rows = inbox_outcomes(&pool, &b.id).await;
    assert_eq!(b_rows, [("created".to_owned(), None)], "{b_rows:?}");
    for tenant in [&a, &b] {
        let alerts = app.tenant(tenant).list_deliveries("").expect(200).await;
        assert_eq!(alerts["data"].as_array().map(Vec::len), Some(1), "{alerts}");
    }
    drop(app);
    bus.delete().await;
}

#[tokio::test]
async fn a_message_that_panics_in_handling_is_dead_lettered_and_the_consumer_goes_on_for_every_tenant(
) {
    let bus = Bus::new().await;
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let mut options = bus.app_options("poisoned");
    options
        .env
        .push(("TIDINGS_TEST_PANIC_ON".into(), "poison-pill".into()));
    let app = TestApp::spawn_on(&db.url, options).await.unwrap();
    let (a, b) = (app.create_tenant().await, app.create_tenant().await);

    let poisoned = alert().entity("poison-pill").recipients(&["ann"]).build();
    bus.publish(&a.id, &poisoned, Some("poisoned")).await;
    for (tenant, entity) in [(&a, "after-a"), (&b, "after-b")] {
        let message = alert().entity(entity).recipients(&["ann"]).build();
        bus.publish(&tenant.id, &message, None).await;
    }
    // Every message is settled: the poisoned one terminated, not
    // redelivered forever, and the others handled after it.
    bus.wait_all_acked("poisoned").await;
    wait_for_count(&pool, Rows::Alerts, 2).await;
    let a_rows = inbox_outcomes(&pool, &a.id).await;
    assert!(
        a_rows
            .iter()
            .any(|(o, e)| o == "rejected" && e.as_deref().is_some_and(|e| e.contains("panicked"))),
        "{a_rows:?}"
    );
    for tenant in [&a, &b] {
        let alerts = app.tenant(tenant).list_deliveries("").expect(200).await;
        assert_eq!(alerts["data"].as_array().map(Vec::len), Some(1), "{alerts}");
    }
    // Still consuming: a later message of each tenant is taken too.
    for (tenant, entity) in [(&a, "later-a"), (&b, "later-b")] {
        let message = alert().entity(entity).recipients(&["ann"]).build();
        bus.publish(&tenant.id, &message, None).await;
    }
    wait_for_count(&pool, Rows::Alerts, 4).await;
    drop(app);
    bus.delete().await;
}
