//! The live feed (ARCHITECTURE.md, invariant 12, "The live stream"): the
//! same items as the feed, in position order, each once, resumable without
//! gap or duplicate; marks and memberships pushed; tickets; limits; CORS.

use std::time::Duration;

use rand::Rng;
use reqwest::Method;
use serde_json::{json, Value};
use tidings_core::Position;
use tidings_tests::{
    alert,
    client::position,
    member_of, member_of_with, openapi, post_event, sql,
    sse::{SseEvent, SseStream, StreamCredential},
    AppOptions, TenantFixture, TestApp,
};

/// Long enough for any push on a loaded test machine; only waited out when a
/// test expects something and it does not come.
const PATIENCE: Duration = Duration::from_secs(20);

async fn open(app: &TestApp, token: &str) -> SseStream {
    let stream = app
        .open_stream(StreamCredential::Token(token), "", None)
        .await;
    assert_eq!(stream.status, 200);
    stream
}

/// The next event that is not `marks`, within [`PATIENCE`].
async fn next_non_marks(stream: &mut SseStream) -> SseEvent {
    loop {
        let event = stream.next_within(PATIENCE).await.expect("an event");
        if event.event != "marks" {
            return event;
        }
    }
}

async fn next_item(stream: &mut SseStream) -> Value {
    let event = next_non_marks(stream).await;
    assert_eq!(event.event, "item", "{event:?}");
    let item = event.json();
    assert_eq!(
        event.id.as_deref(),
        item["cursor"].as_str(),
        "id is the cursor"
    );
    item
}

#[tokio::test]
async fn an_item_is_pushed_exactly_as_the_feed_returns_it() {
    let (f, token) = member_of("team", "u").await;
    let mut stream = open(&f.app, &token).await;
    assert!(stream
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream")));
    let event = post_event(&f.api(), "team", "hello").await;
    let pushed = next_item(&mut stream).await;
    let page = f.app.user(&token).feed("").expect(200).await;
    assert_eq!(pushed, page["items"][0], "the stream's item is the feed's");
    assert_eq!(pushed["id"], event["id"]);
}

/// ARCHITECTURE.md, invariant 2 on the stream: B commits while A, which
/// took its transaction id first, is open. The stream must not push B
/// before A: once A commits it pushes A, then B.
#[tokio::test]
async fn a_transaction_that_commits_late_is_never_skipped_on_the_stream() {
    let (f, token) = member_of("team", "u").await;
    let mut stream = open(&f.app, &token).await;
    let (a_tx, a_id, _) = sql::event_in_open_transaction(&f.pool, &f.tenant, "team", "a").await;
    let b = post_event(&f.api(), "team", "b").await;
    // B is committed; whatever the stream sends now must not be B.
    if let Some(early) = stream.next_within(Duration::from_millis(500)).await {
        assert_ne!(early.event, "item", "pushed before A ended: {early:?}");
    }
    a_tx.commit().await.expect("commit A");
    let first = next_item(&mut stream).await;
    let second = next_item(&mut stream).await;
    assert_eq!(first["id"], a_id, "A first");
    assert_eq!(second["id"], b["id"], "then B");
    assert!(position(&first["cursor"]) < position(&second["cursor"]));
}

/// 1,000 items posted in bursts while the client disconnects at random and
/// resumes with Last-Event-ID: each arrives exactly once, in order.
#[tokio::test]
async fn items_arrive_once_and_in_order_across_random_reconnects() {
    let (f, token) = member_of("team", "u").await;
    let total = 1000usize;
    let api_app = &f.app;
    let tenant = f.tenant.clone();
    let poster = async {
        let api = api_app.tenant(&tenant);
        let mut posted = 0;
        while posted < total {
            let burst = rand::thread_rng().gen_range(1..=40).min(total - posted);
            let events: Vec<Value> = (0..burst)
                .map(|i| json!({"team_id": "team", "type": "burst", "payload": {"i": posted + i}}))
                .collect();
            api.create_events(&json!({"events": events}))
                .expect(201)
                .await;
            posted += burst;
            tokio::time::sleep(Duration::from_millis(rand::thread_rng().gen_range(0..20))).await;
        }
    };
    let reader = async {
        let mut received: Vec<Value> = Vec::new();
        // The first stream resumes from the origin too: opened live, it would
        // rightly miss a burst that committed before it registered.
        let mut last_id: Option<String> = Some(Position::ORIGIN.to_cursor());
        let mut reconnects = 0;
        while received.len() < total {
            let mut stream = api_app
                .open_stream(StreamCredential::Token(&token), "", last_id.as_deref())
                .await;
            assert_eq!(stream.status, 200);
            let quota = rand::thread_rng().gen_range(1..150);
            for _ in 0..quota {
                let Some(event) = stream.next_within(PATIENCE).await else {
                    panic!("stream stalled after {} items", received.len());
                };
                if event.event == "reset" {
                    // A reader falling behind the burst is dropped; resuming
                    // from the last id received is still exact.
                    assert_eq!(event.json()["reason"], "slow_consumer", "{event:?}");
                    break;
                }
                if event.event != "item" {
                    assert_eq!(event.event, "marks", "{event:?}");
                    continue;
                }
                last_id = event.id.clone();
                received.push(event.json());
                if received.len() == total {
                    break;
                }
            }
            reconnects += 1;
        }
        (received, reconnects)
    };
    let ((), (received, reconnects)) = tokio::join!(poster, reader);
    assert!(reconnects > 3, "reconnected {reconnects} times");
    let positions: Vec<Position> = received.iter().map(|i| position(&i["cursor"])).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing positions, hence no duplicate"
    );
    let numbers: Vec<i64> = received
        .iter()
        .map(|i| i["payload"]["i"].as_i64().expect("i"))
        .collect();
    assert_eq!(numbers, (0..total as i64).collect::<Vec<_>>(), "no gap");
}

#[tokio::test]
async fn two_tabs_converge_on_marks() {
    let (f, token) = member_of("team", "u").await;
    let mut tab1 = open(&f.app, &token).await;
    let mut tab2 = open(&f.app, &token).await;
    post_event(&f.api(), "team", "x").await;
    let item = next_item(&mut tab1).await;
    assert_eq!(next_item(&mut tab2).await, item);
    assert_eq!(item["read"], false);

    let marked = f
        .app
        .user(&token)
        .mark_read(&json!({"up_to": item["cursor"]}))
        .expect(200)
        .await;
    for tab in [&mut tab1, &mut tab2] {
        let event = tab.next_within(PATIENCE).await.expect("marks");
        assert_eq!(event.event, "marks", "{event:?}");
        let marks = event.json();
        assert_eq!(marks["read"], item["cursor"]);
        assert_eq!(marks["unread_count"], 0);
        // Without standbys there is no consistency token to pass on.
        assert_eq!(marks, marked, "the same as the answer to the mark");
    }
}

/// The data of each event, by its SSE name, matches the schema the document
/// names for it; a `marks` event without standbys has no consistency token,
/// so the schema must not require one.
#[tokio::test]
async fn every_stream_event_matches_its_schema() {
    let (f, token) = member_of("red", "u").await;
    f.api().put_member("blue", "u").expect(201).await;
    let mut stream = open(&f.app, &token).await;
    post_event(&f.api(), "red", "x").await;
    let item = next_item(&mut stream).await;
    f.app
        .user(&token)
        .mark_read(&json!({"up_to": item["cursor"]}))
        .expect(200)
        .await;
    let mut marks = None;
    while marks.is_none() {
        let event = stream.next_within(PATIENCE).await.expect("marks");
        if event.event == "marks" {
            marks = Some(event.json());
        }
    }
    let marks = marks.expect("a marks event");
    assert!(marks.get("consistency_token").is_none(), "{marks}");
    f.api().delete_member("red", "u").expect(204).await;
    let membership = next_non_marks(&mut stream).await;
    assert_eq!(membership.event, "membership", "{membership:?}");
    f.api().put_member("green", "u").expect(201).await;
    let reset = next_reset(&mut stream).await;
    for (event, data) in [
        ("item", item),
        ("marks", marks),
        ("membership", membership.json()),
        ("reset", reset),
    ] {
        let schema = openapi::sse_event_schema(event).unwrap_or_else(|e| panic!("{e}"));
        if let Err(mismatch) = openapi::check_component(&schema, &data) {
            panic!("the stream's {event} event does not match {schema}: {mismatch}");
        }
    }
}

#[tokio::test]
async fn leaving_a_team_sends_membership_and_stops_its_items() {
    let (f, token) = member_of("red", "u").await;
    f.api().put_member("blue", "u").expect(201).await;
    let mut stream = open(&f.app, &token).await;
    f.api().delete_member("red", "u").expect(204).await;
    let event = next_non_marks(&mut stream).await;
    assert_eq!(event.event, "membership", "{event:?}");
    assert_eq!(event.json(), json!({"team_id": "red", "removed": true}));
    post_event(&f.api(), "red", "hidden").await;
    let blue = post_event(&f.api(), "blue", "shown").await;
    let next = next_item(&mut stream).await;
    assert_eq!(next["id"], blue["id"], "red's item was not pushed");
}

#[tokio::test]
async fn an_item_posted_on_one_instance_reaches_a_stream_on_another() {
    let (f, token) = member_of("team", "u").await;
    let other = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("second instance");
    let mut stream = open(&other, &token).await;
    let event = post_event(&f.api(), "team", "cross").await;
    assert_eq!(next_item(&mut stream).await["id"], event["id"]);
}

/// A write committed on the stream's own instance is pushed without waiting
/// for the tick: with a tick of ten minutes, an event and an in-app alert
/// still arrive.
#[tokio::test]
async fn a_write_on_the_same_instance_is_pushed_before_the_tick() {
    let (f, token) = member_of_with(
        AppOptions::env([("TIDINGS_STREAM_TICK_MS", "600000")]),
        "team",
        "u",
    )
    .await;
    let mut stream = open(&f.app, &token).await;
    let event = post_event(&f.api(), "team", "now").await;
    assert_eq!(next_item(&mut stream).await["id"], event["id"]);
    f.api()
        .create_alert(&alert().recipients(&["u"]).entity("inv-now").build())
        .expect(202)
        .await;
    let pushed = next_item(&mut stream).await;
    assert_eq!(pushed["source"], "alert", "{pushed}");
    assert_eq!(pushed["object_id"], "inv-now", "{pushed}");
}

#[tokio::test]
async fn a_ticket_opens_one_stream_once_and_misuse_is_401() {
    let (f, token) = member_of_with(
        AppOptions::env([("TIDINGS_STREAM_TICKET_TTL_SECS", "1")]),
        "team",
        "u",
    )
    .await;
    let user = f.app.user(&token);
    let ticket = user.create_stream_ticket().expect(201).await;
    let ticket = ticket["ticket"].as_str().expect("ticket").to_string();

    let mut stream = f
        .app
        .open_stream(StreamCredential::Ticket(&ticket), "", None)
        .await;
    assert_eq!(stream.status, 200);
    let event = post_event(&f.api(), "team", "via-ticket").await;
    assert_eq!(next_item(&mut stream).await["id"], event["id"]);
    drop(stream);

    let reused = f
        .app
        .open_stream(StreamCredential::Ticket(&ticket), "", None)
        .await;
    assert_eq!(reused.status, 401, "a used ticket");
    assert!(reused
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/problem+json")));
    let forged = f
        .app
        .open_stream(StreamCredential::Ticket("tds_forged"), "", None)
        .await;
    assert_eq!(forged.status, 401, "an unknown ticket");

    let expiring = user.create_stream_ticket().expect(201).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let expired = f
        .app
        .open_stream(
            StreamCredential::Ticket(expiring["ticket"].as_str().expect("ticket")),
            "",
            None,
        )
        .await;
    assert_eq!(expired.status, 401, "an expired ticket");

    let refused = f
        .app
        .open_stream(StreamCredential::Token("not.a.token"), "", None)
        .await;
    assert_eq!(refused.status, 401, "a bad token");
    let anonymous = f.app.raw(Method::GET, "/v1/feed/stream").problem(401).await;
    assert_eq!(anonymous["status"], 401);
}

#[tokio::test]
async fn a_bad_resume_cursor_gets_reset() {
    let (f, token) = member_of("team", "u").await;
    let mut stream = f
        .app
        .open_stream(StreamCredential::Token(&token), "", Some("not-a-cursor"))
        .await;
    assert_eq!(stream.status, 200);
    let event = next_non_marks(&mut stream).await;
    assert_eq!(event.event, "reset");
    assert_eq!(event.json()["reason"], "invalid_cursor");
    assert!(
        stream.next_within(PATIENCE).await.is_none(),
        "reset ends it"
    );
}

#[tokio::test]
async fn the_eleventh_stream_of_a_user_closes_the_oldest() {
    let (f, token) = member_of_with(
        AppOptions::env([("TIDINGS_STREAM_MAX_PER_USER", "2")]),
        "team",
        "u",
    )
    .await;
    let mut first = open(&f.app, &token).await;
    let _second = open(&f.app, &token).await;
    let _third = open(&f.app, &token).await;
    let event = next_non_marks(&mut first).await;
    assert_eq!(event.event, "reset");
    assert_eq!(event.json()["reason"], "superseded");
}

#[tokio::test]
async fn an_instance_at_its_stream_cap_answers_503_with_retry_after() {
    let (f, token) = member_of_with(
        AppOptions::env([("TIDINGS_STREAM_MAX_CONNECTIONS", "1")]),
        "team",
        "u",
    )
    .await;
    let _held = open(&f.app, &token).await;
    let refused = f
        .app
        .open_stream(StreamCredential::Token(&token), "", None)
        .await;
    assert_eq!(refused.status, 503);
    assert!(refused.headers.contains_key("retry-after"));
}

/// A client that stops reading is dropped with `reset` once its buffer is
/// full, instead of being buffered without bound.
#[tokio::test]
async fn a_slow_consumer_is_dropped_with_reset() {
    let (f, token) = member_of_with(
        AppOptions::env([
            ("TIDINGS_STREAM_BUFFER", "4"),
            ("TIDINGS_MAX_BODY_BYTES", "1048576"),
        ]),
        "team",
        "u",
    )
    .await;
    let mut stream = open(&f.app, &token).await;
    // Far more than the socket buffers hold, while the client reads nothing.
    let text = "x".repeat(8 * 1024);
    for batch in 0..60 {
        let events: Vec<Value> = (0..50)
            .map(|i| json!({"team_id": "team", "type": "big", "payload": {"i": batch * 50 + i, "text": text}}))
            .collect();
        f.api()
            .create_events(&json!({"events": events}))
            .expect(201)
            .await;
    }
    let mut items = 0;
    let last = loop {
        let event = stream.next_within(PATIENCE).await.expect("an event");
        if event.event == "item" {
            items += 1;
            continue;
        }
        break event;
    };
    assert_eq!(last.event, "reset", "{last:?}");
    assert_eq!(last.json()["reason"], "slow_consumer");
    assert!(items < 3000, "dropped before everything was sent ({items})");
}

#[tokio::test]
async fn sigterm_ends_every_stream_with_a_final_event() {
    let (mut f, token) = member_of("team", "u").await;
    let mut stream = open(&f.app, &token).await;
    f.app.process.send_terminate();
    let event = next_non_marks(&mut stream).await;
    assert_eq!(event.event, "reset");
    assert_eq!(event.json()["reason"], "shutdown");
    assert!(stream.next_within(PATIENCE).await.is_none());
    f.app.process.terminate().await.expect("clean exit");
}

// ---------------------------------------------------------------------------
// CORS

const ALLOWED: &str = "https://app.example.com";

async fn cors_app() -> (TenantFixture, String) {
    member_of_with(
        AppOptions::env([(
            "TIDINGS_CORS_ORIGINS",
            format!("{ALLOWED},http://localhost:5173"),
        )]),
        "team",
        "u",
    )
    .await
}

#[tokio::test]
async fn an_allowed_origin_gets_cors_headers_on_answers_and_problems() {
    let (f, token) = cors_app().await;
    let ok = f
        .app
        .user(&token)
        .counts()
        .header("Origin", ALLOWED)
        .reply(200)
        .await;
    assert_eq!(ok.header("access-control-allow-origin"), Some(ALLOWED));
    let problem = f
        .app
        .raw(Method::GET, "/v1/feed")
        .header("Origin", ALLOWED)
        .reply(401)
        .await;
    assert_eq!(problem.header("access-control-allow-origin"), Some(ALLOWED));

    let cross = reqwest::Client::new()
        .get(f.app.url("/v1/feed/stream"))
        .bearer_auth(&token)
        .header("Origin", ALLOWED)
        .send()
        .await
        .expect("stream");
    assert_eq!(
        cross
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap_or_default()),
        Some(ALLOWED),
        "the stream works cross-origin"
    );
}

#[tokio::test]
async fn a_foreign_origin_gets_no_cors_headers() {
    let (f, token) = cors_app().await;
    let answer = f
        .app
        .user(&token)
        .counts()
        .header("Origin", "https://evil.example")
        .reply(200)
        .await;
    assert_eq!(answer.header("access-control-allow-origin"), None);
    let preflight = f
        .app
        .raw(Method::OPTIONS, "/v1/feed")
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "GET")
        .reply_one_of(&[404, 405])
        .await;
    assert_eq!(preflight.header("access-control-allow-origin"), None);
}

#[tokio::test]
async fn the_preflight_of_an_allowed_origin_is_answered() {
    let (f, _) = cors_app().await;
    let preflight = f
        .app
        .raw(Method::OPTIONS, "/v1/feed/stream")
        .header("Origin", ALLOWED)
        .header("Access-Control-Request-Method", "GET")
        .header(
            "Access-Control-Request-Headers",
            "authorization, last-event-id, tidings-consistency-token",
        )
        .reply(204)
        .await;
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some(ALLOWED)
    );
    let allowed = preflight
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for header in [
        "authorization",
        "content-type",
        "last-event-id",
        "idempotency-key",
        "tidings-consistency-token",
    ] {
        assert!(allowed.contains(header), "{header} in {allowed}");
    }
    assert!(preflight.header("access-control-max-age").is_some());
}

/// A script on an allowed origin can read what it needs to pace itself
/// (rate limits, `Retry-After`), to tell a replayed write, to make its next
/// read reflect a mark, and to quote a request when reporting a problem.
#[tokio::test]
async fn an_allowed_origin_may_read_the_headers_a_browser_app_needs() {
    let (f, token) = cors_app().await;
    let answer = f
        .app
        .user(&token)
        .counts()
        .header("Origin", ALLOWED)
        .reply(200)
        .await;
    let exposed: Vec<String> = answer
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    for header in [
        "retry-after",
        "location",
        "ratelimit",
        "ratelimit-policy",
        "idempotency-replayed",
        "tidings-consistency-token",
        "x-request-id",
    ] {
        assert!(
            exposed.iter().any(|h| h == header),
            "{header} in {exposed:?}"
        );
    }
}

/// The next event that is neither `marks` nor an item: the stream's `reset`.
async fn next_reset(stream: &mut SseStream) -> Value {
    loop {
        let event = next_non_marks(stream).await;
        if event.event == "item" {
            continue;
        }
        assert_eq!(event.event, "reset", "{event:?}");
        return event.json();
    }
}

async fn ticket_for(app: &TestApp, token: &str) -> String {
    let ticket = app.user(token).create_stream_ticket().expect(201).await;
    ticket["ticket"].as_str().expect("ticket").to_owned()
}

#[tokio::test]
async fn a_stream_ends_when_its_token_expires_and_so_does_one_opened_with_a_ticket() {
    let (f, _) = member_of("team", "u").await;
    let t = &f.tenant;
    let now = tidings_tests::unix_now();
    let short = tidings_tests::jwt(
        &t.signing_secret,
        json!({"sub": "u", "tid": t.id, "iat": now, "exp": now + 3}),
    );
    let mut by_token = open(&f.app, &short).await;
    let ticket = ticket_for(&f.app, &short).await;
    let mut by_ticket = f
        .app
        .open_stream(StreamCredential::Ticket(&ticket), "", None)
        .await;
    assert_eq!(by_ticket.status, 200);
    for stream in [&mut by_token, &mut by_ticket] {
        assert_eq!(next_reset(stream).await["reason"], "credential_ended");
        assert!(
            stream.next_within(PATIENCE).await.is_none(),
            "reset ends it"
        );
    }
}

#[tokio::test]
async fn revoking_a_users_tokens_ends_their_streams_on_every_instance_and_their_unused_tickets() {
    let (f, ann) = member_of("team", "ann").await;
    f.api().put_member("team", "bob").expect(201).await;
    let bob = f.token("bob").await;
    let other = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("second instance");
    let mut ann_here = open(&f.app, &ann).await;
    let mut ann_there = open(&other, &ann).await;
    let ticket = ticket_for(&other, &ann).await;
    let mut ann_by_ticket = other
        .open_stream(StreamCredential::Ticket(&ticket), "", None)
        .await;
    assert_eq!(ann_by_ticket.status, 200);
    let unused_ticket = ticket_for(&other, &ann).await;
    let mut bob_there = open(&other, &bob).await;

    f.api().revoke_user_tokens("ann").expect(200).await;
    for stream in [&mut ann_here, &mut ann_there, &mut ann_by_ticket] {
        assert_eq!(next_reset(stream).await["reason"], "credential_ended");
    }
    // A ticket bought before the revocation opens nothing any more.
    let refused = other
        .open_stream(StreamCredential::Ticket(&unused_ticket), "", None)
        .await;
    assert_eq!(refused.status, 401);
    // Bob's stream goes on.
    let event = post_event(&f.api(), "team", "after-revocation").await;
    assert_eq!(next_item(&mut bob_there).await["id"], event["id"]);
    // A token issued after the revocation (its cutoff is rounded up to the
    // next second) opens a stream again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = f.token("ann").await;
    let _ann_again = open(&other, &fresh).await;
}

#[tokio::test]
async fn a_rotated_out_signing_secret_ends_the_streams_its_tokens_opened_on_every_instance() {
    let (f, old) = member_of("team", "u").await;
    let other = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("second instance");
    let mut old_there = open(&other, &old).await;
    // The first rotation leaves the old secret verifying through its
    // overlap: the stream goes on.
    f.api().rotate_signing_secret().expect(201).await;
    let newer = f.token("u").await;
    let mut newer_there = open(&other, &newer).await;
    let event = post_event(&f.api(), "team", "during-overlap").await;
    assert_eq!(next_item(&mut old_there).await["id"], event["id"]);
    assert_eq!(next_item(&mut newer_there).await["id"], event["id"]);
    // The second ends the old secret's overlap at once, and its streams.
    f.api().rotate_signing_secret().expect(201).await;
    assert_eq!(
        next_reset(&mut old_there).await["reason"],
        "credential_ended"
    );
    let event = post_event(&f.api(), "team", "after-rotation").await;
    assert_eq!(next_item(&mut newer_there).await["id"], event["id"]);
}

#[tokio::test]
async fn one_tenant_cannot_take_every_stream_slot_and_an_operator_can_give_it_more() {
    // Four slots, half per tenant: two.
    let f =
        TenantFixture::spawn_with(AppOptions::env([("TIDINGS_STREAM_MAX_CONNECTIONS", "4")])).await;
    let mut held = Vec::new();
    for user in ["u1", "u2"] {
        held.push(open(&f.app, &f.token(user).await).await);
    }
    let third = f.token("u3").await;
    let refused = f
        .app
        .open_stream(StreamCredential::Token(&third), "", None)
        .await;
    assert_eq!(refused.status, 503, "A holds its share");
    assert!(refused.headers.contains_key("retry-after"));
    // Another tenant still gets a stream.
    let other = f.app.create_tenant().await;
    let dan = f.app.user_token(&other, "dan").await;
    let _dan = open(&f.app, &dan).await;

    let set = f
        .app
        .admin()
        .set_rate_limits(&f.tenant.id, &json!({"open_streams": 3}))
        .expect(200)
        .await;
    assert_eq!(set["open_streams"], json!({"max": 3, "own": true}));
    let _third = open(&f.app, &third).await;
    f.app
        .admin()
        .set_rate_limits(&f.tenant.id, &json!({"open_streams": 0}))
        .problem(422)
        .await;
}
