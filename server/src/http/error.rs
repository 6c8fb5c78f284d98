//! One error type for the whole API. Clients see an RFC 9457 problem body with a
//! stable `code`; internal causes are logged with their chain and answered with an
//! opaque 500, so nothing about the database or the network leaks to callers.

use poem::{
    http::{header, HeaderValue, StatusCode},
    IntoResponse, Response,
};
use poem_openapi::{
    registry::{MetaMediaType, MetaResponse, MetaResponses, Registry},
    types::ToJSON,
    ApiResponse, Object,
};

/// Declares [`ProblemCode`]: each variant with the text clients match on.
macro_rules! problem_codes {
    ($($(#[$doc:meta])* $variant:ident = $code:literal,)*) => {
        /// The stable machine-readable code of a problem: what a client
        /// matches on (the title and detail are for people). The list is
        /// closed: a code the server sends is one of these, and the
        /// published document lists them all.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, poem_openapi::Enum)]
        pub enum ProblemCode {
            $($(#[$doc])* #[oai(rename = $code)] $variant,)*
        }

        impl ProblemCode {
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ProblemCode::$variant => $code,)*
                }
            }
        }
    };
}

problem_codes! {
    // The request itself.
    /// A parameter or body the framework could not parse (wrong type, unknown field).
    InvalidRequest = "invalid_request",
    /// The body is not valid JSON.
    UnreadableBody = "unreadable_body",
    /// A JSON string or key holds U+0000, which PostgreSQL cannot store.
    NulCharacter = "nul_character",
    /// The body, or a payload in it, is over its size limit.
    PayloadTooLarge = "payload_too_large",
    /// The body did not arrive within the body timeout.
    BodyTimeout = "body_timeout",
    /// The body is not `application/json`.
    UnsupportedMediaType = "unsupported_media_type",
    MethodNotAllowed = "method_not_allowed",
    /// No such route.
    NotFound = "not_found",
    /// An id (team, user, type, key…) that is empty, too long or holds control characters.
    InvalidId = "invalid_id",
    InvalidCursor = "invalid_cursor",
    /// `before` and `after` given together.
    ConflictingCursors = "conflicting_cursors",
    InvalidLimit = "invalid_limit",
    InvalidConsistencyToken = "invalid_consistency_token",
    InvalidIdempotencyKey = "invalid_idempotency_key",
    /// An event's `Idempotency-Key` header and its body's `idempotency_key` differ.
    ConflictingIdempotencyKeys = "conflicting_idempotency_keys",
    /// A batch of events takes keys per event, not an `Idempotency-Key` header.
    IdempotencyKeyOnBatch = "idempotency_key_on_batch",
    /// A payload that is not a JSON object.
    InvalidPayload = "invalid_payload",
    InvalidBatchSize = "invalid_batch_size",
    InvalidAlert = "invalid_alert",
    AlertTooLarge = "alert_too_large",
    InvalidChannel = "invalid_channel",
    /// A `delivery` rule (delay, condition) that is not valid.
    InvalidDelivery = "invalid_delivery",
    InvalidCategory = "invalid_category",
    UnknownCategory = "unknown_category",
    InvalidPreferences = "invalid_preferences",
    /// A template that does not parse, uses an unknown filter or runs out of fuel.
    InvalidTemplate = "invalid_template",
    InvalidLocale = "invalid_locale",
    InvalidTimezone = "invalid_timezone",
    /// Quiet hours with a malformed time, or an empty window.
    InvalidQuietHours = "invalid_quiet_hours",
    InvalidEmail = "invalid_email",
    InvalidDisplayName = "invalid_display_name",
    InvalidTtl = "invalid_ttl",
    InvalidRetention = "invalid_retention",
    InvalidRateLimit = "invalid_rate_limit",
    InvalidWebhookEndpoint = "invalid_webhook_endpoint",
    /// A webhook URL whose host is refused (private, loopback, translated spellings).
    WebhookUrlRefused = "webhook_url_refused",
    /// An unsubscribe POST without the RFC 8058 body.
    NotOneClick = "not_one_click",
    TooManyIndividualReads = "too_many_individual_reads",
    // Credentials.
    Unauthorized = "unauthorized",
    Forbidden = "forbidden",
    // Resources that do not exist in the tenant.
    TenantNotFound = "tenant_not_found",
    ApiKeyNotFound = "api_key_not_found",
    UserNotFound = "user_not_found",
    MembershipNotFound = "membership_not_found",
    ItemNotFound = "item_not_found",
    AlertNotFound = "alert_not_found",
    DeliveryNotFound = "delivery_not_found",
    WebhookEndpointNotFound = "webhook_endpoint_not_found",
    CategoryNotFound = "category_not_found",
    TemplateNotFound = "template_not_found",
    UnsubscribeLinkNotFound = "unsubscribe_link_not_found",
    // Conflicts and limits of the tenant's data.
    IdempotencyKeyInFlight = "idempotency_key_in_flight",
    IdempotencyKeyReused = "idempotency_key_reused",
    /// Another alert for the same entity is being written.
    EntityBusy = "entity_busy",
    DeliveryInFlight = "delivery_in_flight",
    DeliveryNotRetryable = "delivery_not_retryable",
    EventTypeInAnotherCategory = "event_type_in_another_category",
    MembershipLimit = "membership_limit",
    WebhookEndpointLimit = "webhook_endpoint_limit",
    // Capacity and the server's state.
    RateLimited = "rate_limited",
    Overloaded = "overloaded",
    /// The database (its primary, during a failover) cannot be reached.
    Unavailable = "unavailable",
    DatabaseTimeout = "database_timeout",
    /// The binary was built without the WebAssembly core the inbox page runs.
    InboxCoreMissing = "inbox_core_missing",
    Internal = "internal",
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RFC 9457 problem details, plus our stable machine-readable `code`.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct Problem {
    /// URI reference naming the problem type: `urn:tidings:problem:<code>`.
    #[oai(rename = "type")]
    pub type_uri: String,
    /// Short, human-readable summary of the problem type.
    pub title: String,
    /// The HTTP status code of this response.
    pub status: u16,
    /// Human-readable explanation of this occurrence.
    #[oai(skip_serializing_if_is_none)]
    pub detail: Option<String>,
    pub code: ProblemCode,
    /// This occurrence: `urn:tidings:request:<id>`, where `<id>` is the
    /// request's `X-Request-Id` (the one sent, or the one the server made up
    /// and answered with). Quote it when reporting a problem: the server's log
    /// lines of the request carry the same id.
    #[oai(skip_serializing_if_is_none)]
    pub instance: Option<String>,
}

impl poem_openapi::types::Example for Problem {
    fn example() -> Self {
        // Every answer has an `instance` (here a UUIDv7 id, as the server
        // makes up when the client sends none); the document is generated
        // outside any request, so `new` would leave it out.
        Problem {
            instance: Some("urn:tidings:request:0193a5c2-7b1e-7c3d-9f4a-2b6e8d1c0f57".into()),
            ..Problem::new(
                StatusCode::BAD_REQUEST,
                ProblemCode::InvalidCursor,
                Some("cursor is not valid base64url".into()),
            )
        }
    }
}

impl Problem {
    pub fn new(status: StatusCode, code: ProblemCode, detail: Option<String>) -> Self {
        Problem {
            type_uri: format!("urn:tidings:problem:{code}"),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail,
            code,
            instance: crate::http::request_id::RequestId::current().map(|id| id.instance()),
        }
    }

    pub fn into_response(self, extra_headers: &[(&'static str, String)]) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_json_string();
        let mut resp = Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)
            .body(body);
        for (name, value) in extra_headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                resp.headers_mut().insert(*name, v);
            }
        }
        resp
    }
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Every way a request can fail. Handlers return `Result<_, ApiError>`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed: unparsable, out of range, bad cursor.
    #[error("{detail}")]
    BadRequest { code: ProblemCode, detail: String },
    /// Missing, malformed, expired or unknown credential.
    #[error("{detail}")]
    Unauthorized { detail: String },
    /// A valid credential of the wrong kind or scope for this endpoint.
    #[error("{detail}")]
    Forbidden { detail: String },
    #[error("{detail}")]
    NotFound { code: ProblemCode, detail: String },
    /// The request conflicts with work in flight; retry after the given seconds.
    #[error("{detail}")]
    Conflict {
        code: ProblemCode,
        detail: String,
        retry_after_secs: Option<u64>,
    },
    #[error("request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The body did not arrive within the body timeout (TIDINGS_HTTP_BODY_TIMEOUT_SECS).
    #[error("request body not received within {secs} s")]
    BodyTimeout { secs: u64 },
    /// Well-formed but semantically invalid (e.g. idempotency key reused with another body).
    #[error("{detail}")]
    Unprocessable { code: ProblemCode, detail: String },
    #[error("the database is unavailable")]
    Unavailable,
    /// A statement ran past `statement_timeout`, or waited past `lock_timeout`.
    #[error("the database did not answer in time")]
    DatabaseTimeout,
    /// A rate limit of the tenant or the user: retry after the given seconds.
    /// `quotas` are the buckets' states, for the `RateLimit` headers.
    #[error("{detail}")]
    RateLimited {
        detail: String,
        retry_after_secs: u64,
        quotas: Vec<crate::tenants::limits::Quota>,
    },
    /// This instance is at a capacity limit; retry after the given seconds.
    #[error("{detail}")]
    Overloaded {
        detail: String,
        retry_after_secs: u64,
    },
    /// Anything unexpected. Logged with its cause chain; the client sees only a 500.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn bad_request(code: ProblemCode, detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            detail: detail.into(),
        }
    }
    pub fn unprocessable(code: ProblemCode, detail: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            code,
            detail: detail.into(),
        }
    }
    pub fn not_found(code: ProblemCode, detail: impl Into<String>) -> Self {
        ApiError::NotFound {
            code,
            detail: detail.into(),
        }
    }
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        ApiError::Unauthorized {
            detail: detail.into(),
        }
    }
    pub fn forbidden(detail: impl Into<String>) -> Self {
        ApiError::Forbidden {
            detail: detail.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable | ApiError::Overloaded { .. } | ApiError::DatabaseTimeout => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> ProblemCode {
        match self {
            ApiError::BadRequest { code, .. }
            | ApiError::NotFound { code, .. }
            | ApiError::Conflict { code, .. }
            | ApiError::Unprocessable { code, .. } => *code,
            ApiError::Unauthorized { .. } => ProblemCode::Unauthorized,
            ApiError::Forbidden { .. } => ProblemCode::Forbidden,
            ApiError::PayloadTooLarge { .. } => ProblemCode::PayloadTooLarge,
            ApiError::BodyTimeout { .. } => ProblemCode::BodyTimeout,
            ApiError::Unavailable => ProblemCode::Unavailable,
            ApiError::DatabaseTimeout => ProblemCode::DatabaseTimeout,
            ApiError::RateLimited { .. } => ProblemCode::RateLimited,
            ApiError::Overloaded { .. } => ProblemCode::Overloaded,
            ApiError::Internal(_) => ProblemCode::Internal,
        }
    }

    pub fn to_problem(&self) -> Problem {
        let detail = match self {
            ApiError::Internal(_) => None,
            other => Some(other.to_string()),
        };
        Problem::new(self.status(), self.code(), detail)
    }
}

/// Database errors are internal unless the primary cannot be reached (as
/// during a failover: `store::is_unavailable`), or a session timeout ended
/// the statement; a client may retry those: 503 rather than 500.
impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            ref gone if crate::store::is_unavailable(gone) => {
                tracing::warn!(error = %err, "database unavailable");
                ApiError::Unavailable
            }
            ref timeout if crate::store::is_timeout(timeout) => {
                tracing::warn!(error = %err, "statement or lock timeout");
                ApiError::DatabaseTimeout
            }
            other => ApiError::Internal(anyhow::Error::new(other)),
        }
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }

    fn as_response(&self) -> Response {
        if let ApiError::Internal(cause) = self {
            tracing::error!(error = ?cause, "internal error");
        }
        let mut headers = Vec::new();
        match self {
            ApiError::Unauthorized { .. } => {
                headers.push(("www-authenticate", "Bearer".to_string()));
            }
            ApiError::Conflict {
                retry_after_secs: Some(secs),
                ..
            } => {
                headers.push(("retry-after", secs.to_string()));
            }
            ApiError::Unavailable | ApiError::DatabaseTimeout => {
                headers.push(("retry-after", "1".to_string()))
            }
            ApiError::RateLimited {
                retry_after_secs,
                quotas,
                ..
            } => {
                headers.push(("retry-after", retry_after_secs.to_string()));
                headers.extend(ratelimit_headers(quotas));
            }
            ApiError::Overloaded {
                retry_after_secs, ..
            } => headers.push(("retry-after", retry_after_secs.to_string())),
            _ => {}
        }
        self.to_problem().into_response(&headers)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        poem::error::ResponseError::as_response(&self)
    }
}

/// The statuses an operation may answer with a problem body, all of them:
/// every operation shares this error type, and the published document keeps
/// for each operation those its request can provoke (`document::ProblemStatuses`).
const PROBLEM_STATUSES: &[(u16, &str)] = &[
    (
        400,
        "The request is malformed (bad JSON, unknown field, bad cursor, out-of-range value).",
    ),
    (401, "Missing, malformed, expired or unknown credential."),
    (
        403,
        "The credential is valid but of the wrong kind for this endpoint.",
    ),
    (404, "The resource does not exist in this tenant."),
    (
        408,
        "The request body did not arrive within the body timeout; the connection is closed.",
    ),
    (
        409,
        "Conflicts with a request still in flight; see Retry-After.",
    ),
    (413, "The request body exceeds the configured limit."),
    (
        429,
        "A rate limit of the tenant or the user is used up; see Retry-After and the RateLimit headers.",
    ),
    (
        415,
        "The request body is not `application/json` (or the Content-Type header is missing).",
    ),
    (
        422,
        "Well-formed but invalid (e.g. an idempotency key reused with another body).",
    ),
    (
        503,
        "The database is unreachable or did not answer in time, this instance is at a capacity limit, \
         or the tenant's share of the database pool stayed busy; retry after Retry-After.",
    ),
];

impl ApiResponse for ApiError {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: PROBLEM_STATUSES
                .iter()
                .map(|(status, description)| MetaResponse {
                    description,
                    status: Some(*status),
                    status_range: None,
                    content: vec![MetaMediaType {
                        content_type: PROBLEM_CONTENT_TYPE,
                        schema: <Problem as poem_openapi::types::Type>::schema_ref(),
                    }],
                    headers: vec![],
                })
                .collect(),
        }
    }

    fn register(registry: &mut Registry) {
        <Problem as poem_openapi::types::Type>::register(registry);
    }
}

/// Turns every error poem or poem-openapi raises before a handler runs (unknown
/// route, wrong method, unparsable JSON, unknown field, bad parameter) into a
/// problem body. Errors that already are `ApiError`s keep their own response.
pub async fn problem_from_poem_error(err: poem::Error) -> Response {
    if err.is::<ApiError>() {
        return err.into_response();
    }
    let status = err.status();
    let code = match status {
        StatusCode::NOT_FOUND => ProblemCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ProblemCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ProblemCode::PayloadTooLarge,
        StatusCode::UNAUTHORIZED => ProblemCode::Unauthorized,
        StatusCode::FORBIDDEN => ProblemCode::Forbidden,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ProblemCode::UnsupportedMediaType,
        s if s.is_server_error() => {
            tracing::error!(error = %err, "unhandled server error");
            return Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemCode::Internal,
                None,
            )
            .into_response(&[]);
        }
        _ => ProblemCode::InvalidRequest,
    };
    let detail = match status {
        StatusCode::NOT_FOUND => "no such route".to_string(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_string(),
        _ => err.to_string(),
    };
    let mut headers = Vec::new();
    if status == StatusCode::UNAUTHORIZED {
        headers.push(("www-authenticate", "Bearer".to_string()));
    }
    Problem::new(status, code, Some(detail)).into_response(&headers)
}

pub type ApiResult<T> = Result<T, ApiError>;

/// `RateLimit-Policy` and `RateLimit` (IETF httpapi, draft-ietf-httpapi-
/// ratelimit-headers-10) for the buckets a request drew on: one policy per
/// bucket, named after it, with its quota `q` (the burst) and window `w` (the
/// seconds an empty bucket takes to fill), and per bucket the tokens left
/// `r` and the seconds `t` until it is full again.
pub fn ratelimit_headers(quotas: &[crate::tenants::limits::Quota]) -> Vec<(&'static str, String)> {
    if quotas.is_empty() {
        return Vec::new();
    }
    let policy = quotas
        .iter()
        .map(|q| {
            let window = f64::from(q.rate.burst) / q.rate.per_second;
            format!(
                "\"{}\";q={};w={}",
                q.kind.as_str(),
                q.rate.burst,
                (window.ceil() as u64).max(1)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let state = quotas
        .iter()
        .map(|q| {
            format!(
                "\"{}\";r={};t={}",
                q.kind.as_str(),
                q.taken.remaining,
                crate::tenants::limits::ceil_secs(q.taken.wait)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    vec![("ratelimit-policy", policy), ("ratelimit", state)]
}

/// A limit's refusal: 429 for a rate, 503 for the tenant's pool share.
impl From<crate::tenants::limits::Refusal> for ApiError {
    fn from(refusal: crate::tenants::limits::Refusal) -> Self {
        use crate::tenants::limits::Refusal;
        match refusal {
            Refusal::Limited {
                retry_after,
                quotas,
            } => {
                let empty = quotas
                    .iter()
                    .find(|q| !q.taken.allowed)
                    .map_or("rate", |q| q.kind.as_str());
                ApiError::RateLimited {
                    detail: format!("the {empty} rate limit is used up; retry after Retry-After"),
                    retry_after_secs: crate::tenants::limits::ceil_secs(retry_after).max(1),
                    quotas,
                }
            }
            Refusal::ShareBusy { retry_after } => ApiError::Overloaded {
                detail: "this tenant's share of database connections stayed busy".into(),
                retry_after_secs: crate::tenants::limits::ceil_secs(retry_after).max(1),
            },
        }
    }
}

impl From<crate::tenants::limits::AdmitError> for ApiError {
    fn from(err: crate::tenants::limits::AdmitError) -> Self {
        match err {
            crate::tenants::limits::AdmitError::Refused(refusal) => refusal.into(),
            crate::tenants::limits::AdmitError::Db(db) => db.into(),
        }
    }
}

/// An id that breaks the core's rules (empty, over 255 bytes, control characters).
impl From<tidings_core::KeyError> for ApiError {
    fn from(err: tidings_core::KeyError) -> Self {
        ApiError::bad_request(ProblemCode::InvalidId, err.to_string())
    }
}

/// A cursor that does not decode: garbage, truncated or tampered with.
impl From<tidings_core::CursorError> for ApiError {
    fn from(err: tidings_core::CursorError) -> Self {
        ApiError::bad_request(ProblemCode::InvalidCursor, err.to_string())
    }
}

/// A list page's cursor or limit that does not parse.
impl From<crate::store::paging::PagingError> for ApiError {
    fn from(err: crate::store::paging::PagingError) -> Self {
        let code = match err {
            crate::store::paging::PagingError::Limit { .. } => ProblemCode::InvalidLimit,
            crate::store::paging::PagingError::Cursor => ProblemCode::InvalidCursor,
        };
        ApiError::bad_request(code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_codes_are_distinct_snake_case_words() {
        let mut seen = std::collections::HashSet::new();
        for code in ProblemCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} twice");
            assert!(
                !text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{text}"
            );
            // The problem's type names its code.
            let problem = Problem::new(StatusCode::BAD_REQUEST, *code, None);
            assert_eq!(problem.type_uri, format!("urn:tidings:problem:{text}"));
        }
    }
}
