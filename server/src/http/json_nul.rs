//! U+0000 in JSON text. JSON allows it (`"\u0000"`), PostgreSQL's `text`
//! and `jsonb` do not, so a NUL that reached a statement would fail it with
//! an internal error. Every JSON body is checked for one here, once, on
//! entry (the HTTP input guard in `api`, and the NATS inbox), and refused
//! with the path of the field that holds it.

use serde_json::Value;

/// Where the first NUL is: a path like `payload.items[2].note`, or
/// `payload.items[2]` with `in_key` when it is in an object key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct NulCharacter {
    pub path: String,
    pub in_key: bool,
}

impl NulCharacter {
    fn describe(&self) -> String {
        let at = if self.path.is_empty() {
            "the body"
        } else {
            &self.path
        };
        if self.in_key {
            format!("a key of {at} contains U+0000 (NUL), which is not accepted")
        } else {
            format!("{at} contains U+0000 (NUL), which is not accepted")
        }
    }
}

/// Finds the first NUL in the JSON text `body`, in any string or key at any
/// depth. Text that is not JSON is not this check's business: it answers
/// `None` and the parser behind it reports the syntax error.
///
/// JSON cannot carry a raw NUL byte inside a string (control characters must
/// be escaped), so a NUL is always spelled `\u0000`; text without that
/// spelling is passed without parsing it.
pub fn find_nul(body: &[u8]) -> Option<NulCharacter> {
    if !contains_nul_escape(body) {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    find_in_value(&value, &mut String::new())
}

/// The same check on a value already parsed.
pub fn find_in_value(value: &Value, path: &mut String) -> Option<NulCharacter> {
    match value {
        Value::String(s) if s.contains('\0') => Some(NulCharacter {
            path: path.clone(),
            in_key: false,
        }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = find_in_value(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(NulCharacter {
                    path: path.clone(),
                    in_key: true,
                });
            }
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            let found = find_in_value(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

/// Whether `\u0000` appears as an escape (an odd number of backslashes before
/// `u0000`; `\\u0000` is a backslash followed by the text "u0000").
fn contains_nul_escape(body: &[u8]) -> bool {
    let needle = b"u0000";
    body.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .any(|(at, _)| {
            let backslashes = body[..at].iter().rev().take_while(|b| **b == b'\\').count();
            backslashes % 2 == 1
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nul(body: &str) -> Option<(String, bool)> {
        find_nul(body.as_bytes()).map(|n| (n.path, n.in_key))
    }

    #[test]
    fn finds_nul_in_strings_keys_and_nested_values_and_names_the_field() {
        assert_eq!(nul(r#"{"a":"x\u0000"}"#), Some(("a".into(), false)));
        assert_eq!(
            nul(r#"{"payload":{"items":[1,{"note":"\u0000"}]}}"#),
            Some(("payload.items[1].note".into(), false))
        );
        assert_eq!(
            nul(r#"{"payload":{"k\u0000":1}}"#),
            Some(("payload".into(), true))
        );
        assert_eq!(nul(r#"["\u0000"]"#), Some(("[0]".into(), false)));
        assert_eq!(nul(r#""\u0000""#), Some(("".into(), false)));
        assert_eq!(
            find_nul(br#"{"description":"a\u0000b"}"#)
                .map(|n| n.to_string())
                .as_deref(),
            Some("description contains U+0000 (NUL), which is not accepted")
        );
    }

    #[test]
    fn passes_text_without_a_nul_and_leaves_bad_json_to_the_parser() {
        assert_eq!(nul(r#"{"a":"\\u0000"}"#), None, "an escaped backslash");
        assert_eq!(nul(r#"{"a":"\\\u0000"}"#), Some(("a".into(), false)));
        assert_eq!(nul(r#"{"a":"u0000 \u0001"}"#), None);
        assert_eq!(nul(r#"{"a":"\u0000""#), None, "not JSON");
        assert_eq!(nul(""), None);
    }
}
