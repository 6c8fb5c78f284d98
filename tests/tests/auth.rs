//! Credentials: API keys, user tokens, the admin token; 401 versus 403; rotation
//! and revocation; tenants created from the command line.

use std::process::Command;

use serde_json::{json, Value};
use tidings_tests::{jwt, sql, tidings_bin, unix_now, TestApp, ADMIN_TOKEN};

fn in_an_hour() -> i64 {
    unix_now() + 3600
}

#[tokio::test]
async fn admin_endpoints_need_the_admin_token() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let body = json!({"name": "x"});
    app.anonymous()
        .admin()
        .create_tenant(&body)
        .problem(401)
        .await;
    app.bearer("wrong")
        .admin()
        .create_tenant(&body)
        .problem(401)
        .await;
    let tenant = app.create_tenant().await;
    // A tenant's own key is a valid credential of the wrong kind.
    app.bearer(&tenant.api_key)
        .admin()
        .create_tenant(&body)
        .problem(403)
        .await;
    app.bearer(ADMIN_TOKEN)
        .admin()
        .create_tenant(&body)
        .expect(201)
        .await;
}

#[tokio::test]
async fn tenant_creation_validates_its_name() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    for body in [
        json!({"name": ""}),
        json!({"name": "a\u{7}b"}),
        json!({"name": "x".repeat(256)}),
        json!({"name": "x", "extra": 1}),
        json!({}),
    ] {
        app.admin().create_tenant(&body).problem(400).await;
    }
}

#[tokio::test]
async fn tenant_signed_tokens_are_accepted_and_others_are_401() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let a = app.create_tenant().await;
    let b = app.create_tenant().await;
    // A minted token and a self-signed one are both valid user tokens, which a
    // server-to-server endpoint refuses with 403 (a 401 would mean "invalid").
    let minted = app.user_token(&a, "alice").await;
    let self_signed = jwt(
        &a.signing_secret,
        json!({"sub": "alice", "tid": a.id, "iat": unix_now(), "exp": in_an_hour()}),
    );
    for token in [&minted, &self_signed] {
        // A valid user token on a server-to-server endpoint: 403, not 401.
        app.bearer(token)
            .tenant()
            .create_user_token(&json!({"user_id": "x"}))
            .problem(403)
            .await;
    }

    let bad_tokens = [
        (
            "expired",
            jwt(
                &a.signing_secret,
                json!({"sub": "alice", "tid": a.id, "iat": 999_000, "exp": 1_000_000}),
            ),
        ),
        (
            "claims tenant a, signed by b",
            jwt(
                &b.signing_secret,
                json!({"sub": "alice", "tid": a.id, "iat": unix_now(), "exp": in_an_hour()}),
            ),
        ),
        (
            "unknown tenant",
            jwt(
                &a.signing_secret,
                json!({"sub": "alice", "tid": uuid::Uuid::new_v4(), "iat": unix_now(), "exp": in_an_hour()}),
            ),
        ),
        (
            "no exp",
            jwt(&a.signing_secret, json!({"sub": "alice", "tid": a.id})),
        ),
        ("garbage", "a.b.c".to_string()),
        ("not a credential", "hello".to_string()),
        ("revoked-looking key", "tdk_nope".to_string()),
    ];
    for (why, token) in bad_tokens {
        let problem = app
            .bearer(&token)
            .tenant()
            .create_user_token(&json!({"user_id": "x"}))
            .problem(401)
            .await;
        assert_eq!(problem["code"], "unauthorized", "{why}");
    }
}

#[tokio::test]
async fn minted_tokens_carry_the_user_and_tenant_from_the_credential() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let a = app.create_tenant().await;
    let token = app.user_token(&a, "alice").await;
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["tid"], a.id.as_str());
    let exp = claims["exp"].as_i64().unwrap();
    assert!((exp - in_an_hour()).abs() < 60, "exp {exp}");
    // A tenant id in the body is not a field: it can never choose the tenant.
    let api = app.tenant(&a);
    api.create_user_token(&json!({"user_id": "alice", "tenant_id": uuid::Uuid::new_v4()}))
        .problem(400)
        .await;
    for ttl in [0, 86_401] {
        api.create_user_token(&json!({"user_id": "alice", "ttl_seconds": ttl}))
            .problem(400)
            .await;
    }
}

#[tokio::test]
async fn rotated_keys_overlap_until_the_old_one_is_revoked() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let t = app.create_tenant().await;
    let created = app.admin().create_key(&t.id).expect(201).await;
    let new_key = created["api_key"].as_str().unwrap().to_string();
    let mint_with = |key: &str, status: u16| {
        app.bearer(key)
            .tenant()
            .create_user_token(&json!({"user_id": "u"}))
            .reply(status)
    };
    mint_with(&t.api_key, 201).await;
    mint_with(&new_key, 201).await;
    app.admin()
        .revoke_key(&t.id, &t.api_key_id)
        .expect(204)
        .await;
    mint_with(&t.api_key, 401).await;
    mint_with(&new_key, 201).await;
    app.admin()
        .revoke_key(&t.id, &t.api_key_id)
        .problem(404)
        .await;
    app.admin()
        .create_key(uuid::Uuid::new_v4())
        .problem(404)
        .await;
}

#[tokio::test]
async fn cli_creates_tenants_whose_keys_work() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let out = Command::new(tidings_bin())
        .args(["tenant", "create", "--name", "from the cli", "--json"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["name"], "from the cli");
    let key = created["api_key"].as_str().unwrap();
    app.bearer(key)
        .tenant()
        .create_user_token(&json!({"user_id": "u"}))
        .expect(201)
        .await;
    // The key is stored only as a hash.
    let pool = db.pool().await.unwrap();
    assert_eq!(sql::api_key_hashes_containing(&pool, &key[4..]).await, 0);
}
