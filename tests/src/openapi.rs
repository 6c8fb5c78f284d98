//! Every answer of every integration test checked against the committed
//! `openapi/openapi.json` (which `foundation.rs` proves is what the binary
//! generates), in the one request path, [`crate::TestApp::send`]:
//!
//! - the status is one the operation declares;
//! - the content type is one declared for that status (none when none is);
//! - a JSON body matches the declared schema.
//!
//! Requests that match no operation of the document (an unknown route, a
//! method a path does not have, `/docs`) are not checked: the document cannot
//! speak for them.
//!
//! OpenAPI 3.0 schemas are JSON Schema draft 4 plus `nullable`. `nullable:
//! true` becomes `"null"` among the `type`s of the same schema object; where
//! that object has no `type` (beside an `allOf`, a `$ref`), it means nothing —
//! OpenAPI 3.0.3 says so explicitly, and generated clients differ on it — so a
//! `null` there is reported, not allowed. Formats JSON Schema knows
//! (`date-time`, `uuid`, …) are asserted.
//!
//! `TIDINGS_TEST_OPENAPI` chooses what happens:
//! - `check` (the default): a mismatch fails the test, so drift between the
//!   document and the server's behaviour fails a test;
//! - `report=<file>`: each mismatch is appended to `<file>` as a JSON line and
//!   the test goes on (to list them all in one run);
//! - `off`: no check (to see what else a test does while the document is
//!   being changed).

use std::{collections::HashMap, io::Write, path::PathBuf, sync::OnceLock};

use reqwest::Method;
use serde_json::{json, Value};

use crate::client::Reply;

/// The document as a JSON Schema resource.
const DOCUMENT: &str = "urn:tidings:openapi";

enum Mode {
    Off,
    Check,
    Report(PathBuf),
}

fn mode() -> &'static Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    MODE.get_or_init(|| match std::env::var("TIDINGS_TEST_OPENAPI") {
        Ok(v) if v.starts_with("report=") => Mode::Report(PathBuf::from(&v["report=".len()..])),
        Ok(v) if v == "check" || v.is_empty() => Mode::Check,
        Ok(v) if v == "off" => Mode::Off,
        Err(_) => Mode::Check,
        Ok(v) => panic!("TIDINGS_TEST_OPENAPI={v:?}: expected check, report=<file> or off"),
    })
}

/// Checks `reply` to `method path` if the mode says so.
pub(crate) fn check(method: &Method, path: &str, reply: &Reply) {
    let mode = mode();
    if matches!(mode, Mode::Off) {
        return;
    }
    let spec = Spec::get();
    let Some(operation) = spec.operation(method, path) else {
        return;
    };
    let Err(problem) = spec.check(operation, reply) else {
        return;
    };
    match mode {
        Mode::Off => {}
        Mode::Check => panic!(
            "{} answered what {} does not document ({}; TIDINGS_TEST_OPENAPI=off skips this check):\n{problem}",
            reply.request, operation.id, "openapi/openapi.json"
        ),
        Mode::Report(file) => {
            let line = json!({
                "operation": operation.id,
                "request": reply.request,
                "status": reply.status,
                "mismatch": problem,
            });
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            writeln!(out, "{line}").expect("report line");
        }
    }
}

/// Whether `value` matches the component schema `name` of the document; `Err`
/// says how it does not. For what no HTTP answer carries whole, such as the
/// data of a stream event (the stream's answer is `text/event-stream`).
pub fn check_component(name: &str, value: &Value) -> Result<(), String> {
    let spec = Spec::get();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V4);
    compiler.enable_format_assertions();
    compiler
        .add_resource(DOCUMENT, spec.document.clone())
        .expect("openapi.json as a schema resource");
    let mut schemas = boon::Schemas::new();
    let location = format!("{DOCUMENT}#{}", pointer(&["components", "schemas", name]));
    let index = compiler
        .compile(&location, &mut schemas)
        .map_err(|e| format!("compiling {location}: {e:#}"))?;
    schemas
        .validate(value, index)
        .map_err(|e| format!("{e}\n{name}: {value}"))
}

/// The schema the document names for the stream's SSE event `name`
/// (`x-sse-events` of `GET /v1/feed/stream`).
pub fn sse_event_schema(name: &str) -> Result<String, String> {
    let events = &Spec::get().document["paths"]["/v1/feed/stream"]["get"]["responses"]["200"]
        ["content"]["text/event-stream"]["x-sse-events"];
    events[name]["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .map(str::to_owned)
        .ok_or_else(|| format!("the document names no schema for the SSE event {name:?}"))
}

/// One operation of the document: where its path parameters are.
struct Operation {
    id: String,
    method: String,
    template: String,
    /// `None` for a `{parameter}` segment.
    segments: Vec<Option<String>>,
}

struct Spec {
    document: Value,
    operations: Vec<Operation>,
    /// Every response schema of the document, compiled.
    schemas: boon::Schemas,
    /// Schema location → its index in `schemas`.
    compiled: HashMap<String, boon::SchemaIndex>,
}

impl Spec {
    fn get() -> &'static Spec {
        static SPEC: OnceLock<Spec> = OnceLock::new();
        SPEC.get_or_init(Spec::load)
    }

    fn load() -> Spec {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut document: Value = serde_json::from_str(&text).expect("openapi.json is JSON");
        nullable_to_json_schema(&mut document);
        let mut operations = Vec::new();
        for (template, methods) in document["paths"].as_object().expect("paths") {
            for (method, operation) in methods.as_object().expect("path item") {
                operations.push(Operation {
                    id: operation["operationId"]
                        .as_str()
                        .unwrap_or(template)
                        .to_owned(),
                    method: method.to_ascii_uppercase(),
                    template: template.clone(),
                    segments: template
                        .split('/')
                        .map(|s| (!s.starts_with('{')).then(|| s.to_owned()))
                        .collect(),
                });
            }
        }
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V4);
        compiler.enable_format_assertions();
        compiler
            .add_resource(DOCUMENT, document.clone())
            .expect("openapi.json as a schema resource");
        let mut schemas = boon::Schemas::new();
        let mut compiled = HashMap::new();
        for op in &operations {
            let method = op.method.to_ascii_lowercase();
            let responses = &document["paths"][&op.template][&method]["responses"];
            for (status, response) in responses.as_object().into_iter().flatten() {
                for (media, content) in response["content"].as_object().into_iter().flatten() {
                    if content["schema"].is_null() {
                        continue;
                    }
                    let location = schema_location(op, status, media);
                    let index = compiler
                        .compile(&location, &mut schemas)
                        .unwrap_or_else(|e| panic!("compiling {location}: {e:#}"));
                    compiled.insert(location, index);
                }
            }
        }
        Spec {
            document,
            operations,
            schemas,
            compiled,
        }
    }

    /// The operation `method path` calls: the one whose literal segments all
    /// match, preferring more literal segments (`/v1/feed/counts` over a
    /// parameter in that place).
    fn operation(&self, method: &Method, path: &str) -> Option<&Operation> {
        let path = path.split('?').next().unwrap_or(path);
        let segments: Vec<&str> = path.split('/').collect();
        self.operations
            .iter()
            .filter(|op| op.method == method.as_str() && op.segments.len() == segments.len())
            .filter(|op| {
                op.segments
                    .iter()
                    .zip(&segments)
                    .all(|(want, got)| match want {
                        Some(literal) => literal == got,
                        None => !got.is_empty(),
                    })
            })
            .max_by_key(|op| op.segments.iter().filter(|s| s.is_some()).count())
    }

    fn check(&self, operation: &Operation, reply: &Reply) -> Result<(), String> {
        let responses = &self.document["paths"][&operation.template]
            [operation.method.to_ascii_lowercase()]["responses"];
        let status = reply.status.to_string();
        let (declared_as, response) = match (&responses[&status], &responses["default"]) {
            (r, _) if !r.is_null() => (status.as_str(), r),
            (_, d) if !d.is_null() => ("default", d),
            _ => {
                let declared: Vec<&String> = responses
                    .as_object()
                    .map(|r| r.keys().collect())
                    .unwrap_or_default();
                return Err(format!(
                    "status {status} is not declared (declared: {declared:?}); body: {}",
                    reply.text
                ));
            }
        };
        let content = response["content"].as_object();
        let Some(content) = content.filter(|c| !c.is_empty()) else {
            return if reply.text.is_empty() {
                Ok(())
            } else {
                Err(format!("{status} declares no body, got: {}", reply.text))
            };
        };
        let content_type = reply.header("content-type").unwrap_or("");
        let essence = |media: &str| {
            media
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        };
        let Some(media) = content
            .keys()
            .find(|m| *m == content_type)
            .or_else(|| content.keys().find(|m| essence(m) == essence(content_type)))
        else {
            return Err(format!(
                "content type {content_type:?} is not declared for {status} (declared: {:?})",
                content.keys().collect::<Vec<_>>()
            ));
        };
        if content[media]["schema"].is_null() {
            return Ok(());
        }
        let body: Value = serde_json::from_str(&reply.text)
            .map_err(|e| format!("{media} body is not JSON ({e}): {}", reply.text))?;
        let schema = self.compiled[&schema_location(operation, declared_as, media)];
        self.schemas
            .validate(&body, schema)
            .map_err(|e| format!("{e}\nbody: {body}"))
    }
}

/// Where the schema of `operation`'s `status` answer as `media` is.
fn schema_location(operation: &Operation, status: &str, media: &str) -> String {
    format!(
        "{DOCUMENT}#{}",
        pointer(&[
            "paths",
            &operation.template,
            &operation.method.to_ascii_lowercase(),
            "responses",
            status,
            "content",
            media,
            "schema",
        ])
    )
}

/// A JSON pointer to `tokens`, written for a URI fragment.
fn pointer(tokens: &[&str]) -> String {
    let mut out = String::new();
    for token in tokens {
        out.push('/');
        for c in token.chars() {
            match c {
                '~' => out.push_str("~0"),
                '/' => out.push_str("~1"),
                c if c.is_ascii_alphanumeric() || "-._{}".contains(c) => out.push(c),
                c => {
                    let mut bytes = [0; 4];
                    for b in c.encode_utf8(&mut bytes).bytes() {
                        out.push_str(&format!("%{b:02X}"));
                    }
                }
            }
        }
    }
    out
}

/// `nullable: true` beside a `type` becomes `"null"` among the types; without
/// a `type` it is left alone, meaning nothing (OpenAPI 3.0.3).
fn nullable_to_json_schema(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.get("nullable") == Some(&Value::Bool(true)) {
                if let Some(Value::String(kind)) = object.get("type") {
                    let kind = kind.clone();
                    object.insert("type".into(), json!([kind, "null"]));
                }
            }
            object.values_mut().for_each(nullable_to_json_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(nullable_to_json_schema),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, content_type: &str, text: &str) -> Reply {
        let mut headers = reqwest::header::HeaderMap::new();
        if !content_type.is_empty() {
            headers.insert("content-type", content_type.parse().unwrap());
        }
        Reply {
            request: "test".into(),
            status,
            headers,
            text: text.into(),
        }
    }

    fn verdict(method: Method, path: &str, reply: &Reply) -> Result<(), String> {
        let spec = Spec::get();
        let operation = spec.operation(&method, path).expect("an operation");
        spec.check(operation, reply)
    }

    const JSON: &str = "application/json; charset=utf-8";

    #[test]
    fn paths_find_their_operation_and_literal_segments_win() {
        let spec = Spec::get();
        let id = |m: Method, p: &str| spec.operation(&m, p).map(|o| o.id.as_str());
        assert_eq!(id(Method::GET, "/v1/feed/counts"), Some("feed.counts"));
        assert_eq!(
            id(Method::POST, "/v1/feed/items/abc/read?x=1"),
            Some("feed.items.mark_read")
        );
        assert_eq!(
            id(Method::PUT, "/v1/teams/te%01am/members/u"),
            Some("teams.members.put")
        );
        assert_eq!(id(Method::DELETE, "/healthz"), None);
        assert_eq!(id(Method::GET, "/no/such/route"), None);
    }

    #[test]
    fn answers_are_held_to_status_content_type_and_schema() {
        let counts = r#"{"unread": 1, "unseen": 0, "capped": false}"#;
        assert_eq!(
            verdict(Method::GET, "/v1/feed/counts", &reply(200, JSON, counts)),
            Ok(())
        );
        let undeclared = verdict(Method::GET, "/v1/feed/counts", &reply(201, JSON, counts));
        assert!(undeclared.unwrap_err().contains("not declared"));
        let wrong_type = verdict(
            Method::GET,
            "/v1/feed/counts",
            &reply(200, "text/plain", counts),
        );
        assert!(wrong_type.unwrap_err().contains("content type"));
        let missing = verdict(
            Method::GET,
            "/v1/feed/counts",
            &reply(200, JSON, r#"{"unread": 1}"#),
        );
        assert!(missing.is_err());
        let wrong_field = verdict(
            Method::GET,
            "/v1/feed/counts",
            &reply(
                200,
                JSON,
                r#"{"unread": "1", "unseen": 0, "capped": false}"#,
            ),
        );
        assert!(wrong_field.is_err());
        assert!(verdict(Method::DELETE, "/v1/users/u", &reply(204, "", "unexpected")).is_err());
        assert_eq!(
            verdict(Method::DELETE, "/v1/users/u", &reply(204, "", "")),
            Ok(())
        );
    }

    /// The client keeps one method per operation: each names its
    /// operation id in its doc comment.
    #[test]
    fn the_client_has_a_method_for_every_operation() {
        let client = include_str!("client.rs");
        let missing: Vec<&str> = Spec::get()
            .operations
            .iter()
            .map(|op| op.id.as_str())
            .filter(|id| !client.contains(&format!("/// `{id}`")))
            .collect();
        assert!(missing.is_empty(), "tests/src/client.rs lacks {missing:?}");
    }

    #[test]
    fn nullable_admits_null_only_beside_a_type() {
        let mut schema = json!({
            "properties": {
                "typed": {"type": "string", "nullable": true},
                "composed": {"allOf": [{"type": "object"}], "nullable": true}
            }
        });
        nullable_to_json_schema(&mut schema);
        assert_eq!(
            schema["properties"]["typed"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            schema["properties"]["composed"],
            json!({"allOf": [{"type": "object"}], "nullable": true})
        );
    }
}
