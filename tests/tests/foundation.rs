//! The service's frame: health, readiness, docs, problem bodies, the OpenAPI
//! document, and the embedded PostgreSQL default.

use std::{path::Path, process::Command, time::Duration};

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
}

#[tokio::test]
async fn docs_and_openapi_json_are_served() {
    let (app, _db) = TestApp::spawn().await.unwrap();
    let docs = app.public().docs().expect(200).await;
    assert!(docs.to_lowercase().contains("swagger"));
    let spec = app.public().openapi().expect(200).await;
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(spec["paths"]["/readyz"].is_object());
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
    for word in ["DATABASE_URL", "TIDINGS_LISTEN", "TIDINGS_MAX_BODY_BYTES"] {
        assert!(help.contains(word), "serve --help lacks {word}: {help}");
    }
}

/// Without DATABASE_URL the binary starts its own PostgreSQL, serves, and on
/// SIGTERM stops it: no postmaster is left running.
#[tokio::test]
async fn embedded_postgres_starts_serves_and_stops_on_sigterm() {
    let dir = tempdir_in_target("embedded");
    let opts = AppOptions {
        args: vec!["--data-dir".into(), dir.display().to_string()],
        no_database_url: true,
        ..Default::default()
    };
    let mut app = TestApp::spawn_on("", opts).await.unwrap();
    // Not ready (503) would be explained by the server's log.
    let ready = app.public().ready().reply_one_of(&[200, 503]).await;
    assert_eq!(ready.status, 200, "log: {}", app.process.log());

    let pid_file = dir.join("pg/postmaster.pid");
    let postmaster: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_alive(postmaster));

    let status = app.process.terminate().await.unwrap();
    assert!(status.success(), "tidings exited with {status}");
    for _ in 0..100 {
        if !process_alive(postmaster) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !process_alive(postmaster),
        "PostgreSQL (pid {postmaster}) still running after SIGTERM"
    );
    assert!(
        !pid_file.exists(),
        "postmaster.pid left behind: not a clean shutdown"
    );

    // Data is kept between runs: a second start reuses the directory.
    let opts = AppOptions {
        args: vec!["--data-dir".into(), dir.display().to_string()],
        no_database_url: true,
        ..Default::default()
    };
    let mut again = TestApp::spawn_on("", opts).await.unwrap();
    again.public().ready().expect(200).await;
    assert!(again.process.terminate().await.unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

fn process_alive(pid: i32) -> bool {
    // `kill -0` succeeds for live processes; zombies have no /proc/<pid>/status "State: Z" check needed
    // because the postmaster is reparented and reaped by init.
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("State:\tZ")
}

/// A directory under target/ (not /tmp, whose sticky bit is fine, but target/ is
/// certainly reachable by the unprivileged account PostgreSQL runs as).
fn tempdir_in_target(name: &str) -> std::path::PathBuf {
    let dir = tidings_bin()
        .parent()
        .unwrap()
        .join("test-data")
        .join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    let schema = &ok["content"]["application/json; charset=utf-8"]["schema"];
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
                assert_eq!(
                    schema["properties"][field]["nullable"], true,
                    "{method} {path} answers {field}: null, but its schema says {}",
                    schema["properties"][field]
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
