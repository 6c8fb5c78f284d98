//! Templates (docs/design/templates.md) against real PostgreSQL, the real
//! binary and a real SMTP server: what a recipient receives, in which
//! locale, escaped how; what is refused at save; what a failure at send does.

use std::time::Duration;

use serde_json::{json, Value};
use tidings_tests::{
    alert, eventually, post_to_recipients, sql, without_workers, worker_env, Receiver, TestApp,
    TidingsProcess,
};

const EVENT: &str = "invoice.overdue";

fn person(name: &str, locale: Option<&str>, timezone: Option<&str>) -> Value {
    json!({
        "email": format!("{name}@example.com"),
        "display_name": name,
        "locale": locale,
        "timezone": timezone,
    })
}

fn received_by<'a>(received: &'a [Value], address: &str) -> Vec<&'a Value> {
    received
        .iter()
        .filter(|m| m["rcpt_tos"] == json!([address]) && m["answered"] == "250 OK")
        .collect()
}

#[tokio::test]
async fn an_email_is_multipart_in_the_recipients_locale_with_data_escaped_in_html_only() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_user(
        "ada",
        &person("ada", Some("fr-BE"), Some("Europe/Brussels")),
    )
    .expect(200)
    .await;
    api.put_user("bob", &person("bob", None, None))
        .expect(200)
        .await;

    api.put_template(
        EVENT,
        "email",
        "?locale=fr",
        &json!({
            "subject": "Facture {{ payload.invoice }} : {{ payload.amount | number }} €",
            "html": "<html><head><style>p { color: #c00 }</style></head><body>\
                     <p>Bonjour {{ recipient.display_name }},</p>\
                     <p>Client : {{ payload.customer }}</p>\
                     <p>Échéance : {{ payload.due | date('long') }}</p></body></html>",
            "sample": {"invoice": 1, "amount": 10, "customer": "x", "due": "2026-01-01T00:00:00Z"},
        }),
    )
    .expect(200)
    .await;
    api.put_template(
        EVENT,
        "email",
        "?locale=en",
        &json!({
            "subject": "Invoice {{ payload.invoice }}: {{ payload.amount | number }} EUR",
            "format": "mjml",
            "html": "<mjml><mj-body><mj-section><mj-column>\
                     <mj-text>Hello {{ recipient.display_name }}, customer {{ payload.customer }}</mj-text>\
                     </mj-column></mj-section></mj-body></mjml>",
            "text": "Hello {{ recipient.display_name }}, customer {{ payload.customer }}",
            "sample": {"invoice": 1, "amount": 10, "customer": "x", "due": "2026-01-01T00:00:00Z"},
        }),
    )
    .expect(200)
    .await;

    let payload = json!({
        "invoice": 7,
        "amount": 1234.5,
        "customer": "<script>alert(1)</script>",
        "due": "2026-03-01T23:30:00Z",
    });
    let keys = post_to_recipients(
        &api,
        &alert()
            .event_type(EVENT)
            .entity("inv-7")
            .channels(&["email"])
            .payload(payload)
            .build(),
        &["ada".to_owned(), "bob".to_owned()],
    )
    .await;
    // An edit after the alert is enqueued: its emails keep the version
    // they recorded.
    api.put_template(
        EVENT,
        "email",
        "?locale=fr",
        &json!({"subject": "CHANGED", "html": "<p>CHANGED</p>"}),
    )
    .expect(200)
    .await;

    let worker = TidingsProcess::worker(
        &db.url,
        &worker_env(&[("TIDINGS_SMTP_URL", &smtp.smtp_url())]),
    )
    .await
    .expect("worker");
    let sent = eventually(Duration::from_secs(30), || async {
        sql::status_counts(&pool, &tenant).await.get("sent") == Some(&2)
    })
    .await;
    assert!(
        sent,
        "{:?}\n{}",
        sql::status_counts(&pool, &tenant).await,
        worker.log()
    );
    let received = smtp.received();

    let ada = received_by(&received, "ada@example.com");
    assert_eq!(ada.len(), 1, "{received:#?}");
    let ada = ada[0];
    assert_eq!(ada["content_type"], "multipart/alternative", "{ada}");
    assert_eq!(ada["parts"], json!(["text/plain", "text/html"]), "{ada}");
    assert_eq!(
        ada["subject"], "Facture 7 : 1\u{202f}234,50 €",
        "French variant (fr-BE falls back to fr), French number, the version enqueued"
    );
    let html = ada["html"].as_str().unwrap();
    assert!(html.contains("Bonjour ada"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)") && !html.contains("<script>"),
        "data escaped in HTML: {html}"
    );
    assert!(html.contains("style=\"color: #c00"), "CSS inlined: {html}");
    assert!(
        html.contains("2 mars 2026 00:30"),
        "date in the user's time zone and language: {html}"
    );
    let text = ada["body"].as_str().unwrap();
    assert!(
        text.contains("Bonjour ada,") && text.contains("Client : <script>alert(1)</script>"),
        "text derived from the HTML, not escaped: {text}"
    );

    let bob = received_by(&received, "bob@example.com");
    assert_eq!(bob.len(), 1, "{received:#?}");
    let bob = bob[0];
    assert_eq!(bob["subject"], "Invoice 7: 1,234.50 EUR", "no locale: en");
    assert_eq!(bob["parts"], json!(["text/plain", "text/html"]), "{bob}");
    assert_eq!(
        bob["body"].as_str().unwrap().trim(),
        "Hello bob, customer <script>alert(1)</script>"
    );
    let html = bob["html"].as_str().unwrap();
    assert!(
        html.contains("<table") && html.contains("Hello bob"),
        "MJML rendered: {html}"
    );
    assert!(!html.contains("<script>"), "{html}");

    // Both deliveries recorded the version they were rendered with.
    let versions: Vec<Option<i64>> = sqlx::query_scalar(
        "SELECT template_version_id FROM deliveries_sent WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant.uuid())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(versions.len(), 2);
    assert!(versions.iter().all(|v| v.is_some() && *v == versions[0]));
    let _ = keys;
}

#[tokio::test]
async fn a_template_that_loops_recurses_or_names_unknown_filters_is_refused_at_save_with_its_line()
{
    let (app, _db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let refused = |html: &str| json!({"subject": "s", "html": html});
    for (html, expected) in [
        (
            "{% for i in range(10**9) %}x{% endfor %}",
            "too many elements",
        ),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "fuel",
        ),
        (
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "recursion",
        ),
        (
            "<p>\n{% if false %}\n{{ payload.x | safe }}{% endif %}</p>",
            "line 3",
        ),
        ("<p>\n{{ payload.x | safe }}</p>", "unknown filter"),
        ("<p>{{ unclosed </p>", "line 1"),
    ] {
        let problem = api
            .put_template(EVENT, "email", "", &refused(html))
            .problem(422)
            .await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(expected), "{html}: {problem}");
    }
    // Nothing was saved: alerts of this event type keep the plain rendering.
    api.get_template(EVENT, "email", "").problem(404).await;
    let problem = api
        .put_template(EVENT, "email", "?locale=not_a-locale!", &refused("x"))
        .problem(422)
        .await;
    assert_eq!(problem["code"], "invalid_locale", "{problem}");
    let problem = api
        .put_template(EVENT, "in_app", "", &refused("x"))
        .problem(422)
        .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("email fields"),
        "{problem}"
    );
}

#[tokio::test]
async fn a_render_failure_at_send_kills_that_delivery_and_the_others_are_delivered() {
    let smtp = Receiver::smtp(0).await;
    let (app, db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_user("ada", &person("ada", None, None))
        .expect(200)
        .await;
    // Fine on the sample; the real payloads decide.
    api.put_template(
        EVENT,
        "email",
        "",
        &json!({
            "subject": "{{ payload.amount | number }}",
            "html": "{% for a in payload.items %}{% for b in payload.items %}{% for c in payload.items %}.{% endfor %}{% endfor %}{% endfor %}",
            "sample": {"amount": 1, "items": [1, 2]},
        }),
    )
    .expect(200)
    .await;
    let send = |entity: &str, payload: Value| {
        let api = &api;
        let body = alert()
            .event_type(EVENT)
            .entity(entity)
            .channels(&["email"])
            .payload(payload)
            .build();
        async move { post_to_recipients(api, &body, &["ada".to_owned()]).await[0].clone() }
    };
    let not_a_number = send("a", json!({"amount": "oops", "items": [1]})).await;
    let long_loop = send(
        "b",
        json!({"amount": 2, "items": (0..200).collect::<Vec<_>>()}),
    )
    .await;
    let good = send("c", json!({"amount": 3, "items": [1]})).await;

    let worker = TidingsProcess::worker(
        &db.url,
        &worker_env(&[("TIDINGS_SMTP_URL", &smtp.smtp_url())]),
    )
    .await
    .expect("worker");
    let settled = eventually(Duration::from_secs(30), || async {
        let counts = sql::status_counts(&pool, &tenant).await;
        counts.get("sent") == Some(&1) && counts.get("dead") == Some(&2)
    })
    .await;
    assert!(
        settled,
        "{:?}\n{}",
        sql::status_counts(&pool, &tenant).await,
        worker.log()
    );
    let dead = sql::delivery(&pool, &tenant, &not_a_number).await;
    assert_eq!(dead.attempts, 1, "dead at once, not retried: {dead:?}");
    assert!(
        dead.last_error
            .as_deref()
            .unwrap_or("")
            .contains("number expects a number"),
        "{dead:?}"
    );
    let dead = sql::delivery(&pool, &tenant, &long_loop).await;
    assert!(
        dead.last_error.as_deref().unwrap_or("").contains("fuel"),
        "{dead:?}"
    );
    assert_eq!(sql::delivery(&pool, &tenant, &good).await.status, "sent");
    let received = smtp.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_eq!(received[0]["subject"], "3");
}

#[tokio::test]
async fn users_locale_and_timezone_are_checked_and_kept_in_canonical_case() {
    let (app, _db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    let user = api
        .put_user(
            "ada",
            &person("ada", Some("fr_be"), Some("Europe/Brussels")),
        )
        .expect(200)
        .await;
    assert_eq!(user["locale"], "fr-BE");
    assert_eq!(user["timezone"], "Europe/Brussels");
    let problem = api
        .put_user("ada", &person("ada", Some("français"), None))
        .problem(422)
        .await;
    assert_eq!(problem["code"], "invalid_locale", "{problem}");
    let problem = api
        .put_user("ada", &person("ada", None, Some("Mars/Olympus")))
        .problem(422)
        .await;
    assert_eq!(problem["code"], "invalid_timezone", "{problem}");
    assert_eq!(api.get_user("ada").expect(200).await["locale"], "fr-BE");
}

#[tokio::test]
async fn preview_renders_saved_or_unsaved_templates_and_writes_nothing() {
    let (app, db) = TestApp::spawn_with(without_workers()).await.unwrap();
    let pool = db.pool().await.unwrap();
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_template_settings(&json!({"default_locale": "de"}))
        .expect(200)
        .await;
    let settings = api.template_settings().expect(200).await;
    assert_eq!(settings["default_locale"], "de", "{settings}");
    let saved = api
        .put_template(
            EVENT,
            "email",
            "?locale=de",
            &json!({
                "subject": "Rechnung {{ payload.n }}",
                "html": "<p>{{ payload.n }} {{ payload.n | pluralize('Tag', 'Tage') }}</p>",
                "sample": {"n": 1},
            }),
        )
        .expect(200)
        .await;
    assert_eq!(saved["version"], 1);

    let preview = api
        .preview_template(&json!({
            "event_type": EVENT,
            "channel": "email",
            "locale": "it",
            "data": {"n": 3},
        }))
        .expect(200)
        .await;
    assert_eq!(preview["locale"], "de", "it → tenant default de: {preview}");
    assert_eq!(preview["subject"], "Rechnung 3");
    assert!(
        preview["html"].as_str().unwrap().contains("3 Tage"),
        "{preview}"
    );
    assert_eq!(preview["text"].as_str().unwrap().trim(), "3 Tage");
    assert_eq!(preview["variables"], json!(["payload.n"]));
    assert!(preview["fuel"].as_u64().unwrap() > 0, "{preview}");
    assert_eq!(preview["template_version_id"], saved["template_version_id"]);

    let unsaved = api
        .preview_template(&json!({
            "event_type": EVENT,
            "channel": "in_app",
            "data": {"n": 1},
            "template": {"title": "{{ payload.n }} {{ payload.n | pluralize('day', 'days') }}", "body": "b", "action_url": "https://x.example/{{ entity_id }}"},
        }))
        .expect(200)
        .await;
    assert_eq!(unsaved["title"], "1 day");
    assert_eq!(unsaved["action_url"], "https://x.example/sample-entity");
    api.get_template(EVENT, "in_app", "").problem(404).await;

    // Versions: each save and each locale deleted is a new one.
    let list = api.list_templates("?limit=1").expect(200).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    api.put_template(
        EVENT,
        "email",
        "?locale=en",
        &json!({"subject": "s", "html": "h"}),
    )
    .expect(200)
    .await;
    let both = api.get_template(EVENT, "email", "").expect(200).await;
    assert_eq!(both["version"], 2);
    assert_eq!(
        both["variants"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["de", "en"]
    );
    api.delete_template(EVENT, "email", "?locale=de")
        .expect(204)
        .await;
    let en = api.get_template(EVENT, "email", "").expect(200).await;
    assert_eq!(en["version"], 3);
    api.get_template(EVENT, "email", "?locale=de")
        .problem(404)
        .await;
    api.delete_template(EVENT, "email", "").expect(204).await;
    api.get_template(EVENT, "email", "").problem(404).await;
    let deliveries: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(deliveries, 0);
}
