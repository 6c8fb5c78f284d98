//! Quiet hours (ARCHITECTURE.md, "Quiet hours"), with real PostgreSQL and a
//! real SMTP receiver: an email due inside a user's window waits until the
//! window ends and then goes out; in-app is never held; a critical category
//! passes; bad windows are refused without changing what is stored.

use std::time::Duration;

use chrono::{Duration as Span, Timelike, Utc};
use serde_json::json;
use tidings_tests::{
    alert, eventually, kolkata, timestamp, worker_env, AppOptions, Receiver, TestApp,
};

#[tokio::test]
async fn an_email_inside_quiet_hours_waits_for_their_end_and_a_critical_one_passes() {
    let smtp = Receiver::smtp(0).await;
    let (app, _db) = TestApp::spawn_with(AppOptions::env(worker_env(&[
        ("TIDINGS_SMTP_URL", &smtp.smtp_url()),
        ("TIDINGS_OUTBOX_POLL_MS", "100"),
    ])))
    .await
    .expect("app");
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    // A window that began a minute ago and ends in 15 seconds (room for a
    // loaded machine to see the hold before it ends), in the
    // user's zone (whole seconds, so the end is exact).
    let now = Utc::now().with_nanosecond(0).expect("whole second");
    let end = now + Span::seconds(15);
    let user = api
        .put_user(
            "ann",
            &json!({"email": "ann@example.com", "timezone": "Asia/Kolkata",
                    "quiet_hours": {"start": kolkata(now - Span::minutes(1)), "end": kolkata(end)}}),
        )
        .expect(200)
        .await;
    assert_eq!(user["quiet_hours"]["end"], kolkata(end));

    api.put_category(
        "security",
        &json!({"label": "Security", "critical": true, "event_types": ["login.new_device"]}),
    )
    .expect(201)
    .await;
    let held = alert()
        .fresh_entity()
        .recipients(&["ann"])
        .channels(&["in_app", "email"])
        .subject("Invoice overdue")
        .build();
    let held = api.create_alert(&held).expect(202).await;
    let held_id = held["alert_id"].as_str().expect("id").to_owned();
    let critical = alert()
        .event_type("login.new_device")
        .fresh_entity()
        .recipients(&["ann"])
        .channels(&["email"])
        .subject("New sign-in")
        .build();
    api.create_alert(&critical).expect(202).await;

    // The in-app item is there at once; the email waits with its due time
    // at the window's end; the critical email goes out meanwhile.
    let feed_token = app.user_token(&tenant, "ann").await;
    let feed = app.user(&feed_token).feed("").expect(200).await;
    assert_eq!(feed["items"].as_array().expect("items").len(), 1, "{feed}");
    let page = api.get_alert_page(&held_id, "").expect(200).await;
    let email = page["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["channel"] == "email")
        .expect("an email delivery")
        .clone();
    assert_eq!(email["status"], "pending", "{email}");
    assert_eq!(timestamp(&email["next_attempt_at"]), end, "{email}");
    let critical_sent = eventually(Duration::from_secs(10), || async {
        smtp.received().len() == 1
    })
    .await;
    assert!(critical_sent, "the critical email: {:?}", smtp.received());
    assert!(
        Utc::now() < end,
        "the machine was too slow to see the hold before its end"
    );
    assert_eq!(smtp.received().len(), 1, "the held email left early");

    // At the end of the window it goes out.
    let released = eventually(Duration::from_secs(30), || async {
        smtp.received().len() == 2
    })
    .await;
    assert!(released, "the held email: {:?}", smtp.received());
    assert!(Utc::now() >= end);
    // The receiver has it; the worker records the send right after.
    let email_of_alert = || async {
        let page = api.get_alert_page(&held_id, "").expect(200).await;
        page["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .find(|d| d["channel"] == "email")
            .expect("email")
            .clone()
    };
    let recorded = eventually(Duration::from_secs(10), || async {
        email_of_alert().await["status"] == "sent"
    })
    .await;
    let sent = email_of_alert().await;
    assert!(recorded, "{sent}");
    assert!(timestamp(&sent["sent_at"]) >= end, "{sent}");
}

#[tokio::test]
async fn bad_quiet_hours_are_422_and_leave_the_user_as_stored() {
    let (app, _db) = TestApp::spawn().await.expect("app");
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_user(
        "ann",
        &json!({"email": "ann@example.com", "quiet_hours": {"start": "22:00", "end": "07:00"}}),
    )
    .expect(200)
    .await;
    for (bad, status, code) in [
        (
            json!({"start": "22:00", "end": "22:00"}),
            422,
            "invalid_quiet_hours",
        ),
        (
            json!({"start": "25:00", "end": "07:00"}),
            422,
            "invalid_quiet_hours",
        ),
        (
            json!({"start": "10pm", "end": "07:00"}),
            422,
            "invalid_quiet_hours",
        ),
        (json!({"start": "22:00"}), 400, "invalid_request"),
        (
            json!({"start": "22:00", "end": "07:00", "days": "weekdays"}),
            400,
            "invalid_request",
        ),
    ] {
        let problem = api
            .put_user(
                "ann",
                &json!({"email": "other@example.com", "quiet_hours": bad}),
            )
            .problem(status)
            .await;
        assert_eq!(problem["code"], code, "{bad}: {problem}");
    }
    let stored = api.get_user("ann").expect(200).await;
    assert_eq!(stored["email"], "ann@example.com");
    assert_eq!(
        stored["quiet_hours"],
        json!({"start": "22:00:00", "end": "07:00:00"})
    );
    // Left out of a PUT, they are cleared like every other field.
    api.put_user("ann", &json!({"email": "ann@example.com"}))
        .expect(200)
        .await;
    assert!(api.get_user("ann").expect(200).await["quiet_hours"].is_null());
}
