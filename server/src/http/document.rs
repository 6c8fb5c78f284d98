//! The published OpenAPI document: poem-openapi's output, finished so that
//! generated clients and strict validators take it as it is. poem-openapi
//! offers no hook into its registry, so the generated JSON is rewritten here,
//! key order kept (the committed document stays readable, its diffs small).
//! Each step says what poem generates and why it is not enough:
//!
//! - **Media types.** poem writes `application/json; charset=utf-8`; helper
//!   types of generated clients (openapi-typescript's `SuccessResponseJSON`)
//!   look for plain `application/json`. The server still sends the charset.
//! - **Always-present fields.** poem documents an `Option<T>` property as not
//!   required, yet answers `None` as `null`. In the schemas only responses use,
//!   every property is `required` (nullable where it may be `null`), except the
//!   few the server omits ([`OMITTED_WHEN_ABSENT`]). Optional request
//!   properties stay optional and accept `null`, as poem does.
//! - **Null beside a reference.** OpenAPI 3.0 ignores siblings of `$ref`, and
//!   `nullable` beside a bare `allOf` has no `type` to apply to (3.0.3 says
//!   so), so strict validators reject the `null` the server sends. Such a
//!   property becomes `anyOf: [<ref>, <the null value>]`.
//! - **Payloads** (`serde_json::Value`, documented as `{}`, anything) are JSON
//!   objects (`payload::Payload` refuses anything else), and so are the
//!   sample payloads templates are tried on ([`SAMPLE_PAYLOADS`]).
//! - **Limits** the server enforces become schema keywords ([`limits`]), from
//!   the same constants the checks use.
//! - **Headers** poem cannot declare on a shared error type: `Retry-After` on
//!   409, 429 and 503, `WWW-Authenticate` on 401; the replay header's one
//!   value; `RateLimit` and `RateLimit-Policy` on the answers of operations
//!   with rate limits (`limits::RequestClass`), which alone keep the 429.
//! - **Problem statuses per operation.** The shared error type documents every
//!   status on every operation; each keeps those it can answer
//!   ([`ProblemStatuses`]): no 413 on a GET, no 404 on a list.
//! - `servers`, a description for every response, `security: []` on the
//!   operations anyone may call.

use std::fmt;

use serde::{
    de::{MapAccess, SeqAccess, Visitor},
    ser::{SerializeMap, SerializeSeq},
    Deserialize, Deserializer, Serialize, Serializer,
};
use serde_json::json;

use crate::{alerts::idempotency, alerts::request::MAX_SUBJECT_BYTES, feed::events::MAX_BATCH};

/// The generated document as served by `/openapi.json` and `/docs`, and
/// printed by `tidings openapi`.
pub fn publish(generated: &str) -> Result<String, serde_json::Error> {
    let mut doc: Json = serde_json::from_str(generated)?;
    doc.set("openapi", json!("3.0.3"));
    doc.set(
        "servers",
        json!([{
            "url": "/",
            "description": "The server that serves this document (`tidings serve` listens on 127.0.0.1:8080 by default)."
        }]),
    );
    rename_media_types(&mut doc);
    let response_only = response_only_schemas(&doc);
    if let Some(Json::Object(schemas)) =
        doc.get_mut("components").and_then(|c| c.get_mut("schemas"))
    {
        for (name, schema) in schemas.iter_mut() {
            let always_present = response_only.contains(name);
            finish_schema(name, schema, always_present);
        }
    }
    finish_operations(&mut doc);
    add_request_examples(&mut doc);
    declare_sse_events(&mut doc);
    declare_ratelimit_components(&mut doc);
    limits::apply(&mut doc);
    serde_json::to_string_pretty(&doc)
}

/// Properties of response schemas the server leaves out instead of sending
/// `null` (`#[oai(skip_serializing_if_is_none)]`): the one place that knows.
/// A test answer that lacks any other property fails the OpenAPI check of
/// the test harness.
const OMITTED_WHEN_ABSENT: &[(&str, &str)] = &[
    ("Problem", "detail"),
    ("FeedItemOut", "subject"),
    ("MarksEventOut", "consistency_token"),
    ("HealthOut", "check"),
    ("HealthOut", "standbys"),
    ("HealthOut", "reads"),
    ("StandbyOut", "lag_ms"),
    ("StandbyOut", "horizon_age_ms"),
    ("StandbyOut", "error"),
];

const JSON_MEDIA: &str = "application/json";
const GENERATED_JSON_MEDIA: &str = "application/json; charset=utf-8";

fn rename_media_types(value: &mut Json) {
    match value {
        Json::Object(entries) => {
            for (key, child) in entries.iter_mut() {
                if key == "content" {
                    if let Json::Object(media) = child {
                        for (name, _) in media.iter_mut() {
                            if name == GENERATED_JSON_MEDIA {
                                *name = JSON_MEDIA.into();
                            }
                        }
                    }
                }
                rename_media_types(child);
            }
        }
        Json::Array(items) => items.iter_mut().for_each(rename_media_types),
        Json::Scalar(_) => {}
    }
}

/// Component schemas reachable from a response and from no request body or
/// parameter.
fn response_only_schemas(doc: &Json) -> Vec<String> {
    let schemas = doc.get("components").and_then(|c| c.get("schemas"));
    let mut from_requests = Vec::new();
    let mut from_responses = Vec::new();
    if let Some(Json::Object(paths)) = doc.get("paths") {
        for (_, item) in paths {
            let Json::Object(operations) = item else {
                continue;
            };
            for (_, operation) in operations {
                for key in ["parameters", "requestBody"] {
                    if let Some(part) = operation.get(key) {
                        collect_refs(part, schemas, &mut from_requests);
                    }
                }
                if let Some(responses) = operation.get("responses") {
                    collect_refs(responses, schemas, &mut from_responses);
                }
            }
        }
    }
    from_responses.retain(|name| !from_requests.contains(name));
    from_responses
}

/// Every component schema `value` refers to, transitively.
fn collect_refs(value: &Json, schemas: Option<&Json>, found: &mut Vec<String>) {
    match value {
        Json::Object(entries) => {
            for (key, child) in entries {
                if let (true, Json::Scalar(serde_json::Value::String(target))) =
                    (key == "$ref", child)
                {
                    let Some(name) = target.strip_prefix("#/components/schemas/") else {
                        continue;
                    };
                    if found.iter().any(|f| f == name) {
                        continue;
                    }
                    found.push(name.to_owned());
                    if let Some(schema) = schemas.and_then(|s| s.get(name)) {
                        collect_refs(schema, schemas, found);
                    }
                } else {
                    collect_refs(child, schemas, found);
                }
            }
        }
        Json::Array(items) => items.iter().for_each(|i| collect_refs(i, schemas, found)),
        Json::Scalar(_) => {}
    }
}

fn string_list(value: Option<&Json>) -> Vec<String> {
    match value {
        Some(Json::Array(items)) => items
            .iter()
            .filter_map(|n| match n {
                Json::Scalar(serde_json::Value::String(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn finish_schema(name: &str, schema: &mut Json, always_present: bool) {
    let mut required = string_list(schema.get("required"));
    let Some(Json::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    let mut now_required = Vec::new();
    for (property, value) in properties.iter_mut() {
        let omitted = OMITTED_WHEN_ABSENT.contains(&(name, property.as_str()));
        if property == "payload" || SAMPLE_PAYLOADS.contains(&(name, property.as_str())) {
            value.set("type", json!("object"));
            value.set("additionalProperties", json!(true));
        }
        if required.contains(property) {
            continue;
        }
        if !omitted {
            make_nullable(value);
        }
        if always_present && !omitted {
            now_required.push(property.clone());
        }
    }
    if now_required.is_empty() {
        return;
    }
    // Keep the order of the properties in `required`.
    let order: Vec<String> = properties.iter().map(|(k, _)| k.clone()).collect();
    required.extend(now_required);
    required.sort_by_key(|r| order.iter().position(|o| o == r));
    schema.set("required", json!(required));
}

/// Properties that hold a sample payload: JSON objects, as `payload` is.
const SAMPLE_PAYLOADS: &[(&str, &str)] = &[("TemplateIn", "sample"), ("PreviewIn", "data")];

/// The value `null`, as OpenAPI 3.0 can say it: a nullable schema whose only
/// value is `null` (3.0.3: `nullable` with an `enum` must list `null`).
fn null_only() -> serde_json::Value {
    json!({"type": "object", "nullable": true, "enum": [null]})
}

fn make_nullable(property: &mut Json) {
    let Json::Object(entries) = property else {
        return;
    };
    if entries.iter().any(|(k, _)| k == "nullable") {
        return;
    }
    // poem writes a reference either bare or, when the property has a
    // description, as `allOf: [{$ref}, {description}]`.
    let reference = match entries.iter().position(|(k, _)| k == "$ref") {
        Some(at) => Some(entries.remove(at).1),
        None => take_described_reference(entries),
    };
    if let Some(reference) = reference {
        let branches = Json::Array(vec![
            Json::Object(vec![("$ref".into(), reference)]),
            Json::from(null_only()),
        ]);
        entries.push(("anyOf".into(), branches));
        return;
    }
    entries.push((
        "nullable".into(),
        Json::Scalar(serde_json::Value::Bool(true)),
    ));
}

/// The `$ref` of `allOf: [{$ref}, {description}]`, removing the `allOf`.
fn take_described_reference(entries: &mut Vec<(String, Json)>) -> Option<Json> {
    let at = entries.iter().position(|(k, _)| k == "allOf")?;
    let Json::Array(parts) = &entries[at].1 else {
        return None;
    };
    let reference = parts.first()?.get("$ref")?.clone();
    let rest_is_description = parts[1..].iter().all(|p| match p {
        Json::Object(e) => e.iter().all(|(k, _)| k == "description"),
        _ => false,
    });
    if !rest_is_description {
        return None;
    }
    entries.remove(at);
    Some(reference)
}

fn finish_operations(doc: &mut Json) {
    let Some(Json::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Json::Object(operations) = item else {
            continue;
        };
        for (method, operation) in operations.iter_mut() {
            if operation.get("security").is_none() {
                // Anyone may call it; said explicitly so linters and
                // generators do not assume a default scheme.
                operation.set("security", json!([]));
            }
            let metered = is_metered(path, method, operation);
            let can_answer = ProblemStatuses::of(operation, metered);
            let Some(Json::Object(responses)) = operation.get_mut("responses") else {
                continue;
            };
            responses.retain(|(status, _)| can_answer.keeps(status));
            for (status, response) in responses.iter_mut() {
                if status == "409" {
                    if let Some(description) = can_answer.conflict {
                        response.set("description", json!(description));
                    }
                }
                finish_response(status, response, can_answer.conflict_retries);
                if metered && (status.starts_with('2') || status == "429") {
                    declare_ratelimit_headers(response);
                }
            }
        }
    }
}

/// Operations that answer 404 for an identifier in their path that names
/// nothing in the tenant. The others with path parameters create what their
/// path names (`PUT` upserts) or answer an empty result.
const ANSWERS_NOT_FOUND: &[&str] = &[
    "admin.key.create",
    "admin.key.revoke",
    "admin.tenant.rate_limits.set",
    "admin.tenant.rate_limits.get",
    "admin.tenant.retention",
    "teams.members.delete",
    "feed.items.mark_read",
    "alerts.get",
    "deliveries.retry",
    "users.get",
    "users.delete",
    "webhook-endpoints.get",
    "webhook-endpoints.delete",
    "webhook-endpoints.rotate-secret",
    "categories.get",
    "templates.get",
    "templates.delete",
    "categories.digest_template.put",
    "categories.digest_template.get",
    "categories.digest_template.delete",
];

/// Operations without a body that still answer 422: a path or query value
/// that parses but breaks a rule (a channel without templates, a locale) or
/// a limit of the tenant's data.
const UNPROCESSABLE_WITHOUT_BODY: &[&str] = &[
    "teams.members.put",
    "feed.items.mark_read",
    "templates.get",
    "templates.delete",
];

/// The operations that answer 409, each with why, and whether the conflict
/// ends by itself (then `Retry-After` says when).
const CONFLICTS: &[(&str, &str, bool)] = &[
    (
        "alerts.create",
        "A request with the same Idempotency-Key is still in flight, or another alert of \
         the same entity is being written (`entity_busy`); retry after Retry-After.",
        true,
    ),
    (
        "deliveries.retry",
        "The delivery is being attempted right now (retry after Retry-After), or it is \
         in a final state that cannot be retried (`delivery_not_retryable`, no Retry-After).",
        true,
    ),
    (
        "categories.put",
        "One of the event types already belongs to another category \
         (`event_type_in_another_category`); move it out of that one first.",
        false,
    ),
];

/// The problem statuses one operation can really answer. All operations
/// share one error type, for which poem-openapi documents every status; an
/// operation keeps those its request can provoke: 400 with parameters or a
/// body; 408, 413, 415 and 422 with a body; 401 and 403 with a credential;
/// 404, 409 and the body-less 422s where its handler answers them (the
/// lists above, by operation id); 429 where it is metered; 503 always (the
/// database may be unreachable). Statuses that are not problems (2xx) stay.
/// The test harness checks every answer against the document, so a status
/// pruned here that an operation does answer fails the tests that provoke it.
struct ProblemStatuses {
    id: String,
    body: bool,
    parameters: bool,
    secured: bool,
    metered: bool,
    /// The 409's description, where the operation answers 409.
    conflict: Option<&'static str>,
    /// Whether that 409 comes with Retry-After.
    conflict_retries: bool,
}

impl ProblemStatuses {
    fn of(operation: &Json, metered: bool) -> Self {
        let id = match operation.get("operationId") {
            Some(Json::Scalar(serde_json::Value::String(id))) => id.clone(),
            _ => String::new(),
        };
        let non_empty =
            |key: &str| matches!(operation.get(key), Some(Json::Array(items)) if !items.is_empty());
        let conflict = CONFLICTS.iter().find(|(op, _, _)| *op == id);
        ProblemStatuses {
            body: operation.get("requestBody").is_some(),
            parameters: non_empty("parameters"),
            secured: matches!(operation.get("security"), Some(Json::Array(schemes))
                if schemes.iter().any(|s| matches!(s, Json::Object(e) if !e.is_empty()))),
            metered,
            conflict: conflict.map(|(_, description, _)| *description),
            conflict_retries: conflict.is_some_and(|(_, _, retries)| *retries),
            id,
        }
    }

    fn keeps(&self, status: &str) -> bool {
        let listed = |list: &[&str]| list.contains(&self.id.as_str());
        match status {
            "400" => self.body || self.parameters,
            "401" | "403" => self.secured,
            "404" => listed(ANSWERS_NOT_FOUND),
            "408" | "413" | "415" => self.body,
            "409" => self.conflict.is_some(),
            "422" => self.body || listed(UNPROCESSABLE_WITHOUT_BODY),
            "429" => self.metered,
            _ => true,
        }
    }
}

/// An example body for each operation that takes one, by operation id
/// (poem-openapi takes examples only from `Example` impls of the types, which
/// most request types have no use for). A test checks each against its
/// schema, and that every operation with a body has one.
fn request_example(operation_id: &str) -> Option<serde_json::Value> {
    let settings = json!({"settings": [
        {"scope": "category", "key": "billing", "channel": "email", "setting": "off"},
        {"scope": "global", "channel": "webhook", "setting": "on"}
    ]});
    let delivery = json!({"email": {"delay": "15m", "unless": "read"}});
    Some(match operation_id {
        "admin.tenant.create" => json!({"name": "Acme"}),
        "admin.tenant.rate_limits.set" => json!({
            "writes": {"per_second": 500, "burst": 1000},
            "user_reads": {"per_second": 20, "burst": 60},
            "open_streams": 5000
        }),
        "admin.tenant.retention" => json!({"feed_retention_secs": 7_776_000}),
        "user-token.create" => json!({"user_id": "alice", "ttl_seconds": 3600}),
        "events.create_batch" => json!({"events": [
            {"team_id": "design", "type": "comment.created", "actor_id": "alice",
             "object_id": "doc-42", "payload": {"text": "Looks good to me"}, "idempotency_key": "comment-9f2c"},
            {"team_id": "design", "type": "doc.shared", "actor_id": "bob",
             "object_id": "doc-42", "payload": {"with": "ops"}}
        ]}),
        "alerts.create" => json!({
            "event_type": "invoice.overdue",
            "entity_id": "invoice-42",
            "recipients": ["alice"],
            "channels": ["in_app", "email"],
            "subject": "Invoice 42 is overdue",
            "payload": {"invoice": 42, "amount": 120},
            "category": "billing",
            "delivery": delivery
        }),
        "users.put" => json!({
            "email": "alice@example.com",
            "display_name": "Alice",
            "locale": "fr-BE",
            "timezone": "Europe/Brussels",
            "quiet_hours": {"start": "22:00", "end": "07:00"}
        }),
        "webhook-endpoints.create" => json!({
            "url": "https://hooks.example.com/tidings",
            "description": "Billing alerts to the ops tool",
            "event_types": ["invoice.overdue"]
        }),
        "categories.put" => json!({
            "label": "Billing",
            "critical": false,
            "defaults": {"email": "on", "webhook": "off"},
            "event_types": ["invoice.overdue", "invoice.paid"]
        }),
        "preferences.patch" | "preferences.put" | "me.preferences.patch" => settings,
        "preference_defaults.put" => json!({"settings": [
            {"scope": "category", "key": "billing", "channel": "webhook", "setting": "off", "locked": true}
        ]}),
        "templates.put" => json!({
            "subject": "Invoice {{ payload.invoice }} is overdue",
            "html": "<p>Hello {{ recipient.display_name }}, {{ payload.amount | number }} € are due.</p>\
                     <a href=\"{{ unsubscribe_url }}\">Unsubscribe</a>",
            "sample": {"invoice": 42, "amount": 120}
        }),
        "categories.digest_template.put" => json!({
            "subject": "{{ total }} new comments",
            "html": "<ul>{% for item in items %}<li>{{ item.subject }}</li>{% endfor %}</ul>\
                     {% if more %}<p>and {{ more }} more</p>{% endif %}"
        }),
        "templates.preview" => json!({
            "event_type": "invoice.overdue",
            "channel": "email",
            "locale": "fr-BE",
            "data": {"invoice": 42, "amount": 120},
            "recipient": {"id": "alice", "display_name": "Alice", "timezone": "Europe/Brussels"}
        }),
        "template-settings.put" => json!({"default_locale": "en"}),
        "event-types.delivery.put" => delivery,
        _ => return None,
    })
}

/// The stream's events by SSE name, each with its data's schema, as
/// `x-sse-events` on its `text/event-stream` answer (OpenAPI 3.0 has no
/// word for SSE events; the `oneOf` of their data cannot say which is which).
fn declare_sse_events(doc: &mut Json) {
    let media = doc
        .get_mut("paths")
        .and_then(|p| p.get_mut("/v1/feed/stream"))
        .and_then(|p| p.get_mut("get"))
        .and_then(|o| o.get_mut("responses"))
        .and_then(|r| r.get_mut("200"))
        .and_then(|r| r.get_mut("content"))
        .and_then(|c| c.get_mut("text/event-stream"));
    if let Some(media) = media {
        let events: serde_json::Map<String, serde_json::Value> = crate::http::stream::SSE_EVENTS
            .iter()
            .map(|(name, schema)| {
                (
                    (*name).to_owned(),
                    json!({"$ref": format!("#/components/schemas/{schema}")}),
                )
            })
            .collect();
        media.set("x-sse-events", serde_json::Value::Object(events));
    }
}

fn add_request_examples(doc: &mut Json) {
    let Some(Json::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for (_, item) in paths.iter_mut() {
        let Json::Object(operations) = item else {
            continue;
        };
        for (_, operation) in operations.iter_mut() {
            let example = match operation.get("operationId") {
                Some(Json::Scalar(serde_json::Value::String(id))) => request_example(id),
                _ => None,
            };
            let media = operation
                .get_mut("requestBody")
                .and_then(|body| body.get_mut("content"))
                .and_then(|content| content.get_mut(JSON_MEDIA));
            if let (Some(example), Some(media)) = (example, media) {
                if media.get("example").is_none() {
                    media.set("example", example);
                }
            }
        }
    }
}

/// Whether an operation draws on rate-limit buckets: the class the server
/// gives it (`limits::RequestClass`), from its credential and route. (Its
/// path uses `{x}` where the router's template has `:x`; the classes name
/// routes without parameters.)
fn is_metered(path: &str, method: &str, operation: &Json) -> bool {
    let schemes: Vec<String> = match operation.get("security") {
        Some(Json::Array(items)) => items
            .iter()
            .filter_map(|item| match item {
                Json::Object(entries) => Some(entries.iter().map(|(k, _)| k.clone())),
                _ => None,
            })
            .flatten()
            .collect(),
        _ => Vec::new(),
    };
    let user = schemes
        .iter()
        .any(|s| s == "UserTokenAuth" || s == "StreamTicketAuth");
    let tenant = user || schemes.iter().any(|s| s == "ApiKeyAuth");
    tenant
        && crate::tenants::limits::RequestClass::of(&method.to_ascii_uppercase(), path, user)
            != crate::tenants::limits::RequestClass::Unmetered
}

/// The two headers, once, under `components/headers` (each metered answer
/// refers to them).
fn declare_ratelimit_components(doc: &mut Json) {
    let header = |description: &str| json!({"description": description, "required": false, "schema": {"type": "string"}});
    let Some(components) = doc.get_mut("components") else {
        return;
    };
    components.set(
        "headers",
        json!({
            "RateLimitPolicy": header(
                "The rate limits this request counted against (IETF httpapi ratelimit-headers \
                 draft), one per bucket, e.g. `\"user_reads\";q=60;w=3, \"reads\";q=2000;w=2`: \
                 `q` tokens at most, refilled in `w` seconds."
            ),
            "RateLimit": header(
                "Each bucket's state after this request, e.g. `\"user_reads\";r=59;t=1`: `r` \
                 tokens left, full again in `t` seconds."
            ),
        }),
    );
}

fn declare_ratelimit_headers(response: &mut Json) {
    let mut map = match response.get("headers") {
        Some(Json::Object(existing)) => existing.clone(),
        _ => Vec::new(),
    };
    for (name, component) in [
        ("RateLimit-Policy", "RateLimitPolicy"),
        ("RateLimit", "RateLimit"),
    ] {
        map.push((
            name.into(),
            Json::from(json!({"$ref": format!("#/components/headers/{component}")})),
        ));
    }
    response.set_json("headers", Json::Object(map));
}

fn finish_response(status: &str, response: &mut Json, conflict_retries: bool) {
    let described = matches!(response.get("description"),
        Some(Json::Scalar(serde_json::Value::String(d))) if !d.is_empty());
    if !described {
        let schema = response
            .get("content")
            .and_then(|c| c.get(JSON_MEDIA))
            .and_then(|m| m.get("schema"))
            .and_then(|s| s.get("$ref"));
        let reason = match status {
            "200" => "OK",
            "201" => "Created",
            "202" => "Accepted",
            "204" => "Done; no body",
            _ => "Answer",
        };
        let text = match schema {
            Some(Json::Scalar(serde_json::Value::String(r))) => format!(
                "{reason}: a `{}`.",
                r.trim_start_matches("#/components/schemas/")
            ),
            _ => format!("{reason}."),
        };
        response.set("description", json!(text));
    }
    let header = |description: &str, schema: serde_json::Value| json!({"description": description, "required": false, "schema": schema});
    let mut headers: Vec<(&str, serde_json::Value)> = Vec::new();
    match status {
        "401" => headers.push((
            "WWW-Authenticate",
            header(
                "`Bearer`: the credential scheme.",
                json!({"type": "string"}),
            ),
        )),
        "409" if conflict_retries => headers.push((
            "Retry-After",
            header(
                "Seconds until the request in flight is expected to be done (at least 1): \
                 a delivery's remaining lease, an alert's Idempotency-Key in use, or \
                 another alert of the same entity (`entity_busy`).",
                json!({"type": "integer", "minimum": 1}),
            ),
        )),
        "429" | "503" => headers.push((
            "Retry-After",
            header(
                "Seconds to wait before retrying.",
                json!({"type": "integer", "minimum": 1}),
            ),
        )),
        _ => {}
    }
    if let Some(Json::Object(existing)) = response.get_mut("headers") {
        for (name, value) in existing.iter_mut() {
            if name.eq_ignore_ascii_case(idempotency::REPLAYED_HEADER) {
                // poem writes the name in capitals and any string as its value.
                *name = idempotency::REPLAYED_HEADER.into();
                value.set("required", json!(false));
                value.set("schema", json!({"type": "string", "enum": ["true"]}));
                if let Json::Object(entries) = value {
                    entries.retain(|(k, _)| k != "deprecated");
                }
            }
        }
    }
    if !headers.is_empty() {
        let mut map = match response.get("headers") {
            Some(Json::Object(existing)) => existing.clone(),
            _ => Vec::new(),
        };
        for (name, value) in headers {
            map.push((name.into(), Json::from(value)));
        }
        response.set_json("headers", Json::Object(map));
    }
}
/// A JSON value that keeps the order of object keys (serde_json's `Value` sorts them).
#[derive(Clone)]
enum Json {
    Object(Vec<(String, Json)>),
    Array(Vec<Json>),
    Scalar(serde_json::Value),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

impl Json {
    /// Sets `key`, in place when present, else at the end.
    fn set(&mut self, key: &str, value: serde_json::Value) {
        self.set_json(key, Json::from(value));
    }

    fn set_json(&mut self, key: &str, value: Json) {
        if let Json::Object(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => entries.push((key.to_owned(), value)),
            }
        }
    }
}

impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Self {
        match value {
            serde_json::Value::Object(map) => {
                Json::Object(map.into_iter().map(|(k, v)| (k, Json::from(v))).collect())
            }
            serde_json::Value::Array(items) => {
                Json::Array(items.into_iter().map(Json::from).collect())
            }
            scalar => Json::Scalar(scalar),
        }
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Scalar(value) => value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Scalar(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Scalar(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Scalar(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Scalar(
            serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Scalar(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Scalar(v.into()))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Scalar(serde_json::Value::Null))
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Scalar(serde_json::Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry()? {
            entries.push((k, v));
        }
        Ok(Json::Object(entries))
    }
}

/// The limits the server checks, as schema keywords. `maxLength` counts
/// characters where the server counts UTF-8 bytes (JSON Schema cannot count
/// bytes), so for text beyond ASCII the schema is the looser of the two; the
/// descriptions say bytes. Every place named here must exist: a renamed field
/// fails `publish` (and with it the drift test) instead of losing its limit.
mod limits {
    use serde_json::{json, Value};

    use super::Json;
    use crate::{
        alerts,
        alerts::idempotency,
        deliveries,
        deliveries::webhook_endpoints as endpoints,
        feed,
        feed::teams,
        http::{users, webhook_endpoints},
    };
    use tidings_core::MAX_ID_BYTES;

    use super::{MAX_BATCH, MAX_SUBJECT_BYTES};

    /// `char::is_control`: the Unicode category Cc.
    const NO_CONTROL_CHARACTERS: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

    fn id() -> Value {
        json!({"minLength": 1, "maxLength": MAX_ID_BYTES, "pattern": NO_CONTROL_CHARACTERS})
    }

    fn text(max: usize) -> Value {
        json!({"maxLength": max, "pattern": NO_CONTROL_CHARACTERS})
    }

    pub(super) fn apply(doc: &mut Json) {
        let properties: Vec<(&str, &str, Value)> = vec![
            ("AlertIn", "event_type", id()),
            ("AlertIn", "entity_id", id()),
            ("AlertIn", "team_id", id()),
            ("AlertIn", "recipients", json!({"minItems": 1})),
            ("AlertIn", "channels", json!({"minItems": 1})),
            ("AlertIn", "subject", text(MAX_SUBJECT_BYTES)),
            ("EventIn", "team_id", id()),
            ("EventIn", "type", id()),
            ("EventIn", "actor_id", id()),
            ("EventIn", "object_id", id()),
            ("EventIn", "idempotency_key", id()),
            (
                "EventBatchIn",
                "events",
                json!({"minItems": 1, "maxItems": MAX_BATCH}),
            ),
            ("TenantIn", "name", id()),
            ("UserTokenIn", "user_id", id()),
            (
                "UserTokenIn",
                "ttl_seconds",
                // The maximum is a setting (TIDINGS_USER_TOKEN_MAX_LIFETIME_SECS).
                json!({"minimum": 1}),
            ),
            (
                "UserIn",
                "email",
                json!({"maxLength": users::MAX_EMAIL_BYTES, "pattern": "^[^\\s\\u0000-\\u001F\\u007F-\\u009F]*$"}),
            ),
            (
                "UserIn",
                "display_name",
                text(users::MAX_DISPLAY_NAME_BYTES),
            ),
            (
                "WebhookEndpointIn",
                "url",
                // The shape `validate_url` accepts, as far as a pattern can say:
                // http(s), a host, no userinfo, no whitespace.
                json!({
                    "maxLength": webhook_endpoints::MAX_URL_BYTES,
                    "format": "uri",
                    "pattern": "^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][!-~]*)?$",
                }),
            ),
            (
                "WebhookEndpointIn",
                "description",
                json!({"maxLength": webhook_endpoints::MAX_DESCRIPTION_BYTES}),
            ),
            (
                "WebhookEndpointIn",
                "event_types",
                json!({"minItems": 1, "maxItems": webhook_endpoints::MAX_EVENT_TYPES}),
            ),
        ];
        let items: Vec<(&str, &str, Value)> = vec![
            ("AlertIn", "recipients", id()),
            ("WebhookEndpointIn", "event_types", id()),
        ];
        for (schema, property, keywords) in properties {
            merge(property_mut(doc, schema, property), &keywords);
        }
        for (schema, property, keywords) in items {
            let array = property_mut(doc, schema, property);
            let items = array
                .get_mut("items")
                .unwrap_or_else(|| panic!("{schema}.{property} has no items"));
            merge(items, &keywords);
        }
        let limit = |max: u32| json!({"minimum": 1, "maximum": max});
        let parameters: Vec<(&str, &str, &str, Value)> = vec![
            ("/v1/feed", "get", "limit", limit(feed::MAX_LIMIT)),
            (
                "/v1/teams/{team_id}/members",
                "get",
                "limit",
                limit(teams::MAX_LIMIT),
            ),
            (
                "/v1/deliveries",
                "get",
                "limit",
                limit(deliveries::MAX_LIMIT),
            ),
            (
                "/v1/alerts/{alert_id}",
                "get",
                "limit",
                limit(alerts::MAX_DELIVERY_LIMIT),
            ),
            (
                "/v1/webhook-endpoints",
                "get",
                "limit",
                limit(endpoints::MAX_LIMIT),
            ),
            (
                "/v1/alerts",
                "post",
                idempotency::HEADER,
                json!({"minLength": 1, "maxLength": idempotency::MAX_KEY_LEN, "pattern": "^[\\u0020-\\u007E]*$"}),
            ),
        ];
        let mut id_parameters: Vec<(&str, &str, &str, Value)> = Vec::new();
        for (path, method) in [
            ("/v1/teams/{team_id}/members/{user_id}", "put"),
            ("/v1/teams/{team_id}/members/{user_id}", "delete"),
        ] {
            id_parameters.push((path, method, "team_id", id()));
            id_parameters.push((path, method, "user_id", id()));
        }
        id_parameters.push(("/v1/teams/{team_id}/members", "get", "team_id", id()));
        for method in ["put", "get", "delete"] {
            id_parameters.push(("/v1/users/{user_id}", method, "user_id", id()));
        }
        for (path, method, name, keywords) in parameters.into_iter().chain(id_parameters) {
            let parameter = parameter_mut(doc, path, method, name);
            let schema = parameter
                .get_mut("schema")
                .unwrap_or_else(|| panic!("{method} {path} {name} has no schema"));
            merge(schema, &keywords);
        }
    }

    fn property_mut<'a>(doc: &'a mut Json, schema: &str, property: &str) -> &'a mut Json {
        doc.get_mut("components")
            .and_then(|c| c.get_mut("schemas"))
            .and_then(|s| s.get_mut(schema))
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(property))
            .unwrap_or_else(|| panic!("no property {schema}.{property} to limit"))
    }

    fn parameter_mut<'a>(doc: &'a mut Json, path: &str, method: &str, name: &str) -> &'a mut Json {
        let Some(Json::Array(parameters)) = doc
            .get_mut("paths")
            .and_then(|p| p.get_mut(path))
            .and_then(|p| p.get_mut(method))
            .and_then(|o| o.get_mut("parameters"))
        else {
            panic!("{method} {path} has no parameters");
        };
        parameters
            .iter_mut()
            .find(|p| matches!(p.get("name"), Some(Json::Scalar(Value::String(n))) if n == name))
            .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"))
    }

    fn merge(target: &mut Json, keywords: &Value) {
        for (key, value) in keywords.as_object().expect("keywords are an object") {
            target.set(key, value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published() -> serde_json::Value {
        // The offline state's lazy pool wants a runtime, though it never connects.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        serde_json::from_str(&crate::http::openapi_json()).unwrap()
    }

    #[test]
    fn response_fields_are_required_and_null_where_absent_values_are() {
        let doc = published();
        let feed = &doc["components"]["schemas"]["FeedOut"];
        let required = feed["required"].as_array().unwrap();
        assert!(required.contains(&json!("next_before")));
        assert!(required.contains(&json!("head")));
        assert_eq!(feed["properties"]["head"]["nullable"], true);
        let item = &doc["components"]["schemas"]["FeedItemOut"];
        assert!(!item["required"]
            .as_array()
            .unwrap()
            .contains(&json!("subject")));
        // Requests keep their optional fields.
        let mark = &doc["components"]["schemas"]["MarkIn"];
        assert!(mark.get("required").is_none());
        assert_eq!(mark["properties"]["up_to"]["nullable"], true);
    }

    #[test]
    fn a_nullable_reference_is_a_choice_with_null() {
        let doc = published();
        let expansion = &doc["components"]["schemas"]["AlertOut"]["properties"]["expansion"];
        assert_eq!(
            expansion["anyOf"][0]["$ref"],
            "#/components/schemas/ExpansionStatusOut"
        );
        assert_eq!(expansion["anyOf"][1], null_only());
        assert!(expansion.get("nullable").is_none());
    }

    #[test]
    fn media_types_headers_limits_and_descriptions() {
        let doc = published();
        assert!(!doc.to_string().contains(GENERATED_JSON_MEDIA));
        let create = &doc["paths"]["/v1/alerts"]["post"];
        assert_eq!(
            create["responses"]["202"]["headers"]["Idempotency-Replayed"]["schema"]["enum"],
            json!(["true"])
        );
        assert_eq!(
            create["responses"]["409"]["headers"]["Retry-After"]["schema"]["type"],
            "integer"
        );
        assert_eq!(
            doc["components"]["schemas"]["EventBatchIn"]["properties"]["events"]["maxItems"],
            MAX_BATCH
        );
        assert_eq!(doc["paths"]["/healthz"]["get"]["security"], json!([]));
        let events = &doc["paths"]["/v1/feed/stream"]["get"]["responses"]["200"]["content"]
            ["text/event-stream"]["x-sse-events"];
        assert_eq!(
            events["marks"]["$ref"],
            "#/components/schemas/MarksEventOut"
        );
        for (_, event) in events.as_object().unwrap() {
            let name = event["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
            assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
        }
        let statuses = |path: &str, method: &str| -> Vec<String> {
            doc["paths"][path][method]["responses"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(
            statuses("/v1/feed", "get"),
            ["200", "400", "401", "403", "429", "503"]
        );
        assert_eq!(
            statuses("/v1/webhook-endpoints/{id}", "get"),
            ["200", "400", "401", "403", "404", "429", "503"]
        );
        let category = &doc["paths"]["/v1/categories/{key}"]["put"]["responses"]["409"];
        assert!(category["description"]
            .as_str()
            .unwrap()
            .contains("another category"));
        assert!(
            category.get("headers").is_none(),
            "a lasting conflict has no Retry-After"
        );
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                for (status, response) in operation["responses"].as_object().unwrap() {
                    let description = response["description"].as_str().unwrap_or("");
                    assert!(!description.is_empty(), "{method} {path} {status}");
                }
            }
        }
    }
}
