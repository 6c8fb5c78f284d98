//! Limits per tenant and per user (ARCHITECTURE.md, invariant 11 and
//! "Limits per tenant"): rate limits answer 429 with `Retry-After` and the
//! `RateLimit` headers without touching another tenant or user, an operator
//! overrides them per tenant, one tenant's burst queues behind its own share of
//! the pool, a busy entity is refused rather than waited for, and the session
//! timeouts bound every statement. Timings are not asserted here
//! (`scripts/bench --only isolation` measures them).

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{
    alert,
    client::Reply,
    sql::{self, Rows},
    AppOptions, TenantFixture, TestApp,
};

/// A server with rate limits on (the harness turns them off) and `env`.
fn limited(env: &[(&str, &str)]) -> AppOptions {
    let mut all = vec![("TIDINGS_RATE_LIMITS", "true")];
    all.extend_from_slice(env);
    AppOptions::env(all)
}

fn event(team: &str) -> Value {
    json!({"team_id": team, "type": "t", "payload": {}})
}

/// The `r=` of bucket `name` in a `RateLimit` header.
fn remaining(reply: &Reply, name: &str) -> Option<u64> {
    let header = reply.header("ratelimit")?;
    header.split(',').find_map(|item| {
        let mut params = item.trim().split(';');
        (params.next()? == format!("\"{name}\""))
            .then(|| params.find_map(|p| p.strip_prefix("r=").and_then(|r| r.parse().ok())))
            .flatten()
    })
}

/// A 429 as the limits promise it: problem `rate_limited`, Retry-After of at
/// least a second, and the empty bucket's state in the headers.
fn assert_limited(reply: &Reply, bucket: &str, quota: u32) {
    let retry: u64 = reply
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in whole seconds");
    assert!(retry >= 1, "Retry-After {retry}");
    assert_eq!(
        remaining(reply, bucket),
        Some(0),
        "{:?}",
        reply.header("ratelimit")
    );
    let policy = reply.header("ratelimit-policy").unwrap_or_default();
    assert!(
        policy.contains(&format!("\"{bucket}\";q={quota};w=")),
        "{policy}"
    );
    let problem = reply.problem();
    assert_eq!(problem["code"], "rate_limited", "{problem}");
    assert_eq!(problem["status"], 429);
}

#[tokio::test]
async fn a_tenant_over_its_write_rate_gets_429_with_headers_and_another_tenant_is_served() {
    // One token every 100 s: the bucket cannot refill during the test.
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
        ("TIDINGS_RATE_WRITES_BURST", "3"),
    ]))
    .await;
    let api = f.api();
    for left in [2, 1, 0] {
        let reply = api.create_event(&event("team")).reply(201).await;
        assert_eq!(remaining(&reply, "writes"), Some(left));
        assert!(reply.header("ratelimit-policy").is_some());
    }
    // Events and alerts share the bucket; a refused request stores nothing.
    let refused = api.create_event(&event("team")).reply(429).await;
    assert_limited(&refused, "writes", 3);
    let refused = api
        .create_alert(&alert().entity("inv-1").build())
        .reply(429)
        .await;
    assert_limited(&refused, "writes", 3);
    assert_eq!(sql::count_for(&f.pool, Rows::Events, &f.tenant).await, 3);
    assert_eq!(sql::count_for(&f.pool, Rows::Alerts, &f.tenant).await, 0);
    // Reads of the same tenant have buckets of their own.
    api.get_user("nobody").problem(404).await;

    let other = f.app.create_tenant().await;
    let reply = f
        .app
        .tenant(&other)
        .create_event(&event("team"))
        .reply(201)
        .await;
    assert_eq!(remaining(&reply, "writes"), Some(2));
}

#[tokio::test]
async fn one_user_cannot_use_up_the_tenants_reads_and_the_tenant_has_a_ceiling_too() {
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_USER_READS_PER_SEC", "0.01"),
        ("TIDINGS_RATE_USER_READS_BURST", "2"),
        ("TIDINGS_RATE_READS_PER_SEC", "0.01"),
        ("TIDINGS_RATE_READS_BURST", "4"),
    ]))
    .await;
    let (ann, bob, cat) = (
        f.token("ann").await,
        f.token("bob").await,
        f.token("cat").await,
    );
    let reply = f.app.user(&ann).feed("").reply(200).await;
    assert_eq!(remaining(&reply, "user_reads"), Some(1));
    assert_eq!(remaining(&reply, "reads"), Some(3));
    f.app.user(&ann).counts().expect(200).await;
    let refused = f.app.user(&ann).feed("").reply(429).await;
    assert_limited(&refused, "user_reads", 2);

    // Ann's refusal cost the tenant nothing: Bob has his two.
    f.app.user(&bob).feed("").expect(200).await;
    let reply = f.app.user(&bob).feed("").reply(200).await;
    assert_eq!(remaining(&reply, "reads"), Some(0));
    // The tenant's reads are used up, whoever asks next.
    let refused = f.app.user(&cat).feed("").reply(429).await;
    assert_limited(&refused, "reads", 4);

    // Another tenant's users are not held back.
    let other = f.app.create_tenant().await;
    let dan = f.app.user_token(&other, "dan").await;
    f.app.user(&dan).feed("").expect(200).await;
}

#[tokio::test]
async fn a_backends_reads_with_its_api_key_have_a_bucket_of_their_own() {
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_KEY_READS_PER_SEC", "0.01"),
        ("TIDINGS_RATE_KEY_READS_BURST", "3"),
        ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
        ("TIDINGS_RATE_WRITES_BURST", "2"),
    ]))
    .await;
    let api = f.api();
    for left in [2, 1, 0] {
        let reply = api.list_deliveries("").reply(200).await;
        assert_eq!(remaining(&reply, "key_reads"), Some(left));
    }
    let refused = api.list_deliveries("").reply(429).await;
    assert_limited(&refused, "key_reads", 3);
    // Every read route of the key shares the bucket.
    let refused = api.list_members("t", "").reply(429).await;
    assert_limited(&refused, "key_reads", 3);
    // Writes have their own bucket, untouched by the reads.
    let reply = api.create_event(&event("team")).reply(201).await;
    assert_eq!(remaining(&reply, "writes"), Some(1));
    // Another tenant's backend reads on.
    let other = f.app.create_tenant().await;
    f.app.tenant(&other).list_deliveries("").expect(200).await;
}

#[tokio::test]
async fn stream_connects_have_their_own_bucket_and_a_refused_ticket_is_429_not_401() {
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_USER_STREAMS_PER_SEC", "0.01"),
        ("TIDINGS_RATE_USER_STREAMS_BURST", "2"),
    ]))
    .await;
    let ann = f.token("ann").await;
    let first = f.app.user(&ann).create_stream_ticket().expect(201).await;
    f.app.user(&ann).create_stream_ticket().expect(201).await;
    // The stream takes a user token or a ticket: a ticket over the limit is
    // answered for the limit, not for the credential that was not sent.
    let ticket = first["ticket"].as_str().expect("ticket");
    let refused = f
        .app
        .raw(Method::GET, &format!("/v1/feed/stream?ticket={ticket}"))
        .reply(429)
        .await;
    assert_limited(&refused, "user_stream_connects", 2);
    // Reads are another bucket.
    f.app.user(&ann).feed("").expect(200).await;
}

/// The value of metric `series` (name and labels) in the server's `/metrics`.
async fn metric(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.scrape().await;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_refused_request_is_answered_only_after_a_pause() {
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
        ("TIDINGS_RATE_WRITES_BURST", "1"),
        ("TIDINGS_RATE_REFUSAL_HOLD_MS", "1500"),
    ]))
    .await;
    f.api().create_event(&event("team")).expect(201).await;
    // Retry-After is 100 s here: the pause is the configured cap.
    let asked = std::time::Instant::now();
    let refused = f.api().create_event(&event("team")).reply(429).await;
    assert!(
        asked.elapsed() >= Duration::from_millis(1500),
        "answered after {:?}",
        asked.elapsed()
    );
    assert_limited(&refused, "writes", 1);
}

#[tokio::test]
async fn held_refusals_are_bounded_per_tenant_and_another_tenant_is_answered_meanwhile() {
    // Held for a minute: the held requests stay pending for the whole test.
    let f = Arc::new(
        TenantFixture::spawn_with(limited(&[
            ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
            ("TIDINGS_RATE_WRITES_BURST", "1"),
            ("TIDINGS_RATE_REFUSAL_HOLD_MS", "60000"),
            ("TIDINGS_RATE_REFUSALS_HELD_PER_TENANT", "2"),
        ]))
        .await,
    );
    f.api().create_event(&event("team")).expect(201).await;
    let held: Vec<_> = (0..2)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.api().create_event(&event("team")).reply(429).await })
        })
        .collect();
    let both_held = tidings_tests::eventually(Duration::from_secs(30), || async {
        metric(&f.app, "tidings_limit_refusals_held").await == Some(2.0)
    })
    .await;
    assert!(both_held, "two refusals are held");

    // A third refusal of the same tenant is over its held cap: answered at
    // once, while the two held ones are still waiting.
    let at_once = f
        .api()
        .create_alert(&alert().entity("inv-1").build())
        .reply(429)
        .await;
    assert_limited(&at_once, "writes", 1);
    assert_eq!(
        metric(&f.app, "tidings_limit_refusals_unheld_total").await,
        Some(1.0)
    );
    // Another tenant is served, and its own refusal is held apart from A's.
    let other = f.app.create_tenant().await;
    f.app
        .tenant(&other)
        .create_event(&event("team"))
        .expect(201)
        .await;
    let other_refused = {
        let app_tenant = other.clone();
        let f = f.clone();
        tokio::spawn(async move {
            f.app
                .tenant(&app_tenant)
                .create_event(&event("team"))
                .reply(429)
                .await
        })
    };
    let three_held = tidings_tests::eventually(Duration::from_secs(30), || async {
        metric(&f.app, "tidings_limit_refusals_held").await == Some(3.0)
    })
    .await;
    assert!(three_held, "B's refusal is held though A's cap is reached");
    // Reads and unmetered requests of either tenant are answered meanwhile.
    let token = f.app.user_token(&other, "bea").await;
    f.app.user(&token).feed("").expect(200).await;
    f.api().get_user("nobody").problem(404).await;
    assert!(
        held.iter().all(|h| !h.is_finished()) && !other_refused.is_finished(),
        "the held refusals are still waiting"
    );
    for h in held {
        h.abort();
    }
    other_refused.abort();
}

#[tokio::test]
async fn a_refused_request_is_answered_without_its_body_being_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A body that never arrives would be waited for up to the body timeout
    // (then 408) if it were read before the refusal.
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
        ("TIDINGS_RATE_WRITES_BURST", "1"),
        ("TIDINGS_HTTP_BODY_TIMEOUT_SECS", "600"),
    ]))
    .await;
    f.api().create_event(&event("team")).expect(201).await;
    let addr = f
        .app
        .base_url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut socket = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"team_id\":",
        f.tenant.api_key
    );
    socket.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 12];
    tokio::time::timeout(Duration::from_secs(120), socket.read_exact(&mut answer))
        .await
        .expect("answered before the body arrived")
        .expect("an answer");
    assert_eq!(String::from_utf8_lossy(&answer), "HTTP/1.1 429");
    // The tenant's admitted writes still read their bodies.
    assert_eq!(sql::count_for(&f.pool, Rows::Events, &f.tenant).await, 1);
}

#[tokio::test]
async fn an_operator_sets_a_tenants_own_rates_and_can_return_it_to_the_defaults() {
    let f = TenantFixture::spawn_with(limited(&[
        ("TIDINGS_RATE_WRITES_PER_SEC", "0.01"),
        ("TIDINGS_RATE_WRITES_BURST", "2"),
    ]))
    .await;
    let admin = f.app.admin();
    let shown = admin.rate_limits(&f.tenant.id).expect(200).await;
    assert_eq!(
        shown["writes"],
        json!({"per_second": 0.01, "burst": 2, "own": false})
    );
    assert_eq!(shown["enforced"], true);

    let set = admin
        .set_rate_limits(
            &f.tenant.id,
            &json!({"writes": {"per_second": 0.01, "burst": 5}, "user_reads": {"per_second": 0, "burst": 1}}),
        )
        .expect(200)
        .await;
    assert_eq!(
        set["writes"],
        json!({"per_second": 0.01, "burst": 5, "own": true})
    );
    assert_eq!(set["user_reads"]["own"], true);
    assert_eq!(set["reads"]["own"], false);
    assert_eq!(admin.rate_limits(&f.tenant.id).expect(200).await, set);

    for _ in 0..5 {
        f.api().create_event(&event("team")).expect(201).await;
    }
    let refused = f.api().create_event(&event("team")).reply(429).await;
    assert_limited(&refused, "writes", 5);
    // Another tenant keeps the server's default.
    let other = f.app.create_tenant().await;
    for _ in 0..2 {
        f.app
            .tenant(&other)
            .create_event(&event("t"))
            .expect(201)
            .await;
    }
    f.app
        .tenant(&other)
        .create_event(&event("t"))
        .problem(429)
        .await;

    // Out of range (too slow for the bucket's clock too: 1e-11 panicked
    // it, 1e-300 was enforced as unlimited), or unknown: refused, nothing
    // changed.
    for bad in [
        json!({"writes": {"per_second": 1, "burst": 0}}),
        json!({"writes": {"per_second": -1, "burst": 1}}),
        json!({"writes": {"per_second": 1e9, "burst": 1}}),
        json!({"writes": {"per_second": 1e-11, "burst": 1}}),
        json!({"writes": {"per_second": 1e-300, "burst": 1}}),
        json!({"reads": {"per_second": 1, "burst": 2_000_000}}),
    ] {
        let problem = admin.set_rate_limits(&f.tenant.id, &bad).problem(422).await;
        assert_eq!(problem["code"], "invalid_rate_limit", "{problem}");
    }
    admin
        .set_rate_limits(
            &f.tenant.id,
            &json!({"bucket": {"per_second": 1, "burst": 1}}),
        )
        .problem(400)
        .await;
    assert_eq!(admin.rate_limits(&f.tenant.id).expect(200).await, set);
    let problem = admin
        .set_rate_limits(uuid::Uuid::now_v7(), &json!({}))
        .problem(404)
        .await;
    assert_eq!(problem["code"], "tenant_not_found");

    // An empty set returns every bucket to the defaults.
    let reset = admin
        .set_rate_limits(&f.tenant.id, &json!({}))
        .expect(200)
        .await;
    assert_eq!(reset["writes"]["own"], false);
    assert_eq!(reset["user_reads"]["own"], false);
    // A bucket whose rate changed starts full: the default's two, then no more.
    for _ in 0..2 {
        f.api().create_event(&event("team")).expect(201).await;
    }
    let refused = f.api().create_event(&event("team")).reply(429).await;
    assert_limited(&refused, "writes", 2);
}

#[tokio::test]
async fn one_tenants_flood_of_slow_requests_queues_behind_its_share_and_another_tenant_is_served() {
    // 12 connections, a quarter each: tenant A's alerts wait on a held entity
    // lock (lock_timeout is long here), at most 3 of them on connections.
    let f = Arc::new(
        TenantFixture::spawn_with(AppOptions::env([
            ("TIDINGS_DB_MAX_CONNECTIONS", "12"),
            ("TIDINGS_DB_TENANT_SHARE_PERCENT", "25"),
            ("TIDINGS_DB_LOCK_TIMEOUT_MS", "30000"),
        ]))
        .await,
    );
    let blocker = sql::hold_alert_entity_lock(&f.pool, &f.tenant, "invoice.overdue", "hot").await;
    let flood: Vec<_> = (0..12)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move {
                f.api()
                    .create_alert(&alert().entity("hot").build())
                    .reply_one_of(&[202, 503])
                    .await
                    .status
            })
        })
        .collect();
    let mut waiting = 0;
    for _ in 0..100 {
        waiting = sql::advisory_lock_waiters(&f.pool).await;
        if waiting >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiting, 3, "A's share holds three connections");

    // Tenant B reads and writes while A's flood is queued.
    let other = f.app.create_tenant().await;
    let b = f.app.tenant(&other);
    for i in 0..5 {
        b.get_user("nobody").problem(404).await;
        b.create_event(&event(&format!("team-{i}")))
            .expect(201)
            .await;
    }
    let token = f.app.user_token(&other, "bea").await;
    f.app.user(&token).feed("").expect(200).await;
    assert_eq!(
        sql::advisory_lock_waiters(&f.pool).await,
        3,
        "A never held more than its share"
    );

    blocker.rollback().await.expect("rollback");
    let statuses: Vec<u16> = futures::future::join_all(flood)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    // Those that waited for a permit longer than the pool's acquire timeout
    // were told to come back; none failed otherwise.
    assert!(statuses.contains(&202), "{statuses:?}");
    assert_eq!(
        sql::count_for(&f.pool, Rows::Notifications, &f.tenant).await,
        1
    );
}

#[tokio::test]
async fn an_alert_for_a_busy_entity_is_refused_with_409_and_retry_after_and_stores_nothing() {
    let f =
        TenantFixture::spawn_with(AppOptions::env([("TIDINGS_DB_LOCK_TIMEOUT_MS", "200")])).await;
    let blocker = sql::hold_alert_entity_lock(&f.pool, &f.tenant, "invoice.overdue", "inv-7").await;
    let reply = f
        .api()
        .create_alert(&alert().entity("inv-7").build())
        .idempotency_key("k-7")
        .reply(409)
        .await;
    assert_eq!(reply.header("retry-after"), Some("1"));
    let problem = reply.problem();
    assert_eq!(problem["code"], "entity_busy", "{problem}");
    assert_eq!(problem["type"], "urn:tidings:problem:entity_busy");
    for rows in [
        Rows::Alerts,
        Rows::Notifications,
        Rows::InboxItems,
        Rows::IdempotencyKeys,
    ] {
        assert_eq!(
            sql::count_for(&f.pool, rows, &f.tenant).await,
            0,
            "{rows:?}"
        );
    }
    // Other entities of the tenant are not held up.
    f.api()
        .create_alert(&alert().entity("inv-8").build())
        .expect(202)
        .await;

    blocker.rollback().await.expect("rollback");
    // The key was released with the refusal: the retry is a first attempt.
    let reply = f
        .api()
        .create_alert(&alert().entity("inv-7").build())
        .idempotency_key("k-7")
        .reply(202)
        .await;
    assert!(reply.header("idempotency-replayed").is_none());
    assert_eq!(reply.json()["deliveries"][0]["status"], "created");
}

#[tokio::test]
async fn statement_and_lock_timeouts_end_a_request_that_would_wait_with_503() {
    let (app, db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_DB_STATEMENT_TIMEOUT_MS", "300"),
        ("TIDINGS_DB_LOCK_TIMEOUT_MS", "0"),
    ]))
    .await
    .expect("spawn");
    // The same database, bounded by lock_timeout alone.
    let by_lock = TestApp::spawn_on(
        &db.url,
        AppOptions::env([
            ("TIDINGS_DB_STATEMENT_TIMEOUT_MS", "0"),
            ("TIDINGS_DB_LOCK_TIMEOUT_MS", "300"),
        ]),
    )
    .await
    .expect("second instance");
    let pool = db.pool().await.expect("pool");
    let tenant = app.create_tenant().await;
    app.tenant(&tenant)
        .put_user("ann", &json!({"email": null, "display_name": "Ann"}))
        .expect(200)
        .await;

    let blocker = sql::hold_table_lock(&pool, "users").await;
    for server in [&app, &by_lock] {
        let reply = server.tenant(&tenant).get_user("ann").reply(503).await;
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(reply.problem()["code"], "database_timeout");
    }
    blocker.rollback().await.expect("rollback");
    for server in [&app, &by_lock] {
        server.tenant(&tenant).get_user("ann").expect(200).await;
    }
}
