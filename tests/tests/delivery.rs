//! The outbox workers and the webhook and email channels (issue 4, ARCHITECTURE.md,
//! invariant 6), against real PostgreSQL, the real binary and real receivers:
//! webhooks are verified by the reference Standard Webhooks library, emails go
//! through a real SMTP server (tests/receivers/).
//!
//! Until the alert API lands, deliveries are created with SQL exactly as the
//! write path creates them (delivery_support).

mod delivery_support;

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use delivery_support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use tidings_core::Channel;
use tidings_server::store::outbox::{
    claim_deliveries, complete_deliveries, CompletedDelivery, Completion,
};
use tidings_tests::{AppOptions, TestApp, TestDb, TestWorker};
use uuid::Uuid;

async fn migrated_db() -> (TestDb, PgPool) {
    let db = TestDb::create().await.expect("test database");
    let pool = db.pool().await.expect("pool");
    tidings_server::db::migrate(&pool)
        .await
        .expect("migrations");
    (db, pool)
}

fn records_for<'a>(received: &'a [Value], webhook_id: &str) -> Vec<&'a Value> {
    received
        .iter()
        .filter(|r| r["webhook_id"] == webhook_id)
        .collect()
}

#[tokio::test]
async fn webhook_from_serve_is_signed_and_verified_by_the_reference_library() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(&pool, tenant, &receiver.url("/hook"), &secret, None).await;
    let alert = create_alert(
        &pool,
        tenant,
        "invoice.overdue",
        Some("Invoice 42 is overdue"),
        json!({"invoice": 42, "amount": "12.50"}),
    )
    .await;
    let keys = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("user", 1),
    )
    .await;

    // The workers inside `tidings serve`.
    let app = TestApp::spawn_on(
        &db.url,
        AppOptions {
            env: worker_env(&[]),
            ..Default::default()
        },
    )
    .await
    .expect("serve");
    let arrived = eventually(Duration::from_secs(20), || async {
        !receiver.received().is_empty()
    })
    .await;
    assert!(arrived, "nothing arrived; server log:\n{}", app.log());
    assert!(
        eventually(Duration::from_secs(10), || async {
            delivery(&pool, tenant, &keys[0]).await.status == "sent"
        })
        .await
    );

    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let got = &received[0];
    assert_eq!(
        got["verified"], true,
        "the reference library rejected the signature: {got}"
    );
    assert_eq!(got["webhook_id"], keys[0].as_str());
    let body = &got["body"];
    assert_eq!(body["type"], "invoice.overdue");
    assert!(
        body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );
    assert_eq!(body["data"]["alert_id"], alert.id.to_string());
    assert_eq!(body["data"]["entity_id"], alert.entity_id.as_str());
    assert_eq!(body["data"]["recipient_id"], "user-0");
    assert_eq!(body["data"]["subject"], "Invoice 42 is overdue");
    assert_eq!(
        body["data"]["payload"],
        json!({"invoice": 42, "amount": "12.50"})
    );
    assert_eq!(body["data"]["key"], keys[0].as_str());
    let row = delivery(&pool, tenant, &keys[0]).await;
    assert_eq!(
        (row.status.as_str(), row.attempts, row.sent_at_set),
        ("sent", 1, true)
    );
}

#[tokio::test]
async fn retries_carry_the_same_webhook_id_and_body() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/hook?fail_first=2"),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({"n": 1})).await;
    let keys = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("user", 3),
    )
    .await;

    let worker = TestWorker::spawn(&db.url, &worker_env(&[]))
        .await
        .expect("worker");
    let done = eventually(Duration::from_secs(30), || async {
        status_counts(&pool, tenant).await.get("sent").copied() == Some(3)
    })
    .await;
    assert!(
        done,
        "{:?}\n{}",
        status_counts(&pool, tenant).await,
        worker.log()
    );

    let received = receiver.received();
    for key in &keys {
        let tries = records_for(&received, key);
        assert_eq!(
            tries.len(),
            3,
            "two failures then a success for {key}: {tries:#?}"
        );
        assert!(tries.iter().all(|t| t["verified"] == true));
        assert!(
            tries.iter().all(|t| t["body"] == tries[0]["body"]),
            "the body changed between retries"
        );
        assert_eq!(
            tries
                .iter()
                .map(|t| t["answered"].as_i64().unwrap_or(0))
                .collect::<Vec<_>>(),
            vec![500, 500, 200]
        );
        let row = delivery(&pool, tenant, key).await;
        assert_eq!((row.status.as_str(), row.attempts), ("sent", 3));
        assert!(
            row.last_error.as_deref().unwrap_or("").contains("500"),
            "{row:?}"
        );
    }
}

#[tokio::test]
async fn during_rotation_both_secrets_sign_and_an_expired_one_does_not() {
    let (db, pool) = migrated_db().await;
    let (old, new, other_old) = (new_secret(), new_secret(), new_secret());
    let receiver = Receiver::webhooks(&[&old, &new, &other_old]).await;
    let tenant = create_tenant(&pool).await;
    let rotating = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/rotating"),
        &new,
        Some((&old, 3600)),
    )
    .await;
    let expired = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/expired"),
        &new,
        Some((&other_old, -1)),
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(rotating),
        &recipients("a", 1),
    )
    .await;
    enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(expired),
        &recipients("b", 1),
    )
    .await;

    let worker = TestWorker::spawn(&db.url, &worker_env(&[]))
        .await
        .expect("worker");
    assert!(
        eventually(Duration::from_secs(20), || async {
            receiver.received().len() == 2
        })
        .await,
        "{}",
        worker.log()
    );
    let received = receiver.received();
    let at = |path: &str| {
        received
            .iter()
            .find(|r| r["path"] == path)
            .cloned()
            .expect("request")
    };
    let rotating = at("/rotating");
    assert_eq!(
        rotating["signature"]
            .as_str()
            .unwrap_or("")
            .split(' ')
            .count(),
        2,
        "{rotating}"
    );
    assert_eq!(
        rotating["verified_with"],
        json!([0, 1]),
        "each secret alone verifies: {rotating}"
    );
    let expired = at("/expired");
    assert_eq!(
        expired["signature"]
            .as_str()
            .unwrap_or("")
            .split(' ')
            .count(),
        1,
        "{expired}"
    );
    assert_eq!(expired["verified_with"], json!([1]), "{expired}");
}

#[tokio::test]
async fn email_carries_a_message_id_derived_from_the_key_on_every_retry() {
    let (db, pool) = migrated_db().await;
    let smtp = Receiver::smtp(2).await;
    let tenant = create_tenant(&pool).await;
    create_user(&pool, tenant, "ada", Some("ada@example.com")).await;
    create_user(&pool, tenant, "bob", None).await;
    let alert = create_alert(
        &pool,
        tenant,
        "invoice.overdue",
        Some("Invoice 7 is overdue"),
        json!({"invoice": 7}),
    )
    .await;
    let people = vec!["ada".to_owned(), "bob".to_owned(), "nobody".to_owned()];
    let keys = enqueue(&pool, &alert, Channel::Email, None, &people).await;

    let worker = TestWorker::spawn(
        &db.url,
        &worker_env(&[("TIDINGS_SMTP_URL", &smtp.smtp_url())]),
    )
    .await
    .expect("worker");
    let settled = eventually(Duration::from_secs(30), || async {
        let counts = status_counts(&pool, tenant).await;
        counts.get("sent") == Some(&1) && counts.get("skipped") == Some(&2)
    })
    .await;
    assert!(
        settled,
        "{:?}\n{}",
        status_counts(&pool, tenant).await,
        worker.log()
    );

    let received = smtp.received();
    assert_eq!(
        received.len(),
        3,
        "two refusals then acceptance: {received:#?}"
    );
    let expected_id = format!("<{}@tidings>", keys[0]);
    for message in &received {
        assert_eq!(message["message_id"], expected_id.as_str());
        assert_eq!(message["rcpt_tos"], json!(["ada@example.com"]));
        assert_eq!(message["subject"], "Invoice 7 is overdue");
        assert!(
            message["body"]
                .as_str()
                .unwrap_or("")
                .contains("invoice: 7"),
            "{message}"
        );
    }
    assert_eq!(delivery(&pool, tenant, &keys[0]).await.attempts, 3);
    for key in &keys[1..] {
        let row = delivery(&pool, tenant, key).await;
        assert_eq!(row.status, "skipped");
        assert!(
            row.last_error
                .as_deref()
                .unwrap_or("")
                .contains("no email address"),
            "{row:?}"
        );
    }
}

#[tokio::test]
async fn a_receiver_that_always_fails_ends_dead_while_a_thousand_others_are_delivered() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let broken = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/broken?status=500"),
        &secret,
        None,
    )
    .await;
    let healthy = create_endpoint(&pool, tenant, &receiver.url("/healthy"), &secret, None).await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let dead_key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(broken),
        &recipients("x", 1),
    )
    .await
    .remove(0);
    let good_keys = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(healthy),
        &recipients("user", 1000),
    )
    .await;

    let worker = TestWorker::spawn(&db.url, &worker_env(&[]))
        .await
        .expect("worker");
    let settled = eventually(Duration::from_secs(90), || async {
        let counts = status_counts(&pool, tenant).await;
        counts.get("sent") == Some(&1000) && counts.get("dead") == Some(&1)
    })
    .await;
    assert!(
        settled,
        "{:?}\n{}",
        status_counts(&pool, tenant).await,
        worker.log()
    );

    let row = delivery(&pool, tenant, &dead_key).await;
    assert_eq!(
        row.attempts, 4,
        "the short schedule allows 4 attempts: {row:?}"
    );
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("500"),
        "{row:?}"
    );
    let received = receiver.received();
    assert_eq!(records_for(&received, &dead_key).len(), 4);
    let healthy_ids: HashSet<&str> = received
        .iter()
        .filter(|r| r["path"] == "/healthy")
        .filter_map(|r| r["webhook_id"].as_str())
        .collect();
    assert!(
        good_keys.iter().all(|k| healthy_ids.contains(k.as_str())),
        "a healthy delivery never arrived"
    );
}

#[tokio::test]
async fn webhooks_to_loopback_are_refused_unless_allowed() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let literal = create_endpoint(&pool, tenant, &receiver.url("/literal"), &secret, None).await;
    let by_name = create_endpoint(
        &pool,
        tenant,
        &format!("http://localhost:{}/by-name", receiver.port),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let literal_key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(literal),
        &recipients("a", 1),
    )
    .await
    .remove(0);
    let name_key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(by_name),
        &recipients("b", 1),
    )
    .await
    .remove(0);

    let worker = TestWorker::spawn(
        &db.url,
        &worker_env(&[("TIDINGS_WEBHOOK_ALLOW_PRIVATE", "none")]),
    )
    .await
    .expect("worker");
    let settled = eventually(Duration::from_secs(20), || async {
        status_counts(&pool, tenant).await.get("dead") == Some(&2)
    })
    .await;
    assert!(
        settled,
        "{:?}\n{}",
        status_counts(&pool, tenant).await,
        worker.log()
    );
    for key in [&literal_key, &name_key] {
        let row = delivery(&pool, tenant, key).await;
        assert_eq!(
            row.attempts, 1,
            "a refused URL is permanent, never retried: {row:?}"
        );
        let error = row.last_error.unwrap_or_default();
        assert!(
            error.contains("loopback") && error.contains("not allowed"),
            "{error}"
        );
    }
    assert!(
        receiver.received().is_empty(),
        "a refused request reached the receiver"
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/moved?redirect=1"),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("a", 1),
    )
    .await
    .remove(0);

    let worker = TestWorker::spawn(&db.url, &worker_env(&[("TIDINGS_RETRY_MAX_ATTEMPTS", "2")]))
        .await
        .expect("worker");
    assert!(
        eventually(Duration::from_secs(20), || async {
            delivery(&pool, tenant, &key).await.status == "dead"
        })
        .await,
        "{}",
        worker.log()
    );
    let row = delivery(&pool, tenant, &key).await;
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("307"),
        "{row:?}"
    );
    let paths: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| r["path"].clone())
        .collect();
    assert_eq!(
        paths,
        vec![json!("/moved"), json!("/moved")],
        "the redirect target must never be requested"
    );
}

/// A worker sleeping on a long poll interval still starts within moments of
/// a NOTIFY from the write path.
#[tokio::test]
async fn notify_wakes_an_idle_worker() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(&pool, tenant, &receiver.url("/hook"), &secret, None).await;
    let worker = TestWorker::spawn(&db.url, &worker_env(&[("TIDINGS_OUTBOX_POLL_MS", "60000")]))
        .await
        .expect("worker");
    // Let the worker find nothing and go to sleep on its 60 s poll.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let started = Instant::now();
    enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("a", 1),
    )
    .await;
    let arrived = eventually(Duration::from_secs(10), || async {
        !receiver.received().is_empty()
    })
    .await;
    assert!(
        arrived && started.elapsed() < Duration::from_secs(10),
        "{}",
        worker.log()
    );
}

/// SIGTERM lets the current batch finish and be recorded: nothing is left
/// `sending` for a lease to expire.
#[tokio::test]
async fn sigterm_finishes_the_batch_in_flight_and_records_it() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/slow?delay_ms=1000"),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("a", 20),
    )
    .await;
    let mut worker = TestWorker::spawn(
        &db.url,
        &worker_env(&[
            ("TIDINGS_OUTBOX_BATCH", "10"),
            ("TIDINGS_WORKER_CONCURRENCY", "10"),
        ]),
    )
    .await
    .expect("worker");
    assert!(
        eventually(Duration::from_secs(10), || async {
            !receiver.received().is_empty()
        })
        .await
    );
    let status = worker.terminate().await.expect("terminate");
    assert!(status.success(), "{status}: {}", worker.log());
    let counts = status_counts(&pool, tenant).await;
    assert_eq!(
        counts.get("sending"),
        None,
        "a claimed batch was abandoned: {counts:?}"
    );
    let sent = counts.get("sent").copied().unwrap_or(0);
    assert!(sent >= 10, "the batch in flight was recorded: {counts:?}");
    assert_eq!(
        receiver.received().len() as i64,
        sent,
        "only what was recorded was sent"
    );
}

/// One tenant's backlog does not starve another's: with 2,000 due for A and 5
/// for B, B's five are all in the first batch of 100.
#[tokio::test]
async fn a_big_backlog_does_not_starve_another_tenant() {
    let (_db, pool) = migrated_db().await;
    let busy = create_tenant(&pool).await;
    let quiet = create_tenant(&pool).await;
    let busy_alert = create_alert(&pool, busy, "invoice.overdue", None, json!({})).await;
    let quiet_alert = create_alert(&pool, quiet, "invoice.overdue", None, json!({})).await;
    let busy_endpoint =
        create_endpoint(&pool, busy, "http://a.example/hook", &new_secret(), None).await;
    let quiet_endpoint =
        create_endpoint(&pool, quiet, "http://b.example/hook", &new_secret(), None).await;
    enqueue(
        &pool,
        &busy_alert,
        Channel::Webhook,
        Some(busy_endpoint),
        &recipients("u", 2000),
    )
    .await;
    // The backlog is older: a plain FIFO would serve all of it first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    enqueue(
        &pool,
        &quiet_alert,
        Channel::Webhook,
        Some(quiet_endpoint),
        &recipients("u", 5),
    )
    .await;

    let first = claim_deliveries(&pool, 100, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    let quiet_in_first = first.iter().filter(|d| d.tenant_id == quiet).count();
    assert_eq!(quiet_in_first, 5, "tenant B waited behind A's backlog");
    let second = claim_deliveries(&pool, 100, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    assert_eq!(second.len(), 100, "with B done, A gets whole batches");
    assert!(second.iter().all(|d| d.tenant_id == busy));
    // A claim carries what delivery needs.
    let d = &first[0];
    assert!(d.endpoint_url.is_some() && d.endpoint_secret.is_some() && d.payload.is_some());
}

/// A completion is written only by the claim that holds the row: after the
/// lease expired and the row was claimed again, the first worker's late
/// result changes nothing. Every claim counts an attempt.
#[tokio::test]
async fn a_late_result_from_an_expired_lease_cannot_overwrite_the_new_claim() {
    let (_db, pool) = migrated_db().await;
    let tenant = create_tenant(&pool).await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let endpoint =
        create_endpoint(&pool, tenant, "http://a.example/hook", &new_secret(), None).await;
    let key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("u", 1),
    )
    .await
    .remove(0);

    let first = claim_deliveries(&pool, 10, 100, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(first.attempts, 1);
    assert!(
        claim_deliveries(&pool, 10, 100, &[Channel::Webhook])
            .await
            .expect("claim")
            .is_empty(),
        "leased rows are not due"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = claim_deliveries(&pool, 10, 60_000, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(
        (second.id, second.attempts),
        (first.id, 2),
        "an expired lease is claimed again, as a new attempt"
    );

    let late = CompletedDelivery {
        tenant_id: tenant,
        id: first.id,
        attempts: first.attempts,
        completion: Completion::Dead {
            error: "late".into(),
        },
    };
    assert_eq!(
        complete_deliveries(&pool, &[late]).await.expect("complete"),
        0
    );
    assert_eq!(delivery(&pool, tenant, &key).await.status, "sending");
    let current = CompletedDelivery {
        tenant_id: tenant,
        id: second.id,
        attempts: second.attempts,
        completion: Completion::Sent,
    };
    assert_eq!(
        complete_deliveries(&pool, &[current])
            .await
            .expect("complete"),
        1
    );
    let row = delivery(&pool, tenant, &key).await;
    assert_eq!(
        (row.status.as_str(), row.attempts, row.sent_at_set),
        ("sent", 2, true)
    );
}

/// A delivery whose worker dies every time still ends: once its claims exceed
/// the maximum attempts, the next worker marks it dead without sending.
#[tokio::test]
async fn a_delivery_that_keeps_losing_its_worker_ends_dead() {
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let endpoint = create_endpoint(&pool, tenant, &receiver.url("/hook"), &secret, None).await;
    let key = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("u", 1),
    )
    .await
    .remove(0);
    // Four claims whose workers "crashed" (max attempts is 4 in worker_env).
    for _ in 0..4 {
        let claimed = claim_deliveries(&pool, 10, 1, &[Channel::Webhook])
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let worker = TestWorker::spawn(&db.url, &worker_env(&[]))
        .await
        .expect("worker");
    assert!(
        eventually(Duration::from_secs(20), || async {
            delivery(&pool, tenant, &key).await.status == "dead"
        })
        .await,
        "{}",
        worker.log()
    );
    let row = delivery(&pool, tenant, &key).await;
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or("")
            .contains("stopped before recording"),
        "{row:?}"
    );
    assert!(receiver.received().is_empty());
}

/// Invariant 6 under a crash: 5,000 webhooks, two `tidings worker` processes,
/// one killed with SIGKILL mid-batch and a new one started. The receiver takes
/// 100 ms per request, so a worker spends most of each batch cycle with
/// requests in flight and the kill almost always lands there. Every key arrives
/// at least once, every row ends `sent`, and every copy of a delivery carries
/// the same webhook-id.
#[tokio::test]
async fn a_worker_killed_mid_batch_loses_nothing_and_duplicates_keep_their_id() {
    const TOTAL: usize = 5000;
    let (db, pool) = migrated_db().await;
    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/hook?delay_ms=100"),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({"n": 1})).await;
    let keys = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("user", TOTAL),
    )
    .await;

    let env = worker_env(&[
        ("TIDINGS_OUTBOX_LEASE_SECS", "3"),
        ("TIDINGS_DELIVERY_TIMEOUT_MS", "1000"),
    ]);
    let started = Instant::now();
    let mut doomed = TestWorker::spawn(&db.url, &env).await.expect("worker 1");
    let survivor = TestWorker::spawn(&db.url, &env).await.expect("worker 2");
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.received().len() >= 1000
        })
        .await
    );
    doomed.kill();
    let killed_at = receiver.received().len();
    let replacement = TestWorker::spawn(&db.url, &env).await.expect("worker 3");

    let done = eventually(Duration::from_secs(180), || async {
        status_counts(&pool, tenant).await.get("sent").copied() == Some(TOTAL as i64)
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        done,
        "{:?}\nsurvivor:\n{}\nreplacement:\n{}",
        status_counts(&pool, tenant).await,
        survivor.log(),
        replacement.log()
    );

    let received = receiver.received();
    let mut copies: HashMap<&str, usize> = HashMap::new();
    for r in &received {
        assert_eq!(r["verified"], true, "{r}");
        let id = r["webhook_id"].as_str().unwrap_or_default();
        assert_eq!(
            r["body"]["data"]["key"].as_str(),
            Some(id),
            "a copy carried another webhook-id: {r}"
        );
        *copies.entry(id).or_default() += 1;
    }
    let missing = keys
        .iter()
        .filter(|k| !copies.contains_key(k.as_str()))
        .count();
    assert_eq!(missing, 0, "{missing} keys never arrived");
    let duplicates = received.len() - copies.len();
    eprintln!(
        "crash test: sent {TOTAL}, received {} requests for {} distinct keys, duplicates {duplicates} \
         (received {killed_at} before the kill), {:.0} deliveries/s overall ({elapsed:?})",
        received.len(),
        copies.len(),
        TOTAL as f64 / elapsed.as_secs_f64()
    );
}

/// PostgreSQL restarted while a worker drains 2,000 deliveries: the worker
/// recovers by itself and every delivery ends `sent` and received. A private
/// PostgreSQL, never the shared one.
#[tokio::test]
async fn the_worker_recovers_when_postgres_restarts_under_load() {
    const TOTAL: usize = 2000;
    let root = std::env::temp_dir().join(format!("tidings-pg-restart-{}", Uuid::new_v4().simple()));
    let port = tidings_server::embedded_pg::free_port().expect("port");
    let start = |root: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || {
            tidings_server::embedded_pg::EmbeddedPostgres::start_on_port(&root, port)
        })
    };
    let mut pg = start(root.clone())
        .await
        .expect("join")
        .expect("private PostgreSQL");
    let url = pg.url("postgres");
    let pool = tidings_server::db::connect(&url, 4, Duration::from_secs(30))
        .await
        .expect("connect");
    tidings_server::db::migrate(&pool).await.expect("migrate");

    let secret = new_secret();
    let receiver = Receiver::webhooks(&[&secret]).await;
    let tenant = create_tenant(&pool).await;
    let endpoint = create_endpoint(
        &pool,
        tenant,
        &receiver.url("/hook?delay_ms=5"),
        &secret,
        None,
    )
    .await;
    let alert = create_alert(&pool, tenant, "invoice.overdue", None, json!({})).await;
    let keys = enqueue(
        &pool,
        &alert,
        Channel::Webhook,
        Some(endpoint),
        &recipients("user", TOTAL),
    )
    .await;

    let env = worker_env(&[
        ("TIDINGS_OUTBOX_LEASE_SECS", "3"),
        ("TIDINGS_DELIVERY_TIMEOUT_MS", "1000"),
    ]);
    let worker = TestWorker::spawn(&url, &env).await.expect("worker");
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.received().len() >= 300
        })
        .await
    );
    pool.close().await;
    tokio::task::spawn_blocking(move || pg.stop())
        .await
        .expect("stop");
    let during_outage = receiver.received().len();
    // Longer than the pool's acquire timeout (5 s): the worker sees errors.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let pg = start(root.clone())
        .await
        .expect("join")
        .expect("PostgreSQL restarts");

    let pool = tidings_server::db::connect(&url, 4, Duration::from_secs(30))
        .await
        .expect("reconnect");
    let done = eventually(Duration::from_secs(120), || async {
        status_counts(&pool, tenant).await.get("sent").copied() == Some(TOTAL as i64)
    })
    .await;
    assert!(
        done,
        "{:?}\n{}",
        status_counts(&pool, tenant).await,
        worker.log()
    );
    let received: HashSet<String> = receiver
        .received()
        .iter()
        .filter_map(|r| r["webhook_id"].as_str().map(str::to_owned))
        .collect();
    assert!(
        keys.iter().all(|k| received.contains(k)),
        "a delivery marked sent never arrived"
    );
    assert!(
        during_outage < TOTAL,
        "the restart happened after the work was done; the test proved nothing"
    );
    let log = worker.log();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("failed") || l.contains("could not"))
        .collect();
    assert!(
        !errors.is_empty(),
        "the worker never noticed the outage:\n{log}"
    );
    eprintln!(
        "postgres restart: {during_outage} received before the restart, all {TOTAL} sent after; {} errors logged, e.g.\n{}",
        errors.len(),
        errors.iter().take(10).copied().collect::<Vec<_>>().join("\n")
    );
    drop(worker);
    pool.close().await;
    drop(pg);
    let _ = std::fs::remove_dir_all(&root);
}
