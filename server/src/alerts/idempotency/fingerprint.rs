//! Request fingerprints: SHA-256 over canonical JSON, so a retry that
//! serializes the same request differently (key order, whitespace, number
//! spelling) matches, and any change of content does not.
//!
//! Canonical JSON here is written by [`canonical_json`] itself: object keys
//! sorted by their UTF-8 bytes at every depth, no insignificant whitespace,
//! strings and numbers as serde_json writes them. It does not depend on the
//! order of `serde_json::Map`, which becomes insertion order if any crate in
//! the build enables serde_json's `preserve_order` feature.
//!
//! **These bytes are stored** (event fingerprints forever, `Idempotency-Key`
//! fingerprints for the retention period) and compared on every retry, so
//! they must never change: the tests below pin them. The two framings are
//! the two that were stored before this module existed:
//! - [`Fingerprint::of_json`]: SHA-256 of the canonical JSON of one value
//!   (events: `[team_id, type, actor_id, object_id, payload]`);
//! - [`Fingerprint::of_request`]: SHA-256 over method, path and the canonical
//!   body, each length-prefixed (8-byte big-endian length) so no two requests
//!   share an encoding (the `Idempotency-Key` header, any POST).

use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// SHA-256 of the canonical JSON of `value`.
    pub fn of_json(value: &Value) -> Self {
        Fingerprint(Sha256::digest(canonical_json(value).as_bytes()).into())
    }

    /// SHA-256 over `method`, `path` and the canonical JSON of `body`, each
    /// length-prefixed.
    pub fn of_request(method: &str, path: &str, body: &Value) -> Self {
        let canonical = canonical_json(body);
        let mut hasher = Sha256::new();
        for part in [method.as_bytes(), path.as_bytes(), canonical.as_bytes()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Fingerprint(hasher.finalize().into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// Whether a stored fingerprint is this one.
    pub fn matches(&self, stored: &[u8]) -> bool {
        self.0.as_slice() == stored
    }
}

/// The canonical JSON text of `value` (see the module comment).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's escaping of a lone string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn hex(f: Fingerprint) -> String {
        hex::encode(f.as_bytes())
    }

    /// Outputs of the two functions this module replaced, computed by them
    /// before the change: stored fingerprints must still compare equal.
    #[test]
    fn fingerprints_are_byte_identical_to_the_stored_ones() {
        let payload: Value = serde_json::from_str(
            r#"{"z": [1, 2.5, {"b": null, "a": "é\"\n"}], "a": true, "m": -3}"#,
        )
        .expect("json");
        let event = json!(["design", "comment.created", "alice", null, payload]);
        assert_eq!(
            hex(Fingerprint::of_json(&event)),
            "3a7e7d67e467353ea8039f8677b0a89900c54455517f30795e3e655b92d33653"
        );
        let body: Value = serde_json::from_str(
            r#"{"event_type":"invoice.overdue","entity_id":"inv-1","recipients":["a","b"],"team_id":null,"channels":["email","in_app"],"subject":null,"payload":{"z":1,"a":[true,null]}}"#,
        )
        .expect("json");
        assert_eq!(
            hex(Fingerprint::of_request("POST", "/v1/alerts", &body)),
            "9a500026adfc71a3a5e3b82187f5144d13c1fb0b54e1f193182724c40a997fd1"
        );
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_and_drops_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{ "b": {"y": 1, "x": [ {"d": 0, "c": 0} ]}, "a": "\u00e9" }"#)
                .expect("json");
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"é","b":{"x":[{"c":0,"d":0}],"y":1}}"#
        );
    }

    #[test]
    fn content_method_and_path_all_count() {
        let a = json!({"x": 1, "y": [1, 2]});
        let f = |m, p, v: &Value| Fingerprint::of_request(m, p, v);
        assert_ne!(
            f("POST", "/v1/alerts", &a),
            f("POST", "/v1/alerts", &json!({"x": 2, "y": [1, 2]}))
        );
        assert_ne!(f("POST", "/v1/alerts", &a), f("PUT", "/v1/alerts", &a));
        assert_ne!(f("POST", "/v1/alerts", &a), f("POST", "/v1/other", &a));
        assert_ne!(
            Fingerprint::of_json(&json!([1, 2])),
            Fingerprint::of_json(&json!([2, 1]))
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-zé\"\\\\ ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-zé]{0,4}", inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// Rebuilds every object with its keys inserted in reverse order: with
    /// `preserve_order` that changes the map's iteration order; without it,
    /// nothing. Either way the fingerprint must not move.
    fn reinsert_reversed(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.reverse();
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), reinsert_reversed(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(reinsert_reversed).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn key_order_never_changes_a_fingerprint(v in json_value()) {
            let reordered = reinsert_reversed(&v);
            prop_assert_eq!(canonical_json(&v), canonical_json(&reordered));
            prop_assert_eq!(Fingerprint::of_json(&v), Fingerprint::of_json(&reordered));
            prop_assert_eq!(
                Fingerprint::of_request("POST", "/p", &v),
                Fingerprint::of_request("POST", "/p", &reordered)
            );
        }

        /// Canonical JSON is JSON, and reads back as the same value.
        #[test]
        fn canonical_json_round_trips(v in json_value()) {
            let text = canonical_json(&v);
            let back: Value = serde_json::from_str(&text).expect("valid JSON");
            prop_assert_eq!(back, v);
        }
    }
}
