//! The activity feed: events stored once, feeds computed at read time, exact
//! paging and polling, monotonic watermarks, sealed tenants, memberships, and
//! cache invalidation across instances (issue 3; ARCHITECTURE.md, invariants 1-3, 9, 10).

use std::time::Duration;

use rand::seq::SliceRandom;
use reqwest::{Method, Response};
use serde_json::{json, Value};
use sqlx::PgPool;
use tidings_core::Position;
use tidings_tests::{expect_problem, AppOptions, TestApp, TestDb, TestTenant};
use uuid::Uuid;

/// One server, one tenant, and shortcuts for its API.
struct Fixture {
    app: TestApp,
    db: TestDb,
    tenant: TestTenant,
}

impl Fixture {
    async fn new() -> Fixture {
        let (app, db) = TestApp::spawn().await.expect("spawn");
        let tenant = app.create_tenant().await;
        Fixture { app, db, tenant }
    }

    fn tenant_id(&self) -> Uuid {
        self.tenant.id.parse().expect("tenant id is a UUID")
    }

    async fn pool(&self) -> PgPool {
        self.db.pool().await.expect("pool")
    }

    async fn token(&self, user: &str) -> String {
        self.app.user_token(&self.tenant, user).await
    }
}

async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    bearer: &str,
    body: Option<Value>,
) -> Response {
    let mut req = app
        .client
        .request(method, app.url(path))
        .bearer_auth(bearer);
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.expect("request")
}

async fn json_ok(resp: Response, status: u16) -> Value {
    let got = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(got, status, "expected {status}, got {got}: {body}");
    if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body).expect("JSON body")
    }
}

async fn join(app: &TestApp, key: &str, team: &str, user: &str) -> Value {
    let resp = send(
        app,
        Method::PUT,
        &format!("/v1/teams/{team}/members/{user}"),
        key,
        None,
    )
    .await;
    let status = resp.status().as_u16();
    assert!(status == 200 || status == 201, "join: {status}");
    resp.json().await.expect("member JSON")
}

async fn leave(app: &TestApp, key: &str, team: &str, user: &str) {
    let resp = send(
        app,
        Method::DELETE,
        &format!("/v1/teams/{team}/members/{user}"),
        key,
        None,
    )
    .await;
    json_ok(resp, 204).await;
}

/// Waits until feeds serve what transaction `tx` wrote: until every transaction
/// that could still write below it has ended (the snapshot's xmin passed it).
/// xmin is cluster-wide, so other tests' open transactions delay it too.
async fn until_served(tx: i64) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&tidings_tests::admin_url())
        .await
        .expect("connect");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let xmin: i64 =
            sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(&mut conn)
                .await
                .expect("xmin");
        if xmin > tx {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "transaction {tx} not served after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Posts an event and waits until feeds serve it.
async fn post_event(app: &TestApp, key: &str, team: &str, kind: &str) -> Value {
    let event = post_event_unsettled(app, key, team, kind).await;
    until_served(position(&event["cursor"]).tx).await;
    event
}

async fn post_event_unsettled(app: &TestApp, key: &str, team: &str, kind: &str) -> Value {
    let body = json!({"team_id": team, "type": kind, "payload": {"n": kind}});
    json_ok(
        send(app, Method::POST, "/v1/events", key, Some(body)).await,
        201,
    )
    .await
}

async fn post_batch(app: &TestApp, key: &str, team: &str, n: usize) -> Vec<Value> {
    let events: Vec<Value> = (0..n)
        .map(|i| json!({"team_id": team, "type": "batch", "payload": {"i": i}}))
        .collect();
    let resp = send(
        app,
        Method::POST,
        "/v1/events/batch",
        key,
        Some(json!({"events": events})),
    )
    .await;
    let body = json_ok(resp, 201).await;
    let events = body["events"].as_array().expect("events").clone();
    until_served(position(&events[0]["cursor"]).tx).await;
    events
}

async fn feed(app: &TestApp, token: &str, query: &str) -> Value {
    json_ok(
        send(app, Method::GET, &format!("/v1/feed{query}"), token, None).await,
        200,
    )
    .await
}

async fn counts(app: &TestApp, token: &str) -> Value {
    json_ok(
        send(app, Method::GET, "/v1/feed/counts", token, None).await,
        200,
    )
    .await
}

async fn mark(app: &TestApp, token: &str, which: &str, up_to: Option<&str>) -> Value {
    let body = match up_to {
        Some(c) => json!({"up_to": c}),
        None => json!({}),
    };
    json_ok(
        send(
            app,
            Method::POST,
            &format!("/v1/feed/{which}"),
            token,
            Some(body),
        )
        .await,
        200,
    )
    .await
}

fn ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_i64().expect("id"))
        .collect()
}

fn position(cursor: &Value) -> Position {
    Position::from_cursor(cursor.as_str().expect("cursor string")).expect("valid cursor")
}

async fn event_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(pool)
        .await
        .expect("count")
}

/// ARCHITECTURE.md, invariant 2. A's transaction takes its transaction id first and
/// commits last; B commits in between. A feed ordered by id or timestamp (the
/// seed article's watermark) would show B, let the reader mark "everything up to
/// B" read, and then A — with a smaller id and an earlier timestamp — would land
/// below that watermark: skipped by `after` polling and counted as read although
/// nobody saw it. Here positions follow commit visibility: B is held back until
/// A has committed (it is above the snapshot's xmin), so the reader never gets a
/// cursor past A, and once A commits the poll returns both, unread.
#[tokio::test]
async fn a_transaction_that_commits_late_is_never_skipped() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    join(&f.app, key, "team", "reader").await;
    let token = f.token("reader").await;
    let c = post_event(&f.app, key, "team", "c").await;

    // A: written by hand in a transaction that stays open.
    let pool = f.pool().await;
    let mut a_tx = pool.begin().await.expect("begin");
    let (a_id, a_txid): (i64, i64) = sqlx::query_as(
        "INSERT INTO events (tenant_id, team_id, type, payload)
         VALUES ($1, 'team', 'a', '{}') RETURNING id, tx",
    )
    .bind(f.tenant_id())
    .fetch_one(&mut *a_tx)
    .await
    .expect("insert A");

    // B: through the API, committed while A is still open.
    let b = post_event_unsettled(&f.app, key, "team", "b").await;
    let b_pos = position(&b["cursor"]);
    assert!(
        b_pos > Position::new(a_txid, a_id),
        "B's position follows A's"
    );
    assert!(
        b["id"].as_i64().expect("id") > a_id,
        "B's id is larger than A's"
    );

    // The reader sees C only: B is committed but above the snapshot's xmin.
    let page = feed(&f.app, &token, "").await;
    assert_eq!(ids(&page), vec![c["id"].as_i64().expect("id")], "{page}");
    let head = page["head"].as_str().expect("head").to_string();
    let marked = mark(&f.app, &token, "read", Some(&head)).await;
    assert_eq!(marked["read"], head);
    // Mark-all without a cursor cannot pass what is served either.
    let marked = mark(&f.app, &token, "read", None).await;
    assert_eq!(marked["read"], head);
    // Nor can the creation cursor of B, which the head clamps.
    let marked = mark(&f.app, &token, "read", b["cursor"].as_str()).await;
    assert_eq!(marked["read"], head);
    assert_eq!(marked["unread_count"], 0);

    a_tx.commit().await.expect("commit A");
    until_served(b_pos.tx).await;

    let poll = feed(&f.app, &token, &format!("?after={head}")).await;
    assert_eq!(
        ids(&poll),
        vec![b["id"].as_i64().expect("id"), a_id],
        "{poll}"
    );
    for item in poll["items"].as_array().expect("items") {
        assert_eq!(item["read"], false, "{item}");
        assert_eq!(item["seen"], false, "{item}");
    }
    assert_eq!(poll["unread_count"], 2);
    assert_eq!(position(&poll["head"]), b_pos);
}

#[tokio::test]
async fn paging_before_and_polling_after_visit_every_item_exactly_once() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    let limit = 5;
    join(&f.app, key, "red", "u").await;
    join(&f.app, key, "blue", "u").await;
    let token = f.token("u").await;
    let pool = f.pool().await;

    let mut expected = Vec::new();
    for i in 0..4 {
        let team = if i % 2 == 0 { "red" } else { "blue" };
        expected.push(
            post_event(&f.app, key, team, "before").await["id"]
                .as_i64()
                .expect("id"),
        );
    }
    // 3 × limit events in one transaction: they share one tx, ordered by id.
    for e in post_batch(&f.app, key, "red", 3 * limit).await {
        expected.push(e["id"].as_i64().expect("id"));
    }
    // Two in-app alerts for the user, merged into the same order.
    for n in 0..2 {
        let (id, tx): (i64, i64) = sqlx::query_as(
            "INSERT INTO inbox_items (tenant_id, recipient_id, notification_key, alert_id, type,
                                      entity_id, subject, payload)
             VALUES ($1, 'u', $2, $3, 'invoice.overdue', 'inv-1', 'Invoice overdue', '{}')
             RETURNING id, tx",
        )
        .bind(f.tenant_id())
        .bind(format!("key-{n}"))
        .bind(Uuid::new_v4())
        .fetch_one(&pool)
        .await
        .expect("alert");
        until_served(tx).await;
        expected.push(id);
    }
    for _ in 0..3 {
        expected.push(
            post_event(&f.app, key, "blue", "after").await["id"]
                .as_i64()
                .expect("id"),
        );
    }
    // Noise the user must not see: another team.
    post_batch(&f.app, key, "green", 7).await;

    // Walk back with `before`.
    let mut walked = Vec::new();
    let mut positions = Vec::new();
    let mut query = format!("?limit={limit}");
    loop {
        let page = feed(&f.app, &token, &query).await;
        assert!(ids(&page).len() <= limit);
        for item in page["items"].as_array().expect("items") {
            walked.push(item["id"].as_i64().expect("id"));
            positions.push(position(&item["cursor"]));
            let source = item["source"].as_str().expect("source");
            assert_eq!(source == "alert", item["team_id"].is_null(), "{item}");
        }
        match page["next_before"].as_str() {
            Some(next) => query = format!("?limit={limit}&before={next}"),
            None => break,
        }
    }
    assert!(
        positions.windows(2).all(|w| w[0] > w[1]),
        "strictly newest first"
    );
    let mut sorted_expected = expected.clone();
    sorted_expected.sort_unstable();
    let mut sorted_walked = walked.clone();
    sorted_walked.sort_unstable();
    assert_eq!(sorted_walked, sorted_expected, "every item exactly once");

    // Poll forward with `after` from the origin, adding items on the way.
    let mut polled = Vec::new();
    let mut cursor = Position::ORIGIN.to_cursor();
    let mut added_midway = false;
    loop {
        let page = feed(&f.app, &token, &format!("?limit={limit}&after={cursor}")).await;
        let got = ids(&page);
        let page_positions: Vec<Position> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| position(&i["cursor"]))
            .collect();
        assert!(
            page_positions.windows(2).all(|w| w[0] > w[1]),
            "newest first"
        );
        if let Some(newest) = page_positions.first() {
            assert_eq!(
                position(&page["head"]),
                *newest,
                "head is the newest returned"
            );
        }
        assert!(page["next_before"].is_null());
        polled.extend(got.iter().copied());
        if !added_midway {
            added_midway = true;
            expected.push(
                post_event(&f.app, key, "red", "midway").await["id"]
                    .as_i64()
                    .expect("id"),
            );
        }
        if got.is_empty() {
            break;
        }
        cursor = page["head"].as_str().expect("head").to_string();
    }
    let mut sorted_polled = polled.clone();
    sorted_polled.sort_unstable();
    let mut sorted_expected = expected.clone();
    sorted_expected.sort_unstable();
    assert_eq!(sorted_polled, sorted_expected, "every item exactly once");
}

#[tokio::test]
async fn watermarks_only_move_forward() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    join(&f.app, key, "team", "u").await;
    let token = f.token("u").await;
    let mut cursors: Vec<String> = post_batch(&f.app, key, "team", 10)
        .await
        .iter()
        .map(|e| e["cursor"].as_str().expect("cursor").to_string())
        .collect();
    for _ in 0..10 {
        let e = post_event(&f.app, key, "team", "single").await;
        cursors.push(e["cursor"].as_str().expect("cursor").to_string());
    }
    let newest = feed(&f.app, &token, "").await["head"]
        .as_str()
        .expect("head")
        .to_string();
    let max_sent = cursors[..15]
        .iter()
        .max_by_key(|c| Position::from_cursor(c).expect("cursor"))
        .expect("some")
        .clone();

    // 50 concurrent calls with shuffled cursors, none beyond the 15th event.
    let mut calls: Vec<String> = (0..50).map(|i| cursors[i % 15].clone()).collect();
    calls.shuffle(&mut rand::thread_rng());
    let results =
        futures::future::join_all(calls.iter().map(|c| mark(&f.app, &token, "read", Some(c))))
            .await;
    assert_eq!(results.len(), 50);
    let after = counts(&f.app, &token).await;
    assert_eq!(after["unread"], 5, "{after}");
    let state = mark(&f.app, &token, "read", Some(&cursors[0])).await;
    assert_eq!(
        state["read"],
        max_sent.as_str(),
        "an old cursor replayed changes nothing"
    );
    assert_eq!(state["unread_count"], 5);

    // Seen, concurrently too, then a replay.
    let seen =
        futures::future::join_all(calls.iter().map(|c| mark(&f.app, &token, "seen", Some(c))))
            .await;
    assert_eq!(seen.len(), 50);
    let state = mark(&f.app, &token, "seen", Some(&cursors[3])).await;
    assert_eq!(state["seen"], max_sent.as_str());

    // A cursor beyond the head is clamped to the head.
    let beyond = Position::new(i64::MAX / 2, 1).to_cursor();
    let state = mark(&f.app, &token, "read", Some(&beyond)).await;
    assert_eq!(state["read"], newest.as_str());
    assert_eq!(state["unread_count"], 0);
    // An event written after that is unread: the watermark did not run ahead.
    let later = post_event(&f.app, key, "team", "later").await;
    let c = counts(&f.app, &token).await;
    assert_eq!(c["unread"], 1, "{c}");
    let page = feed(&f.app, &token, "?limit=1").await;
    assert_eq!(page["items"][0]["id"], later["id"]);
    assert_eq!(page["items"][0]["read"], false);
}

#[tokio::test]
async fn reading_one_item_marks_that_item_only_and_counts_are_capped() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    join(&f.app, key, "team", "u").await;
    let token = f.token("u").await;
    let batch = post_batch(&f.app, key, "team", 1000).await;
    let c = counts(&f.app, &token).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": false}));
    post_event(&f.app, key, "team", "one more").await;
    let c = counts(&f.app, &token).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": true}));

    // Mark all but the newest 3 read, then one of those 3 individually.
    let up_to = batch[997]["cursor"].as_str().expect("cursor");
    let state = mark(&f.app, &token, "read", Some(up_to)).await;
    assert_eq!(state["unread_count"], 3);
    let target = batch[998]["id"].as_i64().expect("id");
    let resp = send(
        &f.app,
        Method::POST,
        &format!("/v1/feed/items/{target}/read"),
        &token,
        None,
    )
    .await;
    let state = json_ok(resp, 200).await;
    assert_eq!(state["unread_count"], 2);
    assert_eq!(state["unseen_count"], 2, "reading implies seeing");
    let page = feed(&f.app, &token, "?limit=3").await;
    let flags: Vec<(i64, bool)> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["id"].as_i64().expect("id"),
                i["read"].as_bool().expect("read"),
            )
        })
        .collect();
    // Newest first: the single event, batch[999], batch[998].
    assert_eq!(flags[2], (target, true));
    assert!(!flags[0].1 && !flags[1].1, "{flags:?}");
    // Marking it again is harmless; an item outside the feed is 404.
    let resp = send(
        &f.app,
        Method::POST,
        &format!("/v1/feed/items/{target}/read"),
        &token,
        None,
    )
    .await;
    assert_eq!(json_ok(resp, 200).await["unread_count"], 2);
    let resp = send(
        &f.app,
        Method::POST,
        "/v1/feed/items/999999999/read",
        &token,
        None,
    )
    .await;
    expect_problem(resp, 404).await;

    // The watermark passing the item prunes it.
    mark(&f.app, &token, "read", None).await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM item_reads")
        .fetch_one(&f.pool().await)
        .await
        .expect("count");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn tenants_are_sealed_and_users_read_only_their_own_feed() {
    let f = Fixture::new().await;
    let a_key = &f.tenant.api_key;
    join(&f.app, a_key, "team", "u1").await;
    let a_event = json_ok(
        send(
            &f.app,
            Method::POST,
            "/v1/events",
            a_key,
            Some(json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "k"})),
        )
        .await,
        201,
    )
    .await;
    until_served(position(&a_event["cursor"]).tx).await;
    let a_token = f.token("u1").await;
    let a_before = feed(&f.app, &a_token, "").await;
    assert_eq!(ids(&a_before).len(), 1);

    // Tenant B: same team name, same user id, same idempotency key.
    let b = f.app.create_tenant().await;
    let b_key = &b.api_key;
    let b_token = f.app.user_token(&b, "u1").await;
    let b_feed = feed(&f.app, &b_token, "").await;
    assert_eq!(ids(&b_feed), Vec::<i64>::new());
    assert!(b_feed["head"].is_null());
    assert_eq!(
        counts(&f.app, &b_token).await,
        json!({"unread": 0, "unseen": 0, "capped": false})
    );
    let listed = json_ok(
        send(&f.app, Method::GET, "/v1/teams/team/members", b_key, None).await,
        200,
    )
    .await;
    assert_eq!(listed["members"], json!([]));
    let resp = send(
        &f.app,
        Method::DELETE,
        "/v1/teams/team/members/u1",
        b_key,
        None,
    )
    .await;
    expect_problem(resp, 404).await;
    let a_id = a_event["id"].as_i64().expect("id");
    let resp = send(
        &f.app,
        Method::POST,
        &format!("/v1/feed/items/{a_id}/read"),
        &b_token,
        None,
    )
    .await;
    expect_problem(resp, 404).await;
    let state = mark(&f.app, &b_token, "read", a_event["cursor"].as_str()).await;
    assert!(
        state["read"].is_null(),
        "clamped to B's empty feed: {state}"
    );
    mark(&f.app, &b_token, "seen", None).await;
    let b_event = json_ok(
        send(
            &f.app,
            Method::POST,
            "/v1/events",
            b_key,
            Some(json!({"team_id": "team", "type": "other", "payload": {"x": 1}, "idempotency_key": "k"})),
        )
        .await,
        201,
    )
    .await;
    assert_ne!(b_event["id"], a_event["id"]);

    // A's user in B's team does not see B's event; A's state is untouched.
    let a_after = feed(&f.app, &a_token, "").await;
    assert_eq!(ids(&a_after), ids(&a_before));
    assert_eq!(a_after["unread_count"], 1);
    assert_eq!(a_after["items"][0]["seen"], false);

    // Another user of tenant A reads their own (empty) feed, and their marks
    // do not touch u1's.
    let u2 = f.token("u2").await;
    assert_eq!(ids(&feed(&f.app, &u2, "").await), Vec::<i64>::new());
    let resp = send(
        &f.app,
        Method::POST,
        &format!("/v1/feed/items/{a_id}/read"),
        &u2,
        None,
    )
    .await;
    expect_problem(resp, 404).await;
    mark(&f.app, &u2, "read", a_event["cursor"].as_str()).await;
    assert_eq!(counts(&f.app, &a_token).await["unread"], 1);

    // Credentials of the wrong kind are refused.
    let resp = send(&f.app, Method::GET, "/v1/feed", a_key, None).await;
    expect_problem(resp, 403).await;
    let resp = send(
        &f.app,
        Method::PUT,
        "/v1/teams/team/members/u9",
        &a_token,
        None,
    )
    .await;
    expect_problem(resp, 403).await;
    let resp = send(
        &f.app,
        Method::POST,
        "/v1/events",
        &a_token,
        Some(json!({"team_id": "team", "type": "t", "payload": {}})),
    )
    .await;
    expect_problem(resp, 403).await;
    let resp = send(
        &f.app,
        Method::GET,
        "/v1/feed/counts",
        "not-a-credential",
        None,
    )
    .await;
    expect_problem(resp, 401).await;
}

#[tokio::test]
async fn membership_decides_what_a_user_sees() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    let token = f.token("u").await;
    post_event(&f.app, key, "team", "before join").await;
    post_event(&f.app, key, "team", "before join").await;

    let resp = send(&f.app, Method::PUT, "/v1/teams/team/members/u", key, None).await;
    let first = json_ok(resp, 201).await;
    let resp = send(&f.app, Method::PUT, "/v1/teams/team/members/u", key, None).await;
    let again = json_ok(resp, 200).await;
    assert_eq!(
        first["joined_cursor"], again["joined_cursor"],
        "re-adding keeps the join position"
    );
    let page = feed(&f.app, &token, "").await;
    assert_eq!(
        ids(&page),
        Vec::<i64>::new(),
        "events before the join stay hidden"
    );

    let e = post_event(&f.app, key, "team", "after join").await;
    assert_eq!(
        ids(&feed(&f.app, &token, "").await),
        vec![e["id"].as_i64().expect("id")]
    );
    assert_eq!(counts(&f.app, &token).await["unread"], 1);

    leave(&f.app, key, "team", "u").await;
    let page = feed(&f.app, &token, "").await;
    assert_eq!(
        ids(&page),
        Vec::<i64>::new(),
        "leaving hides the team's events"
    );
    assert!(page["head"].is_null());
    assert_eq!(
        counts(&f.app, &token).await,
        json!({"unread": 0, "unseen": 0, "capped": false})
    );
    let resp = send(
        &f.app,
        Method::DELETE,
        "/v1/teams/team/members/u",
        key,
        None,
    )
    .await;
    expect_problem(resp, 404).await;

    // Re-joining starts a new join position.
    join(&f.app, key, "team", "u").await;
    assert_eq!(ids(&feed(&f.app, &token, "").await), Vec::<i64>::new());

    // Listing pages through members in user order.
    for user in ["m3", "m1", "m5", "m2", "m4"] {
        join(&f.app, key, "big", user).await;
    }
    let mut seen = Vec::new();
    let mut query = "?limit=2".to_string();
    loop {
        let page = json_ok(
            send(
                &f.app,
                Method::GET,
                &format!("/v1/teams/big/members{query}"),
                key,
                None,
            )
            .await,
            200,
        )
        .await;
        for m in page["members"].as_array().expect("members") {
            seen.push(m["user_id"].as_str().expect("user").to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, vec!["m1", "m2", "m3", "m4", "m5"]);
}

/// ARCHITECTURE.md, invariant 1.
#[tokio::test]
async fn an_event_is_stored_once_whatever_the_team_size() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    let members: Vec<String> = (0..40).map(|i| format!("member-{i}")).collect();
    for m in &members {
        join(&f.app, key, "everyone", m).await;
    }
    let pool = f.pool().await;
    let before = event_rows(&pool).await;
    let e = post_event(&f.app, key, "everyone", "announcement").await;
    assert_eq!(event_rows(&pool).await, before + 1);
    for m in [&members[0], &members[17], &members[39]] {
        let token = f.token(m).await;
        assert_eq!(
            ids(&feed(&f.app, &token, "").await),
            vec![e["id"].as_i64().expect("id")]
        );
    }
}

#[tokio::test]
async fn event_creation_is_idempotent() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    let pool = f.pool().await;
    let body = json!({"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 1, "b": [1, 2]}, "idempotency_key": "key-1"});
    let first = json_ok(
        send(&f.app, Method::POST, "/v1/events", key, Some(body)).await,
        201,
    )
    .await;
    // The same event serialized differently (key order) is a retry.
    let raw = r#"{"payload": {"b": [1, 2], "a": 1}, "idempotency_key": "key-1", "type": "x", "team_id": "t", "actor_id": "a"}"#;
    let resp = f
        .app
        .client
        .post(f.app.url("/v1/events"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .expect("retry");
    let retry = json_ok(resp, 200).await;
    assert_eq!(retry, first);
    // Same key, another body: refused.
    let other = json!({"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 2, "b": [1, 2]}, "idempotency_key": "key-1"});
    let problem = expect_problem(
        send(&f.app, Method::POST, "/v1/events", key, Some(other)).await,
        422,
    )
    .await;
    assert_eq!(problem["code"], "idempotency_key_reused");
    assert_eq!(event_rows(&pool).await, 1);

    // In a batch: a retried key answers the original, a new key is stored.
    let batch = json!({"events": [
        {"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 1, "b": [1, 2]}, "idempotency_key": "key-1"},
        {"team_id": "t", "type": "y", "payload": {}, "idempotency_key": "key-2"},
    ]});
    let out = json_ok(
        send(
            &f.app,
            Method::POST,
            "/v1/events/batch",
            key,
            Some(batch.clone()),
        )
        .await,
        201,
    )
    .await;
    assert_eq!(out["events"][0], first);
    let again = json_ok(
        send(&f.app, Method::POST, "/v1/events/batch", key, Some(batch)).await,
        200,
    )
    .await;
    assert_eq!(again, out);
    assert_eq!(event_rows(&pool).await, 2);
}

/// ARCHITECTURE.md, invariant 10: every bad request is a 4xx problem and nothing
/// stored changes.
#[tokio::test]
async fn bad_input_gets_a_problem_and_changes_nothing() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    join(&f.app, key, "team", "u").await;
    let token = f.token("u").await;
    post_event(&f.app, key, "team", "x").await;
    let head = feed(&f.app, &token, "").await["head"]
        .as_str()
        .expect("head")
        .to_string();
    mark(&f.app, &token, "seen", Some(&head)).await;
    let pool = f.pool().await;

    async fn snapshot(pool: &PgPool) -> (i64, i64, Vec<(i64, i64, i64, i64)>) {
        let events = event_rows(pool).await;
        let members: i64 = sqlx::query_scalar("SELECT count(*) FROM memberships")
            .fetch_one(pool)
            .await
            .expect("count");
        let marks: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT seen_tx, seen_id, read_tx, read_id FROM feed_state ORDER BY user_id",
        )
        .fetch_all(pool)
        .await
        .expect("marks");
        (events, members, marks)
    }
    let before = snapshot(&pool).await;

    let mut tampered = head.clone().into_bytes();
    tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    for query in [
        "?before=garbage".to_string(),
        format!("?after={tampered}"),
        format!("?before={}", &head[..20]),
    ] {
        let p = expect_problem(
            send(
                &f.app,
                Method::GET,
                &format!("/v1/feed{query}"),
                &token,
                None,
            )
            .await,
            400,
        )
        .await;
        assert_eq!(p["code"], "invalid_cursor", "{query}");
    }
    for query in ["?limit=0", "?limit=101", "?limit=-1", "?limit=ten"] {
        expect_problem(
            send(
                &f.app,
                Method::GET,
                &format!("/v1/feed{query}"),
                &token,
                None,
            )
            .await,
            400,
        )
        .await;
    }
    let both = format!("?before={head}&after={head}");
    expect_problem(
        send(
            &f.app,
            Method::GET,
            &format!("/v1/feed{both}"),
            &token,
            None,
        )
        .await,
        400,
    )
    .await;
    for which in ["read", "seen"] {
        let p = expect_problem(
            send(
                &f.app,
                Method::POST,
                &format!("/v1/feed/{which}"),
                &token,
                Some(json!({"up_to": tampered})),
            )
            .await,
            400,
        )
        .await;
        assert_eq!(p["code"], "invalid_cursor");
        expect_problem(
            send(
                &f.app,
                Method::POST,
                &format!("/v1/feed/{which}"),
                &token,
                Some(json!({"up_to": head, "extra": 1})),
            )
            .await,
            400,
        )
        .await;
    }

    let too_big = "x".repeat(16 * 1024);
    let bad_events = [
        (
            json!({"team_id": "team", "type": "t", "payload": [1, 2]}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": "text"}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {"big": too_big}}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {}, "unknown": 1}),
            400,
        ),
        (
            json!({"team_id": "te\u{1}am", "type": "t", "payload": {}}),
            400,
        ),
        (json!({"team_id": "team", "type": "", "payload": {}}), 400),
        (
            json!({"team_id": "team", "type": "t", "actor_id": "x".repeat(256), "payload": {}}),
            400,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "a\nb"}),
            400,
        ),
        (json!({"type": "t", "payload": {}}), 400),
    ];
    for (body, status) in bad_events {
        let resp = send(&f.app, Method::POST, "/v1/events", key, Some(body.clone())).await;
        expect_problem(resp, status).await;
    }
    for raw in [
        r#"{"team_id": "team", "type": "t", "payload": {}"#,
        "not json",
        "",
    ] {
        let resp = f
            .app
            .client
            .post(f.app.url("/v1/events"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .expect("send");
        expect_problem(resp, 400).await;
    }
    // Batches: too many, one bad event, one reused key — all or nothing.
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"team_id": "team", "type": "t", "payload": {}}))
        .collect();
    let resp = send(
        &f.app,
        Method::POST,
        "/v1/events/batch",
        key,
        Some(json!({"events": many})),
    )
    .await;
    let status = resp.status().as_u16();
    assert!((400..500).contains(&status), "1,001 events: {status}");
    expect_problem(resp, status).await;
    let resp = send(
        &f.app,
        Method::POST,
        "/v1/events/batch",
        key,
        Some(json!({"events": []})),
    )
    .await;
    expect_problem(resp, 422).await;
    let one_bad = json!({"events": [
        {"team_id": "team", "type": "t", "payload": {}},
        {"team_id": "team", "type": "t", "payload": 5},
    ]});
    let p = expect_problem(
        send(&f.app, Method::POST, "/v1/events/batch", key, Some(one_bad)).await,
        422,
    )
    .await;
    assert!(
        p["detail"].as_str().expect("detail").contains("events[1]"),
        "{p}"
    );
    json_ok(
        send(
            &f.app,
            Method::POST,
            "/v1/events",
            key,
            Some(json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "kk"})),
        )
        .await,
        201,
    )
    .await;
    let before = (before.0 + 1, before.1, before.2);
    let reused = json!({"events": [
        {"team_id": "team", "type": "t", "payload": {}},
        {"team_id": "team", "type": "t", "payload": {"changed": true}, "idempotency_key": "kk"},
    ]});
    expect_problem(
        send(&f.app, Method::POST, "/v1/events/batch", key, Some(reused)).await,
        422,
    )
    .await;

    // Ids in paths: control characters, and limits on member lists.
    expect_problem(
        send(
            &f.app,
            Method::PUT,
            "/v1/teams/te%01am/members/u",
            key,
            None,
        )
        .await,
        400,
    )
    .await;
    expect_problem(
        send(
            &f.app,
            Method::DELETE,
            "/v1/teams/team/members/u%7F",
            key,
            None,
        )
        .await,
        400,
    )
    .await;
    expect_problem(
        send(
            &f.app,
            Method::GET,
            "/v1/teams/team/members?limit=0",
            key,
            None,
        )
        .await,
        400,
    )
    .await;
    expect_problem(
        send(
            &f.app,
            Method::GET,
            "/v1/teams/team/members?cursor=%%%",
            key,
            None,
        )
        .await,
        400,
    )
    .await;
    expect_problem(
        send(
            &f.app,
            Method::POST,
            "/v1/feed/items/abc/read",
            &token,
            None,
        )
        .await,
        400,
    )
    .await;

    assert_eq!(snapshot(&pool).await, before, "nothing stored changed");
    assert!(!f.app.log().contains("internal error"), "{}", f.app.log());
}

/// Two instances on one database: a membership change through one reaches the
/// other's cache through LISTEN/NOTIFY.
#[tokio::test]
async fn a_removal_reaches_every_instance_within_a_second() {
    let (one, db) = TestApp::spawn().await.expect("spawn");
    let two = TestApp::spawn_on(&db.url, AppOptions::default())
        .await
        .expect("second instance");
    let tenant = one.create_tenant().await;
    let key = &tenant.api_key;
    join(&one, key, "team", "u").await;
    let e = post_event(&one, key, "team", "x").await;
    let token = one.user_token(&tenant, "u").await;
    // Instance two caches u's teams (only while its listener is up).
    assert!(
        two.log().contains("cache invalidation listener up"),
        "{}",
        two.log()
    );
    for _ in 0..3 {
        assert_eq!(
            ids(&feed(&two, &token, "").await),
            vec![e["id"].as_i64().expect("id")]
        );
    }

    leave(&one, key, "team", "u").await;
    let removed_at = std::time::Instant::now();
    let hidden = loop {
        let page = feed(&two, &token, "").await;
        let c = counts(&two, &token).await;
        if ids(&page).is_empty() && c["unread"] == 0 {
            break true;
        }
        if removed_at.elapsed() > Duration::from_secs(1) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(hidden, "instance two still shows the team after 1 s");

    // Joining another team through instance one shows up on two as well.
    join(&one, key, "other", "u").await;
    let e2 = post_event(&one, key, "other", "y").await;
    let joined_at = std::time::Instant::now();
    let shown = loop {
        if ids(&feed(&two, &token, "").await) == vec![e2["id"].as_i64().expect("id")] {
            break true;
        }
        if joined_at.elapsed() > Duration::from_secs(1) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(shown, "instance two does not show the new team after 1 s");
}

/// Waits until feeds serve everything committed before this call.
async fn until_all_served() {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&tidings_tests::admin_url())
        .await
        .expect("connect");
    let now: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut conn)
        .await
        .expect("xid");
    until_served(now).await;
}

/// In-app alerts (the alerts engineer's `inbox_items`) are feed items too: same
/// positions, same watermarks, source `alert`.
#[tokio::test]
async fn in_app_alerts_are_served_in_the_feed() {
    let f = Fixture::new().await;
    let key = &f.tenant.api_key;
    join(&f.app, key, "team", "ann").await;
    let event = post_event(&f.app, key, "team", "comment").await;
    let alert = json!({
        "event_type": "invoice.overdue",
        "entity_id": "inv-42",
        "recipients": ["ann"],
        "channels": ["in_app"],
        "subject": "Invoice 42 is overdue",
        "payload": {"amount_cents": 1200}
    });
    let resp = send(&f.app, Method::POST, "/v1/alerts", key, Some(alert)).await;
    assert!(resp.status().is_success(), "{}", resp.status());
    until_all_served().await;

    let token = f.token("ann").await;
    let page = feed(&f.app, &token, "").await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{page}");
    let newest = &items[0];
    assert_eq!(newest["source"], "alert", "{page}");
    assert_eq!(newest["type"], "invoice.overdue");
    assert_eq!(newest["object_id"], "inv-42");
    assert_eq!(newest["subject"], "Invoice 42 is overdue");
    assert!(newest["team_id"].is_null());
    assert_eq!(items[1]["id"], event["id"]);
    assert_eq!(items[1]["source"], "event");
    assert_eq!(page["unread_count"], 2);

    let state = mark(&f.app, &token, "read", page["head"].as_str()).await;
    assert_eq!(state["unread_count"], 0);
    // Another user of the tenant does not get ann's alert.
    let bob = f.token("bob").await;
    assert_eq!(ids(&feed(&f.app, &bob, "").await), Vec::<i64>::new());
}
