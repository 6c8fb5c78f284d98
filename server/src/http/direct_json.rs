//! `DirectJson<T>`: a JSON answer serialised straight from its output struct
//! with serde, documented exactly as poem-openapi's `Json<T>`.
//!
//! `Json<T>` answers through `ToJSON`: it first builds a whole
//! `serde_json::Value` tree of the answer (a map per object, a copy of every
//! string and of every item's payload), then serialises that tree. For a feed
//! page that is most of the answer's cost (bench/findings/feed.md, "Measured
//! now": the answer serialised directly). `DirectJson<T>` serialises `T` itself.
//!
//! The bytes must stay those `ToJSON` would give, or the document and the
//! answers could drift apart: `T` implements both, and
//! [`same_bytes_as_to_json`] says whether they agree. Debug builds (every
//! integration test) check it on every answer; each type's unit tests check
//! it on generated values. `ToJSON` collects an object's fields in a
//! `serde_json::Map`, which (without serde_json's `preserve_order`) is a
//! `BTreeMap`: its keys come out sorted, so the `Serialize` impls write their
//! fields in sorted order, not declaration order.

use poem::{IntoResponse, Response};
use poem_openapi::{
    payload::{Json, Payload},
    registry::{MetaResponses, MetaSchemaRef, Registry},
    types::{ToJSON, Type},
    ApiResponse,
};
use serde::Serialize;

/// A JSON answer serialised by serde, with `Json<T>`'s schema, content type
/// and bytes.
#[derive(Debug, Clone)]
pub struct DirectJson<T>(pub T);

impl<T: Type + ToJSON + Serialize + Send> Payload for DirectJson<T> {
    const CONTENT_TYPE: &'static str = <Json<T> as Payload>::CONTENT_TYPE;

    fn schema_ref() -> MetaSchemaRef {
        <Json<T> as Payload>::schema_ref()
    }

    fn register(registry: &mut Registry) {
        <Json<T> as Payload>::register(registry);
    }
}

impl<T: Type + ToJSON + Serialize + Send> IntoResponse for DirectJson<T> {
    fn into_response(self) -> Response {
        debug_assert!(
            same_bytes_as_to_json(&self.0),
            "{}: serde and ToJSON disagree",
            std::any::type_name::<T>()
        );
        // poem's own JSON answer: the same content type and error path as `Json<T>`.
        poem::web::Json(self.0).into_response()
    }
}

impl<T: Type + ToJSON + Serialize + Send> ApiResponse for DirectJson<T> {
    fn meta() -> MetaResponses {
        <Json<T> as ApiResponse>::meta()
    }

    fn register(registry: &mut Registry) {
        <Json<T> as ApiResponse>::register(registry);
    }
}

/// Whether serde writes `value` byte for byte as `Json<T>` (`ToJSON`) would.
pub fn same_bytes_as_to_json<T: ToJSON + Serialize>(value: &T) -> bool {
    let direct = serde_json::to_vec(value).ok();
    let through_tree = serde_json::to_vec(&value.to_json()).ok();
    direct.is_some() && direct == through_tree
}

/// Serialises a timestamp as `ToJSON` does (`to_rfc3339`: `+00:00`, not
/// serde's `Z`).
pub fn rfc3339<S: serde::Serializer>(
    at: &chrono::DateTime<chrono::Utc>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&at.to_rfc3339())
}
