//! Bounded resources per connection and per request (ARCHITECTURE.md,
//! "Bounded work per request" and "HTTP connections": slowloris, connection
//! cap, caps on stored work, paged answers, fair expansion).

use std::{collections::HashSet, time::Duration};

use serde_json::{json, Value};
use tidings_tests::{
    alert,
    client::TenantApi,
    eventually,
    sql::{self, Rows},
    worker_env, AppOptions, TenantFixture, TestApp, WebhookFixture,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// How long a test waits for the server to close a connection: several times
/// the 1–2 s limits the servers below run with.
const CLOSED_WITHIN: Duration = Duration::from_secs(10);

async fn connect(app: &TestApp) -> TcpStream {
    let addr = app.base_url().trim_start_matches("http://").to_string();
    TcpStream::connect(addr).await.expect("connect")
}

/// Sends `first`, then `drip` every half second (each comes well before the
/// idle limit, so only a limit on the whole head or body can end it), and
/// reads everything until the server closes. Returns what it read, or `None`
/// when the connection was still open after [`CLOSED_WITHIN`].
async fn trickle_until_closed(mut socket: TcpStream, first: &[u8], drip: &[u8]) -> Option<String> {
    socket.write_all(first).await.expect("write");
    let (mut reader, mut writer) = socket.into_split();
    let drip = drip.to_vec();
    let writing = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if writer.write_all(&drip).await.is_err() {
                return;
            }
        }
    });
    let read = tokio::time::timeout(CLOSED_WITHIN, async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&answer).into_owned(),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    writing.abort();
    read.ok()
}

fn short_limits() -> AppOptions {
    AppOptions::env([
        ("TIDINGS_HTTP_HEADER_READ_TIMEOUT_SECS", "1"),
        ("TIDINGS_HTTP_IDLE_TIMEOUT_SECS", "2"),
        ("TIDINGS_HTTP_BODY_TIMEOUT_SECS", "2"),
    ])
}

#[tokio::test]
async fn a_head_trickled_a_header_at_a_time_is_cut_off() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let mut slow = Vec::new();
    for _ in 0..20 {
        let socket = connect(&app).await;
        slow.push(tokio::spawn(trickle_until_closed(
            socket,
            b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n",
            b"X-Slow: 1\r\n",
        )));
    }
    for connection in slow {
        let answer = connection.await.unwrap();
        assert!(answer.is_some(), "a slow head kept its connection open");
    }
    // The server still answers.
    app.public().live().expect(200).await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_when_idle() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let socket = connect(&app).await;
    let answer = trickle_until_closed(socket, b"", b"").await;
    assert_eq!(answer.as_deref(), Some(""), "idle connection stayed open");
}

/// The listener notes a request's end and the next head's first byte
/// without waking its supervisor; the limits still hold after an answer.
#[tokio::test]
async fn a_kept_alive_connection_is_timed_again_after_each_answer() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    // A request busy for longer than the shortest limit (its body arrives
    // over 1.5 s), so the supervisor looks while it is busy; then idle after
    // its answer: closed after the idle limit.
    let mut socket = connect(&app).await;
    socket
        .write_all(
            b"POST /v1/events HTTP/1.1\r\nHost: tidings\r\nContent-Type: application/json\r\n\
              Content-Length: 4\r\n\r\n{",
        )
        .await
        .unwrap();
    for byte in [b" ", b" ", b"}"] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        socket.write_all(byte).await.unwrap();
    }
    let answer = trickle_until_closed(socket, b"", b"").await;
    let answer = answer.expect("a kept-alive connection stayed open while idle");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // A head trickled after an answer: cut off, after that answer only.
    let mut socket = connect(&app).await;
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n\r\n")
        .await
        .unwrap();
    let answer = trickle_until_closed(
        socket,
        b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n",
        b"X-Slow: 1\r\n",
    )
    .await;
    let answer = answer.expect("a slow head after an answer kept its connection open");
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 1, "{answer}");
}

#[tokio::test]
async fn a_body_trickled_a_byte_at_a_time_is_cut_off_with_408() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let socket = connect(&app).await;
    let head = b"POST /v1/alerts HTTP/1.1\r\nHost: tidings\r\nContent-Type: application/json\r\n\
                 Content-Length: 1000\r\n\r\n{";
    let answer = trickle_until_closed(socket, head, b" ").await;
    let answer = answer.expect("a trickled body kept its connection open");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_and_the_cap_frees_up() {
    let (app, _db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_HTTP_MAX_CONNECTIONS", "4"),
        ("TIDINGS_HTTP_IDLE_TIMEOUT_SECS", "60"),
    ]))
    .await
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect(&app).await);
    }
    // Give the server the moment to accept all four (they are accepted in order).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut extra = connect(&app).await;
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n\r\n")
        .await
        .ok();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(CLOSED_WITHIN, extra.read(&mut buf))
        .await
        .expect("the connection over the cap was neither answered nor closed");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "over the cap, yet answered: {:?}",
        read.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    );
    // A held connection is served.
    for socket in &mut held[..1] {
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n\r\n")
            .await
            .unwrap();
        let n = socket.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }
    // Closing one frees its place.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + CLOSED_WITHIN;
    loop {
        let mut socket = connect(&app).await;
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\nConnection: close\r\n\r\n")
            .await
            .ok();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.ok();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a freed place was never reused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn webhook_endpoints_past_the_cap_are_refused_naming_it_and_nothing_is_stored() {
    let f =
        TenantFixture::spawn_with(AppOptions::env([("TIDINGS_MAX_WEBHOOK_ENDPOINTS", "3")])).await;
    let api = f.api();
    let body = json!({"url": "https://example.com/hook"});
    // Five at once: the cap holds under concurrency, not only in sequence.
    let replies = futures::future::join_all(
        (0..5).map(|_| api.create_endpoint(&body).reply_one_of(&[201, 422])),
    )
    .await;
    let created = replies.iter().filter(|r| r.status == 201).count();
    assert_eq!(created, 3, "{replies:?}");
    for refused in replies.iter().filter(|r| r.status == 422) {
        let problem = refused.problem();
        assert_eq!(problem["code"], "webhook_endpoint_limit", "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("TIDINGS_MAX_WEBHOOK_ENDPOINTS"),
            "{problem}"
        );
    }
    let listed = api.list_endpoints().expect(200).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 3, "{listed}");
    // Deleting one makes room for one.
    let id = listed["data"][0]["id"].as_str().unwrap().to_owned();
    api.delete_endpoint(&id).expect(204).await;
    api.create_endpoint(&body).expect(201).await;
    api.create_endpoint(&body).problem(422).await;
}

#[tokio::test]
async fn memberships_past_the_cap_are_refused_naming_it_and_nothing_is_stored() {
    let f = TenantFixture::spawn_with(AppOptions::env([("TIDINGS_MAX_MEMBERSHIPS_PER_USER", "3")]))
        .await;
    let api = f.api();
    let teams: Vec<String> = (0..6).map(|i| format!("team-{i}")).collect();
    let replies = futures::future::join_all(
        teams
            .iter()
            .map(|t| api.put_member(t, "ann").reply_one_of(&[201, 422])),
    )
    .await;
    let joined: Vec<&String> = teams
        .iter()
        .zip(&replies)
        .filter(|(_, r)| r.status == 201)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(joined.len(), 3, "{replies:?}");
    for refused in replies.iter().filter(|r| r.status == 422) {
        let problem = refused.problem();
        assert_eq!(problem["code"], "membership_limit", "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("TIDINGS_MAX_MEMBERSHIPS_PER_USER"),
            "{problem}"
        );
    }
    for team in &teams {
        let members = api.list_members(team, "").expect(200).await;
        let is_member = members["data"].as_array().unwrap().len() == 1;
        assert_eq!(is_member, joined.contains(&team), "{team}: {members}");
    }
    // At the cap, an existing membership is still answered as such; another
    // user is not held back by ann's count.
    api.put_member(joined[0], "ann").expect(200).await;
    api.put_member("team-5", "bob").expect(201).await;
}

/// Every page of a list, following `next_cursor` until it is absent.
async fn walk(first: Value, mut next: impl AsyncFnMut(&str) -> Value, items: &str) -> Vec<Value> {
    let mut page = first;
    let mut all = Vec::new();
    loop {
        all.extend(page[items].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => page = next(cursor).await,
            None => return all,
        }
    }
}

fn assert_each_once(items: &[Value], key: &str, want: usize) {
    let ids: HashSet<String> = items.iter().map(|i| i[key].to_string()).collect();
    assert_eq!(items.len(), want, "items");
    assert_eq!(ids.len(), want, "distinct items");
}

async fn endpoints(api: &TenantApi<'_>, n: usize) {
    for _ in 0..n {
        api.create_endpoint(&json!({"url": "https://example.com/hook"}))
            .expect(201)
            .await;
    }
}

#[tokio::test]
async fn the_endpoint_list_pages_through_every_endpoint_once() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    endpoints(&api, 7).await;
    let first = api.list_endpoints_page("?limit=3").expect(200).await;
    let all = walk(
        first,
        async |cursor| {
            api.list_endpoints_page(&format!("?limit=3&cursor={cursor}"))
                .expect(200)
                .await
        },
        "data",
    )
    .await;
    assert_each_once(&all, "id", 7);
    let whole = api.list_endpoints().expect(200).await;
    assert!(whole["next_cursor"].is_null(), "{whole}");
    api.list_endpoints_page("?limit=0").problem(400).await;
    api.list_endpoints_page("?cursor=x").problem(400).await;
}

#[tokio::test]
async fn an_alert_pages_through_every_delivery_once() {
    // No workers: the deliveries stay as written while the test reads them.
    let f = TenantFixture::spawn_with(AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")])).await;
    let api = f.api();
    endpoints(&api, 3).await;
    let recipients: Vec<String> = (0..30).map(|i| format!("user-{i:02}")).collect();
    let accepted = api
        .create_alert(
            &alert()
                .recipients(&recipients)
                .channels(&["in_app", "webhook"])
                .build(),
        )
        .expect(202)
        .await;
    let id = accepted["alert_id"].as_str().unwrap().to_owned();
    // 30 in-app + 30 × 3 webhook deliveries; the default page is 100.
    let first = api.get_alert(&id).expect(200).await;
    assert_eq!(
        first["deliveries"].as_array().unwrap().len(),
        100,
        "{first}"
    );
    assert!(first["next_cursor"].is_string());
    let first = api.get_alert_page(&id, "?limit=7").expect(200).await;
    let all = walk(
        first,
        async |cursor| {
            api.get_alert_page(&id, &format!("?limit=7&cursor={cursor}"))
                .expect(200)
                .await
        },
        "deliveries",
    )
    .await;
    assert_each_once(&all, "id", 120);
    api.get_alert_page(&id, "?limit=1001").problem(400).await;
}

#[tokio::test]
async fn an_alert_past_the_delivery_cap_is_refused_naming_it_and_stores_nothing() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_ALERT_MAX_DELIVERIES", "50"),
        ("TIDINGS_OUTBOX_WORKERS", "0"),
    ]))
    .await;
    let api = f.api();
    let users: Vec<String> = (0..30).map(|i| format!("user-{i:02}")).collect();
    // 30 recipients × 2 channels = 60 rows > 50.
    let problem = api
        .create_alert(
            &alert()
                .recipients(&users)
                .channels(&["in_app", "email"])
                .build(),
        )
        .problem(422)
        .await;
    assert_eq!(problem["code"], "alert_too_large", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("TIDINGS_ALERT_MAX_DELIVERIES"),
        "{problem}"
    );
    // A team counts its members the same way, and so do webhook endpoints.
    for user in &users {
        api.put_member("everyone", user).expect(201).await;
    }
    let two_channels = alert()
        .team("everyone")
        .entity("inv-2")
        .channels(&["in_app", "email"])
        .build();
    api.create_alert(&two_channels).problem(422).await;
    endpoints(&api, 1).await;
    api.create_alert(
        &alert()
            .recipients(&users[..20])
            .channels(&["in_app", "webhook", "email"])
            .build(),
    )
    .problem(422)
    .await;
    for rows in [
        Rows::Alerts,
        Rows::Notifications,
        Rows::Deliveries,
        Rows::InboxItems,
    ] {
        assert_eq!(
            sql::count_for(&f.pool, rows, &f.tenant).await,
            0,
            "{rows:?}"
        );
    }
    // At the cap exactly: accepted.
    api.create_alert(
        &alert()
            .recipients(&users[..25])
            .channels(&["in_app", "email"])
            .build(),
    )
    .expect(202)
    .await;
}

#[tokio::test]
async fn an_alert_past_the_inline_bound_is_written_in_background_batches_and_delivered() {
    let opts = AppOptions {
        env: worker_env(&[("TIDINGS_ALERT_BATCH_DELIVERIES", "10")]),
        ..AppOptions::default()
    };
    let f = WebhookFixture::start(None, opts).await;
    f.endpoint("/a").await;
    f.endpoint("/b").await;
    let api = f.api();
    let users: Vec<String> = (0..25).map(|i| format!("user-{i:02}")).collect();
    // 25 × (in-app + 2 endpoints) = 75 rows, more than one transaction's 10.
    let accepted = api
        .create_alert(
            &alert()
                .recipients(&users)
                .channels(&["in_app", "webhook"])
                .build(),
        )
        .expect(202)
        .await;
    assert_eq!(accepted["expansion"], "background", "{accepted}");
    assert_eq!(accepted["deliveries"], json!([]), "{accepted}");
    let id = accepted["alert_id"].as_str().unwrap().to_owned();
    let delivered = eventually(Duration::from_secs(30), || async {
        f.receiver.received().len() >= 50
    })
    .await;
    assert!(
        delivered,
        "received {} of 50 webhooks",
        f.receiver.received().len()
    );
    let page = api.get_alert_page(&id, "?limit=1000").expect(200).await;
    assert_eq!(
        page["expansion"],
        json!({"done": true, "expanded": 25}),
        "{page}"
    );
    assert_each_once(page["deliveries"].as_array().unwrap(), "id", 75);
    assert_eq!(
        sql::count_for(&f.pool, Rows::Notifications, &f.tenant).await,
        50
    );
    assert_eq!(f.receiver.received().len(), 50);
    // Posted again: every key exists, nothing more is written or sent.
    let again = api
        .create_alert(
            &alert()
                .recipients(&users)
                .channels(&["in_app", "webhook"])
                .build(),
        )
        .expect(202)
        .await;
    let again_id = again["alert_id"].as_str().unwrap().to_owned();
    let done = eventually(Duration::from_secs(30), || async {
        api.get_alert(&again_id).expect(200).await["expansion"]["done"] == true
    })
    .await;
    assert!(done);
    assert_eq!(
        sql::count_for(&f.pool, Rows::Deliveries, &f.tenant).await,
        75
    );
}

#[tokio::test]
async fn one_tenants_expansion_backlog_does_not_hold_back_anothers() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_FANOUT_INLINE_MAX", "1"),
        ("TIDINGS_FANOUT_BATCH_SIZE", "2"),
        ("TIDINGS_OUTBOX_WORKERS", "0"),
    ]))
    .await;
    let a = f.api();
    let other = f.app.create_tenant().await;
    let b = f.app.tenant(&other);
    for i in 0..150 {
        a.put_member("everyone", format!("a-{i:03}"))
            .expect(201)
            .await;
    }
    for i in 0..4 {
        b.put_member("small", format!("b-{i}")).expect(201).await;
    }
    // Tenant A: 6 alerts of 75 batches each, queued first.
    let mut a_alerts = Vec::new();
    for i in 0..6 {
        let accepted = a
            .create_alert(&alert().team("everyone").entity(&format!("a-{i}")).build())
            .expect(202)
            .await;
        a_alerts.push(accepted["alert_id"].as_str().unwrap().to_owned());
    }
    // Tenant B: 2 batches, queued behind all of A's.
    let accepted = b
        .create_alert(&alert().team("small").entity("b-1").build())
        .expect(202)
        .await;
    assert_eq!(accepted["expansion"], "background");
    let b_alert = accepted["alert_id"].as_str().unwrap().to_owned();
    let b_done = eventually(Duration::from_secs(60), || async {
        b.get_alert(&b_alert).expect(200).await["expansion"]["done"] == true
    })
    .await;
    assert!(b_done, "B's expansion never finished");
    let a_last = a.get_alert(a_alerts.last().unwrap()).expect(200).await;
    assert_eq!(
        a_last["expansion"]["done"], false,
        "B's small expansion waited for all of A's: {}",
        a_last["expansion"]
    );
}
