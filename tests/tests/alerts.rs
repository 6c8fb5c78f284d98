//! Transactional alerts, the write path: notification keys (one per tenant,
//! event type, entity, recipient, channel), the outbox rows written with them,
//! Idempotency-Key semantics, team expansion, and the operator endpoints.

use std::{sync::Arc, time::Duration};

use serde_json::{json, Value};
use tidings_tests::{
    alert,
    client::{Reply, TenantApi},
    sql::{self, Rows},
    user_with_email, AlertBody, AppOptions, TenantFixture,
};

/// Adds members through the API, as a tenant's backend would.
async fn add_members(api: &TenantApi<'_>, team: &str, users: &[String]) {
    for user in users {
        api.put_member(team, user).expect(201).await;
    }
}

/// Invoice 42 as a sender writes it, with a subject and a payload: the alert
/// of these tests.
fn invoice() -> AlertBody {
    alert()
        .subject("Invoice 42 is overdue")
        .payload(json!({"amount_cents": 1200, "currency": "EUR"}))
}

/// A tenant whose `emailed` users have addresses and whose one webhook
/// endpoint takes every event type.
async fn subscribed_tenant(emailed: &[&str]) -> TenantFixture {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for user in emailed {
        user_with_email(&api, user, Some(&format!("{user}@example.com"))).await;
    }
    api.create_endpoint(&json!({"url": "https://example.com/h"}))
        .expect(201)
        .await;
    f
}

/// Posts `alert` 100 times at once, under Idempotency-Key `key` if any: each
/// answer is 202, or 409 while a request with the same key is in flight.
async fn hundred_at_once(
    f: &Arc<TenantFixture>,
    alert: &Value,
    key: Option<&'static str>,
) -> Vec<Reply> {
    let statuses: &'static [u16] = if key.is_some() { &[202, 409] } else { &[202] };
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (f, alert) = (f.clone(), alert.clone());
        set.spawn(async move {
            let mut call = f.api().create_alert(&alert);
            if let Some(key) = key {
                call = call.idempotency_key(key);
            }
            call.reply_one_of(statuses).await
        });
    }
    let mut replies = Vec::new();
    while let Some(reply) = set.join_next().await {
        replies.push(reply.unwrap());
    }
    replies
}

/// Posts `alert` under Idempotency-Key `key` in the background; the answer
/// must have `status`.
fn post_in_background(
    f: &Arc<TenantFixture>,
    alert: &Value,
    key: &'static str,
    status: u16,
) -> tokio::task::JoinHandle<Reply> {
    let (f, alert) = (f.clone(), alert.clone());
    tokio::spawn(async move {
        f.api()
            .create_alert(&alert)
            .idempotency_key(key)
            .reply(status)
            .await
    })
}

/// `alert` posted again under `key` answers `stored`, marked as a replay.
async fn assert_replays(api: &TenantApi<'_>, alert: &Value, key: &str, stored: &Value) {
    let replay = api
        .create_alert(alert)
        .idempotency_key(key)
        .reply(202)
        .await;
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(&replay.json(), stored);
}

#[tokio::test]
async fn one_event_on_three_channels_for_three_recipients_makes_nine_deliveries() {
    // Workers off: this test looks at what the alert's transaction wrote, before
    // any delivery attempt changes it (tests/tests/end_to_end.rs delivers).
    let f = TenantFixture::spawn_with(AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")])).await;
    let (pool, tenant, api) = (&f.pool, &f.tenant, f.api());
    for user in ["ann", "bob", "cat"] {
        user_with_email(&api, user, Some(&format!("{user}@example.com"))).await;
    }
    let endpoint = api
        .create_endpoint(&json!({"url": "http://127.0.0.1:9/hook"}))
        .expect(201)
        .await;

    let body = api
        .create_alert(
            &invoice()
                .recipients(&["ann", "bob", "cat"])
                .channels(&["email", "in_app", "webhook"])
                .build(),
        )
        .expect(202)
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

    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 9);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 9);
    assert_eq!(
        sql::deliveries_by_channel_and_status(pool, tenant).await,
        vec![
            ("email".into(), "pending".into(), 3),
            ("in_app".into(), "sent".into(), 3),
            ("webhook".into(), "pending".into(), 3)
        ]
    );
    let webhook_targets =
        sql::deliveries_to_endpoint(pool, tenant, endpoint["id"].as_str().unwrap()).await;
    assert_eq!(webhook_targets, 3);
    assert_eq!(sql::count_for(pool, Rows::InboxItems, tenant).await, 3);

    // GET shows every delivery with its state.
    let alert = api
        .get_alert(body["alert_id"].as_str().unwrap())
        .expect(200)
        .await;
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
    let f = TenantFixture::spawn().await;
    let (app, pool, tenant) = (&f.app, &f.pool, &f.tenant);
    let api = f.api();
    let alert = invoice().recipients(&["ann", "bob"]).build();
    let first = api.create_alert(&alert).expect(202).await;
    let again = api.create_alert(&alert).expect(202).await;
    assert!(
        again["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "duplicate"),
        "{again}"
    );
    assert_eq!(again["alert_id"], first["alert_id"]);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 2);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 2);
    assert_eq!(sql::count_for(pool, Rows::Alerts, tenant).await, 1);

    // A partial overlap creates a new alert holding only the new key.
    let more = api
        .create_alert(&invoice().recipients(&["ann", "bob", "cat"]).build())
        .expect(202)
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
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 3);

    // Another tenant's identical alert is its own notification (the tenant is in the key).
    let other = app.create_tenant().await;
    let theirs = app.tenant(&other).create_alert(&alert).expect(202).await;
    assert!(theirs["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "created"));
}

#[tokio::test]
async fn email_without_address_and_webhook_without_endpoint_are_skipped_with_the_reason() {
    let f = TenantFixture::spawn().await;
    let (pool, tenant) = (&f.pool, &f.tenant);
    let api = f.api();
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    user_with_email(&api, "bob", None).await;
    // An endpoint for other event types only: not subscribed.
    api.create_endpoint(&json!({"url": "https://example.com/h", "event_types": ["user.signup"]}))
        .expect(201)
        .await;
    let body = api
        .create_alert(
            &invoice()
                .recipients(&["ann", "bob"])
                .channels(&["email", "webhook"])
                .build(),
        )
        .expect(202)
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
    let reasons = sql::skipped_reasons(pool, tenant).await;
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons
        .iter()
        .all(|(_, _, e)| e.as_deref().is_some_and(|e| !e.is_empty())));
    assert_eq!(
        sql::count_for(pool, Rows::WebhookDeliveriesWithoutEndpoint, tenant).await,
        2
    );
}

#[tokio::test]
async fn invalid_alerts_get_problems_and_store_nothing() {
    let f = TenantFixture::spawn().await;
    let (app, pool, tenant) = (&f.app, &f.pool, &f.tenant);
    let api = f.api();
    let mut both = invoice().recipients(&["a"]).build();
    both["team_id"] = json!("t");
    let mut neither = invoice().recipients(&["a"]).build();
    neither.as_object_mut().unwrap().remove("recipients");
    let too_many: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let big_payload = invoice()
        .recipients(&["a"])
        .payload(json!({"x": "y".repeat(17 * 1024)}))
        .build();
    let array_payload = invoice().recipients(&["a"]).payload(json!([1, 2])).build();
    let empty_event = invoice().recipients(&["a"]).event_type("").build();
    let mut unknown_field = alert()
        .event_type("e")
        .entity("x")
        .recipients(&["a"])
        .build();
    unknown_field["extra"] = json!(1);
    for (bad, status) in [
        (both, 422),
        (neither, 422),
        (invoice().recipients(&too_many).build(), 422),
        (invoice().recipients(&["a"]).channels(&[]).build(), 422),
        (invoice().recipients::<&str>(&[]).build(), 422),
        (
            invoice().recipients(&["a"]).channels(&["push"]).build(),
            400,
        ),
        (big_payload, 422),
        (array_payload, 422),
        (empty_event, 422),
        (unknown_field, 400),
    ] {
        api.create_alert(&bad).problem(status).await;
    }
    // Exactly 1,000 distinct recipients (after deduplication) are fine.
    let thousand: Vec<String> = (0..1000)
        .map(|i| format!("u{i}"))
        .chain(["u0".to_string()])
        .collect();
    let ok = api
        .create_alert(&invoice().recipients(&thousand).build())
        .expect(202)
        .await;
    assert_eq!(ok["deliveries"].as_array().unwrap().len(), 1000);
    assert_eq!(
        sql::count_for(pool, Rows::Notifications, tenant).await,
        1000
    );
    // Unauthenticated: 401.
    app.anonymous()
        .tenant()
        .create_alert(&invoice().recipients(&["a"]).build())
        .problem(401)
        .await;
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_without_a_key_notify_once() {
    let f = Arc::new(subscribed_tenant(&["ann", "bob"]).await);
    let alert = invoice()
        .recipients(&["ann", "bob"])
        .channels(&["email", "in_app", "webhook"])
        .build();
    let mut created_per_key = std::collections::HashMap::<String, usize>::new();
    for reply in hundred_at_once(&f, &alert, None).await {
        for d in reply.json()["deliveries"].as_array().unwrap() {
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
    let (pool, tenant) = (&f.pool, &f.tenant);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 6);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 6);
    assert_eq!(sql::count_for(pool, Rows::Alerts, tenant).await, 1);
}

/// Invariant 4 at the rows, under overlapping concurrent alerts: exactly
/// one notification per natural key, every delivery and in-app item tied to
/// the notification its alert created (migration 0020 dropped the foreign
/// keys and the index by alert; the retention purge finds an alert's
/// notifications by its event type and entity), and a full replay answers
/// with the alert that first created the keys, writing nothing.
#[tokio::test]
async fn overlapping_concurrent_alerts_leave_one_notification_per_key_and_replay_the_original() {
    let f = Arc::new(subscribed_tenant(&[]).await);
    let first = f
        .api()
        .create_alert(
            &invoice()
                .recipients(&["ann", "bob"])
                .channels(&["in_app", "webhook"])
                .build(),
        )
        .expect(202)
        .await;
    let wider = invoice()
        .recipients(&["ann", "bob", "cat", "dan"])
        .channels(&["in_app", "webhook"])
        .build();
    let replies = hundred_at_once(&f, &wider, None).await;
    let created: usize = replies
        .iter()
        .map(|r| {
            r.json()["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["status"] == "created")
                .count()
        })
        .sum();
    assert_eq!(created, 4, "cat's and dan's two keys, created once each");
    let (pool, tenant) = (&f.pool, &f.tenant);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 8);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 8);
    assert_eq!(sql::count_for(pool, Rows::InboxItems, tenant).await, 4);
    assert_eq!(sql::count_for(pool, Rows::Alerts, tenant).await, 2);
    assert_eq!(sql::alert_rows_astray(pool, tenant).await, (0, 0, 0, 0));

    // A full replay of either alert creates nothing and answers with the
    // alert that first created any of its keys: the first one.
    for alert in [
        invoice()
            .recipients(&["ann", "bob"])
            .channels(&["in_app", "webhook"])
            .build(),
        wider,
    ] {
        let again = f.api().create_alert(&alert).expect(202).await;
        assert!(
            again["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d["status"] == "duplicate"),
            "{again}"
        );
        assert_eq!(again["alert_id"], first["alert_id"]);
    }
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 8);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 8);
    assert_eq!(sql::count_for(pool, Rows::InboxItems, tenant).await, 4);
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_with_one_key_notify_once_and_replay_the_first_answer()
{
    let f = Arc::new(subscribed_tenant(&["ann"]).await);
    let alert = invoice()
        .recipients(&["ann", "bob"])
        .channels(&["email", "in_app", "webhook"])
        .build();
    let mut fresh = Vec::new();
    let mut replays = Vec::new();
    for reply in hundred_at_once(&f, &alert, Some("retry-me-1")).await {
        let body = reply.json();
        match reply.status {
            202 if reply.header("idempotency-replayed").is_some() => replays.push(body),
            202 => fresh.push(body),
            _ => assert!(
                reply.header("retry-after").is_some(),
                "409 must carry Retry-After: {body}"
            ),
        }
    }
    assert_eq!(fresh.len(), 1, "exactly one request did the work");
    for replay in &replays {
        assert_eq!(
            replay, &fresh[0],
            "a replay answers exactly what the first request answered"
        );
    }
    assert_eq!(
        sql::count_for(&f.pool, Rows::Notifications, &f.tenant).await,
        6
    );
    assert_eq!(
        sql::count_for(&f.pool, Rows::Deliveries, &f.tenant).await,
        6
    );
    // Now that it is done, the same key replays the stored answer.
    assert_replays(&f.api(), &alert, "retry-me-1", &fresh[0]).await;
}

#[tokio::test]
async fn an_idempotency_key_in_flight_is_409_reused_with_another_body_is_422_and_validation_is_not_stored(
) {
    let f = Arc::new(TenantFixture::spawn().await);
    let (pool, tenant) = (&f.pool, &f.tenant);
    let alert = invoice().build();

    // Hold the fan-out lock of this (tenant, event type, entity) from outside, so
    // the first request stays in flight.
    let blocker = sql::hold_alert_entity_lock(pool, tenant, "invoice.overdue", "inv-42").await;
    let first = post_in_background(&f, &alert, "k1", 202);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api = f.api();
    let reply = api
        .create_alert(&alert)
        .idempotency_key("k1")
        .reply(409)
        .await;
    assert_eq!(reply.header("retry-after"), Some("1"));
    let problem = reply.problem();
    assert_eq!(problem["code"], "idempotency_key_in_flight");
    blocker.rollback().await.unwrap();
    let first = first.await.unwrap().json();

    // Same key, other body: 422, nothing stored.
    let other = invoice().recipients(&["zed"]).build();
    let problem = api
        .create_alert(&other)
        .idempotency_key("k1")
        .problem(422)
        .await;
    assert_eq!(problem["code"], "idempotency_key_reused");
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 1);
    // Same key on another tenant is another key.
    let tenant2 = f.app.create_tenant().await;
    let reply = f
        .app
        .tenant(&tenant2)
        .create_alert(&other)
        .idempotency_key("k1")
        .reply(202)
        .await;
    assert!(reply.header("idempotency-replayed").is_none());

    // A validation problem is not stored: fixing the body and retrying with the
    // same key works.
    let mut broken = invoice()
        .entity("inv-43")
        .payload(json!("not an object"))
        .build();
    api.create_alert(&broken)
        .idempotency_key("k2")
        .problem(422)
        .await;
    broken["payload"] = json!({});
    let reply = api
        .create_alert(&broken)
        .idempotency_key("k2")
        .reply(202)
        .await;
    assert!(reply.header("idempotency-replayed").is_none());

    // Header limits.
    api.create_alert(&alert)
        .idempotency_key(&"k".repeat(256))
        .problem(400)
        .await;
    api.create_alert(&alert)
        .idempotency_key(&"k".repeat(255))
        .expect(202)
        .await;
    assert_replays(&api, &alert, "k1", &first).await;
}

#[tokio::test]
async fn a_crashed_first_requests_key_is_taken_over_after_its_lease() {
    let f = Arc::new(
        TenantFixture::spawn_with(AppOptions::env([("TIDINGS_IDEMPOTENCY_LEASE_SECS", "1")])).await,
    );
    let alert = invoice().build();
    let blocker =
        sql::hold_alert_entity_lock(&f.pool, &f.tenant, "invoice.overdue", "inv-42").await;
    // The first request takes the key and then hangs on the lock past its
    // lease: it loses the lease, and its transaction rolls back with a 409.
    let slow = post_in_background(&f, &alert, "k", 409);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The retry takes the expired lease over, and also waits for the lock; its
    // answer is the one stored.
    let retry = post_in_background(&f, &alert, "k", 202);
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.rollback().await.unwrap();
    slow.await.unwrap();
    let stored = retry.await.unwrap().json();
    assert_eq!(
        sql::count_for(&f.pool, Rows::Notifications, &f.tenant).await,
        1
    );
    assert_replays(&f.api(), &alert, "k", &stored).await;
}

#[tokio::test]
async fn idempotency_keys_are_purged_after_their_retention() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_IDEMPOTENCY_RETENTION_SECS", "1"),
        ("TIDINGS_IDEMPOTENCY_PURGE_INTERVAL_SECS", "1"),
    ]))
    .await;
    let (pool, tenant, api) = (&f.pool, &f.tenant, f.api());
    api.create_alert(&invoice().build())
        .idempotency_key("old")
        .expect(202)
        .await;
    let mut left = 1;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = sql::count_for(pool, Rows::IdempotencyKeys, tenant).await;
        if left == 0 {
            break;
        }
    }
    assert_eq!(left, 0, "the key should have been purged");
    // Past retention, the key is new again (the notification is still a duplicate).
    let reply = api
        .create_alert(&invoice().build())
        .idempotency_key("old")
        .reply(202)
        .await;
    assert!(reply.header("idempotency-replayed").is_none());
    assert_eq!(reply.json()["deliveries"][0]["status"], "duplicate");
}

#[tokio::test]
async fn small_teams_are_expanded_inline() {
    let f = TenantFixture::spawn().await;
    let (pool, tenant) = (&f.pool, &f.tenant);
    add_members(
        &f.api(),
        "billing",
        &["ann".into(), "bob".into(), "cat".into()],
    )
    .await;
    let alert = invoice()
        .team("billing")
        .channels(&["in_app", "email"])
        .build();
    let api = f.api();
    let body = api.create_alert(&alert).expect(202).await;
    assert_eq!(body["expansion"], "inline");
    assert_eq!(body["deliveries"].as_array().unwrap().len(), 6);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 6);
    let again = api.create_alert(&alert).expect(202).await;
    assert!(again["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "duplicate"));
    assert_eq!(again["alert_id"], body["alert_id"]);
}

#[tokio::test]
async fn large_teams_are_expanded_in_background_batches_exactly_once_per_key() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_FANOUT_INLINE_MAX", "10"),
        ("TIDINGS_FANOUT_BATCH_SIZE", "7"),
    ]))
    .await;
    let (pool, tenant) = (&f.pool, &f.tenant);
    let members: Vec<String> = (0..53).map(|i| format!("member-{i:03}")).collect();
    add_members(&f.api(), "everyone", &members).await;
    let alert = invoice()
        .team("everyone")
        .channels(&["in_app", "email"])
        .build();
    let api = f.api();

    let wait_done = |alert_id: String| {
        let api = &api;
        async move {
            for _ in 0..100 {
                let body = api.get_alert(&alert_id).expect(200).await;
                if body["expansion"]["done"] == true {
                    return body;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("expansion of {alert_id} did not finish");
        }
    };
    let body = api.create_alert(&alert).expect(202).await;
    assert_eq!(body["expansion"], "background");
    assert_eq!(body["deliveries"].as_array().unwrap().len(), 0);
    let done = wait_done(body["alert_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(done["expansion"]["expanded"], 53);
    let all = api
        .get_alert_page(done["id"].as_str().unwrap(), "?limit=1000")
        .expect(200)
        .await;
    assert_eq!(all["deliveries"].as_array().unwrap().len(), 106);
    assert_eq!(sql::distinct_notified_pairs(pool, tenant).await, 106);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 106);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 106);

    // A re-post expands again and finds every key taken.
    let again = api.create_alert(&alert).expect(202).await;
    let done_again = wait_done(again["alert_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(done_again["deliveries"].as_array().unwrap().len(), 0);
    assert_eq!(sql::count_for(pool, Rows::Notifications, tenant).await, 106);
    assert_eq!(sql::count_for(pool, Rows::Deliveries, tenant).await, 106);
}

#[tokio::test]
async fn users_are_put_read_and_deleted_within_their_tenant() {
    let f = TenantFixture::spawn().await;
    let (app, tenant) = (&f.app, &f.tenant);
    let other = app.create_tenant().await;
    let (ours, theirs) = (app.tenant(tenant), app.tenant(&other));
    user_with_email(&ours, "ann", Some("ann@example.com")).await;
    let ann = ours.get_user("ann").expect(200).await;
    assert_eq!(ann["email"], "ann@example.com");
    theirs.get_user("ann").problem(404).await;
    // PUT replaces: the email is gone when not sent.
    let ann = ours
        .put_user("ann", &json!({"display_name": "Ann"}))
        .expect(200)
        .await;
    assert_eq!(ann["email"], Value::Null);
    for bad in [
        "no-at",
        "a@b@c",
        "two words@x",
        &format!("{}@example.com", "a".repeat(250)),
    ] {
        ours.put_user("ann", &json!({"email": bad}))
            .problem(422)
            .await;
    }
    theirs.delete_user("ann").problem(404).await;
    ours.delete_user("ann").expect(204).await;
    ours.get_user("ann").problem(404).await;
}

#[tokio::test]
async fn webhook_endpoints_have_standard_secrets_rotate_with_grace_and_stay_in_their_tenant() {
    let f = TenantFixture::spawn().await;
    let (app, pool, tenant) = (&f.app, &f.pool, &f.tenant);
    let other = app.create_tenant().await;
    let (ours, theirs) = (app.tenant(tenant), app.tenant(&other));
    let created = ours
        .create_endpoint(&json!({"url": "https://example.com/hook", "description": "billing", "event_types": ["invoice.overdue"]}))
        .expect(201)
        .await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    assert!((24..=64).contains(&raw.len()));
    let id = created["id"].as_str().unwrap();

    let list = ours.list_endpoints().expect(200).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(
        list["data"][0].get("secret").is_none(),
        "secrets are shown only on creation and rotation"
    );
    let their_list = theirs.list_endpoints().expect(200).await;
    assert_eq!(their_list["data"].as_array().unwrap().len(), 0);
    theirs.get_endpoint(id).problem(404).await;

    let rotated = ours.rotate_endpoint_secret(id).expect(200).await;
    assert_ne!(rotated["secret"], created["secret"]);
    let (previous, hours_left) = sql::previous_secret(pool, id).await;
    let previous = previous.expect("the old secret keeps signing during the grace period");
    assert!(
        previous.starts_with("tdenc:v2:") && !previous.contains(&secret[6..]),
        "stored sealed: {previous}"
    );
    assert!((23.9..=24.0).contains(&hours_left), "{hours_left}");
    theirs.rotate_endpoint_secret(id).problem(404).await;

    for bad in [
        "/relative",
        "ftp://example.com/x",
        "https://user:pw@example.com/",
        "nonsense",
    ] {
        ours.create_endpoint(&json!({"url": bad}))
            .problem(422)
            .await;
    }
    theirs.delete_endpoint(id).problem(404).await;
    ours.delete_endpoint(id).expect(204).await;
}

#[tokio::test]
async fn operators_page_through_dead_deliveries_and_requeue_them() {
    let f = TenantFixture::spawn().await;
    let (app, pool, tenant) = (&f.app, &f.pool, &f.tenant);
    let other = app.create_tenant().await;
    let (ours, theirs) = (app.tenant(tenant), app.tenant(&other));
    let users: Vec<String> = (0..5).map(|i| format!("u{i}")).collect();
    for u in &users {
        user_with_email(&ours, u, Some(&format!("{u}@example.com"))).await;
    }
    ours.create_alert(
        &invoice()
            .recipients(&users)
            .channels(&["email", "in_app"])
            .build(),
    )
    .expect(202)
    .await;
    // Play the delivery worker: three emails died, one is being sent.
    let ids = sql::delivery_ids(pool, "email").await;
    sql::stage_dead_deliveries(pool, &ids[..3]).await;
    sql::stage_delivery_in_flight(pool, ids[3]).await;

    let page = |cursor: Option<String>| {
        let mut query = "?status=dead&limit=2".to_string();
        if let Some(c) = cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        ours.list_deliveries(&query).expect(200)
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
        ours.list_deliveries(&format!("?{bad}")).problem(400).await;
    }
    let their_dead = theirs.list_deliveries("?status=dead").expect(200).await;
    assert_eq!(their_dead["data"].as_array().unwrap().len(), 0);

    theirs.retry_delivery(ids[0]).problem(404).await;
    let requeued = ours.retry_delivery(ids[0]).expect(200).await;
    assert_eq!(requeued["status"], "pending");
    assert_eq!(requeued["attempts"], 0);
    let reply = ours.retry_delivery(ids[3]).reply(409).await;
    assert!(reply.header("retry-after").is_some());
    assert_eq!(reply.problem()["code"], "delivery_in_flight");
    let in_app = sql::delivery_ids(pool, "in_app").await[0];
    assert_eq!(
        ours.retry_delivery(in_app).problem(409).await["code"],
        "delivery_not_retryable"
    );
    let pending = ours.retry_delivery(ids[4]).expect(200).await;
    assert_eq!(pending["status"], "pending");
}
