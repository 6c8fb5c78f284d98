//! Input an attacker or a careless client sends, credentials pushed past their
//! limits, and secrets that must not show (issue 11: input, authentication,
//! secrets).

use std::process::{Command, Stdio};

use jsonwebtoken::{encode, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{tidings_bin, TenantFixture, TestApp};

fn jwt(secret: &str, claims: Value) -> String {
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("encodable claims")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn alert(payload: Value) -> Value {
    json!({
        "event_type": "invoice.overdue",
        "entity_id": "inv_1",
        "recipients": ["ann"],
        "channels": ["in_app"],
        "payload": payload,
    })
}

#[tokio::test]
async fn a_nul_anywhere_in_json_is_a_422_naming_the_field_and_stores_nothing() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for (body, field) in [
        (alert(json!({"note": "a\u{0}b"})), "payload.note"),
        (
            alert(json!({"lines": [{"ok": 1}, {"text": "\u{0}"}]})),
            "payload.lines[1].text",
        ),
        (alert(json!({"k\u{0}ey": 1})), "a key of payload"),
        (
            json!({"event_type": "invoice.overdue", "entity_id": "inv\u{0}", "recipients": ["ann"], "channels": ["in_app"], "payload": {}}),
            "entity_id",
        ),
    ] {
        let problem = api.create_alert(&body).problem(422).await;
        assert_eq!(problem["code"], "nul_character", "{problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(field), "{field}: {detail}");
    }
    let problem = api
        .create_endpoint(&json!({"url": "https://example.com/h", "description": "bill\u{0}ing"}))
        .problem(422)
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("description"),
        "{problem}"
    );
    let problem = api
        .create_event(&json!({"team_id": "t", "event_type": "e", "payload": {"x": ["\u{0}"]}}))
        .problem(422)
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("payload.x[0]"),
        "{problem}"
    );
    // An escaped backslash followed by "u0000" is text, not a NUL.
    api.create_alert(&alert(json!({"note": "\\u0000"})))
        .expect(202)
        .await;
    let endpoints = api.list_endpoints().expect(200).await;
    assert_eq!(endpoints.to_string().matches("example.com").count(), 0);
}

#[tokio::test]
async fn an_undecodable_or_overlong_idempotency_key_is_a_400_not_ignored() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for key in ["clé-1", "key\u{200b}", &"k".repeat(256)] {
        for payload in [json!({"a": 1}), json!({"a": 2})] {
            let problem = api
                .create_alert(&alert(payload))
                .idempotency_key(key)
                .problem(400)
                .await;
            assert_eq!(problem["code"], "invalid_idempotency_key", "{key:?}");
        }
    }
    // Twice in one request is no key either.
    let problem = api
        .create_alert(&alert(json!({})))
        .idempotency_key("a")
        .idempotency_key("b")
        .problem(400)
        .await;
    assert_eq!(problem["code"], "invalid_idempotency_key");
    // A valid key still works.
    api.create_alert(&alert(json!({})))
        .idempotency_key("k-1")
        .expect(202)
        .await;
}

#[tokio::test]
async fn ids_with_bidi_or_zero_width_characters_are_refused() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for sneaky in ["adm\u{200b}in", "\u{202e}nimda", "a\u{2066}b", "\u{feff}x"] {
        let mut body = alert(json!({}));
        body["recipients"] = json!([sneaky]);
        let problem = api.create_alert(&body).problem(400).await;
        assert!(
            problem["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("format characters"),
            "{sneaky:?}: {problem}"
        );
        let path_id: String = url::form_urlencoded::byte_serialize(sneaky.as_bytes()).collect();
        api.put_member("team", &path_id).problem(400).await;
    }
}

#[tokio::test]
async fn user_tokens_need_iat_a_bounded_lifetime_and_honour_nbf() {
    let f = TenantFixture::spawn().await;
    let (app, t) = (&f.app, &f.tenant);
    let secret = &t.signing_secret;
    let feed =
        |token: String| async move { app.user(&token).counts().reply_one_of(&[200, 401]).await };
    let good = jwt(
        secret,
        json!({"sub": "ann", "tid": t.id, "iat": now(), "exp": now() + 3600}),
    );
    assert_eq!(feed(good).await.status, 200);
    for (why, claims) in [
        (
            "exp in year 9999",
            json!({"sub": "ann", "tid": t.id, "iat": now(), "exp": 253_402_300_799_i64}),
        ),
        (
            "lifetime of a day and a second",
            json!({"sub": "ann", "tid": t.id, "iat": now(), "exp": now() + 86_401}),
        ),
        (
            "no iat",
            json!({"sub": "ann", "tid": t.id, "exp": now() + 3600}),
        ),
        (
            "iat in the future",
            json!({"sub": "ann", "tid": t.id, "iat": now() + 7200, "exp": now() + 9000}),
        ),
        (
            "nbf in an hour",
            json!({"sub": "ann", "tid": t.id, "iat": now(), "nbf": now() + 3600, "exp": now() + 7200}),
        ),
    ] {
        assert_eq!(feed(jwt(secret, claims)).await.status, 401, "{why}");
    }
}

#[tokio::test]
async fn an_unknown_tenant_and_a_bad_signature_are_the_same_answer() {
    let f = TenantFixture::spawn().await;
    let other = f.app.create_tenant().await;
    let claims = |tid: &str| json!({"sub": "ann", "tid": tid, "iat": now(), "exp": now() + 60});
    let unknown = jwt(
        &f.tenant.signing_secret,
        claims(&uuid::Uuid::new_v4().to_string()),
    );
    let foreign = jwt(&other.signing_secret, claims(&f.tenant.id));
    let mut details = Vec::new();
    for token in [unknown.clone(), foreign, unknown] {
        let problem = f.app.user(&token).counts().problem(401).await;
        details.push(problem["detail"].clone());
    }
    assert_eq!(details[0], details[1], "{details:?}");
    assert_eq!(details[0], details[2], "a cached miss answers the same");
}

/// Runs `tidings` with `args` and `env` (nothing inherited that names a
/// database) and returns (success, stdout + stderr).
fn run_tidings(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(tidings_bin())
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TIDINGS_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("tidings runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn serve_refuses_an_admin_token_shorter_than_32_bytes() {
    let (ok, text) = run_tidings(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("TIDINGS_ADMIN_TOKEN", "x"),
            ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
        ],
    );
    assert!(!ok, "{text}");
    assert!(text.contains("at least 32"), "{text}");
}

#[test]
fn help_and_start_up_errors_never_print_a_password() {
    let env = [
        (
            "DATABASE_URL",
            "postgres://app:hunter2@db.internal:5432/tidings",
        ),
        ("TIDINGS_SMTP_URL", "smtps://mailer:hunter2@mail.internal"),
        ("TIDINGS_NATS_URL", "nats://pub:hunter2@nats.internal:4222"),
        (
            "TIDINGS_ADMIN_TOKEN",
            "hunter2-hunter2-hunter2-hunter2-hunter2",
        ),
    ];
    for command in ["serve", "worker"] {
        let (ok, text) = run_tidings(&[command, "--help"], &env);
        assert!(ok, "{text}");
        assert!(text.contains("DATABASE_URL"), "{text}");
        assert!(
            !text.contains("hunter2"),
            "{command} --help shows a password:\n{text}"
        );
    }
    // An SMTP URL that does not parse is refused without being echoed.
    for smtp in [
        "smtps://mailer:hunter2@[bad",
        "smtps://mailer:hunter2@mail:99999",
    ] {
        let (ok, text) = run_tidings(
            &["serve", "--listen", "127.0.0.1:0"],
            &[
                ("TIDINGS_SMTP_URL", smtp),
                (
                    "TIDINGS_ADMIN_TOKEN",
                    "a-long-enough-admin-token-for-this-test",
                ),
                ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
            ],
        );
        assert!(!ok, "{text}");
        assert!(text.contains("TIDINGS_SMTP_URL"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}

#[tokio::test]
async fn raw_nul_in_a_query_or_path_is_never_a_500() {
    let f = TenantFixture::spawn().await;
    let token = f.token("ann").await;
    for path in ["/v1/users/a%00b", "/v1/teams/t%00/members/u"] {
        let reply = f
            .app
            .raw(Method::GET, path)
            .bearer(&f.tenant.api_key)
            .reply_one_of(&[400, 404, 405])
            .await;
        assert!(reply.status < 500);
    }
    f.app
        .raw(Method::GET, "/v1/feed?before=%00")
        .bearer(&token)
        .reply_one_of(&[400])
        .await;
}
