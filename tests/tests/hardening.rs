//! Input an attacker or a careless client sends, credentials pushed past their
//! limits, and secrets that must not show (ARCHITECTURE.md, "Cross-cutting
//! concerns": input, credentials, secrets in output).

use std::process::{Command, Stdio};

use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{
    alert, jwt, jwt_with_kid, sql, tidings_bin, unix_now, AppOptions, TenantFixture, TestApp,
    ADMIN_TOKEN,
};

#[tokio::test]
async fn a_nul_anywhere_in_json_is_a_422_naming_the_field_and_stores_nothing() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for (body, field) in [
        (
            alert().payload(json!({"note": "a\u{0}b"})).build(),
            "payload.note",
        ),
        (
            alert()
                .payload(json!({"lines": [{"ok": 1}, {"text": "\u{0}"}]}))
                .build(),
            "payload.lines[1].text",
        ),
        (
            alert().payload(json!({"k\u{0}ey": 1})).build(),
            "a key of payload",
        ),
        (alert().entity("inv\u{0}").build(), "entity_id"),
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
    api.create_alert(&alert().payload(json!({"note": "\\u0000"})).build())
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
                .create_alert(&alert().payload(payload).build())
                .idempotency_key(key)
                .problem(400)
                .await;
            assert_eq!(problem["code"], "invalid_idempotency_key", "{key:?}");
        }
    }
    // Twice in one request is no key either.
    let problem = api
        .create_alert(&alert().build())
        .idempotency_key("a")
        .idempotency_key("b")
        .problem(400)
        .await;
    assert_eq!(problem["code"], "invalid_idempotency_key");
    // A valid key still works.
    api.create_alert(&alert().build())
        .idempotency_key("k-1")
        .expect(202)
        .await;
}

#[tokio::test]
async fn ids_with_bidi_or_zero_width_characters_are_refused() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    for sneaky in ["adm\u{200b}in", "\u{202e}nimda", "a\u{2066}b", "\u{feff}x"] {
        let body = alert().recipients(&[sneaky]).build();
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
        json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "exp": unix_now() + 3600}),
    );
    assert_eq!(feed(good).await.status, 200);
    for (why, claims) in [
        (
            "exp in year 9999",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "exp": 253_402_300_799_i64}),
        ),
        (
            "lifetime of a day and a second",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "exp": unix_now() + 86_401}),
        ),
        (
            "no iat",
            json!({"sub": "ann", "tid": t.id, "exp": unix_now() + 3600}),
        ),
        (
            "iat in the future",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now() + 7200, "exp": unix_now() + 9000}),
        ),
        (
            "nbf in an hour",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "nbf": unix_now() + 3600, "exp": unix_now() + 7200}),
        ),
        // jsonwebtoken skips an `nbf` that is not a number: refused here.
        (
            "nbf as a string",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "nbf": (unix_now() + 3600).to_string(), "exp": unix_now() + 7200}),
        ),
        (
            "nbf as a date",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "nbf": "2099-01-01T00:00:00Z", "exp": unix_now() + 7200}),
        ),
        (
            "nbf as a fraction",
            json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "nbf": (unix_now() + 3600) as f64 + 0.5, "exp": unix_now() + 7200}),
        ),
    ] {
        assert_eq!(feed(jwt(secret, claims)).await.status, 401, "{why}");
    }
}

#[tokio::test]
async fn an_unknown_tenant_and_a_bad_signature_are_the_same_answer() {
    let f = TenantFixture::spawn().await;
    let other = f.app.create_tenant().await;
    let claims =
        |tid: &str| json!({"sub": "ann", "tid": tid, "iat": unix_now(), "exp": unix_now() + 60});
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

#[tokio::test]
async fn a_rotated_signing_secret_keeps_verifying_through_the_overlap_only() {
    let f = TenantFixture::spawn().await;
    let (app, t) = (&f.app, &f.tenant);
    let claims = || json!({"sub": "ann", "tid": t.id, "iat": unix_now(), "exp": unix_now() + 600});
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
    assert!(signing.starts_with("tdenc:v2:"), "{signing}");
    assert!(!signing.contains(&f.tenant.signing_secret));
    let stored = sql::stored_endpoint_secret(&f.pool, &id).await;
    assert!(stored.starts_with("tdenc:v2:"), "{stored}");
    assert!(!stored.contains(&webhook_secret[6..]));
    let token = || {
        jwt(
            &f.tenant.signing_secret,
            json!({"sub": "ann", "tid": f.tenant.id, "iat": unix_now(), "exp": unix_now() + 60}),
        )
    };

    // Rows from a database whose secrets were never bound (plaintext from
    // before encryption at rest): sealed, bound, at the next start.
    sql::stage_secrets_never_bound(&f.pool).await;
    sql::stage_plaintext_secrets(&f.pool, &f.tenant, &id, &webhook_secret).await;
    let restarted = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("restart");
    let (signing, _) = sql::stored_signing_secrets(&f.pool, &f.tenant).await;
    assert!(signing.starts_with("tdenc:v2:"), "{signing}");
    assert!(sql::stored_endpoint_secret(&f.pool, &id)
        .await
        .starts_with("tdenc:v2:"));
    // And the sealed secret still verifies the tenant's own tokens.
    restarted.user(&token()).counts().expect(200).await;
    drop(restarted);

    // Once a start has bound every secret, plaintext that appears later is
    // neither sealed nor opened: the tenant's tokens stop verifying.
    sql::stage_plaintext_secrets(&f.pool, &f.tenant, &id, &webhook_secret).await;
    let restarted = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("restart");
    let (signing, _) = sql::stored_signing_secrets(&f.pool, &f.tenant).await;
    assert_eq!(signing, f.tenant.signing_secret, "left as it is");
    restarted.user(&token()).counts().problem(401).await;
}

#[tokio::test]
async fn a_sealed_signing_secret_copied_to_another_tenants_row_does_not_open() {
    let f = TenantFixture::spawn().await;
    let other = f.app.create_tenant().await;
    // Whoever can write the table gives our tenant the other's secret, so
    // that tokens the other can mint would pass as ours.
    sql::copy_stored_signing_secret(&f.pool, &other, &f.tenant).await;
    let fresh = TestApp::spawn_on(&f.db.url, AppOptions::default())
        .await
        .expect("an instance with no cached secrets");
    let forged = jwt(
        &other.signing_secret,
        json!({"sub": "ann", "tid": f.tenant.id, "iat": unix_now(), "exp": unix_now() + 60}),
    );
    fresh.user(&forged).counts().problem(401).await;
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

/// A client may send any token as its method. Each distinct label value is a
/// series kept and rendered for the life of the process, so the request
/// metric's `method` label takes a fixed set of values: invented methods are
/// all `other`.
#[tokio::test]
async fn invented_http_methods_share_one_metric_label() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let http = reqwest::Client::new();
    for n in 0..20 {
        let method = Method::from_bytes(format!("INVENTED{n}X").as_bytes()).unwrap();
        let status = http
            .request(method, app.url("/v1/feed"))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_client_error(), "{status}");
    }
    let text = app.scrape().await;
    assert!(!text.contains("INVENTED"), "{text}");
    let other: f64 = text
        .lines()
        .filter(|l| l.starts_with("tidings_http_request_duration_seconds_count{"))
        .filter(|l| l.contains(r#"method="other""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(other, 20.0, "{text}");
}

/// The API's listener is public: `/metrics` is served there only behind
/// `TIDINGS_METRICS_TOKEN`, and not at all by default.
#[tokio::test]
async fn metrics_are_off_the_api_listener_unless_a_token_guards_them() {
    let (open, db) = TestApp::spawn_with(AppOptions::env([("TIDINGS_METRICS_TOKEN", "")]))
        .await
        .unwrap();
    open.raw(Method::GET, "/metrics").problem(404).await;
    let guarded = TestApp::spawn_on(&db.url, AppOptions::default())
        .await
        .unwrap();
    guarded.raw(Method::GET, "/metrics").problem(401).await;
    guarded
        .raw(Method::GET, "/metrics")
        .bearer(ADMIN_TOKEN)
        .problem(401)
        .await;
    assert!(guarded
        .scrape()
        .await
        .contains("tidings_http_request_duration_seconds"));
    let (ok, text) = run_tidings(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("TIDINGS_METRICS_TOKEN", "short"),
            (
                "TIDINGS_ADMIN_TOKEN",
                "a-long-enough-admin-token-for-this-test",
            ),
            ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
        ],
    );
    assert!(!ok, "{text}");
    assert!(text.contains("TIDINGS_METRICS_TOKEN"), "{text}");
    assert!(!text.contains("short"), "{text}");
}

/// `X-Forwarded-For` and `X-Real-IP` are anyone's to write: the request log
/// names the peer unless it is a trusted proxy. And a stream ticket is never
/// logged, however its parameter's name is spelled (`%74icket` is decoded to
/// `ticket` by the query parser that authenticates).
#[tokio::test]
async fn the_request_log_names_the_peer_unless_trusted_and_never_a_ticket() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let http = reqwest::Client::new();
    let forged = |base: String| {
        let http = http.clone();
        async move {
            http.get(format!("{base}/healthz"))
                .header("x-forwarded-for", "203.0.113.9")
                .header("x-real-ip", "198.51.100.7")
                .send()
                .await
                .unwrap();
        }
    };
    forged(app.base_url().to_owned()).await;
    for name in ["%74icket", "TICKET", "Ticket"] {
        http.get(app.url(&format!("/v1/feed/stream?{name}=tds_leaked_{}", name.len())))
            .send()
            .await
            .unwrap();
    }
    let logged = tidings_tests::eventually(std::time::Duration::from_secs(10), || async {
        app.process.log().matches("/v1/feed/stream?").count() >= 3
    })
    .await;
    let log = app.process.log();
    assert!(logged, "{log}");
    assert!(log.contains("remote_addr=127.0.0.1"), "{log}");
    assert!(!log.contains("203.0.113.9"), "{log}");
    assert!(!log.contains("198.51.100.7"), "{log}");
    assert!(!log.contains("tds_leaked"), "{log}");

    let behind_proxy = TestApp::spawn_on(
        &db.url,
        AppOptions::env([("TIDINGS_TRUSTED_PROXIES", "127.0.0.0/8")]),
    )
    .await
    .unwrap();
    forged(behind_proxy.base_url().to_owned()).await;
    let believed = tidings_tests::eventually(std::time::Duration::from_secs(10), || async {
        behind_proxy
            .process
            .log()
            .contains("remote_addr=203.0.113.9")
    })
    .await;
    assert!(believed, "{}", behind_proxy.process.log());
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The sum of the samples of metric `name` whose labels contain `labels`.
fn metric_sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Clients that ask for the largest static page (`/docs`, 1.8 MB) and never
/// read the answer: each holds no copy of the page (one buffer is shared),
/// and each is cut off once its writes have made no progress for the write
/// timeout (bench/findings/health-and-http.md, "Clients that stop reading",
/// has the measurement at the audit's 300 clients).
#[tokio::test]
async fn clients_that_never_read_share_one_page_and_are_cut_off_by_the_write_timeout() {
    use tokio::io::AsyncWriteExt;
    const CLIENTS: usize = 100;
    let (app, _db) =
        TestApp::spawn_with(AppOptions::env([("TIDINGS_HTTP_WRITE_TIMEOUT_SECS", "2")]))
            .await
            .unwrap();
    let page = reqwest::get(app.url("/docs")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.bytes().await.unwrap().len() > 1_000_000);
    let pid = app.process.pid().unwrap();
    let before = rss_kib(pid);
    let addr: std::net::SocketAddr = app
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let mut stalled = Vec::new();
    for _ in 0..CLIENTS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        // Several pages in a row: more than the kernel's buffers hold.
        stream
            .write_all(&b"GET /docs HTTP/1.1\r\nHost: t\r\n\r\n".repeat(4))
            .await
            .unwrap();
        stalled.push(stream);
    }
    // Every stalled client's first answer has been handed to the connection.
    let started = tidings_tests::eventually(std::time::Duration::from_secs(30), || async {
        let text = app.scrape().await;
        metric_sum(
            &text,
            "tidings_http_request_duration_seconds_count{",
            r#"route="/docs""#,
        ) >= (CLIENTS + 1) as f64
    })
    .await;
    assert!(started, "{}", app.scrape().await);
    let grown_mib = rss_kib(pid).saturating_sub(before) / 1024;
    eprintln!("{CLIENTS} clients that never read: RSS +{grown_mib} MiB");
    // A copy of the page each would be 170 MiB and more.
    assert!(grown_mib < 40, "RSS grew {grown_mib} MiB");
    let cut_off = tidings_tests::eventually(std::time::Duration::from_secs(30), || async {
        let text = app.scrape().await;
        metric_sum(
            &text,
            "tidings_http_connections_timed_out_total",
            r#"reason="write_timeout""#,
        ) >= CLIENTS as f64
    })
    .await;
    assert!(cut_off, "{}", app.scrape().await);
    drop(stalled);
}

/// A session left inside a transaction (a task stalled or lost mid-way)
/// holds its locks and every tenant's feed horizon: PostgreSQL ends it
/// after TIDINGS_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS.
#[tokio::test]
async fn pooled_sessions_end_a_transaction_left_idle() {
    use clap::Parser;
    use tidings_server::app::config::{Cli, Command};
    let db = tidings_tests::TestDb::create().await.unwrap();
    let cli = Cli::try_parse_from([
        "tidings",
        "migrate",
        "--database-url",
        &db.url,
        "--db-idle-in-transaction-timeout-ms",
        "300",
    ])
    .unwrap();
    let Command::Migrate(args) = cli.command else {
        panic!("parsed another command");
    };
    let pool = tidings_server::db::connect(
        &db.url,
        1,
        std::time::Duration::from_secs(10),
        args.session_timeouts(),
    )
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    // Well past the timeout: the server has ended the session.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = sqlx::query("SELECT 1").execute(&mut *tx).await;
    assert!(after.is_err(), "the idle transaction was left open");
    // The default is on too.
    let defaults = Cli::try_parse_from(["tidings", "migrate"]).unwrap();
    let Command::Migrate(args) = defaults.command else {
        panic!("parsed another command");
    };
    assert!(!args.session_timeouts().idle_in_transaction.is_zero());
}

/// With a pool too small for its own background tasks (LISTEN sessions,
/// outbox, expansion) an instance starved without a word; `serve` refuses
/// it and says what the pool must hold.
#[test]
fn serve_refuses_a_pool_smaller_than_its_background_tasks_need() {
    let (ok, text) = run_tidings(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("TIDINGS_DB_MAX_CONNECTIONS", "4"),
            (
                "TIDINGS_ADMIN_TOKEN",
                "a-long-enough-admin-token-for-this-test",
            ),
            ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing"),
        ],
    );
    assert!(!ok, "{text}");
    assert!(text.contains("TIDINGS_DB_MAX_CONNECTIONS is 4"), "{text}");
    assert!(text.contains("LISTEN"), "{text}");
}

/// Cursors carry a checksum anyone can compute, so a client may send a
/// position beyond the present. Resuming a stream from one must not silence
/// it until the present catches up (for the largest position: for good).
#[tokio::test]
async fn a_stream_resumed_from_a_forged_future_cursor_still_delivers_new_items() {
    use tidings_tests::sse::StreamCredential;
    let (f, token) = tidings_tests::member_of("ops", "ann").await;
    let forged = tidings_core::Position::new(i64::MAX, i64::MAX).to_cursor();
    let mut stream = f
        .app
        .open_stream(
            StreamCredential::Token(&token),
            &format!("?after={forged}"),
            None,
        )
        .await;
    assert_eq!(stream.status, 200);
    let posted = tidings_tests::post_event(&f.api(), "ops", "deploy.finished").await;
    let item = loop {
        let event = stream
            .next_within(std::time::Duration::from_secs(10))
            .await
            .expect("the new item arrives");
        if event.event != "marks" {
            break event;
        }
    };
    assert_eq!(item.event, "item", "{item:?}");
    assert_eq!(item.json()["id"], posted["id"], "{item:?}");
}
