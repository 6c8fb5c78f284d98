//! Delayed channels with a condition ("email me in a while, only if I have
//! not read it"; ARCHITECTURE.md, "Delayed channels"), with real PostgreSQL,
//! a real SMTP receiver and two instances: one takes alerts and the users'
//! marks, the other runs the outbox workers that decide.
//!
//! The promise: no email for an item that a read committed before the
//! decision covers (mark all read, or the item read one by one), whichever
//! instance the read went to; an email when the decision came first; the
//! recorded watermark says which.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use futures::future::join_all;
use rand::Rng;
use serde_json::{json, Value};
use tidings_core::Position;
use tidings_tests::{
    alert, eventually, timestamp, user_with_email, worker_env, AppOptions, Receiver, TestApp,
    TestDb, TestTenant,
};

/// Two instances on one database: `front` takes alerts and marks and runs no
/// workers; `worker` runs the outbox, polling every `poll_ms` (a delayed
/// delivery wakes nobody when it falls due).
struct Pair {
    front: TestApp,
    worker: TestApp,
    _db: TestDb,
}

/// The SMTP hand-off is outside any lock: an email the receiver accepted
/// while the worker timed out is retried, decided again and may then be
/// skipped, though it arrived. The timeouts are long enough here that a
/// loaded machine does not turn a slow send into such a retry, so the
/// emails received can be compared with the decisions exactly.
///
/// The worker pauses 20 ms between reading the watermarks and recording its
/// decisions (a test hook): with the users' locks held, marks wait it out;
/// without them, a mark could commit inside the pause unseen, and the race
/// test would catch it.
async fn pair(smtp: &Receiver, poll_ms: &str) -> Pair {
    let (front, db) = TestApp::spawn_with(AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")]))
        .await
        .expect("front instance");
    let worker = TestApp::spawn_on(
        &db.url,
        AppOptions::env(worker_env(&[
            ("TIDINGS_SMTP_URL", &smtp.smtp_url()),
            ("TIDINGS_OUTBOX_POLL_MS", poll_ms),
            ("TIDINGS_DELIVERY_TIMEOUT_MS", "15000"),
            ("TIDINGS_OUTBOX_LEASE_SECS", "60"),
            ("TIDINGS_TEST_DECISION_PAUSE_MS", "20"),
        ])),
    )
    .await
    .expect("worker instance");
    Pair {
        front,
        worker,
        _db: db,
    }
}

fn email_of(user: &str) -> String {
    format!("{user}@example.com")
}

/// Each user's email delivery of `alert`, by recipient.
fn email_deliveries(alert: &Value) -> HashMap<String, Value> {
    alert["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .filter(|d| d["channel"] == "email")
        .map(|d| {
            (
                d["recipient_id"].as_str().expect("recipient").to_owned(),
                d.clone(),
            )
        })
        .collect()
}

/// Every delivery of `alert_id`, following the pages.
async fn all_deliveries(app: &TestApp, tenant: &TestTenant, alert_id: &str) -> Value {
    let api = app.tenant(tenant);
    let mut all = Vec::new();
    let mut query = "?limit=1000".to_owned();
    loop {
        let page = api.get_alert_page(alert_id, &query).expect(200).await;
        all.extend(
            page["deliveries"]
                .as_array()
                .expect("deliveries")
                .iter()
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => query = format!("?limit=1000&cursor={cursor}"),
            None => return json!({ "deliveries": all }),
        }
    }
}

fn is_final(delivery: &Value) -> bool {
    matches!(
        delivery["status"].as_str(),
        Some("sent" | "skipped" | "dead")
    )
}

/// Waits until every email delivery of `alert_id` is final; answers them.
async fn settled(app: &TestApp, tenant: &TestTenant, alert_id: &str) -> HashMap<String, Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let last = email_deliveries(&all_deliveries(app, tenant, alert_id).await);
        if last.values().all(is_final) {
            return last;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deliveries never settled: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cursor_position(value: &Value) -> Option<Position> {
    value
        .as_str()
        .map(|c| Position::from_cursor(c).expect("valid cursor"))
}

/// Posts an alert (in-app and a delayed email) to `users` through `front`
/// and answers its id.
async fn post_delayed(
    app: &TestApp,
    tenant: &TestTenant,
    users: &[String],
    delivery: Value,
) -> String {
    let body = alert()
        .fresh_entity()
        .recipients(users)
        .channels(&["in_app", "email"])
        .subject("Invoice overdue")
        .delivery(delivery)
        .build();
    let created = app.tenant(tenant).create_alert(&body).expect(202).await;
    created["alert_id"].as_str().expect("alert id").to_owned()
}

/// The race, 1,000 times: one instance marks all read at a random moment
/// around the end of the delay while the other instance's worker decides.
/// Each email delivery must be explained by its recorded watermark (sent:
/// below the item; skipped: at or above it), a mark whose answer arrived
/// before the decision was recorded must have been seen by it (with the
/// lock, no mark can commit between the decision's read and its commit),
/// and the SMTP receiver must hold exactly the emails decided `send`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mark_all_read_racing_the_decision_never_lets_an_email_through_for_a_read_item() {
    const ROUNDS: usize = 4;
    const USERS_PER_ROUND: usize = 250;
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "50").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);

    let (mut sent, mut skipped) = (0usize, 0usize);
    for round in 0..ROUNDS {
        let users: Vec<String> = (0..USERS_PER_ROUND)
            .map(|i| format!("r{round}-u{i}"))
            .collect();
        let addresses: Vec<String> = users.iter().map(|u| email_of(u)).collect();
        join_all(
            users
                .iter()
                .zip(&addresses)
                .map(|(u, a)| user_with_email(&api, u, Some(a))),
        )
        .await;
        let tokens: Vec<String> =
            join_all(users.iter().map(|u| p.front.user_token(&tenant, u))).await;
        // Half the users have read something before (a watermark row to lock);
        // the other half never opened the app (no row: the claim inserts it).
        let earlier = alert()
            .fresh_entity()
            .recipients(&users.iter().step_by(2).collect::<Vec<_>>())
            .channels(&["in_app"])
            .build();
        api.create_alert(&earlier).expect(202).await;
        join_all(
            tokens
                .iter()
                .step_by(2)
                .map(|t| p.front.user(t).mark_read(&json!({})).expect(200)),
        )
        .await;
        let alert_id = post_delayed(
            &p.front,
            &tenant,
            &users,
            json!({"email": {"delay": "1s", "unless": "read"}}),
        )
        .await;
        let shown = all_deliveries(&p.front, &tenant, &alert_id).await;
        let due = timestamp(
            &email_deliveries(&shown).values().next().expect("an email")["next_attempt_at"],
        );
        // Marks spread from 150 ms before the delay ends to 250 ms after it;
        // the worker polls every 50 ms, so decisions fall inside that window.
        let marks = users.iter().zip(&tokens).map(|(user, token)| {
            let offset_ms: i64 = rand::thread_rng().gen_range(-150..250);
            let at = due + chrono::Duration::milliseconds(offset_ms);
            let front = &p.front;
            async move {
                let wait = (at - Utc::now()).to_std().unwrap_or_default();
                tokio::time::sleep(wait).await;
                front.user(token).mark_read(&json!({})).expect(200).await;
                (user.clone(), Utc::now())
            }
        });
        let answered: HashMap<String, DateTime<Utc>> = join_all(marks).await.into_iter().collect();

        let decided = settled(&p.front, &tenant, &alert_id).await;
        assert_eq!(decided.len(), USERS_PER_ROUND);
        for (user, d) in &decided {
            let condition = &d["condition"];
            let item = cursor_position(&condition["item"]).expect("linked to its in-app item");
            let seen = cursor_position(&condition["decided_watermark"])
                .unwrap_or_else(|| panic!("no recorded watermark: {d}"));
            let decided_at = timestamp(&condition["decided_at"]);
            assert_eq!(
                d["attempts"], 1,
                "decided once, sent at the first attempt: {d}"
            );
            match d["status"].as_str() {
                Some("sent") => {
                    sent += 1;
                    assert!(
                        seen < item,
                        "sent with the item at or below the watermark it saw: {d}"
                    );
                    assert!(
                        answered[user] > decided_at,
                        "{user}'s mark was answered at {} before the decision recorded at {decided_at}, yet it sent: {d}",
                        answered[user]
                    );
                }
                Some("skipped") => {
                    skipped += 1;
                    assert_eq!(d["last_error"], "read", "{d}");
                    assert!(
                        seen >= item,
                        "skipped with the item above the watermark it saw: {d}"
                    );
                }
                other => panic!("{user}: {other:?}: {d}"),
            }
        }
        // Every email decided `send` arrives, and no other.
        let expected: Vec<String> = decided
            .iter()
            .filter(|(_, d)| d["status"] == "sent")
            .map(|(user, _)| email_of(user))
            .collect();
        let addressed = |smtp: &Receiver| -> Vec<String> {
            smtp.received()
                .iter()
                .flat_map(|m| m["rcpt_tos"].as_array().cloned().unwrap_or_default())
                .filter_map(|to| to.as_str().map(str::to_owned))
                .filter(|to| to.starts_with(&format!("r{round}-")))
                .collect()
        };
        let arrived = eventually(Duration::from_secs(20), || async {
            addressed(&smtp).len() >= expected.len()
        })
        .await;
        assert!(
            arrived,
            "round {round}: emails decided `send` did not all arrive"
        );
        let mut got = addressed(&smtp);
        got.sort();
        let mut want = expected.clone();
        want.sort();
        let unexplained: Vec<&Value> = got
            .iter()
            .filter(|to| !want.contains(to))
            .filter_map(|to| decided.get(to.trim_end_matches("@example.com")))
            .collect();
        assert_eq!(
            got, want,
            "round {round}: the emails are exactly those decided `send`; not decided so: {unexplained:?}\n{}",
            p.worker.process.log()
        );
    }
    let total = ROUNDS * USERS_PER_ROUND;
    assert_eq!(sent + skipped, total);
    // The window straddles the decisions: both sides must have happened, or
    // the test raced nothing.
    assert!(
        sent >= total / 50 && skipped >= total / 50,
        "sent {sent}, skipped {skipped}: the marks and the decisions did not interleave"
    );
    eprintln!("race: {total} decisions, {sent} sent, {skipped} skipped (read first)");
    drop(p.worker);
}

#[tokio::test]
async fn an_item_read_one_by_one_50_ms_before_the_delay_ends_gets_no_email() {
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "20").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);
    let users = ["ann".to_owned(), "bob".to_owned()];
    for u in &users {
        user_with_email(&api, u, Some(&email_of(u))).await;
    }
    let alert_id = post_delayed(
        &p.front,
        &tenant,
        &users,
        json!({"email": {"delay": "2s", "unless": "read"}}),
    )
    .await;
    let shown = all_deliveries(&p.front, &tenant, &alert_id).await;
    let due = timestamp(&email_deliveries(&shown)["ann"]["next_attempt_at"]);
    let ann = p
        .front
        .user(&p.front.user_token(&tenant, "ann").await)
        .feed("")
        .expect(200)
        .await;
    let item_id = ann["items"][0]["id"].as_i64().expect("ann's item");
    let token = p.front.user_token(&tenant, "ann").await;
    let wait = (due - chrono::Duration::milliseconds(50) - Utc::now())
        .to_std()
        .expect("the delay has not ended yet");
    tokio::time::sleep(wait).await;
    p.front
        .user(&token)
        .mark_item_read(item_id)
        .expect(200)
        .await;

    let decided = settled(&p.front, &tenant, &alert_id).await;
    assert_eq!(decided["ann"]["status"], "skipped", "{:?}", decided["ann"]);
    assert_eq!(decided["ann"]["last_error"], "read");
    assert_eq!(
        decided["bob"]["status"], "sent",
        "bob read nothing: {:?}",
        decided["bob"]
    );
    let bobs = eventually(Duration::from_secs(10), || async {
        !smtp.received().is_empty()
    })
    .await;
    assert!(bobs, "bob's email never arrived");
    let received = smtp.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        received[0]["rcpt_tos"],
        json!(["bob@example.com"]),
        "{received:?}"
    );
}

#[tokio::test]
async fn a_user_who_never_opened_the_app_counts_as_unread_and_gets_the_email() {
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "50").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    let alert_id = post_delayed(
        &p.front,
        &tenant,
        &["ann".to_owned()],
        json!({"email": {"delay": "1s", "unless": "seen"}}),
    )
    .await;
    let decided = settled(&p.front, &tenant, &alert_id).await;
    let d = &decided["ann"];
    assert_eq!(d["status"], "sent", "{d}");
    assert_eq!(d["condition"]["unless"], "seen");
    assert_eq!(
        cursor_position(&d["condition"]["decided_watermark"]),
        Some(Position::ORIGIN),
        "no watermark row: the origin, everything unread: {d}"
    );
    let arrived = eventually(Duration::from_secs(10), || async {
        smtp.received().len() == 1
    })
    .await;
    assert!(arrived, "no email: {:?}", smtp.received());
}

#[tokio::test]
async fn a_critical_category_never_waits_and_an_opt_out_during_the_delay_skips_the_send() {
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "50").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);
    for u in ["ann", "bob"] {
        user_with_email(&api, u, Some(&email_of(u))).await;
    }
    api.put_category(
        "security",
        &json!({"label": "Security", "critical": true, "event_types": ["login.new_device"]}),
    )
    .expect(201)
    .await;
    let critical = alert()
        .event_type("login.new_device")
        .fresh_entity()
        .recipients(&["ann"])
        .channels(&["in_app", "email"])
        .delivery(json!({"email": {"delay": "1h", "unless": "read"}}))
        .build();
    let created = api.create_alert(&critical).expect(202).await;
    let critical_id = created["alert_id"].as_str().expect("id").to_owned();
    let decided = settled(&p.front, &tenant, &critical_id).await;
    assert_eq!(decided["ann"]["status"], "sent", "{:?}", decided["ann"]);
    assert!(
        decided["ann"]["condition"].is_null(),
        "a critical alert waits on nothing"
    );

    // bob opts out of the event type's email while his email waits.
    let alert_id = post_delayed(
        &p.front,
        &tenant,
        &["bob".to_owned()],
        json!({"email": {"delay": "2s", "unless": "read"}}),
    )
    .await;
    api.patch_preferences(
        "bob",
        &json!({"settings": [{"scope": "event_type", "key": "invoice.overdue", "channel": "email", "setting": "off"}]}),
    )
    .expect(200)
    .await;
    let decided = settled(&p.front, &tenant, &alert_id).await;
    let bobs = &decided["bob"];
    assert_eq!(bobs["status"], "skipped", "{bobs}");
    assert!(
        bobs["last_error"]
            .as_str()
            .unwrap_or("")
            .starts_with("preference"),
        "{bobs}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = smtp.received();
    assert_eq!(received.len(), 1, "only ann's critical email: {received:?}");
}

#[tokio::test]
async fn event_type_defaults_apply_the_alerts_own_rule_wins_and_bad_rules_are_422() {
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "1000").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);
    user_with_email(&api, "ann", Some("ann@example.com")).await;

    assert_eq!(
        api.event_type_delivery("invoice.overdue").expect(200).await,
        json!({})
    );
    let rules = json!({"email": {"delay": "90m", "unless": "seen"}});
    let put = api
        .put_event_type_delivery("invoice.overdue", &rules)
        .expect(200)
        .await;
    assert_eq!(put, rules);
    assert_eq!(
        api.event_type_delivery("invoice.overdue").expect(200).await,
        rules
    );

    let by_default = alert()
        .fresh_entity()
        .recipients(&["ann"])
        .channels(&["in_app", "email"])
        .build();
    let id = api.create_alert(&by_default).expect(202).await["alert_id"].clone();
    let shown = api.get_alert(id.as_str().expect("id")).expect(200).await;
    let d = &email_deliveries(&shown)["ann"];
    assert_eq!(d["condition"]["unless"], "seen", "{d}");
    let waits = timestamp(&d["next_attempt_at"]) - timestamp(&d["created_at"]);
    assert_eq!(waits.num_minutes(), 90, "{d}");

    let own = alert()
        .fresh_entity()
        .recipients(&["ann"])
        .channels(&["in_app", "email"])
        .delivery(json!({"email": {"delay": "30s", "unless": "read"}}))
        .build();
    let id = api.create_alert(&own).expect(202).await["alert_id"].clone();
    let shown = api.get_alert(id.as_str().expect("id")).expect(200).await;
    let d = &email_deliveries(&shown)["ann"];
    assert_eq!(d["condition"]["unless"], "read", "{d}");
    let waits = timestamp(&d["next_attempt_at"]) - timestamp(&d["created_at"]);
    assert_eq!(waits.num_seconds(), 30, "{d}");

    let bad = |delivery: Value, channels: &[&str]| {
        alert()
            .fresh_entity()
            .recipients(&["ann"])
            .channels(channels)
            .delivery(delivery)
            .build()
    };
    for (body, names) in [
        (
            bad(
                json!({"email": {"delay": "15 minutes", "unless": "read"}}),
                &["in_app", "email"],
            ),
            "delivery.email.delay",
        ),
        (
            bad(
                json!({"email": {"delay": "0s", "unless": "read"}}),
                &["in_app", "email"],
            ),
            "delivery.email.delay",
        ),
        (
            bad(
                json!({"email": {"delay": "15m", "unless": "opened"}}),
                &["in_app", "email"],
            ),
            "delivery.email.unless",
        ),
        (
            bad(
                json!({"email": {"delay": "15m", "unless": "read"}}),
                &["email"],
            ),
            "in_app",
        ),
        (
            bad(
                json!({"webhook": {"delay": "15m", "unless": "read"}}),
                &["in_app", "email"],
            ),
            "delivery.webhook",
        ),
    ] {
        let problem = api.create_alert(&body).problem(422).await;
        assert_eq!(problem["code"], "invalid_alert", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap_or("").contains(names),
            "{names}: {problem}"
        );
    }
    let problem = api
        .put_event_type_delivery(
            "invoice.overdue",
            &json!({"email": {"delay": "2w", "unless": "read"}}),
        )
        .problem(422)
        .await;
    assert_eq!(problem["code"], "invalid_delivery", "{problem}");
    assert_eq!(
        api.event_type_delivery("invoice.overdue").expect(200).await,
        rules,
        "a refused rule changes nothing"
    );
}

/// A batch decides many alerts at once, grouped by (event type, category)
/// for the preferences: an opt-out of one category during the delay skips
/// that category's emails only, whichever alerts share the batch.
#[tokio::test]
async fn opt_outs_during_the_delay_apply_per_category_within_one_batch() {
    let smtp = Receiver::smtp(0).await;
    let p = pair(&smtp, "50").await;
    let tenant = p.front.create_tenant().await;
    let api = p.front.tenant(&tenant);
    let users: Vec<String> = (0..6).map(|i| format!("u{i}")).collect();
    for u in &users {
        user_with_email(&api, u, Some(&email_of(u))).await;
    }
    for (key, event_type) in [
        ("billing", "invoice.overdue"),
        ("social", "comment.mentioned"),
    ] {
        api.put_category(key, &json!({"label": key, "event_types": [event_type]}))
            .expect(201)
            .await;
    }
    // Twelve alerts falling due together: each user gets one of each category.
    let mut alerts = Vec::new();
    for event_type in ["invoice.overdue", "comment.mentioned"] {
        for u in &users {
            let body = alert()
                .event_type(event_type)
                .fresh_entity()
                .recipients(&[u.as_str()])
                .channels(&["in_app", "email"])
                .delivery(json!({"email": {"delay": "2s", "unless": "read"}}))
                .build();
            let created = api.create_alert(&body).expect(202).await;
            alerts.push((
                event_type,
                u.clone(),
                created["alert_id"].as_str().expect("id").to_owned(),
            ));
        }
    }
    // Half the users turn billing email off while the emails wait.
    for u in &users[..3] {
        api.patch_preferences(
            u,
            &json!({"settings": [{"scope": "category", "key": "billing", "channel": "email", "setting": "off"}]}),
        )
        .expect(200)
        .await;
    }
    let mut sent = 0;
    for (event_type, user, alert_id) in &alerts {
        let decided = settled(&p.front, &tenant, alert_id).await;
        let d = &decided[user.as_str()];
        let opted_out = event_type == &"invoice.overdue" && users[..3].contains(user);
        if opted_out {
            assert_eq!(d["status"], "skipped", "{event_type} to {user}: {d}");
            assert!(
                d["last_error"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("preference"),
                "{d}"
            );
        } else {
            assert_eq!(d["status"], "sent", "{event_type} to {user}: {d}");
            sent += 1;
        }
    }
    assert_eq!(sent, 9);
    let arrived = eventually(Duration::from_secs(10), || async {
        smtp.received().len() == 9
    })
    .await;
    assert!(arrived, "{} emails", smtp.received().len());
}
