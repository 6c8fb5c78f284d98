//! The JSON payload of events and alerts: an object of at most 16 KiB,
//! measured as compact serialized JSON. Checked once, on entry.

use serde_json::Value;

/// Largest accepted payload, in bytes of compact serialized JSON.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("must be a JSON object")]
    NotAnObject,
    #[error("is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")]
    TooLarge { size: usize },
}

/// A checked payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload(Value);

impl Payload {
    pub fn parse(value: Value) -> Result<Self, PayloadError> {
        if !value.is_object() {
            return Err(PayloadError::NotAnObject);
        }
        // Serializing a `Value` cannot fail (its keys are strings).
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        if size > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::TooLarge { size });
        }
        Ok(Payload(value))
    }

    pub fn as_json(&self) -> &Value {
        &self.0
    }

    pub fn into_json(self) -> Value {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payloads_are_objects_of_at_most_16_kib() {
        assert_eq!(Payload::parse(json!([1])), Err(PayloadError::NotAnObject));
        assert_eq!(
            Payload::parse(json!("text")),
            Err(PayloadError::NotAnObject)
        );
        let fits = "x".repeat(MAX_PAYLOAD_BYTES - r#"{"t":""}"#.len());
        assert!(Payload::parse(json!({ "t": fits })).is_ok());
        let big = "x".repeat(MAX_PAYLOAD_BYTES);
        assert!(matches!(
            Payload::parse(json!({ "t": big })),
            Err(PayloadError::TooLarge { .. })
        ));
    }
}
