//! Losing the primary (docs/design/failover.md): on the highly available
//! topology of `scripts/cluster --ha` (Patroni, etcd, HAProxy; synchronous
//! replication), the primary's PostgreSQL and its Patroni are killed with
//! SIGKILL, and once the killed node has rejoined, the new primary too, while
//! writers post events and alerts through one `tidings serve`, two `tidings
//! worker`s deliver the alerts' webhooks, two tabs mark everything read and a
//! reader holds a stream open. The same processes resume on each new
//! primary; meanwhile requests get 503 with `Retry-After`, never a 500;
//! readiness says there is no primary; the stream resets (its client
//! refetches); the read watermark never goes back; every acknowledged write
//! is there afterwards, once; and every acknowledged alert's webhook arrives,
//! a repeated one with the same body.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    process::Command,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tidings_tests::{
    alert, checkout_port, create_endpoint, eventually, sse::StreamCredential, worker_env,
    AppOptions, HaCluster, Receiver, TestApp, TestDb, TidingsProcess,
};

/// Writes acknowledged after the kill before the writers stop: enough to show
/// that writes resumed and go on.
const WRITES_AFTER_KILL: usize = 40;

/// Each worker's sends in flight (`TIDINGS_WORKER_CONCURRENCY`): what a kill
/// can make it repeat.
const WORKER_CONCURRENCY: usize = 8;

/// What one writer saw.
#[derive(Default)]
struct Written {
    /// Keys whose write was acknowledged (2xx), with the id answered.
    acked: Vec<(String, String)>,
    /// The webhook and email notification keys of acknowledged alerts.
    webhook_keys: Vec<String>,
    email_keys: Vec<String>,
    /// Keys tried at all (an unacknowledged one may still have committed).
    tried: HashSet<String>,
    /// Answers by status and problem code.
    statuses: BTreeMap<String, usize>,
    missing_retry_after: usize,
}

/// Posts `body(key)` with idempotency key `key` for keys `{prefix}-0`,
/// `{prefix}-1`, …, each retried with the same key until acknowledged, until
/// `stop`. Any status other than 2xx, 409 (the same key still in flight) and
/// 503 fails the test (`reply_one_of`).
async fn write_until_stopped(
    app: &TestApp,
    tenant: &tidings_tests::TestTenant,
    path: &str,
    prefix: &str,
    body: impl Fn(&str) -> Value,
    counters: &[&AtomicUsize],
    stop: &AtomicBool,
) -> Written {
    let api = app.tenant(tenant);
    let mut written = Written::default();
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        let key = format!("{prefix}-{i}");
        written.tried.insert(key.clone());
        let call = match path {
            "/v1/events" => api.create_event(&body(&key)),
            _ => api.create_alert(&body(&key)),
        };
        let reply = call
            .idempotency_key(&key)
            .reply_one_of(&[200, 201, 202, 409, 503])
            .await;
        let code = if reply.status < 300 {
            String::new()
        } else {
            reply.json()["code"].as_str().unwrap_or_default().to_owned()
        };
        *written
            .statuses
            .entry(format!("{} {code}", reply.status).trim().to_owned())
            .or_default() += 1;
        if reply.status < 300 {
            let answer = reply.json();
            let id = answer.get("alert_id").unwrap_or(&answer["id"]).to_string();
            for delivery in answer["deliveries"].as_array().into_iter().flatten() {
                let key = delivery["key"]
                    .as_str()
                    .expect("notification key")
                    .to_owned();
                match delivery["channel"].as_str() {
                    Some("webhook") => written.webhook_keys.push(key),
                    Some("email") => written.email_keys.push(key),
                    _ => {}
                }
            }
            written.acked.push((key, id));
            for counter in counters {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            i += 1;
        } else {
            if reply.header("retry-after").is_none() {
                written.missing_retry_after += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    written
}

/// A reader's stream, opened again after each reset (as a client does after
/// refetching), until `stop` and two resets (or 30 s after `stop`): the
/// items of each session, and the resets.
async fn follow_stream(
    app: &TestApp,
    token: &str,
    stop: &AtomicBool,
) -> (Vec<Vec<Value>>, Vec<Value>) {
    let mut sessions: Vec<Vec<Value>> = Vec::new();
    let mut resets = Vec::new();
    let mut stopped_at = None;
    'open: loop {
        let mut stream = app
            .open_stream(StreamCredential::Token(token), "", None)
            .await;
        if stream.status != 200 {
            // The database is away: 503, as any request then.
            assert_eq!(stream.status, 503);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        sessions.push(Vec::new());
        loop {
            match stream.next_within(Duration::from_millis(500)).await {
                Some(event) if event.event == "reset" => {
                    resets.push(event.json());
                    continue 'open;
                }
                Some(event) if event.event == "item" => sessions
                    .last_mut()
                    .unwrap()
                    .push(event.json()["id"].clone()),
                _ => {}
            }
            if stop.load(Ordering::SeqCst) {
                let since = *stopped_at.get_or_insert_with(Instant::now);
                if resets.len() >= 2 || since.elapsed() > Duration::from_secs(30) {
                    break 'open (sessions, resets);
                }
            }
        }
    }
}

fn kill_9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

#[tokio::test]
async fn killing_the_primary_twice_loses_no_acknowledged_write_and_answers_503_meanwhile() {
    let topology = HaCluster::up().await;
    assert!(
        topology.node("sync_standby").is_some(),
        "no synchronous standby: {topology:?}"
    );
    let db = TestDb::create_on(&topology.admin_url())
        .await
        .expect("database through HAProxy");
    // Two `tidings serve` instances; deliveries go out from two `tidings
    // worker`s to a webhook receiver and an SMTP server.
    let serve = || {
        TestApp::spawn_on(
            &db.url,
            AppOptions::env([
                ("TIDINGS_OUTBOX_WORKERS", "0"),
                ("TIDINGS_WEBHOOK_ALLOW_PRIVATE", "loopback"),
            ]),
        )
    };
    let app = serve().await.expect("serve");
    let other = serve().await.expect("a second serve");
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let receiver = Receiver::webhooks(&[]).await;
    let smtp = Receiver::smtp(0).await;
    api.put_user("reader", &json!({"email": "reader@example.com"}))
        .expect(200)
        .await;
    let endpoint = create_endpoint(&api, &receiver.url("/hook"), None).await;
    receiver.trust(&endpoint.secret).await;
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            TidingsProcess::worker(
                &db.url,
                &worker_env(&[
                    ("TIDINGS_SMTP_URL", &smtp.smtp_url()),
                    (
                        "TIDINGS_WORKER_CONCURRENCY",
                        &WORKER_CONCURRENCY.to_string(),
                    ),
                ]),
            )
            .await
            .expect("worker"),
        );
    }
    api.put_member("team", "reader").expect(201).await;
    api.put_member("team", "other").expect(201).await;
    let token = app.user_token(&tenant, "reader").await;

    let acked_total = AtomicUsize::new(0);
    let alerts_acked = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let readiness = Mutex::new(Vec::<(u16, Option<String>)>::new());
    let event = |key: &str| json!({"team_id": "team", "type": "failover", "payload": {"key": key}});
    let alert_body = |key: &str| {
        alert()
            .entity(key)
            .recipients(&["reader"])
            .channels(&["in_app", "webhook", "email"])
            .build()
    };
    let until_acked = |target: usize, what: &'static str| {
        let (acked_total, app) = (&acked_total, &app);
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            while acked_total.load(Ordering::SeqCst) < target {
                assert!(
                    Instant::now() < deadline,
                    "{what} not within 120 s; the server's log:\n{}",
                    app.process.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // Two failovers: the primary is killed, writes resume on the new one;
    // then the killed node rejoins as a standby (`up`) and the new primary is
    // killed in turn.
    let killer = async {
        let mut unavailable = Vec::new();
        let mut alerts_resumed = Vec::new();
        let mut killed = Vec::new();
        let mut topology = topology.clone();
        for round in 0..2 {
            if round > 0 {
                topology = HaCluster::up().await;
            }
            let primary = topology.node("primary").expect("a primary").clone();
            // A moment that differs from run to run: 30 to 90 writes on.
            let jitter = (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                % 61) as usize;
            let flowing = acked_total.load(Ordering::SeqCst) + 30 + jitter;
            until_acked(flowing, "writes before the kill").await;
            kill_9(primary.patroni_pid.expect("the primary's Patroni"));
            kill_9(primary.pid.expect("the primary's postmaster"));
            let (at, acked_at_kill) = (Instant::now(), acked_total.load(Ordering::SeqCst));
            let alerts_at_kill = alerts_acked.load(Ordering::SeqCst);
            // Three writers: at most three writes were in flight at the kill,
            // so a fourth acknowledgement is a write that began after it.
            until_acked(acked_at_kill + 4, "writes resuming after the kill").await;
            unavailable.push(at.elapsed());
            until_acked(acked_at_kill + WRITES_AFTER_KILL, "writes after the kill").await;
            // The alert sender too, whose request in flight at the kill held
            // its Idempotency-Key: the key is released once a primary answers,
            // well before its lease (60 s) would have ended.
            while alerts_acked.load(Ordering::SeqCst) < alerts_at_kill + 2 {
                assert!(
                    at.elapsed() < Duration::from_secs(50),
                    "the alert sender was held back after the failover"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            alerts_resumed.push(at.elapsed());
            let now = HaCluster::status().await;
            let promoted = now.node("primary").expect("a new primary");
            assert_ne!(promoted.name, primary.name, "{now:?}");
            killed.push(primary.name);
        }
        stop.store(true, Ordering::SeqCst);
        (unavailable, alerts_resumed, killed)
    };
    let ready_poller = async {
        while !stop.load(Ordering::SeqCst) {
            let reply = app.public().ready().reply_one_of(&[200, 503]).await;
            let check = reply.json()["check"].as_str().map(str::to_owned);
            readiness.lock().unwrap().push((reply.status, check));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    // Two tabs marking everything read: no answer shows a watermark below
    // one already answered before its request was sent.
    let answered_read = Mutex::new(None::<tidings_core::Position>);
    let tab = || {
        let (app, token, stop, answered_read) = (&app, &token, &stop, &answered_read);
        async move {
            let reader = app.user(token);
            let mut marks = 0;
            while !stop.load(Ordering::SeqCst) {
                let floor = *answered_read.lock().unwrap();
                let reply = reader.mark_read(&json!({})).reply_one_of(&[200, 503]).await;
                if reply.status == 200 {
                    marks += 1;
                    if let Some(read) = reply.json()["read"].as_str() {
                        let read = tidings_core::Position::from_cursor(read).expect("cursor");
                        assert!(
                            floor.is_none_or(|f| read >= f),
                            "the read watermark went back"
                        );
                        let mut answered = answered_read.lock().unwrap();
                        *answered = Some(answered.map_or(read, |a| a.max(read)));
                    }
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            marks
        }
    };
    let event_counters = [&acked_total];
    let alert_counters = [&acked_total, &alerts_acked];
    let (
        (unavailable, alerts_resumed, killed),
        _,
        stream_a,
        stream_b,
        stream_c,
        marks_a,
        marks_b,
        events_a,
        events_b,
        alerts,
    ) = tokio::join!(
        killer,
        ready_poller,
        follow_stream(&app, &token, &stop),
        follow_stream(&other, &token, &stop),
        follow_stream(&app, &token, &stop),
        tab(),
        tab(),
        write_until_stopped(
            &app,
            &tenant,
            "/v1/events",
            "a",
            event,
            &event_counters,
            &stop
        ),
        write_until_stopped(
            &other,
            &tenant,
            "/v1/events",
            "b",
            event,
            &event_counters,
            &stop
        ),
        write_until_stopped(
            &app,
            &tenant,
            "/v1/alerts",
            "alert",
            alert_body,
            &alert_counters,
            &stop
        ),
    );

    eprintln!(
        "killed {killed:?}; writes unavailable {unavailable:?}, the alert sender resumed {alerts_resumed:?} after each kill; statuses: events {:?} {:?}, alerts {:?}; marks {marks_a} + {marks_b}",
        events_a.statuses, events_b.statuses, alerts.statuses
    );
    for written in [&events_a, &events_b, &alerts] {
        assert_eq!(
            written.missing_retry_after, 0,
            "a 503 or 409 without Retry-After"
        );
    }
    assert!(marks_a > 0 && marks_b > 0, "a tab never marked");
    // Three streams on both instances: each session sent each item once,
    // and each failover reset every stream.
    for (sessions, resets) in [&stream_a, &stream_b, &stream_c] {
        for items in sessions {
            let unique: HashSet<String> = items.iter().map(Value::to_string).collect();
            assert_eq!(unique.len(), items.len(), "an item twice on a stream");
        }
        assert!(
            resets.len() >= 2,
            "a stream did not reset after each failover: {resets:?}"
        );
        for reset in resets {
            assert_eq!(reset["reason"], "resync", "{reset}");
        }
    }
    // Readiness said "no primary" while there was none, and is ready again.
    let seen = readiness.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|(status, check)| *status == 503 && check.as_deref() == Some("primary")),
        "readiness never reported the missing primary: {seen:?}"
    );
    assert!(
        tidings_tests::eventually(Duration::from_secs(30), || async {
            app.public().ready().reply_one_of(&[200, 503]).await.status == 200
        })
        .await,
        "readiness did not recover"
    );

    // Every acknowledged alert's webhook arrives, through both failovers and
    // the workers' retries; a notification sent twice (a send in flight when
    // its result could not be recorded) carries the same body each time.
    let delivered = eventually(Duration::from_secs(120), || async {
        let received = receiver.received();
        alerts.webhook_keys.iter().all(|key| {
            received
                .iter()
                .any(|r| r["webhook_id"] == key.as_str() && r["answered"] == 200)
        })
    })
    .await;
    let worker_logs: Vec<String> = workers.iter().map(TidingsProcess::log).collect();
    assert!(
        delivered,
        "a webhook never arrived; workers' logs:\n{worker_logs:?}"
    );
    let received = receiver.received();
    let mut bodies: HashMap<String, Vec<Value>> = HashMap::new();
    for r in &received {
        let id = r["webhook_id"].as_str().unwrap_or_default().to_owned();
        bodies.entry(id).or_default().push(r["body"].clone());
    }
    let mut repeated = 0;
    for (id, sent) in &bodies {
        assert!(
            sent.iter().all(|b| *b == sent[0]),
            "webhook {id} with two bodies"
        );
        repeated += sent.len() - 1;
    }
    // Emails alike: every acknowledged alert's email arrives (its
    // Message-ID is its key), a repeated one with the same body.
    let delivered = eventually(Duration::from_secs(120), || async {
        let received = smtp.received();
        alerts.email_keys.iter().all(|key| {
            let id = format!("<{key}@tidings>");
            received
                .iter()
                .any(|m| m["message_id"] == id.as_str() && m["answered"] == "250 OK")
        })
    })
    .await;
    assert!(
        delivered,
        "an email never arrived; workers' logs:\n{worker_logs:?}"
    );
    let mut emails: HashMap<String, Vec<Value>> = HashMap::new();
    for m in smtp.received() {
        let id = m["message_id"].as_str().unwrap_or_default().to_owned();
        emails.entry(id).or_default().push(m["body"].clone());
    }
    for (id, sent) in &emails {
        assert!(
            sent.iter().all(|b| *b == sent[0]),
            "email {id} with two bodies"
        );
        repeated += sent.len() - 1;
    }
    // A send repeats only when its worker could not record it: at most the
    // sends in flight, per worker and kill.
    let bound = 2 * workers.len() * WORKER_CONCURRENCY;
    assert!(
        repeated <= bound,
        "{repeated} sends repeated, more than the {bound} in flight"
    );
    eprintln!(
        "{} webhooks and {} emails delivered, {repeated} sent again",
        alerts.webhook_keys.len(),
        alerts.email_keys.len()
    );

    // Every acknowledged event is in the database once; nothing is there
    // twice (a retried write whose first answer was lost replayed it).
    let pool = db.pool().await.expect("pool");
    let events: Vec<(String, i64)> = sqlx::query_as(
        "SELECT payload->>'key', count(*) FROM events WHERE tenant_id = $1 GROUP BY 1",
    )
    .bind(tenant.uuid())
    .fetch_all(&pool)
    .await
    .expect("events");
    let events: HashMap<String, i64> = events.into_iter().collect();
    for written in [&events_a, &events_b] {
        for (key, _) in &written.acked {
            assert_eq!(events.get(key), Some(&1), "acknowledged event {key}");
        }
    }
    for (key, count) in &events {
        assert_eq!(*count, 1, "event {key} stored {count} times");
        assert!(
            events_a.tried.contains(key) || events_b.tried.contains(key),
            "an event nobody wrote: {key}"
        );
    }
    let alerts_stored: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT entity_id, min(id::text), count(*) FROM alerts WHERE tenant_id = $1 GROUP BY 1",
    )
    .bind(tenant.uuid())
    .fetch_all(&pool)
    .await
    .expect("alerts");
    let alerts_stored: HashMap<String, (String, i64)> = alerts_stored
        .into_iter()
        .map(|(entity, id, count)| (entity, (id, count)))
        .collect();
    for (key, id) in &alerts.acked {
        let (stored_id, count) = alerts_stored
            .get(key)
            .unwrap_or_else(|| panic!("acknowledged alert {key} is gone"));
        assert_eq!(*count, 1, "alert {key} stored {count} times");
        assert_eq!(&format!("\"{stored_id}\""), id, "alert {key}");
    }

    // The reader's feed, through the same process, serves every event once
    // and in order (no skipped item: each page continues where the last
    // ended).
    let reader = app.user(&token);
    let stored: HashSet<String> = events.keys().cloned().collect();
    let mut keys = Vec::new();
    // The feed's horizon may trail the last commits for a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        keys.clear();
        let mut before: Option<String> = None;
        loop {
            let query = match &before {
                Some(cursor) => format!("?limit=100&before={cursor}"),
                None => "?limit=100".to_owned(),
            };
            let page = reader.feed(&query).expect(200).await;
            for item in page["items"].as_array().expect("items") {
                if item["type"] == "failover" {
                    keys.push(item["payload"]["key"].as_str().expect("key").to_owned());
                }
            }
            match page["next_before"].as_str() {
                Some(cursor) => before = Some(cursor.to_owned()),
                None => break,
            }
        }
        let unique: HashSet<String> = keys.iter().cloned().collect();
        assert_eq!(unique.len(), keys.len(), "an item twice in the feed");
        if unique == stored || Instant::now() > deadline {
            assert_eq!(unique, stored, "the feed and the stored events differ");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The scripts pick the ports of a checkout's clusters (scripts/lib.sh,
/// `checkout_port`) as the tests and the bench do.
#[test]
fn the_scripts_derive_a_checkout_port_as_the_tests_do() {
    let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/lib.sh");
    for path in ["/work/main/tests", "/home/ci/tidings/ha", "/tmp/é x"] {
        let out = Command::new("bash")
            .args(["-c", &format!(". {lib} && checkout_port \"$0\""), path])
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port: u16 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a port");
        assert_eq!(port, checkout_port(path), "{path}");
    }
}
