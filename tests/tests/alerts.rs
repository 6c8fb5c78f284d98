//! Transactional alerts, the write path: notification keys (one per tenant,
//! event type, entity, recipient, channel), the outbox rows written with them,
//! Idempotency-Key semantics, team expansion, and the operator endpoints.

use std::time::Duration;

use reqwest::Response;
use serde_json::{json, Value};
use sqlx::PgPool;
use tidings_tests::{expect_problem, AppOptions, TestApp, TestTenant};

async fn post_alert(
    app: &TestApp,
    tenant: &TestTenant,
    body: &Value,
    key: Option<&str>,
) -> Response {
    let mut req = app
        .client
        .post(app.url("/v1/alerts"))
        .bearer_auth(&tenant.api_key)
        .json(body);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    req.send().await.expect("POST /v1/alerts")
}

async fn accepted(resp: Response) -> Value {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(status, 202, "expected 202: {body}");
    serde_json::from_str(&body).expect("JSON body")
}

async fn put_user(app: &TestApp, tenant: &TestTenant, user: &str, email: Option<&str>) {
    let resp = app
        .client
        .put(app.url(&format!("/v1/users/{user}")))
        .bearer_auth(&tenant.api_key)
        .json(&json!({"email": email, "display_name": user}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "{}",
        resp.text().await.unwrap_or_default()
    );
}

async fn create_endpoint(app: &TestApp, tenant: &TestTenant, body: Value) -> Value {
    let resp = app
        .client
        .post(app.url("/v1/webhook-endpoints"))
        .bearer_auth(&tenant.api_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        201,
        "{}",
        resp.text().await.unwrap_or_default()
    );
    resp.json().await.unwrap()
}

async fn count(pool: &PgPool, sql: &str, tenant: &TestTenant) -> i64 {
    sqlx::query_scalar(sql)
        .bind(uuid::Uuid::parse_str(&tenant.id).unwrap())
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn notifications(pool: &PgPool, tenant: &TestTenant) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM notifications WHERE tenant_id = $1",
        tenant,
    )
    .await
}

async fn deliveries(pool: &PgPool, tenant: &TestTenant) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM deliveries WHERE tenant_id = $1",
        tenant,
    )
    .await
}

/// Adds members through the API, as a tenant's backend would.
async fn add_members(app: &TestApp, tenant: &TestTenant, team: &str, users: &[String]) {
    for user in users {
        let resp = app
            .client
            .put(app.url(&format!("/v1/teams/{team}/members/{user}")))
            .bearer_auth(&tenant.api_key)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "add member: {}", resp.status());
    }
}

fn invoice_alert(recipients: &[&str], channels: &[&str]) -> Value {
    json!({
        "event_type": "invoice.overdue",
        "entity_id": "inv-42",
        "recipients": recipients,
        "channels": channels,
        "subject": "Invoice 42 is overdue",
        "payload": {"amount_cents": 1200, "currency": "EUR"}
    })
}

#[tokio::test]
async fn one_event_on_three_channels_for_three_recipients_makes_nine_deliveries() {
    // Workers off: this test looks at what the alert's transaction wrote, before
    // any delivery attempt changes it (tests/tests/end_to_end.rs delivers).
    let (app, db) = TestApp::spawn_with(AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")]))
        .await
        .unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    for user in ["ann", "bob", "cat"] {
        put_user(&app, &tenant, user, Some(&format!("{user}@example.com"))).await;
    }
    let endpoint = create_endpoint(&app, &tenant, json!({"url": "http://127.0.0.1:9/hook"})).await;

    let body = accepted(
        post_alert(
            &app,
            &tenant,
            &invoice_alert(&["ann", "bob", "cat"], &["email", "in_app", "webhook"]),
            None,
        )
        .await,
    )
    .await;
    let items = body["deliveries"].as_array().unwrap();
    assert_eq!(items.len(), 9, "{body}");
    assert!(
        items.iter().all(|d| d["status"] == "created"),
        "none may be a duplicate: {body}"
    );
    let keys: std::collections::HashSet<&str> =
        items.iter().map(|d| d["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 9, "the channel is part of the key");
    assert_eq!(body["expansion"], "none");

    assert_eq!(notifications(&pool, &tenant).await, 9);
    assert_eq!(deliveries(&pool, &tenant).await, 9);
    let by_status: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT channel, status, count(*) FROM deliveries WHERE tenant_id = $1 GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(uuid::Uuid::parse_str(&tenant.id).unwrap())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        by_status,
        vec![
            ("email".into(), "pending".into(), 3),
            ("in_app".into(), "sent".into(), 3),
            ("webhook".into(), "pending".into(), 3)
        ]
    );
    let webhook_targets: i64 = count(
        &pool,
        &format!(
            "SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND endpoint_id = '{}'",
            endpoint["id"].as_str().unwrap()
        ),
        &tenant,
    )
    .await;
    assert_eq!(webhook_targets, 3);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM inbox_items WHERE tenant_id = $1",
            &tenant
        )
        .await,
        3
    );

    // GET shows every delivery with its state.
    let alert: Value = app
        .client
        .get(app.url(&format!(
            "/v1/alerts/{}",
            body["alert_id"].as_str().unwrap()
        )))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(alert["deliveries"].as_array().unwrap().len(), 9, "{alert}");
    let in_app = alert["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["channel"] == "in_app")
        .unwrap();
    assert_eq!(in_app["status"], "sent");
    assert!(in_app["sent_at"].is_string());
    assert_eq!(in_app["attempts"], 0);
}

#[tokio::test]
async fn reposting_an_alert_creates_nothing_and_answers_with_the_original_alert() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let alert = invoice_alert(&["ann", "bob"], &["in_app"]);
    let first = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    let again = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    assert!(
        again["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "duplicate"),
        "{again}"
    );
    assert_eq!(again["alert_id"], first["alert_id"]);
    assert_eq!(notifications(&pool, &tenant).await, 2);
    assert_eq!(deliveries(&pool, &tenant).await, 2);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM alerts WHERE tenant_id = $1",
            &tenant
        )
        .await,
        1
    );

    // A partial overlap creates a new alert holding only the new key.
    let more = accepted(
        post_alert(
            &app,
            &tenant,
            &invoice_alert(&["ann", "bob", "cat"], &["in_app"]),
            None,
        )
        .await,
    )
    .await;
    let statuses: Vec<(&str, &str)> = more["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["recipient_id"].as_str().unwrap(),
                d["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("ann", "duplicate"),
            ("bob", "duplicate"),
            ("cat", "created")
        ]
    );
    assert_ne!(more["alert_id"], first["alert_id"]);
    assert_eq!(notifications(&pool, &tenant).await, 3);

    // Another tenant's identical alert is its own notification (the tenant is in the key).
    let other = app.create_tenant().await;
    let theirs = accepted(post_alert(&app, &other, &alert, None).await).await;
    assert!(theirs["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "created"));
}

#[tokio::test]
async fn email_without_address_and_webhook_without_endpoint_are_skipped_with_the_reason() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    put_user(&app, &tenant, "ann", Some("ann@example.com")).await;
    put_user(&app, &tenant, "bob", None).await;
    // An endpoint for other event types only: not subscribed.
    create_endpoint(
        &app,
        &tenant,
        json!({"url": "https://example.com/h", "event_types": ["user.signup"]}),
    )
    .await;
    let body = accepted(
        post_alert(
            &app,
            &tenant,
            &invoice_alert(&["ann", "bob"], &["email", "webhook"]),
            None,
        )
        .await,
    )
    .await;
    let status = |r: &str, c: &str| {
        body["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["recipient_id"] == r && d["channel"] == c)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status("ann", "email"), "created");
    assert_eq!(status("bob", "email"), "skipped");
    assert_eq!(status("ann", "webhook"), "skipped");
    let reasons: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT recipient_id, channel, last_error FROM deliveries WHERE tenant_id = $1 AND status = 'skipped'
          ORDER BY 1, 2",
    )
    .bind(uuid::Uuid::parse_str(&tenant.id).unwrap())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons
        .iter()
        .all(|(_, _, e)| e.as_deref().is_some_and(|e| !e.is_empty())));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND channel = 'webhook' AND endpoint_id IS NULL", &tenant)
            .await,
        2
    );
}

#[tokio::test]
async fn invalid_alerts_get_problems_and_store_nothing() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let mut both = invoice_alert(&["a"], &["in_app"]);
    both["team_id"] = json!("t");
    let mut neither = invoice_alert(&["a"], &["in_app"]);
    neither.as_object_mut().unwrap().remove("recipients");
    let too_many: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    let mut big_payload = invoice_alert(&["a"], &["in_app"]);
    big_payload["payload"] = json!({"x": "y".repeat(17 * 1024)});
    let mut array_payload = invoice_alert(&["a"], &["in_app"]);
    array_payload["payload"] = json!([1, 2]);
    let mut empty_event = invoice_alert(&["a"], &["in_app"]);
    empty_event["event_type"] = json!("");
    for (bad, status) in [
        (both, 422),
        (neither, 422),
        (invoice_alert(&too_many, &["in_app"]), 422),
        (invoice_alert(&["a"], &[]), 422),
        (invoice_alert(&[], &["in_app"]), 422),
        (invoice_alert(&["a"], &["push"]), 400),
        (big_payload, 422),
        (array_payload, 422),
        (empty_event, 422),
        (
            json!({"event_type": "e", "entity_id": "x", "recipients": ["a"], "channels": ["in_app"], "payload": {}, "extra": 1}),
            400,
        ),
    ] {
        let resp = post_alert(&app, &tenant, &bad, None).await;
        expect_problem(resp, status).await;
    }
    // Exactly 1,000 distinct recipients (after deduplication) are fine.
    let thousand: Vec<String> = (0..1000)
        .map(|i| format!("u{i}"))
        .chain(["u0".to_string()])
        .collect();
    let thousand: Vec<&str> = thousand.iter().map(String::as_str).collect();
    let ok =
        accepted(post_alert(&app, &tenant, &invoice_alert(&thousand, &["in_app"]), None).await)
            .await;
    assert_eq!(ok["deliveries"].as_array().unwrap().len(), 1000);
    assert_eq!(notifications(&pool, &tenant).await, 1000);
    // Unauthenticated: 401.
    let resp = app
        .client
        .post(app.url("/v1/alerts"))
        .json(&invoice_alert(&["a"], &["in_app"]))
        .send()
        .await
        .unwrap();
    expect_problem(resp, 401).await;
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_without_a_key_notify_once() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    put_user(&app, &tenant, "ann", Some("ann@example.com")).await;
    put_user(&app, &tenant, "bob", Some("bob@example.com")).await;
    create_endpoint(&app, &tenant, json!({"url": "https://example.com/h"})).await;
    let alert = invoice_alert(&["ann", "bob"], &["email", "in_app", "webhook"]);
    let app = std::sync::Arc::new(app);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (app, tenant, alert) = (app.clone(), tenant.clone(), alert.clone());
        set.spawn(async move { accepted(post_alert(&app, &tenant, &alert, None).await).await });
    }
    let mut created_per_key = std::collections::HashMap::<String, usize>::new();
    while let Some(body) = set.join_next().await {
        for d in body.unwrap()["deliveries"].as_array().unwrap() {
            let created = usize::from(d["status"] == "created");
            *created_per_key
                .entry(d["key"].as_str().unwrap().to_owned())
                .or_default() += created;
        }
    }
    assert_eq!(created_per_key.len(), 6);
    assert!(
        created_per_key.values().all(|&n| n == 1),
        "each key created by exactly one request: {created_per_key:?}"
    );
    assert_eq!(notifications(&pool, &tenant).await, 6);
    assert_eq!(deliveries(&pool, &tenant).await, 6);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM alerts WHERE tenant_id = $1",
            &tenant
        )
        .await,
        1
    );
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_with_one_key_notify_once_and_replay_the_first_answer()
{
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    put_user(&app, &tenant, "ann", Some("ann@example.com")).await;
    create_endpoint(&app, &tenant, json!({"url": "https://example.com/h"})).await;
    let alert = invoice_alert(&["ann", "bob"], &["email", "in_app", "webhook"]);
    let app = std::sync::Arc::new(app);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (app, tenant, alert) = (app.clone(), tenant.clone(), alert.clone());
        set.spawn(async move {
            let resp = post_alert(&app, &tenant, &alert, Some("retry-me-1")).await;
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").is_some();
            let replayed = resp.headers().get("idempotency-replayed").is_some();
            let body: Value = resp.json().await.unwrap();
            (status, retry_after, replayed, body)
        });
    }
    let mut fresh = Vec::new();
    let mut replays = Vec::new();
    while let Some(result) = set.join_next().await {
        let (status, retry_after, replayed, body) = result.unwrap();
        match status {
            202 if replayed => replays.push(body),
            202 => fresh.push(body),
            409 => assert!(retry_after, "409 must carry Retry-After: {body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(fresh.len(), 1, "exactly one request did the work");
    for replay in &replays {
        assert_eq!(
            replay, &fresh[0],
            "a replay answers exactly what the first request answered"
        );
    }
    assert_eq!(notifications(&pool, &tenant).await, 6);
    assert_eq!(deliveries(&pool, &tenant).await, 6);
    // Now that it is done, the same key replays the stored answer.
    let resp = post_alert(&app, &tenant, &alert, Some("retry-me-1")).await;
    assert_eq!(resp.headers().get("idempotency-replayed").unwrap(), "true");
    assert_eq!(accepted(resp).await, fresh[0]);
}

#[tokio::test]
async fn an_idempotency_key_in_flight_is_409_reused_with_another_body_is_422_and_validation_is_not_stored(
) {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let alert = invoice_alert(&["ann"], &["in_app"]);

    // Hold the fan-out lock of this (tenant, event type, entity) from outside, so
    // the first request stays in flight.
    let lock = tidings_core::stable_lock_key(&[&tenant.id, "invoice.overdue", "inv-42"]);
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock)
        .execute(&mut *blocker)
        .await
        .unwrap();
    let app = std::sync::Arc::new(app);
    let first = {
        let (app, tenant, alert) = (app.clone(), tenant.clone(), alert.clone());
        tokio::spawn(
            async move { accepted(post_alert(&app, &tenant, &alert, Some("k1")).await).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resp = post_alert(&app, &tenant, &alert, Some("k1")).await;
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("1".into())
    );
    let problem = expect_problem(resp, 409).await;
    assert_eq!(problem["code"], "idempotency_key_in_flight");
    blocker.rollback().await.unwrap();
    let first = first.await.unwrap();

    // Same key, other body: 422, nothing stored.
    let other = invoice_alert(&["zed"], &["in_app"]);
    let problem = expect_problem(post_alert(&app, &tenant, &other, Some("k1")).await, 422).await;
    assert_eq!(problem["code"], "idempotency_key_reused");
    assert_eq!(notifications(&pool, &tenant).await, 1);
    // Same key on another tenant is another key.
    let tenant2 = app.create_tenant().await;
    let resp = post_alert(&app, &tenant2, &other, Some("k1")).await;
    assert!(resp.headers().get("idempotency-replayed").is_none());
    accepted(resp).await;

    // A validation problem is not stored: fixing the body and retrying with the
    // same key works.
    let mut broken = invoice_alert(&["ann"], &["in_app"]);
    broken["entity_id"] = json!("inv-43");
    broken["payload"] = json!("not an object");
    expect_problem(post_alert(&app, &tenant, &broken, Some("k2")).await, 422).await;
    broken["payload"] = json!({});
    let resp = post_alert(&app, &tenant, &broken, Some("k2")).await;
    assert!(resp.headers().get("idempotency-replayed").is_none());
    accepted(resp).await;

    // Header limits.
    expect_problem(
        post_alert(&app, &tenant, &alert, Some(&"k".repeat(256))).await,
        400,
    )
    .await;
    let replay = post_alert(&app, &tenant, &alert, Some(&"k".repeat(255))).await;
    accepted(replay).await;
    let again = post_alert(&app, &tenant, &alert, Some("k1")).await;
    assert_eq!(again.headers().get("idempotency-replayed").unwrap(), "true");
    assert_eq!(accepted(again).await, first);
}

#[tokio::test]
async fn a_crashed_first_requests_key_is_taken_over_after_its_lease() {
    let (app, db) = TestApp::spawn_with(AppOptions::env([("TIDINGS_IDEMPOTENCY_LEASE_SECS", "1")]))
        .await
        .unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let alert = invoice_alert(&["ann"], &["in_app"]);
    let lock = tidings_core::stable_lock_key(&[&tenant.id, "invoice.overdue", "inv-42"]);
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock)
        .execute(&mut *blocker)
        .await
        .unwrap();
    // The first request takes the key and then hangs on the lock past its lease.
    // The same request under Idempotency-Key "k", sent in the background.
    let post_in_background = || {
        let client = app.client.clone();
        let (url, key, alert) = (app.url("/v1/alerts"), tenant.api_key.clone(), alert.clone());
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "k")
                .json(&alert)
                .send()
                .await
                .unwrap()
        })
    };
    let slow = post_in_background();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The retry takes the expired lease over, and also waits for the lock.
    let retry = post_in_background();
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.rollback().await.unwrap();
    let (slow, retry) = (slow.await.unwrap(), retry.await.unwrap());
    // The first lost its lease: its transaction rolls back with a 409; the
    // retry's answer is the one stored.
    assert_eq!(slow.status(), 409, "{}", slow.text().await.unwrap());
    let stored = accepted(retry).await;
    assert_eq!(notifications(&pool, &tenant).await, 1);
    let replay = post_alert(&app, &tenant, &alert, Some("k")).await;
    assert_eq!(
        replay.headers().get("idempotency-replayed").unwrap(),
        "true"
    );
    assert_eq!(accepted(replay).await, stored);
}

#[tokio::test]
async fn idempotency_keys_are_purged_after_their_retention() {
    let (app, db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_IDEMPOTENCY_RETENTION_SECS", "1"),
        ("TIDINGS_IDEMPOTENCY_PURGE_INTERVAL_SECS", "1"),
    ]))
    .await
    .unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    accepted(
        post_alert(
            &app,
            &tenant,
            &invoice_alert(&["ann"], &["in_app"]),
            Some("old"),
        )
        .await,
    )
    .await;
    let mut left = 1;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = count(
            &pool,
            "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1",
            &tenant,
        )
        .await;
        if left == 0 {
            break;
        }
    }
    assert_eq!(left, 0, "the key should have been purged");
    // Past retention, the key is new again (the notification is still a duplicate).
    let resp = post_alert(
        &app,
        &tenant,
        &invoice_alert(&["ann"], &["in_app"]),
        Some("old"),
    )
    .await;
    assert!(resp.headers().get("idempotency-replayed").is_none());
    let body = accepted(resp).await;
    assert_eq!(body["deliveries"][0]["status"], "duplicate");
}

#[tokio::test]
async fn small_teams_are_expanded_inline() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    add_members(
        &app,
        &tenant,
        "billing",
        &["ann".into(), "bob".into(), "cat".into()],
    )
    .await;
    let mut alert = invoice_alert(&[], &["in_app", "email"]);
    alert.as_object_mut().unwrap().remove("recipients");
    alert["team_id"] = json!("billing");
    let body = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    assert_eq!(body["expansion"], "inline");
    assert_eq!(body["deliveries"].as_array().unwrap().len(), 6);
    assert_eq!(notifications(&pool, &tenant).await, 6);
    let again = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    assert!(again["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "duplicate"));
    assert_eq!(again["alert_id"], body["alert_id"]);
}

#[tokio::test]
async fn large_teams_are_expanded_in_background_batches_exactly_once_per_key() {
    let (app, db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_FANOUT_INLINE_MAX", "10"),
        ("TIDINGS_FANOUT_BATCH_SIZE", "7"),
    ]))
    .await
    .unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let members: Vec<String> = (0..53).map(|i| format!("member-{i:03}")).collect();
    add_members(&app, &tenant, "everyone", &members).await;
    let mut alert = invoice_alert(&[], &["in_app", "email"]);
    alert.as_object_mut().unwrap().remove("recipients");
    alert["team_id"] = json!("everyone");

    let wait_done = |alert_id: String| {
        let (app, tenant) = (&app, &tenant);
        async move {
            for _ in 0..100 {
                let body: Value = app
                    .client
                    .get(app.url(&format!("/v1/alerts/{alert_id}")))
                    .bearer_auth(&tenant.api_key)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if body["expansion"]["done"] == true {
                    return body;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("expansion of {alert_id} did not finish");
        }
    };
    let body = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    assert_eq!(body["expansion"], "background");
    assert_eq!(body["deliveries"].as_array().unwrap().len(), 0);
    let done = wait_done(body["alert_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(done["expansion"]["expanded"], 53);
    assert_eq!(done["deliveries"].as_array().unwrap().len(), 106);
    let distinct: i64 = count(
        &pool,
        "SELECT count(DISTINCT (recipient_id, channel)) FROM notifications WHERE tenant_id = $1",
        &tenant,
    )
    .await;
    assert_eq!(distinct, 106);
    assert_eq!(notifications(&pool, &tenant).await, 106);
    assert_eq!(deliveries(&pool, &tenant).await, 106);

    // A re-post expands again and finds every key taken.
    let again = accepted(post_alert(&app, &tenant, &alert, None).await).await;
    let done_again = wait_done(again["alert_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(done_again["deliveries"].as_array().unwrap().len(), 0);
    assert_eq!(notifications(&pool, &tenant).await, 106);
    assert_eq!(deliveries(&pool, &tenant).await, 106);
}

#[tokio::test]
async fn users_are_put_read_and_deleted_within_their_tenant() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let tenant = app.create_tenant().await;
    let other = app.create_tenant().await;
    put_user(&app, &tenant, "ann", Some("ann@example.com")).await;
    let get = |t: &TestTenant, user: &str| {
        app.client
            .get(app.url(&format!("/v1/users/{user}")))
            .bearer_auth(&t.api_key)
            .send()
    };
    let ann: Value = get(&tenant, "ann").await.unwrap().json().await.unwrap();
    assert_eq!(ann["email"], "ann@example.com");
    expect_problem(get(&other, "ann").await.unwrap(), 404).await;
    // PUT replaces: the email is gone when not sent.
    let resp = app
        .client
        .put(app.url("/v1/users/ann"))
        .bearer_auth(&tenant.api_key)
        .json(&json!({"display_name": "Ann"}))
        .send()
        .await
        .unwrap();
    let ann: Value = resp.json().await.unwrap();
    assert_eq!(ann["email"], Value::Null);
    for bad in [
        "no-at",
        "a@b@c",
        "two words@x",
        &format!("{}@example.com", "a".repeat(250)),
    ] {
        let resp = app
            .client
            .put(app.url("/v1/users/ann"))
            .bearer_auth(&tenant.api_key)
            .json(&json!({"email": bad}))
            .send()
            .await
            .unwrap();
        expect_problem(resp, 422).await;
    }
    let resp = app
        .client
        .delete(app.url("/v1/users/ann"))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap();
    expect_problem(resp, 404).await;
    let resp = app
        .client
        .delete(app.url("/v1/users/ann"))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    expect_problem(get(&tenant, "ann").await.unwrap(), 404).await;
}

#[tokio::test]
async fn webhook_endpoints_have_standard_secrets_rotate_with_grace_and_stay_in_their_tenant() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let other = app.create_tenant().await;
    let created = create_endpoint(&app, &tenant, json!({"url": "https://example.com/hook", "description": "billing", "event_types": ["invoice.overdue"]})).await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    assert!((24..=64).contains(&raw.len()));
    let id = created["id"].as_str().unwrap();

    let list: Value = app
        .client
        .get(app.url("/v1/webhook-endpoints"))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(
        list["data"][0].get("secret").is_none(),
        "secrets are shown only on creation and rotation"
    );
    let theirs: Value = app
        .client
        .get(app.url("/v1/webhook-endpoints"))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["data"].as_array().unwrap().len(), 0);
    let resp = app
        .client
        .get(app.url(&format!("/v1/webhook-endpoints/{id}")))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap();
    expect_problem(resp, 404).await;

    let rotated: Value = app
        .client
        .post(app.url(&format!("/v1/webhook-endpoints/{id}/rotate-secret")))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(rotated["secret"], created["secret"]);
    let (previous, hours_left): (Option<String>, f64) = sqlx::query_as(
        "SELECT previous_secret, EXTRACT(EPOCH FROM previous_secret_expires_at - now())::float8 / 3600
           FROM webhook_endpoints WHERE id = $1::uuid",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        previous.as_deref(),
        Some(secret.as_str()),
        "the old secret keeps signing during the grace period"
    );
    assert!((23.9..=24.0).contains(&hours_left), "{hours_left}");
    let resp = app
        .client
        .post(app.url(&format!("/v1/webhook-endpoints/{id}/rotate-secret")))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap();
    expect_problem(resp, 404).await;

    for bad in [
        "/relative",
        "ftp://example.com/x",
        "https://user:pw@example.com/",
        "nonsense",
    ] {
        let resp = app
            .client
            .post(app.url("/v1/webhook-endpoints"))
            .bearer_auth(&tenant.api_key)
            .json(&json!({"url": bad}))
            .send()
            .await
            .unwrap();
        expect_problem(resp, 422).await;
    }
    let resp = app
        .client
        .delete(app.url(&format!("/v1/webhook-endpoints/{id}")))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap();
    expect_problem(resp, 404).await;
    let resp = app
        .client
        .delete(app.url(&format!("/v1/webhook-endpoints/{id}")))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
}

#[tokio::test]
async fn operators_page_through_dead_deliveries_and_requeue_them() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let other = app.create_tenant().await;
    let users: Vec<String> = (0..5).map(|i| format!("u{i}")).collect();
    for u in &users {
        put_user(&app, &tenant, u, Some(&format!("{u}@example.com"))).await;
    }
    let refs: Vec<&str> = users.iter().map(String::as_str).collect();
    accepted(
        post_alert(
            &app,
            &tenant,
            &invoice_alert(&refs, &["email", "in_app"]),
            None,
        )
        .await,
    )
    .await;
    // Play the delivery worker: three emails died, one is being sent.
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM deliveries WHERE channel = 'email' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    sqlx::query("UPDATE deliveries SET status = 'dead', attempts = 10, last_error = 'HTTP 500' WHERE id = ANY($1)")
        .bind(&ids[..3])
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE deliveries SET status = 'sending', attempts = 1, claimed_until = now() + interval '1 minute' WHERE id = $1")
        .bind(ids[3])
        .execute(&pool)
        .await
        .unwrap();

    let page = |cursor: Option<String>| {
        let mut url = app.url("/v1/deliveries?status=dead&limit=2");
        if let Some(c) = cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let req = app.client.get(url).bearer_auth(&tenant.api_key);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let first = page(None).await;
    assert_eq!(first["data"].as_array().unwrap().len(), 2, "{first}");
    let second = page(first["next_cursor"].as_str().map(str::to_owned)).await;
    assert_eq!(second["data"].as_array().unwrap().len(), 1, "{second}");
    assert!(second["next_cursor"].is_null());
    let seen: Vec<i64> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["data"].as_array().unwrap())
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(seen, ids[..3].to_vec());
    for bad in ["limit=0", "limit=101", "cursor=abc", "status=lost"] {
        let resp = app
            .client
            .get(app.url(&format!("/v1/deliveries?{bad}")))
            .bearer_auth(&tenant.api_key)
            .send()
            .await
            .unwrap();
        expect_problem(resp, 400).await;
    }
    let theirs: Value = app
        .client
        .get(app.url("/v1/deliveries?status=dead"))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["data"].as_array().unwrap().len(), 0);

    let retry = |t: &TestTenant, id: i64| {
        app.client
            .post(app.url(&format!("/v1/deliveries/{id}/retry")))
            .bearer_auth(&t.api_key)
            .send()
    };
    expect_problem(retry(&other, ids[0]).await.unwrap(), 404).await;
    let requeued: Value = retry(&tenant, ids[0]).await.unwrap().json().await.unwrap();
    assert_eq!(requeued["status"], "pending");
    assert_eq!(requeued["attempts"], 0);
    let resp = retry(&tenant, ids[3]).await.unwrap();
    assert!(resp.headers().get("retry-after").is_some());
    assert_eq!(
        expect_problem(resp, 409).await["code"],
        "delivery_in_flight"
    );
    let in_app: i64 =
        sqlx::query_scalar("SELECT id FROM deliveries WHERE channel = 'in_app' LIMIT 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        expect_problem(retry(&tenant, in_app).await.unwrap(), 409).await["code"],
        "delivery_not_retryable"
    );
    let pending: Value = retry(&tenant, ids[4]).await.unwrap().json().await.unwrap();
    assert_eq!(pending["status"], "pending");
}
