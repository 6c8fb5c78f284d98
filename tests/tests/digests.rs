//! Digests (ARCHITECTURE.md, "Digests"), with real PostgreSQL, a real SMTP
//! receiver and separate `tidings` processes: a digest lists what is still
//! unread at its flush and nothing read before it; all read, no email; two
//! workers flushing at once send one email; a worker killed (`kill -9`)
//! between the decision and the send leaves a digest the next worker sends
//! once, with the same Message-ID.

use std::time::Duration;

use serde_json::{json, Value};
use tidings_core::Position;
use tidings_tests::{
    alert, eventually, user_with_email, worker_env, AppOptions, Receiver, TestApp, TestDb,
    TestTenant, TidingsProcess,
};

/// `front` takes alerts and marks and runs no workers; the digests are
/// flushed by `tidings worker` processes started by each test.
async fn front() -> (TestApp, TestDb) {
    TestApp::spawn_with(AppOptions::env([("TIDINGS_OUTBOX_WORKERS", "0")]))
        .await
        .expect("front instance")
}

async fn worker(db: &TestDb, smtp: &Receiver, extra: &[(&str, &str)]) -> TidingsProcess {
    let smtp_url = smtp.smtp_url();
    let mut env = vec![
        ("TIDINGS_SMTP_URL", smtp_url.as_str()),
        ("TIDINGS_OUTBOX_POLL_MS", "50"),
    ];
    env.extend_from_slice(extra);
    TidingsProcess::worker(&db.url, &worker_env(&env))
        .await
        .expect("worker process")
}

/// Posts an alert (in-app and a digested email) to `users`; answers its id.
async fn post_digested(
    app: &TestApp,
    tenant: &TestTenant,
    users: &[&str],
    subject: &str,
    digest: Value,
) -> String {
    let users: Vec<String> = users.iter().map(|u| (*u).to_owned()).collect();
    let body = alert()
        .event_type("comment.created")
        .fresh_entity()
        .recipients(&users)
        .channels(&["in_app", "email"])
        .subject(subject)
        .delivery(json!({"email": {"digest": digest}}))
        .build();
    let created = app.tenant(tenant).create_alert(&body).expect(202).await;
    created["alert_id"].as_str().expect("alert id").to_owned()
}

async fn digests_of(app: &TestApp, tenant: &TestTenant, user: &str) -> Vec<Value> {
    let page = app.tenant(tenant).list_user_digests(user).expect(200).await;
    page["data"].as_array().expect("data").clone()
}

/// Waits until every digest of `user` is final (not open or decided).
async fn settled(app: &TestApp, tenant: &TestTenant, user: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let digests = digests_of(app, tenant, user).await;
        if !digests.is_empty()
            && digests
                .iter()
                .all(|d| !matches!(d["status"].as_str(), Some("open" | "decided")))
        {
            return digests;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{user}'s digests never settled: {digests:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_digest_lists_what_is_unread_at_its_flush_and_nothing_read_before_it() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    for u in ["ann", "bob", "cat"] {
        user_with_email(&api, u, Some(&format!("{u}@example.com"))).await;
    }
    // Three comments within the window; the window counts from the first.
    let digest = json!({"window": "4s", "max_items": 2, "unless": "read"});
    let mut alerts = Vec::new();
    for n in 1..=3 {
        alerts.push(
            post_digested(
                &app,
                &tenant,
                &["ann", "bob", "cat"],
                &format!("Comment {n}"),
                digest.clone(),
            )
            .await,
        );
    }
    // Each alert's own email is collected, not sent.
    let page = api.get_alert_page(&alerts[0], "").expect(200).await;
    let emails: Vec<&Value> = page["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .filter(|d| d["channel"] == "email")
        .collect();
    assert_eq!(emails.len(), 3, "{page}");
    for e in &emails {
        assert_eq!(e["status"], "skipped", "{e}");
        assert_eq!(e["last_error"], "collected into a digest", "{e}");
    }
    let open = digests_of(&app, &tenant, "ann").await;
    assert_eq!(
        open.len(),
        1,
        "one open digest collects all three: {open:?}"
    );
    assert_eq!(open[0]["status"], "open");
    assert_eq!(open[0]["items"], 3);
    assert_eq!(open[0]["key"], "comment.created");

    // Ann reads the first comment one by one; Bob marks all read; Cat, who
    // never opened the app, reads nothing.
    let ann = app.user_token(&tenant, "ann").await;
    let feed = app.user(&ann).feed("").expect(200).await;
    let oldest = feed["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["subject"] == "Comment 1")
        .expect("comment 1")["id"]
        .as_i64()
        .expect("id");
    app.user(&ann).mark_item_read(oldest).expect(200).await;
    let bob = app.user_token(&tenant, "bob").await;
    app.user(&bob).mark_read(&json!({})).expect(200).await;

    let _worker = worker(&db, &smtp, &[]).await;
    let ann_digest = settled(&app, &tenant, "ann").await;
    let bob_digest = settled(&app, &tenant, "bob").await;
    let cat_digest = settled(&app, &tenant, "cat").await;

    assert_eq!(ann_digest[0]["status"], "sent", "{ann_digest:?}");
    assert_eq!(ann_digest[0]["sent_items"], 2, "{ann_digest:?}");
    assert_eq!(cat_digest[0]["status"], "sent", "{cat_digest:?}");
    assert_eq!(cat_digest[0]["sent_items"], 3, "{cat_digest:?}");
    assert_eq!(
        cat_digest[0]["decided_watermark"]
            .as_str()
            .map(Position::from_cursor),
        Some(Ok(Position::ORIGIN)),
        "no watermark row: everything unread: {cat_digest:?}"
    );
    // Bob read everything before the flush: no email, and the digest says
    // why, with the watermark it was decided against.
    assert_eq!(bob_digest[0]["status"], "empty", "{bob_digest:?}");
    assert_eq!(bob_digest[0]["reason"], "read", "{bob_digest:?}");
    assert!(
        bob_digest[0]["decided_watermark"].is_string(),
        "{bob_digest:?}"
    );

    let arrived = eventually(Duration::from_secs(10), || async {
        smtp.received().len() >= 2
    })
    .await;
    assert!(arrived, "{:?}", smtp.received());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = smtp.received();
    assert_eq!(
        received.len(),
        2,
        "one email each for ann and cat: {received:?}"
    );
    let to = |who: &str| {
        received
            .iter()
            .find(|m| m["rcpt_tos"] == json!([format!("{who}@example.com")]))
            .unwrap_or_else(|| panic!("no email to {who}: {received:?}"))
            .clone()
    };
    let (ann_mail, cat_mail) = (to("ann"), to("cat"));
    // The subject states the count; the text lists the newest `max_items`
    // and how many more; ann's lists nothing she had read.
    let subject = ann_mail["subject"].as_str().expect("subject");
    assert!(
        subject.starts_with("2 new notifications: Comment 3 (") && subject.ends_with(") and more"),
        "{subject}"
    );
    let body = ann_mail["body"].as_str().expect("text");
    assert!(
        body.contains("Comment 3") && body.contains("Comment 2"),
        "{body}"
    );
    assert!(
        !body.contains("Comment 1") && !body.contains("more"),
        "{body}"
    );
    let body = cat_mail["body"].as_str().expect("text");
    assert!(body.starts_with("3 new notifications"), "{body}");
    assert!(
        body.contains("Comment 3") && body.contains("Comment 2"),
        "{body}"
    );
    assert!(
        !body.contains("Comment 1") && body.contains("and 1 more."),
        "{body}"
    );
    assert_eq!(ann_mail["message_id"], ann_digest[0]["message_id"]);

    // The next comment opens a new digest: the flushed one took no more.
    post_digested(&app, &tenant, &["ann"], "Comment 4", digest).await;
    let now = digests_of(&app, &tenant, "ann").await;
    assert_eq!(now.len(), 2, "{now:?}");
    assert_eq!(
        (now[1]["status"].clone(), now[1]["items"].clone()),
        (json!("open"), json!(1))
    );

    // Retention purges finished digests, and leaves the open one.
    let _purger = TestApp::spawn_on(
        &db.url,
        AppOptions::env([
            ("TIDINGS_OUTBOX_WORKERS", "0"),
            ("TIDINGS_RETENTION_DELIVERED_SECS", "1"),
            ("TIDINGS_RETENTION_INTERVAL_SECS", "1"),
        ]),
    )
    .await
    .expect("purging instance");
    let purged = eventually(Duration::from_secs(20), || async {
        digests_of(&app, &tenant, "ann").await.len() == 1
            && digests_of(&app, &tenant, "bob").await.is_empty()
    })
    .await;
    let left = digests_of(&app, &tenant, "ann").await;
    assert!(purged, "{left:?}");
    assert_eq!(left[0]["status"], "open", "{left:?}");
}

#[tokio::test]
async fn two_workers_flushing_at_once_send_each_digest_once() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let users: Vec<String> = (0..20).map(|n| format!("u{n:02}")).collect();
    for u in &users {
        user_with_email(&api, u, Some(&format!("{u}@example.com"))).await;
    }
    let names: Vec<&str> = users.iter().map(String::as_str).collect();
    for n in 0..2 {
        post_digested(
            &app,
            &tenant,
            &names,
            &format!("Comment {n}"),
            json!({"window": "2s", "unless": "read"}),
        )
        .await;
    }
    // Both workers poll every 50 ms from before the windows end.
    let _a = worker(&db, &smtp, &[]).await;
    let _b = worker(&db, &smtp, &[]).await;
    let mut ids = Vec::new();
    for u in &users {
        let d = settled(&app, &tenant, u).await;
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0]["status"], "sent", "{d:?}");
        assert_eq!(d[0]["attempts"], 1, "{d:?}");
        ids.push(d[0]["message_id"].as_str().expect("id").to_owned());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = smtp.received();
    let mut got: Vec<String> = received
        .iter()
        .map(|m| m["message_id"].as_str().expect("message id").to_owned())
        .collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "one email per digest, none twice");
}

#[tokio::test]
async fn a_worker_killed_between_decision_and_send_leaves_one_email_with_the_same_id() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    post_digested(
        &app,
        &tenant,
        &["ann"],
        "Comment 1",
        json!({"window": "1s", "unless": "read"}),
    )
    .await;
    // The first worker decides, then pauses before sending: killed there.
    let lease = [
        ("TIDINGS_OUTBOX_LEASE_SECS", "4"),
        ("TIDINGS_DELIVERY_TIMEOUT_MS", "1000"),
    ];
    let mut first = worker(
        &db,
        &smtp,
        &[
            lease[0],
            lease[1],
            ("TIDINGS_TEST_DIGEST_SEND_PAUSE_MS", "60000"),
        ],
    )
    .await;
    let decided = eventually(Duration::from_secs(20), || async {
        digests_of(&app, &tenant, "ann").await[0]["status"] == "decided"
    })
    .await;
    let before = digests_of(&app, &tenant, "ann").await;
    assert!(decided, "{before:?}");
    first.kill();
    // Read after the decision: the content is what was decided, not
    // decided again.
    let ann = app.user_token(&tenant, "ann").await;
    app.user(&ann).mark_read(&json!({})).expect(200).await;

    let _second = worker(&db, &smtp, &[lease[0], lease[1]]).await;
    let after = settled(&app, &tenant, "ann").await;
    assert_eq!(after[0]["status"], "sent", "{after:?}");
    assert_eq!(after[0]["attempts"], 2, "the lease ran out once: {after:?}");
    assert_eq!(
        after[0]["decided_at"], before[0]["decided_at"],
        "decided once"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = smtp.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["message_id"], before[0]["message_id"]);
    assert!(
        received[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains("Comment 1")),
        "{received:?}"
    );
}

#[tokio::test]
async fn bad_digest_rules_are_422_and_event_type_defaults_take_a_digest() {
    let (app, _db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    for (bad, field) in [
        (
            json!({"email": {"digest": {"window": "soon"}}}),
            "delivery.email.digest.window",
        ),
        (
            json!({"email": {"digest": {"window": "1h", "max_items": 0}}}),
            "delivery.email.digest.max_items",
        ),
        (
            json!({"email": {"digest": {"window": "1h"}, "delay": "1m", "unless": "read"}}),
            "delivery.email takes digest",
        ),
        (
            json!({"webhook": {"digest": {"window": "1h"}}}),
            "delivery.webhook.digest",
        ),
        (json!({"email": {"delay": "1m"}}), "delivery.email.unless"),
    ] {
        let problem = api
            .put_event_type_delivery("comment.created", &bad)
            .problem(422)
            .await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with(field)),
            "{bad}: {problem}"
        );
    }
    let rules = json!({"email": {"digest": {"window": "1h", "max_items": 10, "unless": "seen", "key": "{{ payload.project }}"}}});
    let stored = api
        .put_event_type_delivery("comment.created", &rules)
        .expect(200)
        .await;
    assert_eq!(stored, rules);
    // An alert without its own rule takes the default, keyed by project.
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    let body = alert()
        .event_type("comment.created")
        .fresh_entity()
        .recipients(&["ann".to_owned()])
        .channels(&["in_app", "email"])
        .payload(json!({"project": "apollo"}))
        .build();
    api.create_alert(&body).expect(202).await;
    let digests = digests_of(&app, &tenant, "ann").await;
    assert_eq!(digests.len(), 1, "{digests:?}");
    assert_eq!(digests[0]["key"], "comment.created/apollo");
    assert_eq!(digests[0]["unless"], "seen");
}

#[tokio::test]
async fn a_daily_email_preference_collects_into_a_digest_due_at_eight_local() {
    let (app, _db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category(
        "comments",
        &json!({"label": "Comments", "event_types": ["comment.created"]}),
    )
    .expect(201)
    .await;
    for u in ["ann", "bob"] {
        api.put_user(
            u,
            &json!({"email": format!("{u}@example.com"), "timezone": "Europe/Berlin"}),
        )
        .expect(200)
        .await;
    }
    // Only email may be daily or weekly; a refused row changes nothing.
    let problem = api
        .patch_preferences(
            "ann",
            &json!({"settings": [{"scope": "category", "key": "comments", "channel": "in_app", "setting": "daily"}]}),
        )
        .problem(422)
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("email")),
        "{problem}"
    );
    api.patch_preferences(
        "ann",
        &json!({"settings": [{"scope": "category", "key": "comments", "channel": "email", "setting": "daily"}]}),
    )
    .expect(200)
    .await;
    let before = chrono::Utc::now();
    let body = alert()
        .event_type("comment.created")
        .fresh_entity()
        .recipients(&["ann".to_owned(), "bob".to_owned()])
        .channels(&["in_app", "email"])
        .subject("Ann replied")
        .build();
    let created = api.create_alert(&body).expect(202).await;
    let page = api
        .get_alert_page(created["alert_id"].as_str().expect("id"), "")
        .expect(200)
        .await;
    let email_of = |who: &str| {
        page["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .find(|d| d["channel"] == "email" && d["recipient_id"] == who)
            .unwrap_or_else(|| panic!("{who}'s email: {page}"))
            .clone()
    };
    // Ann's email waits for her daily digest; Bob, who chose nothing, gets
    // his as usual.
    assert_eq!(email_of("ann")["last_error"], "collected into a digest");
    assert_eq!(email_of("bob")["status"], "pending");
    assert!(digests_of(&app, &tenant, "bob").await.is_empty());
    let digests = digests_of(&app, &tenant, "ann").await;
    assert_eq!(digests.len(), 1, "{digests:?}");
    let d = &digests[0];
    assert_eq!(d["key"], "daily/comments", "{d}");
    assert_eq!(d["unless"], "read", "{d}");
    // 08:00 in Berlin: 06:00 UTC in summer time, 07:00 in winter; the next
    // one, within a day (and the change's hour).
    let due = tidings_tests::timestamp(&d["flush_at"]);
    use chrono::Timelike;
    assert!(
        matches!(due.hour(), 6 | 7) && due.minute() == 0 && due.second() == 0,
        "{due}"
    );
    assert!(
        due > before && due - before <= chrono::Duration::hours(25),
        "{due}"
    );
}

#[tokio::test]
async fn the_options_send_the_first_at_once_hold_a_lone_item_and_slide_the_window() {
    use tidings_tests::timestamp;
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    for u in ["ann", "bob", "cat", "dan"] {
        user_with_email(&api, u, Some(&format!("{u}@example.com"))).await;
    }
    let span = |d: &Value| timestamp(&d["flush_at"]) - timestamp(&d["window_start"]);
    // Bob: one item, no second within 1 s: due 1 s after it. Cat: a second
    // item arrives: due at the window's end, 4 s after the first.
    let lone = json!({"window": "4s", "second_within": "1s"});
    post_digested(&app, &tenant, &["bob", "cat"], "Lone", lone.clone()).await;
    post_digested(&app, &tenant, &["cat"], "Second", lone).await;
    let bob = digests_of(&app, &tenant, "bob").await;
    let cat = digests_of(&app, &tenant, "cat").await;
    assert_eq!(span(&bob[0]), chrono::Duration::seconds(1), "{bob:?}");
    assert_eq!(span(&cat[0]), chrono::Duration::seconds(4), "{cat:?}");
    // Dan: a sliding window of 2 s, at most 3 s: the second item, half a
    // second later, moves the end past the first's 2 s, not past 3 s.
    let sliding = json!({"window": "2s", "max_wait": "3s"});
    post_digested(&app, &tenant, &["dan"], "Slide 1", sliding.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    post_digested(&app, &tenant, &["dan"], "Slide 2", sliding).await;
    let dan = digests_of(&app, &tenant, "dan").await;
    let dan_span = span(&dan[0]);
    assert!(
        dan_span > chrono::Duration::seconds(2) && dan_span <= chrono::Duration::seconds(3),
        "{dan:?}"
    );
    // Ann: the first item's email goes at once, the window collects the rest.
    let first = json!({"window": "2s", "send_first": true});
    let at_once = post_digested(&app, &tenant, &["ann"], "First", first.clone()).await;
    let page = api.get_alert_page(&at_once, "").expect(200).await;
    let ann_email = page["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["channel"] == "email")
        .expect("ann's email")
        .clone();
    assert_eq!(ann_email["status"], "pending", "{ann_email}");
    post_digested(&app, &tenant, &["ann"], "Later", first).await;
    let ann = digests_of(&app, &tenant, "ann").await;
    assert_eq!(ann[0]["items"], 1, "the first item is not in it: {ann:?}");

    let _worker = worker(&db, &smtp, &[]).await;
    for u in ["ann", "bob", "cat", "dan"] {
        let d = settled(&app, &tenant, u).await;
        assert_eq!(d[0]["status"], "sent", "{u}: {d:?}");
    }
    let arrived = eventually(Duration::from_secs(10), || async {
        smtp.received().len() >= 5
    })
    .await;
    assert!(arrived, "{:?}", smtp.received());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = smtp.received();
    let subjects = |who: &str| -> Vec<String> {
        let mut s: Vec<String> = received
            .iter()
            .filter(|m| m["rcpt_tos"] == json!([format!("{who}@example.com")]))
            .map(|m| m["subject"].as_str().expect("subject").to_owned())
            .collect();
        s.sort();
        s
    };
    let starts = |subjects: Vec<String>, prefixes: &[&str]| {
        subjects.len() == prefixes.len()
            && subjects.iter().zip(prefixes).all(|(s, p)| s.starts_with(p))
    };
    // Ann: the first at once (its own email), then a digest of the other.
    assert!(
        starts(subjects("ann"), &["First", "Later ("]),
        "{received:?}"
    );
    // Bob's lone item went as an email of its own; cat's and dan's as digests.
    assert!(starts(subjects("bob"), &["Lone ("]), "{received:?}");
    assert!(
        starts(subjects("cat"), &["2 new notifications: Second ("]),
        "{received:?}"
    );
    assert!(
        starts(subjects("dan"), &["2 new notifications: Slide 2 ("]),
        "{received:?}"
    );
}

#[tokio::test]
async fn a_categorys_digest_template_renders_the_digest_and_a_bad_one_is_422() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let template = json!({
        "subject": "{{ total }} new comments",
        "html": "<ul>{% for item in items %}<li>{{ item.subject }}: {{ item.payload.text }}</li>{% endfor %}</ul>{% if more %}<p>and {{ more }} more</p>{% endif %}"
    });
    // No such category yet: 404, nothing stored.
    let problem = api
        .put_digest_template("comments", &template)
        .problem(404)
        .await;
    assert_eq!(problem["code"], "category_not_found", "{problem}");
    api.put_category(
        "comments",
        &json!({"label": "Comments", "event_types": ["comment.created"]}),
    )
    .expect(201)
    .await;
    let bad = json!({"subject": "{{ total | nope }}", "html": "<p></p>"});
    let problem = api.put_digest_template("comments", &bad).problem(422).await;
    assert_eq!(problem["code"], "invalid_template", "{problem}");
    api.digest_template("comments").problem(404).await;
    let saved = api
        .put_digest_template("comments", &template)
        .expect(200)
        .await;
    assert_eq!(saved["subject"], template["subject"], "{saved}");

    user_with_email(&api, "ann", Some("ann@example.com")).await;
    let digest = json!({"window": "1s", "max_items": 2});
    for (n, text) in ["first", "second", "third"].iter().enumerate() {
        let body = alert()
            .event_type("comment.created")
            .fresh_entity()
            .recipients(&["ann".to_owned()])
            .channels(&["in_app", "email"])
            .subject(&format!("Comment {}", n + 1))
            .payload(json!({"text": text}))
            .delivery(json!({"email": {"digest": digest}}))
            .build();
        api.create_alert(&body).expect(202).await;
    }
    let _worker = worker(&db, &smtp, &[]).await;
    let d = settled(&app, &tenant, "ann").await;
    assert_eq!(d[0]["status"], "sent", "{d:?}");
    let arrived = eventually(Duration::from_secs(10), || async {
        smtp.received().len() == 1
    })
    .await;
    let received = smtp.received();
    assert!(arrived, "{received:?}");
    assert_eq!(received[0]["subject"], "3 new comments", "{received:?}");
    let html = received[0]["html"].as_str().expect("html");
    assert!(
        html.contains("<li>Comment 3: third</li><li>Comment 2: second</li>")
            && html.contains("and 1 more")
            && !html.contains("Comment 1"),
        "{html}"
    );
    api.delete_digest_template("comments").expect(204).await;
    api.digest_template("comments").problem(404).await;
}

/// A daily digest end to end: sent once at its local time (a test hook
/// moves 08:00 to 15 seconds from now, in Asia/Kolkata, UTC+05:30), and
/// the next item waits for the same local time the next day. Daylight-saving
/// changes are the schedule's unit tests (`deliveries::digests`), which
/// cannot wait for a real one.
#[tokio::test]
async fn a_daily_digest_is_sent_once_at_its_local_time_and_the_next_waits_a_day() {
    use chrono::{Duration as Span, SubsecRound, Utc};
    use tidings_tests::timestamp;
    let smtp = Receiver::smtp(0).await;
    // Room for a loaded machine to start the instance and post before it.
    let due = Utc::now().trunc_subsecs(0) + Span::seconds(15);
    let local = (due + Span::minutes(330)).format("%H:%M:%S").to_string();
    let (app, db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_OUTBOX_WORKERS", "0"),
        ("TIDINGS_TEST_PERIODIC_AT", local.as_str()),
    ]))
    .await
    .expect("front instance");
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category(
        "comments",
        &json!({"label": "Comments", "event_types": ["comment.created"]}),
    )
    .expect(201)
    .await;
    api.put_user(
        "ann",
        &json!({"email": "ann@example.com", "timezone": "Asia/Kolkata"}),
    )
    .expect(200)
    .await;
    api.patch_preferences(
        "ann",
        &json!({"settings": [{"scope": "global", "channel": "email", "setting": "daily"}]}),
    )
    .expect(200)
    .await;
    let post = |subject: &'static str| {
        let api = app.tenant(&tenant);
        async move {
            let body = alert()
                .event_type("comment.created")
                .fresh_entity()
                .recipients(&["ann".to_owned()])
                .channels(&["in_app", "email"])
                .subject(subject)
                .build();
            api.create_alert(&body).expect(202).await;
        }
    };
    post("Before the hour").await;
    let open = digests_of(&app, &tenant, "ann").await;
    assert_eq!(timestamp(&open[0]["flush_at"]), due, "{open:?}");
    assert!(
        Utc::now() < due,
        "the machine was too slow to post before the hour"
    );

    let _worker = worker(&db, &smtp, &[]).await;
    let sent = settled(&app, &tenant, "ann").await;
    assert_eq!(sent[0]["status"], "sent", "{sent:?}");
    assert!(timestamp(&sent[0]["sent_at"]) >= due, "{sent:?}");
    post("After the hour").await;
    let both = digests_of(&app, &tenant, "ann").await;
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(
        timestamp(&both[1]["flush_at"]),
        due + Span::days(1),
        "the next one waits for the same local time tomorrow: {both:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = smtp.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert!(
        received[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains("Before the hour") && !b.contains("After")),
        "{received:?}"
    );
}

/// Quiet hours hold a digest: due inside them, it keeps collecting and is
/// decided and sent at their end.
#[tokio::test]
async fn a_digest_due_inside_quiet_hours_is_sent_at_their_end() {
    use chrono::{Duration as Span, SubsecRound, Utc};
    use tidings_tests::{kolkata, timestamp};
    let smtp = Receiver::smtp(0).await;
    let (app, db) = front().await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let now = Utc::now().trunc_subsecs(0);
    let end = now + Span::seconds(12);
    api.put_user(
        "ann",
        &json!({"email": "ann@example.com", "timezone": "Asia/Kolkata",
                "quiet_hours": {"start": kolkata(now - Span::minutes(1)), "end": kolkata(end)}}),
    )
    .expect(200)
    .await;
    post_digested(&app, &tenant, &["ann"], "Held", json!({"window": "1s"})).await;
    let _worker = worker(&db, &smtp, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = digests_of(&app, &tenant, "ann").await;
    assert!(
        Utc::now() < end,
        "the machine was too slow to see the hold before its end"
    );
    assert_eq!(
        held[0]["status"], "open",
        "held, still collecting: {held:?}"
    );
    assert!(smtp.received().is_empty(), "{:?}", smtp.received());
    let sent = settled(&app, &tenant, "ann").await;
    assert_eq!(sent[0]["status"], "sent", "{sent:?}");
    assert!(timestamp(&sent[0]["sent_at"]) >= end, "{sent:?}");
    assert!(timestamp(&sent[0]["decided_at"]) >= end, "{sent:?}");
}
