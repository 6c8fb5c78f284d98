//! Credentials: API keys, user tokens, the admin token; 401 versus 403; rotation
//! and revocation; tenants created from the command line.

use std::process::Command;

use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use tidings_tests::{expect_problem, tidings_bin, TestApp, ADMIN_TOKEN};

fn jwt(secret: &str, claims: Value) -> String {
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

#[tokio::test]
async fn admin_endpoints_need_the_admin_token() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let create = |token: Option<&str>| {
        let mut req = app
            .client
            .post(app.url("/v1/admin/tenants"))
            .json(&json!({"name": "x"}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    expect_problem(create(None).await.unwrap(), 401).await;
    expect_problem(create(Some("wrong")).await.unwrap(), 401).await;
    let tenant = app.create_tenant().await;
    // A tenant's own key is a valid credential of the wrong kind.
    expect_problem(create(Some(&tenant.api_key)).await.unwrap(), 403).await;
    assert_eq!(create(Some(ADMIN_TOKEN)).await.unwrap().status(), 201);
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
        let resp = app
            .client
            .post(app.url("/v1/admin/tenants"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        expect_problem(resp, 400).await;
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
        json!({"sub": "alice", "tid": a.id, "exp": in_an_hour()}),
    );
    for token in [&minted, &self_signed] {
        // A valid user token on a server-to-server endpoint: 403, not 401.
        let resp = app
            .client
            .post(app.url("/v1/user-tokens"))
            .bearer_auth(token)
            .json(&json!({"user_id": "x"}))
            .send()
            .await
            .unwrap();
        expect_problem(resp, 403).await;
    }

    let bad_tokens = [
        (
            "expired",
            jwt(
                &a.signing_secret,
                json!({"sub": "alice", "tid": a.id, "exp": 1_000_000}),
            ),
        ),
        (
            "claims tenant a, signed by b",
            jwt(
                &b.signing_secret,
                json!({"sub": "alice", "tid": a.id, "exp": in_an_hour()}),
            ),
        ),
        (
            "unknown tenant",
            jwt(
                &a.signing_secret,
                json!({"sub": "alice", "tid": uuid::Uuid::new_v4(), "exp": in_an_hour()}),
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
        let resp = app
            .client
            .post(app.url("/v1/user-tokens"))
            .bearer_auth(&token)
            .json(&json!({"user_id": "x"}))
            .send()
            .await
            .unwrap();
        let problem = expect_problem(resp, 401).await;
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
    let resp = app
        .client
        .post(app.url("/v1/user-tokens"))
        .bearer_auth(&a.api_key)
        .json(&json!({"user_id": "alice", "tenant_id": uuid::Uuid::new_v4()}))
        .send()
        .await
        .unwrap();
    expect_problem(resp, 400).await;
    for ttl in [0, 86_401] {
        let resp = app
            .client
            .post(app.url("/v1/user-tokens"))
            .bearer_auth(&a.api_key)
            .json(&json!({"user_id": "alice", "ttl_seconds": ttl}))
            .send()
            .await
            .unwrap();
        expect_problem(resp, 400).await;
    }
}

#[tokio::test]
async fn rotated_keys_overlap_until_the_old_one_is_revoked() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let t = app.create_tenant().await;
    let resp = app
        .client
        .post(app.url(&format!("/v1/admin/tenants/{}/keys", t.id)))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let new_key = resp.json::<Value>().await.unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_string();
    let works = |key: String| {
        let req = app
            .client
            .post(app.url("/v1/user-tokens"))
            .bearer_auth(key)
            .json(&json!({"user_id": "u"}));
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(works(t.api_key.clone()).await, 201);
    assert_eq!(works(new_key.clone()).await, 201);
    let revoke = app
        .client
        .delete(app.url(&format!("/v1/admin/tenants/{}/keys/{}", t.id, t.api_key_id)))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 204);
    assert_eq!(works(t.api_key.clone()).await, 401);
    assert_eq!(works(new_key).await, 201);
    let again = app
        .client
        .delete(app.url(&format!("/v1/admin/tenants/{}/keys/{}", t.id, t.api_key_id)))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    expect_problem(again, 404).await;
    let unknown_tenant = app
        .client
        .post(app.url(&format!("/v1/admin/tenants/{}/keys", uuid::Uuid::new_v4())))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    expect_problem(unknown_tenant, 404).await;
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
    let resp = app
        .client
        .post(app.url("/v1/user-tokens"))
        .bearer_auth(key)
        .json(&json!({"user_id": "u"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    // The key is stored only as a hash.
    let pool = db.pool().await.unwrap();
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_keys WHERE encode(key_hash, 'escape') LIKE '%' || $1 || '%'",
    )
    .bind(&key[4..])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(stored, 0);
}
