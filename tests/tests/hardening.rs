//! Input an attacker or a careless client sends, credentials pushed past their
//! limits, and secrets that must not show (issue 11: input, authentication,
//! secrets).

use std::process::{Command, Stdio};

use jsonwebtoken::{encode, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{sql, tidings_bin, AppOptions, TenantFixture, TestApp};

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
        // An alert's invalid recipient is `invalid_alert` (422), as for controls.
        let problem = api.create_alert(&body).problem(422).await;
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

/// Behind a transaction pooler LISTEN and migrations need a direct session:
/// without one, `serve` and `worker` refuse to start and say what is missing,
/// rather than failing later on a LISTEN that never hears anything.
#[test]
fn a_transaction_pooler_without_a_direct_session_url_is_refused() {
    for command in ["serve", "worker"] {
        let (ok, text) = run_tidings(
            &[command],
            &[
                ("TIDINGS_DATABASE_POOLER", "transaction"),
                (
                    "TIDINGS_ADMIN_TOKEN",
                    "a-long-enough-admin-token-for-this-test",
                ),
                ("TIDINGS_LISTEN", "127.0.0.1:0"),
                ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
            ],
        );
        assert!(!ok, "{command}: {text}");
        assert!(
            text.contains("TIDINGS_DATABASE_LISTEN_URL"),
            "{command}: {text}"
        );
    }
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
            "TIDINGS_DATABASE_LISTEN_URL",
            "postgres://app:hunter2@primary.internal:5432/tidings",
        ),
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

fn jwt_with_kid(secret: &str, kid: Option<&str>, claims: Value) -> String {
    let header = Header {
        kid: kid.map(str::to_owned),
        ..Header::default()
    };
    encode(
        &header,
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("encodable")
}

#[tokio::test]
async fn a_rotated_signing_secret_keeps_verifying_through_the_overlap_only() {
    let f = TenantFixture::spawn().await;
    let (app, t) = (&f.app, &f.tenant);
    let claims = || json!({"sub": "ann", "tid": t.id, "iat": now(), "exp": now() + 600});
    let status = |token: String| async move {
        app.user(&token)
            .counts()
            .reply_one_of(&[200, 401])
            .await
            .status
    };
    let before = f.token("ann").await;
    let old_self_signed = jwt(&t.signing_secret, claims());

    let first = app.tenant(t).rotate_signing_secret().expect(201).await;
    let (new_secret, new_kid) = (
        first["signing_secret"].as_str().expect("secret").to_owned(),
        first["key_id"].as_str().expect("kid").to_owned(),
    );
    assert_eq!(first["previous_key_id"], "k0");
    assert_ne!(new_secret, t.signing_secret);
    // Old tokens work through the overlap; new ones with or without kid.
    assert_eq!(status(before.clone()).await, 200);
    assert_eq!(status(old_self_signed.clone()).await, 200);
    assert_eq!(
        status(jwt_with_kid(&new_secret, Some(&new_kid), claims())).await,
        200
    );
    assert_eq!(status(jwt(&new_secret, claims())).await, 200);
    // A kid names one secret: the old secret under the new kid is refused.
    assert_eq!(
        status(jwt_with_kid(&t.signing_secret, Some(&new_kid), claims())).await,
        401
    );
    let minted = f.token("ann").await;
    let header: Value = serde_json::from_slice(
        &base64::Engine::decode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            minted.split('.').next().expect("header"),
        )
        .expect("base64"),
    )
    .expect("json");
    assert_eq!(
        header["kid"],
        new_kid.as_str(),
        "minted with the new secret"
    );

    // A second rotation ends the first one's overlap at once.
    app.tenant(t).rotate_signing_secret().expect(201).await;
    assert_eq!(status(before).await, 401);
    assert_eq!(status(old_self_signed).await, 401);
    assert_eq!(status(minted).await, 200);
}

#[tokio::test]
async fn revoking_a_users_tokens_refuses_those_issued_before() {
    let f = TenantFixture::spawn().await;
    let other_tenant = f.app.create_tenant().await;
    let (ann, bob) = (f.token("ann").await, f.token("bob").await);
    let other_ann = f.app.user_token(&other_tenant, "ann").await;
    let revoked = f.api().revoke_user_tokens("ann").expect(200).await;
    assert_eq!(revoked["user_id"], "ann");
    let problem = f.app.user(&ann).counts().problem(401).await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("revoked"),
        "{problem}"
    );
    f.app.user(&bob).counts().expect(200).await;
    f.app.user(&other_ann).counts().expect(200).await;
    // Tokens issued after the revocation (past its second) work.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let fresh = f.token("ann").await;
    f.app.user(&fresh).counts().expect(200).await;
    f.api().revoke_user_tokens("a\u{200b}b").problem(400).await;
}

#[tokio::test]
async fn signing_and_webhook_secrets_are_stored_sealed_and_old_rows_are_sealed_at_start() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let created = api
        .create_endpoint(&json!({"url": "https://example.com/h"}))
        .expect(201)
        .await;
    let (id, webhook_secret) = (
        created["id"].as_str().expect("id").to_owned(),
        created["secret"].as_str().expect("secret").to_owned(),
    );
    let (signing, _) = sql::stored_signing_secrets(&f.pool, &f.tenant).await;
    assert!(signing.starts_with("tdenc:v1:"), "{signing}");
    assert!(!signing.contains(&f.tenant.signing_secret));
    let stored = sql::stored_endpoint_secret(&f.pool, &id).await;
    assert!(stored.starts_with("tdenc:v1:"), "{stored}");
    assert!(!stored.contains(&webhook_secret[6..]));

    // Rows from before encryption at rest: read as they are, sealed at the
    // next start.
    sql::stage_plaintext_secrets(&f.pool, &f.tenant, &id, &webhook_secret).await;
    let restarted = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("restart");
    let (signing, _) = sql::stored_signing_secrets(&f.pool, &f.tenant).await;
    assert!(signing.starts_with("tdenc:v1:"), "{signing}");
    assert!(sql::stored_endpoint_secret(&f.pool, &id)
        .await
        .starts_with("tdenc:v1:"));
    // And the sealed secret still verifies the tenant's own tokens.
    let token = jwt(
        &f.tenant.signing_secret,
        json!({"sub": "ann", "tid": f.tenant.id, "iat": now(), "exp": now() + 60}),
    );
    restarted.user(&token).counts().expect(200).await;
}

#[test]
fn a_secret_key_that_does_not_parse_is_refused_without_being_echoed() {
    let (ok, text) = run_tidings(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("TIDINGS_SECRET_KEY", "k1:aHVudGVyMg"),
            (
                "TIDINGS_ADMIN_TOKEN",
                "a-long-enough-admin-token-for-this-test",
            ),
            ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
        ],
    );
    assert!(!ok, "{text}");
    assert!(!text.contains("aHVudGVyMg"), "{text}");
}
