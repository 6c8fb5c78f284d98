//! Preferences and one-click unsubscribe (docs/design/preferences.md), with a
//! real SMTP receiver and real PostgreSQL: opting out stops the email and
//! keeps the in-app item, critical categories ignore settings, a locked
//! tenant default beats the user, and `/u/{token}` unsubscribes on POST only,
//! for its own tenant only.

use std::time::Duration;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{
    alert, eventually, user_with_email, without_workers, worker_env, AppOptions, Receiver, TestApp,
    TestDb,
};

const PUBLIC_URL: &str = "https://notify.example.test";

/// A server with outbox workers sending to `smtp`, unsubscribe links on.
async fn app_with_smtp(smtp: &Receiver) -> (TestApp, TestDb) {
    let mut env = worker_env(&[("TIDINGS_SMTP_URL", &smtp.smtp_url())]);
    env.push(("TIDINGS_PUBLIC_URL".into(), PUBLIC_URL.into()));
    TestApp::spawn_with(AppOptions::env(env)).await.unwrap()
}

fn billing() -> Value {
    json!({
        "label": "Billing",
        "defaults": {"email": "on"},
        "event_types": ["invoice.overdue"],
    })
}

fn delivery<'a>(alert: &'a Value, recipient: &str, channel: &str) -> &'a Value {
    alert["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["recipient_id"] == recipient && d["channel"] == channel)
        .unwrap_or_else(|| panic!("no {recipient}/{channel} delivery: {alert}"))
}

fn cell<'a>(prefs: &'a Value, category: &str, channel: &str) -> &'a Value {
    prefs["categories"]
        .as_array()
        .expect("categories")
        .iter()
        .find(|row| row["category"]["key"] == category)
        .and_then(|row| {
            row["channels"]
                .as_array()
                .expect("channels")
                .iter()
                .find(|c| c["channel"] == channel)
        })
        .unwrap_or_else(|| panic!("no {category}/{channel} cell: {prefs}"))
}

/// The path of the `List-Unsubscribe` link, `/u/<token>`.
fn unsubscribe_path(message: &Value) -> String {
    let header = message["list_unsubscribe"]
        .as_str()
        .unwrap_or_else(|| panic!("no List-Unsubscribe: {message}"));
    let url = header
        .strip_prefix('<')
        .and_then(|h| h.strip_suffix('>'))
        .unwrap_or_else(|| panic!("not <url>: {header}"));
    url.strip_prefix(PUBLIC_URL)
        .unwrap_or_else(|| panic!("not under TIDINGS_PUBLIC_URL: {url}"))
        .to_owned()
}

#[tokio::test]
async fn an_opted_out_user_gets_no_email_but_the_in_app_item_and_a_retry_resurrects_nothing() {
    let smtp = Receiver::smtp(0).await;
    let (app, _db) = app_with_smtp(&smtp).await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category("billing", &billing()).expect(201).await;
    for user in ["ann", "bob"] {
        user_with_email(&api, user, Some(&format!("{user}@example.com"))).await;
    }
    let prefs = api
        .patch_preferences(
            "ann",
            &json!({"settings": [{"scope": "category", "key": "billing", "channel": "email", "setting": "off"}]}),
        )
        .expect(200)
        .await;
    assert_eq!(
        cell(&prefs, "billing", "email")["setting"],
        "off",
        "{prefs}"
    );
    assert_eq!(
        cell(&prefs, "billing", "email")["decided_by"],
        "user_category"
    );
    assert_eq!(cell(&prefs, "billing", "in_app")["setting"], "on");

    let body = alert()
        .recipients(&["ann", "bob"])
        .channels(&["in_app", "email"])
        .subject("Invoice 42 is overdue")
        .build();
    let created = api.create_alert(&body).expect(202).await;
    let alert_id = created["alert_id"].as_str().expect("alert id").to_owned();
    let got_bobs = eventually(Duration::from_secs(30), || async {
        !smtp.received().is_empty()
    })
    .await;
    assert!(got_bobs, "bob's email never arrived\n{}", app.process.log());

    let shown = api.get_alert(&alert_id).expect(200).await;
    let anns_email = delivery(&shown, "ann", "email");
    assert_eq!(anns_email["status"], "skipped", "{shown}");
    assert!(
        anns_email["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("preference"),
        "GET /v1/alerts/{{id}} says why: {anns_email}"
    );
    assert_eq!(delivery(&shown, "ann", "in_app")["status"], "sent");
    let token = app.user_token(&tenant, "ann").await;
    let feed = app.user(&token).feed("").expect(200).await;
    assert_eq!(feed["items"].as_array().map(Vec::len), Some(1), "{feed}");

    // Ann opts back in, the sender retries: the notification exists, so
    // nothing is written again, and no email goes to ann.
    api.patch_preferences(
        "ann",
        &json!({"settings": [{"scope": "category", "key": "billing", "channel": "email", "setting": null}]}),
    )
    .expect(200)
    .await;
    let again = api.create_alert(&body).expect(202).await;
    assert!(
        again["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .all(|d| d["status"] == "duplicate"),
        "{again}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = smtp.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_eq!(received[0]["rcpt_tos"], json!(["bob@example.com"]));
    // The received email carries the one-click headers.
    let message = &received[0];
    assert!(unsubscribe_path(message).starts_with("/u/"), "{message}");
    assert_eq!(
        message["list_unsubscribe_post"], "List-Unsubscribe=One-Click",
        "{message}"
    );
    let list_id = message["list_id"].as_str().unwrap_or("");
    assert!(
        list_id.starts_with("<billing.") && list_id.ends_with(".notify.example.test>"),
        "{message}"
    );
}

#[tokio::test]
async fn a_critical_category_ignores_the_opt_out_and_carries_no_unsubscribe_link() {
    let smtp = Receiver::smtp(0).await;
    let (app, _db) = app_with_smtp(&smtp).await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category(
        "security",
        &json!({"label": "Security", "critical": true, "event_types": ["password.reset"]}),
    )
    .expect(201)
    .await;
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    api.put_preferences(
        "ann",
        &json!({"settings": [
            {"scope": "global", "channel": "*", "setting": "off"},
            {"scope": "category", "key": "security", "channel": "email", "setting": "off"},
        ]}),
    )
    .expect(200)
    .await;
    let created = api
        .create_alert(
            &alert()
                .event_type("password.reset")
                .recipients(&["ann"])
                .channels(&["email", "in_app"])
                .build(),
        )
        .expect(202)
        .await;
    assert!(
        created["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .all(|d| d["status"] == "created"),
        "{created}"
    );
    let arrived = eventually(Duration::from_secs(30), || async {
        !smtp.received().is_empty()
    })
    .await;
    assert!(
        arrived,
        "the critical email never arrived\n{}",
        app.process.log()
    );
    let message = &smtp.received()[0];
    assert_eq!(message["rcpt_tos"], json!(["ann@example.com"]));
    assert!(message["list_unsubscribe"].is_null(), "{message}");
    assert!(message["list_unsubscribe_post"].is_null(), "{message}");
}

#[tokio::test]
async fn a_locked_tenant_default_beats_the_users_own_setting() {
    let (app, _db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category("billing", &billing()).expect(201).await;
    user_with_email(&api, "ann", Some("ann@example.com")).await;
    api.put_preference_defaults(&json!({"settings": [
        {"scope": "category", "key": "billing", "channel": "email", "setting": "off", "locked": true},
    ]}))
    .expect(200)
    .await;
    let defaults = api.preference_defaults().expect(200).await;
    assert_eq!(defaults["settings"][0]["locked"], true, "{defaults}");
    assert_eq!(defaults["settings"][0]["key"], "billing", "{defaults}");
    let categories = api.list_categories().expect(200).await;
    assert_eq!(
        categories["categories"][0]["key"], "billing",
        "{categories}"
    );
    let prefs = api
        .patch_preferences(
            "ann",
            &json!({"settings": [{"scope": "event_type", "key": "invoice.overdue", "channel": "email", "setting": "on"}]}),
        )
        .expect(200)
        .await;
    assert_eq!(
        cell(&prefs, "billing", "email")["setting"],
        "off",
        "{prefs}"
    );
    assert_eq!(cell(&prefs, "billing", "email")["decided_by"], "locked");
    // A user cannot lock their own rows.
    api.patch_preferences(
        "ann",
        &json!({"settings": [{"scope": "global", "channel": "*", "setting": "on", "locked": true}]}),
    )
    .problem(422)
    .await;

    let created = api
        .create_alert(&alert().recipients(&["ann"]).channels(&["email"]).build())
        .expect(202)
        .await;
    let shown = api
        .get_alert(created["alert_id"].as_str().expect("id"))
        .expect(200)
        .await;
    let email = delivery(&shown, "ann", "email");
    assert_eq!(email["status"], "skipped", "{shown}");
    assert!(
        email["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("locked"),
        "{email}"
    );
}

#[tokio::test]
async fn categories_are_checked_an_alert_naming_a_missing_one_is_refused() {
    let (app, _db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_category("billing", &billing()).expect(201).await;
    api.put_category("billing", &billing()).expect(200).await;
    let taken = api
        .put_category(
            "payments",
            &json!({"label": "Payments", "event_types": ["invoice.overdue"]}),
        )
        .problem(409)
        .await;
    assert_eq!(taken["code"], "event_type_in_another_category", "{taken}");
    api.get_category("payments").problem(404).await;
    let refused = api
        .create_alert(&alert().category("nope").build())
        .problem(422)
        .await;
    assert_eq!(refused["code"], "unknown_category", "{refused}");
    api.create_alert(&alert().category("billing").build())
        .expect(202)
        .await;
}

#[tokio::test]
async fn one_click_unsubscribe_works_on_post_only_twice_alike_and_only_in_its_tenant() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = app_with_smtp(&smtp).await;
    let pool = db.pool().await.unwrap();
    let a = app.create_tenant().await;
    let b = app.create_tenant().await;
    for tenant in [&a, &b] {
        let api = app.tenant(tenant);
        api.put_category("billing", &billing()).expect(201).await;
        user_with_email(&api, "bob", Some("bob@example.com")).await;
    }
    app.tenant(&a)
        .create_alert(&alert().recipients(&["bob"]).channels(&["email"]).build())
        .expect(202)
        .await;
    let arrived = eventually(Duration::from_secs(30), || async {
        !smtp.received().is_empty()
    })
    .await;
    assert!(arrived, "no email\n{}", app.process.log());
    let path = unsubscribe_path(&smtp.received()[0]);
    let bobs_email = |tenant| {
        let app = &app;
        async move {
            let prefs = app.tenant(tenant).preferences("bob").expect(200).await;
            cell(&prefs, "billing", "email")["setting"].clone()
        }
    };

    // Mail scanners fetch links: GET shows a page and changes nothing.
    let page = app.raw(Method::GET, &path).reply(200).await;
    assert!(page.text.contains("<form method=\"post\""), "{}", page.text);
    assert_eq!(bobs_email(&a).await, "on");

    // A forged, truncated or other-tenant token: 404, nothing changes.
    let token = path.trim_start_matches("/u/");
    let mut bytes = URL_SAFE_NO_PAD.decode(token).expect("base64url token");
    bytes[..16].copy_from_slice(b.uuid().as_bytes());
    let moved_to_b = format!("/u/{}", URL_SAFE_NO_PAD.encode(&bytes));
    for bad in [
        moved_to_b.as_str(),
        &path[..path.len() - 3],
        "/u/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        app.raw(Method::POST, bad)
            .body(
                Some("application/x-www-form-urlencoded"),
                "List-Unsubscribe=One-Click",
            )
            .reply(404)
            .await;
    }
    assert_eq!(bobs_email(&a).await, "on");
    assert_eq!(bobs_email(&b).await, "on");

    // The one-click POST, with no credential: 200, no redirect, and again.
    for _ in 0..2 {
        let done = app
            .raw(Method::POST, &path)
            .body(
                Some("application/x-www-form-urlencoded"),
                "List-Unsubscribe=One-Click",
            )
            .reply(200)
            .await;
        assert!(done.headers.get("location").is_none());
        assert_eq!(bobs_email(&a).await, "off");
    }
    assert_eq!(bobs_email(&b).await, "on", "tenant B's bob is untouched");
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT setting, source FROM preference_settings WHERE tenant_id = $1 AND user_id = 'bob'",
    )
    .bind(a.uuid())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows, [("off".to_string(), "one_click".to_string())]);
}
