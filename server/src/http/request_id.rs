//! The request id: taken from `X-Request-Id` when it is a sane token, made up
//! otherwise, and known to everything that runs for the request (its log
//! span, its problem bodies' `instance`) through a task-local.
//!
//! A leaf: it imports nothing of the server.

use std::{fmt, future::Future};

/// The header a request id arrives and leaves in.
pub const HEADER: &str = "x-request-id";

/// Longest accepted id. Enough for a UUID, a W3C trace id, or a proxy's own
/// prefixed ids; short enough that a hostile header cannot bloat every log line.
pub const MAX_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// An incoming id, if it is 1–128 characters of `A–Z a–z 0–9 - _ . : ~`:
    /// characters that need no escaping in a log line, a header or a URN.
    /// Anything else is not an error for the caller (a request is not refused
    /// for its tracing header): it gets a fresh id instead.
    pub fn parse(value: &str) -> Option<Self> {
        let sane = !value.is_empty()
            && value.len() <= MAX_LEN
            && value.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~')
            });
        sane.then(|| RequestId(value.to_string()))
    }

    /// A fresh id: a UUIDv7, so ids sort by time in logs.
    pub fn generate() -> Self {
        RequestId(uuid::Uuid::now_v7().to_string())
    }

    /// The id from a header value, or a fresh one.
    pub fn from_header(value: Option<&str>) -> Self {
        value.and_then(Self::parse).unwrap_or_else(Self::generate)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The RFC 9457 `instance` of a problem answered to this request.
    pub fn instance(&self) -> String {
        format!("urn:tidings:request:{}", self.0)
    }

    /// Runs `fut` with this id as the current one.
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }

    /// The id of the request being served by this task, if any.
    pub fn current() -> Option<RequestId> {
        CURRENT.try_with(Clone::clone).ok()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

tokio::task_local! {
    static CURRENT: RequestId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sane_ids_are_kept_and_others_replaced() {
        for kept in [
            "abc",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "trace:00-4bf92f35.x~y_z",
        ] {
            assert_eq!(RequestId::from_header(Some(kept)).as_str(), kept);
        }
        assert!(RequestId::parse(&"a".repeat(MAX_LEN)).is_some());
        for replaced in ["", "has space", "new\nline", "é", "a/b", "<script>"] {
            assert!(RequestId::parse(replaced).is_none(), "{replaced:?}");
            let fresh = RequestId::from_header(Some(replaced));
            assert_ne!(fresh.as_str(), replaced);
            assert!(RequestId::parse(fresh.as_str()).is_some());
        }
        assert!(RequestId::parse(&"a".repeat(MAX_LEN + 1)).is_none());
    }

    #[tokio::test]
    async fn the_current_id_is_known_inside_its_scope_only() {
        assert_eq!(RequestId::current(), None);
        let id = RequestId::parse("r-1").unwrap();
        let seen = id.clone().scope(async { RequestId::current() }).await;
        assert_eq!(seen, Some(id));
        assert_eq!(RequestId::current(), None);
    }
}
