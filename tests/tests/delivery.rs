//! The outbox workers and the webhook and email channels (ARCHITECTURE.md,
//! invariant 6 and "The outbox state machine"), against real PostgreSQL, the real binary and
//! real receivers: webhooks are verified by the reference Standard Webhooks
//! library, emails go through a real SMTP server (tests/receivers/).
//!
//! Deliveries are written by `POST /v1/alerts` on a `serve` whose own workers
//! are off ([`webhook_fixture`]); the workers under test are a `tidings worker`
//! process, or the store's claim and completion functions called directly.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tidings_core::Channel;
use tidings_server::store::outbox::{
    claim_deliveries, complete_deliveries, ClaimedDelivery, CompletedDelivery, Completion,
};
use tidings_tests::{
    alert, create_endpoint, eventually, post_to_recipients, recipients,
    sql::{self, end_previous_secret_grace, Rows},
    user_with_email, webhook_fixture, without_workers, worker_env, AppOptions, Receiver, TestApp,
    TidingsProcess, WebhookFixture,
};
use uuid::Uuid;

fn records_for<'a>(received: &'a [Value], webhook_id: &str) -> Vec<&'a Value> {
    received
        .iter()
        .filter(|r| r["webhook_id"] == webhook_id)
        .collect()
}

#[tokio::test]
async fn webhook_from_serve_is_signed_and_verified_by_the_reference_library() {
    // The workers inside `tidings serve`.
    let f = WebhookFixture::start(
        None,
        AppOptions {
            env: worker_env(&[]),
            ..Default::default()
        },
    )
    .await;
    f.endpoint("/hook").await;
    let entity_id = format!("inv_{}", Uuid::new_v4().simple());
    let accepted = f
        .api()
        .create_alert(
            &alert()
                .entity(&entity_id)
                .recipients(&["user-0"])
                .channels(&["webhook"])
                .subject("Invoice 42 is overdue")
                .payload(json!({"invoice": 42, "amount": "12.50"}))
                .build(),
        )
        .expect(202)
        .await;
    let key = accepted["deliveries"][0]["key"].as_str().unwrap();

    let arrived = eventually(Duration::from_secs(20), || async {
        !f.receiver.received().is_empty()
    })
    .await;
    assert!(
        arrived,
        "nothing arrived; server log:\n{}",
        f.app.process.log()
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            f.delivery(key).await.status == "sent"
        })
        .await
    );

    let received = f.receiver.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let got = &received[0];
    assert_eq!(
        got["verified"], true,
        "the reference library rejected the signature: {got}"
    );
    assert_eq!(got["webhook_id"], key);
    let body = &got["body"];
    assert_eq!(body["type"], "invoice.overdue");
    assert!(
        body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );
    assert_eq!(body["data"]["alert_id"], accepted["alert_id"]);
    assert_eq!(body["data"]["entity_id"], entity_id.as_str());
    assert_eq!(body["data"]["recipient_id"], "user-0");
    assert_eq!(body["data"]["subject"], "Invoice 42 is overdue");
    assert_eq!(
        body["data"]["payload"],
        json!({"invoice": 42, "amount": "12.50"})
    );
    assert_eq!(body["data"]["key"], key);
    assert_eq!(f.delivery(key).await.outcome(), ("sent", 1, true));
}

#[tokio::test]
async fn retries_carry_the_same_webhook_id_and_body() {
    let f = webhook_fixture().await;
    f.endpoint("/hook?fail_first=2").await;
    let keys = f.send("invoice.overdue", &recipients("user", 3)).await;

    let worker = f.worker(&[]).await;
    let done = eventually(Duration::from_secs(30), || async {
        f.status_counts().await.get("sent").copied() == Some(3)
    })
    .await;
    assert!(done, "{:?}\n{}", f.status_counts().await, worker.log());

    let received = f.receiver.received();
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
        let row = f.delivery(key).await;
        assert_eq!((row.status.as_str(), row.attempts), ("sent", 3));
        assert!(
            row.last_error.as_deref().unwrap_or("").contains("500"),
            "{row:?}"
        );
    }
}

#[tokio::test]
async fn during_rotation_both_secrets_sign_and_an_expired_one_does_not() {
    let f = webhook_fixture().await;
    // The receiver trusts, in this order: rotating's old (0) and new (1)
    // secret, expired's old (2) and new (3) secret.
    let rotating = f.endpoint_for("/rotating", "invoice.overdue").await;
    f.rotate_secret(&rotating).await;
    let expired = f.endpoint_for("/expired", "invoice.reminder").await;
    f.rotate_secret(&expired).await;
    end_previous_secret_grace(&f.pool, &expired.id).await;
    f.send_one("invoice.overdue", "a-0").await;
    f.send_one("invoice.reminder", "b-0").await;

    let worker = f.worker(&[]).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            f.receiver.received().len() == 2
        })
        .await,
        "{}",
        worker.log()
    );
    let received = f.receiver.received();
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
    assert_eq!(expired["verified_with"], json!([3]), "{expired}");
}

#[tokio::test]
async fn email_carries_a_message_id_derived_from_the_key_on_every_retry() {
    let smtp = Receiver::smtp(2).await;
    let (app, db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let people = vec!["ada".to_owned(), "bob".to_owned(), "nobody".to_owned()];
    for person in &people {
        user_with_email(&api, person, Some(&format!("{person}@example.com"))).await;
    }
    let keys = post_to_recipients(
        &api,
        &alert()
            .entity("inv-7")
            .channels(&["email"])
            .subject("Invoice 7 is overdue")
            .payload(json!({"invoice": 7}))
            .build(),
        &people,
    )
    .await;
    // After the alert, bob loses his address and nobody is deleted: by the
    // time a worker claims their emails there is no address to send to.
    user_with_email(&api, "bob", None).await;
    api.delete_user("nobody").expect(204).await;

    let worker = TidingsProcess::worker(
        &db.url,
        &worker_env(&[("TIDINGS_SMTP_URL", &smtp.smtp_url())]),
    )
    .await
    .expect("worker");
    let settled = eventually(Duration::from_secs(30), || async {
        let counts = sql::status_counts(&pool, &tenant).await;
        counts.get("sent") == Some(&1) && counts.get("skipped") == Some(&2)
    })
    .await;
    assert!(
        settled,
        "{:?}\n{}",
        sql::status_counts(&pool, &tenant).await,
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
    assert_eq!(sql::delivery(&pool, &tenant, &keys[0]).await.attempts, 3);
    for key in &keys[1..] {
        let row = sql::delivery(&pool, &tenant, key).await;
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
    let f = webhook_fixture().await;
    f.endpoint_for("/broken?status=500", "invoice.disputed")
        .await;
    f.endpoint_for("/healthy", "invoice.overdue").await;
    let dead_key = f.send_one("invoice.disputed", "x-0").await;
    let good_keys = f.send("invoice.overdue", &recipients("user", 1000)).await;

    let worker = f.worker(&[]).await;
    let settled = eventually(Duration::from_secs(90), || async {
        let counts = f.status_counts().await;
        counts.get("sent") == Some(&1000) && counts.get("dead") == Some(&1)
    })
    .await;
    assert!(settled, "{:?}\n{}", f.status_counts().await, worker.log());

    let row = f.delivery(&dead_key).await;
    assert_eq!(
        row.attempts, 4,
        "the short schedule allows 4 attempts: {row:?}"
    );
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("500"),
        "{row:?}"
    );
    // Tenants read last_error: the status, never what the target answered.
    assert!(
        !row.last_error
            .as_deref()
            .unwrap_or("")
            .contains("receiver says no"),
        "{row:?}"
    );
    let received = f.receiver.received();
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
    let f = webhook_fixture().await;
    f.endpoint_for("/literal", "invoice.overdue").await;
    f.endpoint_at(
        &format!("http://localhost:{}/by-name", f.receiver.port),
        Some("invoice.reminder"),
    )
    .await;
    let literal_key = f.send_one("invoice.overdue", "a-0").await;
    let name_key = f.send_one("invoice.reminder", "b-0").await;

    let worker = f.worker(&[("TIDINGS_WEBHOOK_ALLOW_PRIVATE", "none")]).await;
    let settled = eventually(Duration::from_secs(20), || async {
        f.status_counts().await.get("dead") == Some(&2)
    })
    .await;
    assert!(settled, "{:?}\n{}", f.status_counts().await, worker.log());
    for key in [&literal_key, &name_key] {
        let row = f.delivery(key).await;
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
    // The name's resolved address is ours to know, not the tenant's.
    let by_name = f.delivery(&name_key).await.last_error.unwrap_or_default();
    assert!(
        by_name.contains("localhost") && !by_name.contains("127.0.0.1") && !by_name.contains("::1"),
        "{by_name}"
    );
    assert!(
        f.receiver.received().is_empty(),
        "a refused request reached the receiver"
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let f = webhook_fixture().await;
    f.endpoint("/moved?redirect=1").await;
    let key = f.send_one("invoice.overdue", "a-0").await;

    let worker = f.worker(&[("TIDINGS_RETRY_MAX_ATTEMPTS", "2")]).await;
    f.until_delivery_is(&key, "dead", Duration::from_secs(20), &worker)
        .await;
    let row = f.delivery(&key).await;
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("307"),
        "{row:?}"
    );
    assert!(
        !row.last_error.as_deref().unwrap_or("").contains("/ok"),
        "the redirect's target is not shown to the tenant: {row:?}"
    );
    let paths: Vec<Value> = f
        .receiver
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
    let f = webhook_fixture().await;
    f.endpoint("/hook").await;
    let worker = f.worker(&[("TIDINGS_OUTBOX_POLL_MS", "60000")]).await;
    // Let the worker find nothing and go to sleep on its 60 s poll.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let started = Instant::now();
    f.send_one("invoice.overdue", "a-0").await;
    let arrived = eventually(Duration::from_secs(10), || async {
        !f.receiver.received().is_empty()
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
    let f = webhook_fixture().await;
    f.endpoint("/slow?delay_ms=1000").await;
    f.send("invoice.overdue", &recipients("a", 20)).await;
    let mut worker = f
        .worker(&[
            ("TIDINGS_OUTBOX_BATCH", "10"),
            ("TIDINGS_WORKER_CONCURRENCY", "10"),
        ])
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            !f.receiver.received().is_empty()
        })
        .await
    );
    let status = worker.terminate().await.expect("terminate");
    assert!(status.success(), "{status}: {}", worker.log());
    let counts = f.status_counts().await;
    assert_eq!(
        counts.get("sending"),
        None,
        "a claimed batch was abandoned: {counts:?}"
    );
    let sent = counts.get("sent").copied().unwrap_or(0);
    assert!(sent >= 10, "the batch in flight was recorded: {counts:?}");
    assert_eq!(
        f.receiver.received().len() as i64,
        sent,
        "only what was recorded was sent"
    );
}

/// One tenant's backlog does not starve another's: with 2,000 due for A and 5
/// for B, B's five are all in the first batch of 100.
#[tokio::test]
async fn a_big_backlog_does_not_starve_another_tenant() {
    let f = webhook_fixture().await;
    let busy = f.tenant.uuid();
    let quiet = f.app.create_tenant().await;
    let quiet_api = f.app.tenant(&quiet);
    f.endpoint_at("http://a.example/hook", None).await;
    create_endpoint(&quiet_api, "http://b.example/hook", None).await;
    f.send("invoice.overdue", &recipients("u", 2000)).await;
    // The backlog is older: a plain FIFO would serve all of it first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    post_to_recipients(
        &quiet_api,
        &alert().fresh_entity().channels(&["webhook"]).build(),
        &recipients("u", 5),
    )
    .await;

    let first = claim_deliveries(&f.pool, 100, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    let quiet_in_first = first.iter().filter(|d| d.tenant_id == quiet.uuid()).count();
    assert_eq!(quiet_in_first, 5, "tenant B waited behind A's backlog");
    let second = claim_deliveries(&f.pool, 100, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    assert_eq!(second.len(), 100, "with B done, A gets whole batches");
    assert!(second.iter().all(|d| d.tenant_id == busy));
    // A claim carries what delivery needs.
    let d = &first[0];
    assert!(d.endpoint_url.is_some() && d.endpoint_secret.is_some() && d.payload.is_some());
}

/// The fairness probe finds every tenant with due work, however many: with a
/// backlog for A and a few due for B and C (and a tenant with nothing), B's and
/// C's all go out in the first batch, beside A's share.
#[tokio::test]
async fn every_tenant_with_due_work_gets_its_share_of_one_batch() {
    let f = webhook_fixture().await;
    let busy = f.tenant.uuid();
    f.endpoint_at("http://a.example/hook", None).await;
    f.send("invoice.overdue", &recipients("u", 500)).await;
    let idle = f.app.create_tenant().await;
    create_endpoint(&f.app.tenant(&idle), "http://idle.example/hook", None).await;
    let mut quiet = vec![];
    for host in ["b", "c"] {
        let tenant = f.app.create_tenant().await;
        let api = f.app.tenant(&tenant);
        create_endpoint(&api, &format!("http://{host}.example/hook"), None).await;
        post_to_recipients(
            &api,
            &alert().fresh_entity().channels(&["webhook"]).build(),
            &recipients("u", 5),
        )
        .await;
        quiet.push(tenant.uuid());
    }

    let first = claim_deliveries(&f.pool, 100, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    for tenant in &quiet {
        let theirs = first.iter().filter(|d| d.tenant_id == *tenant).count();
        assert_eq!(
            theirs, 5,
            "a tenant with due work was left out of the batch"
        );
    }
    let busy_share = first.iter().filter(|d| d.tenant_id == busy).count();
    assert_eq!(
        busy_share, 34,
        "three tenants with due work: a third of 100 each"
    );
    assert!(first
        .iter()
        .all(|d| d.endpoint_url.is_some() && d.recipient_email.is_none()));
}

/// A completion is written only by the claim that holds the row: after the
/// lease expired and the row was claimed again, the first worker's late
/// result changes nothing. Every claim counts an attempt.
#[tokio::test]
async fn a_late_result_from_an_expired_lease_cannot_overwrite_the_new_claim() {
    let f = webhook_fixture().await;
    f.endpoint_at("http://a.example/hook", None).await;
    let key = f.send_one("invoice.overdue", "u-0").await;

    // A lease long enough that the next statement runs inside it however
    // loaded the machine (a 100 ms lease once expired between the two claims
    // at load 19), short enough to wait out.
    const LEASE_MS: u64 = 1_500;
    let first = claim_deliveries(&f.pool, 10, LEASE_MS, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(first.attempts, 1);
    assert!(
        claim_deliveries(&f.pool, 10, LEASE_MS, &[Channel::Webhook])
            .await
            .expect("claim")
            .is_empty(),
        "leased rows are not due"
    );
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    let second = claim_deliveries(&f.pool, 10, 60_000, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(
        (second.id, second.attempts),
        (first.id, 2),
        "an expired lease is claimed again, as a new attempt"
    );

    let late = CompletedDelivery {
        tenant_id: f.tenant.uuid(),
        id: first.id,
        attempts: first.attempts,
        // The version the first claim wrote, which the second left behind.
        version: first.version.clone(),
        completion: Completion::Dead {
            error: "late".into(),
        },
    };
    assert_eq!(
        complete_deliveries(&f.pool, &[late])
            .await
            .expect("complete"),
        0
    );
    assert_eq!(f.delivery(&key).await.status, "sending");
    let current = CompletedDelivery {
        tenant_id: f.tenant.uuid(),
        id: second.id,
        attempts: second.attempts,
        version: second.version.clone(),
        completion: Completion::Sent,
    };
    assert_eq!(
        complete_deliveries(&f.pool, &[current])
            .await
            .expect("complete"),
        1
    );
    assert_eq!(f.delivery(&key).await.outcome(), ("sent", 2, true));
}

/// The completion moves a `sent` delivery out of `deliveries` (migration
/// 0022) under the same guard: a worker whose lease expired and whose row
/// another worker claimed sends its late `sent` in vain. Nothing moves; the
/// new holder's `sent` moves the row once, and a repeat of it moves nothing.
#[tokio::test]
async fn a_late_sent_from_an_expired_lease_moves_nothing_and_the_delivery_is_sent_once() {
    let f = webhook_fixture().await;
    f.endpoint_at("http://a.example/hook", None).await;
    let key = f.send_one("invoice.overdue", "u-0").await;

    // As in the test above: long enough for the next statement, short enough
    // to wait out.
    const LEASE_MS: u64 = 1_500;
    let first = claim_deliveries(&f.pool, 10, LEASE_MS, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    let second = claim_deliveries(&f.pool, 10, 60_000, &[Channel::Webhook])
        .await
        .expect("claim")
        .remove(0);
    assert_eq!((second.id, second.attempts), (first.id, 2));

    let sent = |claimed: &tidings_server::store::outbox::ClaimedDelivery| CompletedDelivery {
        tenant_id: claimed.tenant_id,
        id: claimed.id,
        attempts: claimed.attempts,
        version: claimed.version.clone(),
        completion: Completion::Sent,
    };
    assert_eq!(
        complete_deliveries(&f.pool, &[sent(&first)])
            .await
            .expect("complete"),
        0,
        "the late sent writes nothing"
    );
    assert_eq!(sql::count(&f.pool, Rows::MovedSentDeliveries).await, 0);
    assert_eq!(f.delivery(&key).await.outcome(), ("sending", 2, false));

    assert_eq!(
        complete_deliveries(&f.pool, &[sent(&second)])
            .await
            .expect("complete"),
        1
    );
    assert_eq!(
        complete_deliveries(&f.pool, &[sent(&second)])
            .await
            .expect("complete"),
        0,
        "a repeated sent moves nothing"
    );
    assert_eq!(sql::count(&f.pool, Rows::MovedSentDeliveries).await, 1);
    assert_eq!(
        sql::count(&f.pool, Rows::Deliveries).await,
        1,
        "one row in all: moved, not copied"
    );
    assert_eq!(f.delivery(&key).await.outcome(), ("sent", 2, true));
}

/// One alert to two webhook endpoints, its two deliveries claimed directly
/// (the fixture runs no worker).
async fn one_alert_claimed_at_two_endpoints() -> (WebhookFixture, Vec<ClaimedDelivery>) {
    let f = webhook_fixture().await;
    f.endpoint_at("http://a.example/hook", None).await;
    f.endpoint_at("http://b.example/hook", None).await;
    f.send_one("invoice.overdue", "u-0").await;
    let claimed = claim_deliveries(&f.pool, 10, 60_000, &[Channel::Webhook])
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 2, "one delivery per endpoint");
    (f, claimed)
}

/// The completion reaches a row at the version its claim wrote, and by its
/// key when the row has moved on since (another statement updated it): a
/// version that names another row, or no live row, never completes the
/// wrong one nor loses the result.
#[tokio::test]
async fn a_completion_finds_its_row_whatever_version_it_carries() {
    let (f, claimed) = one_alert_claimed_at_two_endpoints().await;
    let (a, b) = (&claimed[0], &claimed[1]);
    assert!(a.version.is_some() && a.version != b.version, "{claimed:?}");
    let sent = |d: &ClaimedDelivery, version: Option<String>| CompletedDelivery {
        tenant_id: d.tenant_id,
        id: d.id,
        attempts: d.attempts,
        version,
        completion: Completion::Sent,
    };
    let status = |id: i64| {
        let pool = f.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT status FROM deliveries WHERE id = $1
                 UNION ALL SELECT status FROM deliveries_sent WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("status")
        }
    };

    // B's result carrying A's version (a live row, not B's): B is found by
    // its key, A is untouched (claimed: still pending in its status column).
    assert_eq!(
        complete_deliveries(&f.pool, &[sent(b, a.version.clone())])
            .await
            .expect("complete"),
        1
    );
    assert_eq!(
        (status(a.id).await, status(b.id).await),
        ("pending".to_string(), "sent".to_string())
    );

    // A updated since its claim (a new version; the guard still holds):
    // its result carries a version no live row has, and A is found by key.
    sqlx::query("UPDATE deliveries SET last_error = 'touched' WHERE id = $1")
        .bind(a.id)
        .execute(&f.pool)
        .await
        .expect("touch");
    assert_eq!(
        complete_deliveries(&f.pool, &[sent(a, a.version.clone())])
            .await
            .expect("complete"),
        1
    );
    assert_eq!(status(a.id).await, "sent");
    assert_eq!(sql::count(&f.pool, Rows::MovedSentDeliveries).await, 2);
    assert_eq!(
        sql::count(&f.pool, Rows::Deliveries).await,
        2,
        "moved, not copied"
    );
}

/// Retention looks for a notification's remaining deliveries in both
/// tables: one webhook notification of two endpoints, one delivery sent
/// (moved to `deliveries_sent`), one skipped (in `deliveries`). Purging the
/// skipped one keeps the notification, since the moved one remains; purging
/// the moved one then takes the notification.
#[tokio::test]
async fn retention_keeps_a_notification_while_a_delivery_of_it_remains_in_either_table() {
    use tidings_server::{
        deliveries::DeliveryStatus,
        store::retention::{purge_deliveries, DeliveryTable},
    };
    let (f, claimed) = one_alert_claimed_at_two_endpoints().await;
    let done: Vec<CompletedDelivery> = claimed
        .iter()
        .zip([
            Completion::Sent,
            Completion::Skipped {
                reason: "endpoint deleted".into(),
            },
        ])
        .map(|(d, completion)| CompletedDelivery {
            tenant_id: d.tenant_id,
            id: d.id,
            attempts: d.attempts,
            version: d.version.clone(),
            completion,
        })
        .collect();
    assert_eq!(
        complete_deliveries(&f.pool, &done).await.expect("complete"),
        2
    );
    assert_eq!(sql::count(&f.pool, Rows::MovedSentDeliveries).await, 1);

    let tenant = f.tenant.uuid();
    let purge = |table, status| purge_deliveries(&f.pool, table, tenant, status, 0.0, 100);
    let gone = purge(DeliveryTable::Deliveries, DeliveryStatus::Skipped)
        .await
        .expect("purge skipped");
    assert_eq!(
        (gone.deliveries, gone.notifications),
        (1, 0),
        "the moved delivery keeps its notification"
    );
    assert_eq!(sql::count(&f.pool, Rows::Notifications).await, 1);
    let gone = purge(DeliveryTable::Sent, DeliveryStatus::Sent)
        .await
        .expect("purge sent");
    assert_eq!((gone.deliveries, gone.notifications), (1, 1));
    assert_eq!(sql::count(&f.pool, Rows::Deliveries).await, 0);
    assert_eq!(sql::count(&f.pool, Rows::Notifications).await, 0);
}

/// A delivery whose worker dies every time still ends: once its claims exceed
/// the maximum attempts, the next worker marks it dead without sending.
#[tokio::test]
async fn a_delivery_that_keeps_losing_its_worker_ends_dead() {
    let f = webhook_fixture().await;
    f.endpoint("/hook").await;
    let key = f.send_one("invoice.overdue", "u-0").await;
    // Four claims whose workers "crashed" (max attempts is 4 in worker_env).
    for _ in 0..4 {
        let claimed = claim_deliveries(&f.pool, 10, 1, &[Channel::Webhook])
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let worker = f.worker(&[]).await;
    f.until_delivery_is(&key, "dead", Duration::from_secs(20), &worker)
        .await;
    let row = f.delivery(&key).await;
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or("")
            .contains("stopped before recording"),
        "{row:?}"
    );
    assert!(f.receiver.received().is_empty());
}

/// Invariant 6 under a crash: 5,000 webhooks, two `tidings worker` processes,
/// one killed with SIGKILL mid-batch and a new one started. The receiver takes
/// 100 ms per request, so a worker spends most of each batch cycle with
/// requests in flight and the kill almost always lands there. Every key arrives
/// at least once, every row ends `sent`, and every copy of a delivery carries
/// the same webhook-id. Results are recorded as they complete, so the kill
/// repeats only what was in flight: at most the killed worker's concurrency
/// (20) of its batch of 100, where recording per batch repeated up to 100.
#[tokio::test]
async fn a_worker_killed_mid_batch_loses_nothing_and_repeats_only_sends_in_flight() {
    const TOTAL: usize = 5000;
    const CONCURRENCY: usize = 20;
    let f = webhook_fixture().await;
    f.endpoint("/hook?delay_ms=100").await;
    let keys = f.send("invoice.overdue", &recipients("user", TOTAL)).await;

    let concurrency = CONCURRENCY.to_string();
    let env = [
        ("TIDINGS_OUTBOX_LEASE_SECS", "3"),
        ("TIDINGS_DELIVERY_TIMEOUT_MS", "1000"),
        ("TIDINGS_OUTBOX_BATCH", "100"),
        ("TIDINGS_WORKER_CONCURRENCY", concurrency.as_str()),
    ];
    let started = Instant::now();
    let mut doomed = f.worker(&env).await;
    let survivor = f.worker(&env).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            f.receiver.received().len() >= 1000
        })
        .await
    );
    doomed.kill();
    let killed_at = f.receiver.received().len();
    let replacement = f.worker(&env).await;

    let done = eventually(Duration::from_secs(180), || async {
        f.status_counts().await.get("sent").copied() == Some(TOTAL as i64)
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        done,
        "{:?}\nsurvivor:\n{}\nreplacement:\n{}",
        f.status_counts().await,
        survivor.log(),
        replacement.log()
    );

    let received = f.receiver.received();
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
    assert!(
        duplicates <= CONCURRENCY,
        "the kill repeated {duplicates} deliveries, more than the {CONCURRENCY} a worker has in flight"
    );
}

/// PostgreSQL restarted while a worker drains 2,000 deliveries: the worker
/// recovers by itself and every delivery ends `sent` and received. A private
/// PostgreSQL, never the shared one.
#[tokio::test]
async fn the_worker_recovers_when_postgres_restarts_under_load() {
    const TOTAL: usize = 2000;
    let root = std::env::temp_dir().join(format!("tidings-pg-restart-{}", Uuid::new_v4().simple()));
    let port = tidings_server::db::embedded_pg::free_port().expect("port");
    let start = |root: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || {
            tidings_server::db::embedded_pg::EmbeddedPostgres::start_on_port(&root, port)
        })
    };
    let mut pg = start(root.clone())
        .await
        .expect("join")
        .expect("private PostgreSQL");
    let url = pg.url("postgres");

    let mut f = WebhookFixture::start(Some(&url), without_workers()).await;
    f.endpoint("/hook?delay_ms=5").await;
    let keys = f.send("invoice.overdue", &recipients("user", TOTAL)).await;
    // The deliveries are written; only the worker under test stays connected.
    f.app.process.terminate().await.expect("stop serve");

    let worker = f
        .worker(&[
            ("TIDINGS_OUTBOX_LEASE_SECS", "3"),
            ("TIDINGS_DELIVERY_TIMEOUT_MS", "1000"),
        ])
        .await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            f.receiver.received().len() >= 300
        })
        .await
    );
    f.pool.close().await;
    tokio::task::spawn_blocking(move || pg.stop())
        .await
        .expect("stop");
    let during_outage = f.receiver.received().len();
    // Longer than the pool's acquire timeout (5 s): the worker sees errors.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let pg = start(root.clone())
        .await
        .expect("join")
        .expect("PostgreSQL restarts");

    let pool = tidings_server::db::connect(
        &url,
        4,
        Duration::from_secs(30),
        tidings_server::app::config::SessionTimeouts::default(),
    )
    .await
    .expect("reconnect");
    let done = eventually(Duration::from_secs(120), || async {
        sql::status_counts(&pool, &f.tenant)
            .await
            .get("sent")
            .copied()
            == Some(TOTAL as i64)
    })
    .await;
    assert!(
        done,
        "{:?}\n{}",
        sql::status_counts(&pool, &f.tenant).await,
        worker.log()
    );
    let received: HashSet<String> = f
        .receiver
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
    drop(f);
    drop(pg);
    let _ = std::fs::remove_dir_all(&root);
}

/// IPv6 spellings that reach 127.0.0.1 or a private network through a
/// translator or relay (NAT64, 6to4, SIIT, IPv4-compatible) route off this
/// host: whatever the policy, creating an endpoint at one is refused with
/// 422, so no delivery ever connects to it (the resolver refuses a name that
/// resolves to one: `ssrf`'s unit tests).
#[tokio::test]
async fn an_endpoint_at_a_translated_spelling_of_loopback_is_refused_under_every_policy() {
    for policy in ["none", "all"] {
        let f = tidings_tests::TenantFixture::spawn_with(AppOptions::env([(
            "TIDINGS_WEBHOOK_ALLOW_PRIVATE",
            policy,
        )]))
        .await;
        for host in [
            "[64:ff9b::7f00:1]",
            "[64:ff9b:1::7f00:1]",
            "[2002:7f00:1::1]",
            "[::ffff:0:7f00:1]",
            "[::7f00:1]",
            "[64:ff9b::a00:1]",
        ] {
            let problem = f
                .api()
                .create_endpoint(&json!({"url": format!("http://{host}:9/hook")}))
                .problem(422)
                .await;
            assert_eq!(
                problem["code"], "webhook_url_refused",
                "{policy} {host}: {problem}"
            );
        }
        // The plain address is the delivering worker's policy to allow
        // (`webhooks_to_loopback_are_refused_unless_allowed`).
        f.api()
            .create_endpoint(&json!({"url": "http://127.0.0.1:9/hook"}))
            .expect(201)
            .await;
    }
}
