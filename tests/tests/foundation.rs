//! The service's frame: health, readiness, docs, problem bodies, the OpenAPI
//! document, and the embedded PostgreSQL default.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use reqwest::Method;
use serde_json::{json, Value};
use tidings_tests::{sql, tidings_bin, AppOptions, TenantFixture, TestApp, ADMIN_TOKEN};

#[tokio::test]
async fn health_is_ok_and_ready_once_migrated() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let live = app.public().live().expect(200).await;
    assert_eq!(live["status"], "ok");
    app.public().ready().expect(200).await;
}

#[tokio::test]
async fn readiness_fails_when_migrations_are_missing() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    // Forget one applied migration: the binary knows more than the database has.
    sql::forget_last_migration(&pool).await;
    let body = app.public().ready().expect(503).await;
    assert_eq!(body["status"], "migrations pending");
    assert_eq!(body["check"], "migrations", "the failed check is named");
}

/// A missing migration, and no migrations table at all, are "pending", not
/// "unreachable".
#[tokio::test]
async fn readiness_says_pending_when_the_migrations_table_is_gone() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let pool = db.pool().await.unwrap();
    app.public().ready().expect(200).await;
    sqlx::query("ALTER TABLE _sqlx_migrations RENAME TO _sqlx_migrations_away")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..2 {
        let body = app.public().ready().expect(503).await;
        assert_eq!(body["check"], "migrations", "{body}");
    }
}

/// A database that applied a migration whose comments were reworded later
/// (`db::COMMENT_REWRITES`: same SQL, new checksum) still migrates and starts,
/// and takes the new checksum; without the rewrite list sqlx would refuse it
/// as a modified migration.
#[tokio::test]
async fn a_database_migrated_before_a_comment_rewrite_still_migrates() {
    use tidings_server::db::{self, PrimaryPool, COMMENT_REWRITES};
    let test_db = tidings_tests::TestDb::create().await.unwrap();
    let pool = test_db.pool().await.unwrap();
    db::migrate(&PrimaryPool::direct(pool.clone()))
        .await
        .unwrap();
    let current: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .unwrap();
    for (version, shipped) in COMMENT_REWRITES {
        sqlx::query("UPDATE _sqlx_migrations SET checksum = decode($2, 'hex') WHERE version = $1")
            .bind(version)
            .bind(shipped)
            .execute(&pool)
            .await
            .unwrap();
    }
    db::migrate(&PrimaryPool::direct(pool.clone()))
        .await
        .expect("a database with the shipped comments migrates");
    let after: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(after, current, "every checksum is the current text's again");
}

#[tokio::test]
async fn docs_and_openapi_json_are_served() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let docs = app.public().docs().expect(200).await;
    assert!(docs.to_lowercase().contains("swagger"));
    let spec = app.public().openapi().expect(200).await;
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(spec["paths"]["/readyz"].is_object());
    // The UI shows the published document, not poem's own.
    let committed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json"),
    )
    .unwrap();
    assert!(
        docs.contains(committed.trim_end()),
        "/docs embeds another document than /openapi.json"
    );
}

#[tokio::test]
async fn the_inbox_page_is_served_and_a_setting_turns_it_off() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let page = app
        .raw(Method::GET, "/inbox/")
        .reply_one_of(&[200, 503])
        .await;
    if page.status == 200 {
        assert!(page
            .header("content-type")
            .unwrap()
            .starts_with("text/html"));
        assert!(page.text.contains(r#"src="./page.js""#), "{}", page.text);
        let policy = page.header("content-security-policy").unwrap_or_default();
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        // The page is a host of the element.
        let start = app.raw(Method::GET, "/inbox/page.js").reply(200).await;
        assert!(start.text.contains("tidings-inbox"));
        let element = app
            .raw(Method::GET, "/inbox/tidings-inbox.js")
            .reply(200)
            .await;
        assert!(element
            .text
            .contains(r#"customElements.define("tidings-inbox""#));
        for (path, kind) in [
            ("/inbox/page.js", "text/javascript"),
            ("/inbox/tidings-inbox.js", "text/javascript"),
            ("/inbox/inbox.js", "text/javascript"),
            ("/inbox/model.js", "text/javascript"),
            ("/inbox/inbox.css", "text/css"),
            ("/inbox/core/tidings_core.js", "text/javascript"),
            ("/inbox/core/tidings_core_bg.wasm", "application/wasm"),
        ] {
            let asset = app.raw(Method::GET, path).reply(200).await;
            let content_type = asset.header("content-type").unwrap();
            assert!(content_type.starts_with(kind), "{path}: {content_type}");
            // A host page on another origin loads the modules with CORS.
            assert_eq!(asset.header("access-control-allow-origin"), Some("*"));
        }
    } else {
        // Built before scripts/build-wasm: the page says how to get it.
        assert!(page.text.contains("scripts/build-wasm"), "{}", page.text);
    }
    let (off, _off_db) = TestApp::spawn_with(AppOptions::env([("TIDINGS_INBOX_PAGE", "false")]))
        .await
        .unwrap();
    off.raw(Method::GET, "/inbox/").problem(404).await;
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_get_problem_bodies() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let problem = app.raw(Method::GET, "/no/such/route").problem(404).await;
    assert_eq!(problem["code"], "not_found");
    let problem = app.raw(Method::DELETE, "/healthz").problem(405).await;
    assert_eq!(problem["code"], "method_not_allowed");
}

#[tokio::test]
async fn oversized_bodies_get_413_whether_declared_or_streamed() {
    let opts = AppOptions {
        args: vec!["--max-body-bytes".into(), "1024".into()],
        ..Default::default()
    };
    let (app, _db) = TestApp::spawn_with(opts).await.unwrap();
    let big = vec![b'x'; 4096];
    app.raw(Method::POST, "/healthz")
        .body(None, big.clone())
        .problem(413)
        .await;
    // No Content-Length: a chunked stream must be cut off at the limit too.
    let stream = futures::stream::iter(
        big.chunks(512)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    app.raw(Method::POST, "/healthz")
        .body(None, reqwest::Body::wrap_stream(stream))
        .problem(413)
        .await;
}

#[test]
fn committed_openapi_document_matches_the_binary() {
    let out = Command::new(tidings_bin()).arg("openapi").output().unwrap();
    assert!(
        out.status.success(),
        "tidings openapi failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: regenerate it with `target/debug/tidings openapi > openapi/openapi.json`"
    );
}

/// Every operation has a short summary (a generated client's method title)
/// and a description, and every parameter says what it is: generated clients
/// turn these into their documentation.
#[test]
fn every_operation_and_parameter_is_described() {
    let doc = generated_document();
    let mut missing = Vec::new();
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for (method, op) in operations.as_object().expect("operations") {
            let name = format!("{} {path}", method.to_uppercase());
            let summary = op["summary"].as_str().unwrap_or_default();
            if summary.is_empty() || summary.len() > 60 || summary.contains('\n') {
                missing.push(format!(
                    "{name}: summary {summary:?} (one line, at most 60 bytes)"
                ));
            }
            if op["description"]
                .as_str()
                .unwrap_or_default()
                .trim()
                .is_empty()
            {
                missing.push(format!("{name}: no description"));
            }
            for parameter in op["parameters"].as_array().into_iter().flatten() {
                if parameter["description"]
                    .as_str()
                    .unwrap_or_default()
                    .is_empty()
                {
                    missing.push(format!(
                        "{name}: parameter {} undescribed",
                        parameter["name"]
                    ));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every request body has an example, and each example is a body the schema
/// accepts (generated docs and "try it" consoles start from it).
#[test]
fn every_request_body_has_an_example_its_schema_accepts() {
    let doc = generated_document();
    let mut wrong = Vec::new();
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for (method, op) in operations.as_object().expect("operations") {
            let Some(media) = op["requestBody"]["content"].get("application/json") else {
                continue;
            };
            let name = format!("{} {path}", method.to_uppercase());
            let schema = media["schema"]["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .unwrap_or_else(|| panic!("{name}: the body is not a component"));
            let example = media
                .get("example")
                .or_else(|| doc["components"]["schemas"][schema].get("example"));
            match example {
                None => wrong.push(format!("{name}: no example")),
                Some(example) => {
                    if let Err(why) = tidings_tests::openapi::check_component(schema, example) {
                        wrong.push(format!("{name}: {why}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The document `tidings openapi` prints, parsed.
fn generated_document() -> Value {
    let out = Command::new(tidings_bin()).arg("openapi").output().unwrap();
    assert!(out.status.success(), "tidings openapi failed");
    serde_json::from_slice(&out.stdout).expect("the document is JSON")
}

/// Linters (Redocly, Spectral) refuse an example that lacks a required
/// property, and generated documentation shows examples as real answers.
#[test]
fn every_schema_example_has_the_required_properties() {
    let doc = generated_document();
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        let Some(example) = schema.get("example") else {
            continue;
        };
        for required in schema["required"].as_array().into_iter().flatten() {
            let property = required.as_str().unwrap();
            assert!(
                example.get(property).is_some(),
                "the example of {name} lacks {property}: {example}"
            );
        }
    }
}

/// A generated client passes a stream ticket as a declared parameter, not by
/// writing the query string by hand.
#[test]
fn the_stream_declares_its_ticket_as_a_query_parameter() {
    let doc = generated_document();
    let parameters = doc["paths"]["/v1/feed/stream"]["get"]["parameters"]
        .as_array()
        .expect("the stream's parameters");
    let ticket = parameters
        .iter()
        .find(|p| p["name"] == "ticket")
        .expect("a ticket parameter");
    assert_eq!(ticket["in"], "query");
    assert_eq!(ticket["required"], false, "a user token works without it");
    assert_eq!(ticket["schema"]["type"], "string");
}

#[test]
fn help_explains_the_commands_and_configuration() {
    let out = Command::new(tidings_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for word in ["serve", "migrate", "openapi"] {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
    let out = Command::new(tidings_bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for word in [
        "DATABASE_URL",
        "TIDINGS_LISTEN",
        "TIDINGS_MAX_BODY_BYTES",
        "TIDINGS_DATA_DIR",
        "/var/lib/tidings",
    ] {
        assert!(help.contains(word), "serve --help lacks {word}: {help}");
    }
}

/// Without DATABASE_URL and without --data-dir the binary starts its own
/// PostgreSQL, serves, and on SIGTERM stops it: no postmaster is left running.
/// The working directory is a 0700 directory, as a clone under /root or in
/// `mktemp -d` is: run as root, PostgreSQL runs as an unprivileged account that
/// cannot reach `./.tidings`, so the data must move to a reachable per-checkout
/// directory, say so in the log, and be found there again by the next start.
/// (Not root: PostgreSQL runs as we do and the data stays in `./.tidings`.)
/// The server runs with autovacuum on and the migrations' per-table settings.
#[tokio::test]
async fn embedded_default_in_a_0700_directory_serves_is_found_again_and_stops_on_sigterm() {
    let checkout = private_tempdir("embedded-default");
    let as_root = owner_uid(&checkout) == 0;
    let start = || {
        TestApp::spawn_on(
            "",
            AppOptions {
                no_database_url: true,
                cwd: Some(checkout.clone()),
                ..Default::default()
            },
        )
    };

    let mut app = start().await.unwrap();
    // Not ready (503) would be explained by the server's log.
    let ready = app.public().ready().reply_one_of(&[200, 503]).await;
    assert_eq!(ready.status, 200, "log: {}", app.process.log());
    let root = data_root_from_log(&app.process.log(), as_root, &checkout);
    let pid_file = root.join("pg/postmaster.pid");
    let (postmaster, port) = postmaster_pid_and_port(&pid_file);
    assert!(process_alive(postmaster));
    if as_root {
        assert!(!root.starts_with(&checkout), "{}", root.display());
        assert_ne!(
            owner_uid(&root.join("pg")),
            0,
            "PostgreSQL's data is not root's"
        );
        let note = std::fs::read_to_string(checkout.join(".tidings/where-is-the-data.txt"))
            .expect("a note in ./.tidings says where the data went");
        assert!(note.contains(&root.display().to_string()), "{note}");
    }

    // Autovacuum runs, set explicitly, and migration 0008's table settings apply.
    let db_url = format!("postgres://postgres@127.0.0.1:{port}/tidings");
    let pool = sqlx::PgPool::connect(&db_url).await.unwrap();
    let (autovacuum, source): (String, String) =
        sqlx::query_as("SELECT setting, source FROM pg_settings WHERE name = 'autovacuum'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (autovacuum.as_str(), source.as_str()),
        ("on", "command line")
    );
    let track_counts: String = sqlx::query_scalar("SHOW track_counts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(track_counts, "on");
    let options: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = 'deliveries'::regclass",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        options.contains(&"autovacuum_vacuum_scale_factor=0.01".to_string()),
        "{options:?}"
    );
    let tenant = app.create_tenant().await;
    pool.close().await;

    let status = app.process.terminate().await.unwrap();
    assert!(status.success(), "tidings exited with {status}");
    wait_until_gone(postmaster).await;
    assert!(
        !pid_file.exists(),
        "postmaster.pid left behind: not a clean shutdown"
    );

    // The next start finds the same instance: same place, same data.
    let mut again = start().await.unwrap();
    let ready = again.public().ready().reply_one_of(&[200, 503]).await;
    assert_eq!(ready.status, 200, "log: {}", again.process.log());
    assert_eq!(
        data_root_from_log(&again.process.log(), as_root, &checkout),
        root
    );
    let (postmaster, port) = postmaster_pid_and_port(&pid_file);
    let pool = sqlx::PgPool::connect(&format!("postgres://postgres@127.0.0.1:{port}/tidings"))
        .await
        .unwrap();
    let kept: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1::uuid)")
            .bind(&tenant.id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(kept, "the tenant made by the first start is gone");
    pool.close().await;
    assert!(again.process.terminate().await.unwrap().success());
    wait_until_gone(postmaster).await;

    let _ = std::fs::remove_dir_all(&checkout);
    if as_root {
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// An explicit data directory (flag or environment) is used as given: when
/// PostgreSQL's account cannot reach it, start-up is refused with the directory
/// in the way named, and nothing is initialised anywhere else.
#[tokio::test]
async fn an_explicit_data_dir_postgres_cannot_reach_is_refused() {
    let parent = private_tempdir("explicit");
    if owner_uid(&parent) != 0 {
        // Not root: PostgreSQL runs as we do and reaches whatever we can.
        eprintln!("skipped: only root hands PostgreSQL to another account");
        let _ = std::fs::remove_dir_all(&parent);
        return;
    }
    let data_dir = parent.join("data");
    for (args, env) in [
        (vec!["--data-dir", data_dir.to_str().unwrap()], None),
        (vec![], Some(data_dir.to_str().unwrap())),
    ] {
        let mut cmd = Command::new(tidings_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(&args)
            .env_remove("DATABASE_URL")
            .env_remove("TIDINGS_DATA_DIR");
        if let Some(dir) = env {
            cmd.env("TIDINGS_DATA_DIR", dir);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{} is not searchable by other users, so PostgreSQL (running as",
                parent.display()
            )),
            "{stderr}"
        );
        assert!(stderr.contains("choose another --data-dir or set DATABASE_URL"));
        assert!(!data_dir.join("pg").exists(), "initialised anyway");
        assert!(!stderr.contains("keeps its data in"), "fell back: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&parent);
}

/// A new directory only its owner can enter (like /root or `mktemp -d`).
fn private_tempdir(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir =
        std::env::temp_dir().join(format!("tidings-{name}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir.canonicalize().unwrap()
}

fn owner_uid(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().uid()
}

/// Where the server keeps its data: the fallback its log names (as root), or
/// `./.tidings` (otherwise, when the log must name no fallback).
fn data_root_from_log(log: &str, as_root: bool, checkout: &Path) -> PathBuf {
    const SAID: &str = "the embedded PostgreSQL keeps its data in ";
    let named = log.lines().find_map(|line| {
        let rest = &line[line.find(SAID)? + SAID.len()..];
        Some(PathBuf::from(rest.split_whitespace().next()?))
    });
    if as_root {
        named.unwrap_or_else(|| panic!("the log does not say where the data went:\n{log}"))
    } else {
        assert_eq!(
            named, None,
            "fell back although PostgreSQL runs as us:\n{log}"
        );
        checkout.join(".tidings")
    }
}

/// Line 1 of postmaster.pid is the pid, line 4 the port.
fn postmaster_pid_and_port(pid_file: &Path) -> (i32, u16) {
    let text =
        std::fs::read_to_string(pid_file).unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    let lines: Vec<&str> = text.lines().collect();
    (
        lines[0].trim().parse().unwrap(),
        lines[3].trim().parse().unwrap(),
    )
}

async fn wait_until_gone(postmaster: i32) {
    for _ in 0..100 {
        if !process_alive(postmaster) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("PostgreSQL (pid {postmaster}) still running after SIGTERM");
}

fn process_alive(pid: i32) -> bool {
    // The postmaster is our grandchild, reaped by init once it exits; a zombie
    // waiting for that counts as gone.
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("State:\tZ")
}

#[tokio::test]
async fn malformed_json_unknown_fields_and_wrong_content_types_get_problem_bodies() {
    let (app, db) = TestApp::spawn().await.unwrap();
    let post = |body: &'static str, content_type: &'static str| {
        app.raw(Method::POST, "/v1/admin/tenants")
            .bearer(ADMIN_TOKEN)
            .body(Some(content_type), body)
    };
    for (body, content_type, status) in [
        ("{\"name\": ", "application/json", 400),
        ("[1, 2]", "application/json", 400),
        ("{\"name\": null}", "application/json", 400),
        ("{\"name\": {\"a\": 1}}", "application/json", 400),
        (
            "{\"name\": \"x\", \"surprise\": true}",
            "application/json",
            400,
        ),
        ("", "application/json", 400),
        ("name=x", "application/x-www-form-urlencoded", 415),
    ] {
        let problem = post(body, content_type).problem(status).await;
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}: {problem}"
        );
    }
    // Nothing was stored by any of them.
    let pool = db.pool().await.unwrap();
    assert_eq!(sql::count(&pool, sql::Rows::Tenants).await, 0);
}

/// The documented schema of a 200/201 JSON response of `method path`.
fn response_schema<'a>(spec: &'a Value, path: &str, method: &str) -> &'a Value {
    let responses = &spec["paths"][path][method]["responses"];
    let ok = ["200", "201"]
        .iter()
        .map(|s| &responses[*s])
        .find(|r| !r.is_null())
        .unwrap_or_else(|| panic!("{method} {path}: no 200/201 response documented"));
    let schema = &ok["content"]["application/json"]["schema"];
    let reference = schema["$ref"]
        .as_str()
        .unwrap_or_else(|| panic!("{method} {path}: response is not a $ref: {schema}"));
    let name = reference.trim_start_matches("#/components/schemas/");
    &spec["components"]["schemas"][name]
}

/// A server with a tenant, a token for its user `user-1`, and the OpenAPI
/// document it serves.
async fn served_spec_with_a_user() -> (TenantFixture, String, Value) {
    let f = TenantFixture::spawn().await;
    let token = f.token("user-1").await;
    let spec = f.app.public().openapi().expect(200).await;
    (f, token, spec)
}

#[tokio::test]
async fn fields_answered_as_null_are_documented_nullable() {
    let (f, token, spec) = served_spec_with_a_user().await;
    let (app, tenant) = (&f.app, &f.tenant);
    f.api().put_user("user-1", &json!({})).expect(200).await;
    // Empty feed, no watermarks, last pages, a user without contact data: each
    // answer carries nulls.
    let calls: [(&str, &str, &str, &str); 6] = [
        ("get", "/v1/feed", "/v1/feed", &token),
        ("post", "/v1/feed/seen", "/v1/feed/seen", &token),
        (
            "get",
            "/v1/teams/{team_id}/members",
            "/v1/teams/t/members",
            &tenant.api_key,
        ),
        ("get", "/v1/deliveries", "/v1/deliveries", &tenant.api_key),
        (
            "get",
            "/v1/users/{user_id}",
            "/v1/users/user-1",
            &tenant.api_key,
        ),
        (
            "get",
            "/v1/webhook-endpoints",
            "/v1/webhook-endpoints",
            &tenant.api_key,
        ),
    ];
    let mut nulls_seen = 0;
    for (method, template, path, credential) in calls {
        let call = match method {
            "get" => app.raw(Method::GET, path),
            _ => app.raw(Method::POST, path).json(&json!({})),
        };
        let body = call.bearer(credential).expect(200).await;
        let schema = response_schema(&spec, template, method);
        let Some(fields) = body.as_object() else {
            continue;
        };
        for (field, value) in fields {
            if value.is_null() {
                nulls_seen += 1;
                // A nullable value, or a nullable reference: a choice of it
                // and the null value (http::document).
                let property = &schema["properties"][field];
                let nullable = property["nullable"] == true
                    || property["anyOf"]
                        .as_array()
                        .is_some_and(|choices| choices.iter().any(|c| c["enum"] == json!([null])));
                assert!(
                    nullable,
                    "{method} {path} answers {field}: null, but its schema says {property}"
                );
            }
        }
    }
    assert!(
        nulls_seen >= 6,
        "the calls should answer nulls: {nulls_seen}"
    );
}

#[tokio::test]
async fn a_body_without_content_type_gets_a_documented_415_problem_on_every_operation() {
    let (f, token, spec) = served_spec_with_a_user().await;
    let (app, tenant) = (&f.app, &f.tenant);
    let mut checked = 0;
    for (template, operations) in spec["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            if operation["requestBody"].is_null() {
                continue;
            }
            let credential = match operation["security"][0].as_object() {
                Some(s) if s.contains_key("AdminAuth") => ADMIN_TOKEN,
                Some(s) if s.contains_key("UserTokenAuth") => token.as_str(),
                _ => tenant.api_key.as_str(),
            };
            let path = template
                .split('/')
                .map(|seg| {
                    if seg.starts_with('{') {
                        "00000000-0000-0000-0000-000000000000"
                    } else {
                        seg
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let method_name = method.to_uppercase();
            app.raw(method_name.parse().unwrap(), &path)
                .bearer(credential)
                .body(None, "{}")
                .problem(415)
                .await;
            let documented = &operation["responses"]["415"]["content"]["application/problem+json"];
            assert!(
                !documented.is_null(),
                "{method_name} {template} answers 415 but does not document it"
            );
            checked += 1;
        }
    }
    assert!(checked >= 9, "operations with a body: {checked}");
}

/// A pool of one connection to the test server, so that the next statement
/// gets the connection the previous one gave back.
async fn one_connection_pool() -> sqlx::PgPool {
    tidings_server::db::connect(
        &tidings_tests::admin_url(),
        1,
        Duration::from_secs(10),
        tidings_server::app::config::SessionTimeouts::default(),
    )
    .await
    .expect("connect")
}

/// Whether transaction-scoped advisory lock `key` is free, asked on `other`
/// (taken and, the statement being its own transaction, released at once).
async fn advisory_lock_is_free(other: &mut sqlx::PgConnection, key: i64) -> bool {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(key)
        .fetch_one(other)
        .await
        .unwrap()
}

async fn other_connection() -> sqlx::PgConnection {
    <sqlx::PgConnection as sqlx::Connection>::connect(&tidings_tests::admin_url())
        .await
        .expect("connect")
}

/// A transaction dropped uncommitted (a client gone, a timeout) has its
/// ROLLBACK sent when its connection goes back to the pool, so its locks are
/// released then, not whenever the pool next hands the connection out (an
/// idle pool would hold them forever).
#[tokio::test]
async fn a_transaction_dropped_uncommitted_releases_its_locks_when_its_connection_goes_back() {
    const KEY: i64 = 8_675_309;
    let pool = one_connection_pool().await;
    let mut other = other_connection().await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(KEY)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(
        !advisory_lock_is_free(&mut other, KEY).await,
        "the transaction does not hold the lock"
    );

    drop(tx);
    let other = tokio::sync::Mutex::new(other);
    let released = tidings_tests::eventually(Duration::from_secs(10), || async {
        advisory_lock_is_free(&mut *other.lock().await, KEY).await
    })
    .await;
    assert!(released, "the dropped transaction still holds its lock");
    pool.close().await;
}

/// A transaction's BEGIN dropped half way (the request's client went away, a
/// timeout fired) must not leave its connection inside a transaction that the
/// pool hands out again: every later statement on it would run uncommitted
/// and keep its locks (sqlx 0.8's begin alone is not cancel-safe;
/// `db::PrimaryPool::begin`). The begin is dropped at many points, from
/// before its first answer on; after each, a transaction-scoped lock the
/// pool's next statement takes must be gone when that statement ends.
#[tokio::test]
async fn a_begin_dropped_half_way_leaves_no_transaction_behind() {
    const KEY: i64 = 8_675_310;
    let pool = tidings_server::db::PrimaryPool::direct(one_connection_pool().await);
    let mut other = other_connection().await;
    for polls in 0..40 {
        // A statement first, so the begin below gets a connection without a
        // ping, once the connection is back in the pool (its return is a task).
        sqlx::query("SELECT 1").execute(&pool).await.unwrap();
        while pool.inner().num_idle() == 0 {
            tokio::task::yield_now().await;
        }
        // Polled once, the begin sends BEGIN and waits for its answer; polled
        // more often between yields, it gets further, up to done.
        let mut begin = Box::pin(pool.begin());
        for _ in 0..=polls {
            if futures::FutureExt::now_or_never(&mut begin).is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(begin);
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(KEY)
            .execute(&pool)
            .await
            .unwrap();
        assert!(
            advisory_lock_is_free(&mut other, KEY).await,
            "a begin dropped after {} polls left its connection in a transaction",
            polls + 1
        );
    }
    pool.close().await;
}
