//! What an operator relies on: request ids, metrics, readiness that says what
//! is wrong, and retention.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tidings_tests::{
    alert, eventually,
    sql::{self, Rows},
    user_with_email, AppOptions, TenantFixture, TestApp, METRICS_TOKEN,
};

#[tokio::test]
async fn a_sane_request_id_is_echoed_and_names_the_problem_and_the_log_lines() {
    let opts = AppOptions::env([("TIDINGS_LOG_FORMAT", "json")]);
    let (app, _db) = TestApp::spawn_with(opts).await.unwrap();
    let reply = app
        .raw(Method::GET, "/no/such/route")
        .header("x-request-id", "req-7f3a.9")
        .reply(404)
        .await;
    assert_eq!(reply.header("x-request-id"), Some("req-7f3a.9"));
    assert_eq!(
        reply.problem()["instance"],
        "urn:tidings:request:req-7f3a.9"
    );

    // The handler's own refusal (poem-openapi's path, not the router's).
    let reply = app
        .raw(Method::GET, "/v1/feed")
        .header("x-request-id", "req-unauthorized")
        .reply(401)
        .await;
    assert_eq!(
        reply.problem()["instance"],
        "urn:tidings:request:req-unauthorized"
    );

    let logged = eventually(Duration::from_secs(5), || async {
        app.process.log().lines().any(|line| {
            line.contains("\"request_id\":\"req-7f3a.9\"") && line.contains("\"response\"")
        })
    })
    .await;
    assert!(
        logged,
        "no log line carries the request id:\n{}",
        app.process.log()
    );
}

#[tokio::test]
async fn a_missing_or_unsafe_request_id_is_replaced_by_a_fresh_one() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let first = app.public().live().reply(200).await;
    let second = app.public().live().reply(200).await;
    let (a, b) = (first.header("x-request-id"), second.header("x-request-id"));
    assert!(a.is_some_and(|id| !id.is_empty()), "{:?}", first.headers);
    assert_ne!(a, b, "each request gets its own id");

    for unsafe_id in ["has spaces", "<script>", &"x".repeat(129)] {
        let reply = app
            .raw(Method::GET, "/no/such/route")
            .header("x-request-id", unsafe_id)
            .reply(404)
            .await;
        let echoed = reply
            .header("x-request-id")
            .expect("an id is always echoed");
        assert_ne!(echoed, unsafe_id);
        assert_eq!(
            reply.problem()["instance"],
            format!("urn:tidings:request:{echoed}")
        );
    }
}

async fn scrape(app: &TestApp) -> String {
    let reply = app
        .raw(Method::GET, "/metrics")
        .bearer(METRICS_TOKEN)
        .reply(200)
        .await;
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        reply.headers
    );
    reply.text
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_sample_the_outbox_and_horizon() {
    let opts = AppOptions::env([("TIDINGS_METRICS_SAMPLE_SECS", "1")]);
    let (app, _db) = TestApp::spawn_with(opts).await.unwrap();
    let tenant = app.create_tenant().await;
    // Two different alert ids: one route template, one series.
    for id in [
        "0190a0b0-0000-7000-8000-000000000001",
        "0190a0b0-0000-7000-8000-000000000002",
    ] {
        app.tenant(&tenant).get_alert(id).problem(404).await;
    }
    let text = scrape(&app).await;
    assert!(
        text.contains(
            r#"tidings_http_request_duration_seconds_count{method="GET",route="/v1/alerts/:param0",status="404"} 2"#
        ),
        "{text}"
    );
    assert!(!text.contains("0190a0b0-"), "raw paths never become labels");
    let sampled = eventually(Duration::from_secs(10), || async {
        let text = scrape(&app).await;
        text.contains(r#"tidings_outbox_deliveries{channel="webhook",status="pending"} 0"#)
            && text.contains("tidings_feed_horizon_lag_seconds ")
            && text.contains(r#"tidings_db_pool_connections{state="max"} "#)
            && text.contains(r#"tidings_listen_up{channel="tidings_cache"} 1"#)
    })
    .await;
    assert!(sampled, "{}", scrape(&app).await);
}

#[tokio::test]
async fn metrics_can_be_kept_off_the_api_listener() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let (app, _db) =
        TestApp::spawn_with(AppOptions::env([("TIDINGS_METRICS_LISTEN", addr.as_str())]))
            .await
            .unwrap();
    app.raw(Method::GET, "/metrics")
        .bearer(METRICS_TOKEN)
        .problem(404)
        .await;
    let scrape = |token: Option<&'static str>| {
        let url = format!("http://{addr}/metrics");
        async move {
            let mut request = reqwest::Client::new().get(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let reply = request.send().await.unwrap();
            (reply.status().as_u16(), reply.text().await.unwrap())
        }
    };
    // The token, when set, is asked for there too.
    assert_eq!(scrape(None).await.0, 401);
    let (status, text) = scrape(Some(METRICS_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("tidings_http_request_duration_seconds"),
        "{text}"
    );
}

#[tokio::test]
async fn readiness_names_a_listen_connection_that_stays_down() {
    let opts = AppOptions::env([
        ("TIDINGS_TEST_LISTEN_REFUSED", "1"),
        ("TIDINGS_READY_LISTEN_DOWN_SECS", "1"),
    ]);
    let (app, _db) = TestApp::spawn_with(opts).await.unwrap();
    let failed = eventually(Duration::from_secs(10), || async {
        app.public().ready().reply_one_of(&[200, 503]).await.status == 503
    })
    .await;
    assert!(failed, "readiness never noticed the LISTEN outage");
    let body = app.public().ready().expect(503).await;
    assert_eq!(body["check"], "listen", "{body}");
    assert!(
        body["status"]
            .as_str()
            .unwrap()
            .contains("LISTEN on tidings_"),
        "{body}"
    );
}

#[tokio::test]
async fn retention_purges_what_is_done_and_old_and_an_old_cursor_pages_to_the_end() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_RETENTION_DELIVERED_SECS", "1"),
        ("TIDINGS_RETENTION_INTERVAL_SECS", "1"),
        // Small batches: every purge takes several.
        ("TIDINGS_RETENTION_BATCH", "2"),
        ("TIDINGS_RETENTION_PAUSE_MS", "0"),
    ]))
    .await;
    let api = f.api();
    api.put_member("ops", "ann").expect(201).await;
    for n in 0..5 {
        api.create_event(&json!({"team_id": "ops", "type": "deploy", "payload": {"n": n}}))
            .expect(201)
            .await;
    }
    // In-app (sent at once) for three users; email: bob's waits (no SMTP
    // server), ann's and cat's are skipped (no address), and all three are
    // then made dead, which is kept 90 days.
    user_with_email(&api, "bob", Some("bob@example.com")).await;
    let build_failed = |entity: &str| {
        alert()
            .event_type("build.failed")
            .entity(entity)
            .recipients(&["ann", "bob", "cat"])
            .payload(json!({"build": entity}))
    };
    api.create_alert(&build_failed("b-1").build())
        .expect(202)
        .await;
    api.create_alert(&build_failed("b-2").channels(&["email"]).build())
        .expect(202)
        .await;
    let emails = sql::delivery_ids(&f.pool, "email").await;
    assert_eq!(emails.len(), 3);
    sql::stage_dead_deliveries(&f.pool, &emails).await;

    sql::until_all_served().await;
    let token = f.token("ann").await;
    let page = f.app.user(&token).feed("?limit=2").expect(200).await;
    let old_cursor = page["next_before"]
        .as_str()
        .expect("more pages")
        .to_string();

    // Sent and skipped deliveries go, with their notifications and the
    // alert whose every notification went; the dead one stays (90 days).
    let purged = eventually(Duration::from_secs(20), || async {
        sql::count(&f.pool, Rows::Deliveries).await == 3
    })
    .await;
    assert!(
        purged,
        "deliveries left: {}",
        sql::count(&f.pool, Rows::Deliveries).await
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            sql::count(&f.pool, Rows::Notifications).await == 3
                && sql::count(&f.pool, Rows::Alerts).await == 1
        })
        .await,
        "dead deliveries keep their notifications and alert, the rest go"
    );
    // The feed is kept until the tenant says otherwise.
    assert_eq!(sql::count(&f.pool, Rows::Events).await, 5);
    assert_eq!(sql::count(&f.pool, Rows::InboxItems).await, 3);

    let admin = f.app.admin();
    let tenant = &f.tenant.id;
    admin
        .set_feed_retention(tenant, &json!({"feed_retention_secs": 0}))
        .problem(400)
        .await;
    admin
        .set_feed_retention(
            "0190a0b0-0000-7000-8000-000000000009",
            &json!({"feed_retention_secs": 60}),
        )
        .problem(404)
        .await;
    let set = admin
        .set_feed_retention(tenant, &json!({"feed_retention_secs": 1}))
        .expect(200)
        .await;
    assert_eq!(set["feed_retention_secs"], 1);
    let feed_purged = eventually(Duration::from_secs(20), || async {
        sql::count(&f.pool, Rows::Events).await == 0
            && sql::count(&f.pool, Rows::InboxItems).await == 0
    })
    .await;
    assert!(
        feed_purged,
        "events and in-app items past the tenant's retention go"
    );

    // A cursor from before the purge pages to the end, cleanly, both ways.
    let older = f
        .app
        .user(&token)
        .feed(&format!("?limit=2&before={old_cursor}"))
        .expect(200)
        .await;
    assert_eq!(older["items"], json!([]), "{older}");
    assert!(older["next_before"].is_null(), "{older}");
    let newer = f
        .app
        .user(&token)
        .feed(&format!("?limit=2&after={old_cursor}"))
        .expect(200)
        .await;
    assert_eq!(newer["items"], json!([]), "{newer}");
}
