//! poem-openapi documents an `Option<T>` property of an `Object` as a plain `T`
//! that is merely not required, yet it answers `None` as `null` and accepts `null`
//! in requests. Under OpenAPI 3.0 a `null` needs `nullable: true`, so without this
//! pass every generated client and schema validator rejects our own responses
//! (`"next_cursor": null`, `"head": null`, …). poem-openapi offers no hook into
//! its registry, so the generated document is rewritten: every optional property
//! of a component schema becomes nullable. Key order is kept, so the committed
//! document stays readable and its diffs small.

use std::fmt;

use serde::{
    de::{MapAccess, SeqAccess, Visitor},
    ser::{SerializeMap, SerializeSeq},
    Deserialize, Deserializer, Serialize, Serializer,
};

/// A JSON value that keeps the order of object keys (serde_json's `Value` sorts them).
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

/// Marks every optional property of every component schema `nullable`.
pub fn make_optional_properties_nullable(spec: &str) -> Result<String, serde_json::Error> {
    let mut doc: Json = serde_json::from_str(spec)?;
    if let Some(Json::Object(schemas)) =
        doc.get_mut("components").and_then(|c| c.get_mut("schemas"))
    {
        for (_, schema) in schemas.iter_mut() {
            mark_schema(schema);
        }
    }
    serde_json::to_string_pretty(&doc)
}

fn mark_schema(schema: &mut Json) {
    let required: Vec<String> = match schema.get("required") {
        Some(Json::Array(names)) => names
            .iter()
            .filter_map(|n| match n {
                Json::Scalar(serde_json::Value::String(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let Some(Json::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if required.contains(name) {
            continue;
        }
        let Json::Object(entries) = property else {
            continue;
        };
        if entries.iter().any(|(k, _)| k == "nullable") {
            continue;
        }
        // OpenAPI 3.0 ignores siblings of `$ref`: wrap it so `nullable` counts.
        if entries.iter().any(|(k, _)| k == "$ref") {
            let reference = std::mem::take(entries);
            entries.push(("allOf".into(), Json::Array(vec![Json::Object(reference)])));
        }
        entries.push((
            "nullable".into(),
            Json::Scalar(serde_json::Value::Bool(true)),
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_properties_become_nullable_and_key_order_is_kept() {
        let spec = r##"{"components":{"schemas":{"Page":{"type":"object","required":["items"],
            "properties":{"items":{"type":"array"},"next":{"type":"string","description":"d"},
            "nested":{"$ref":"#/components/schemas/X"}}}}}}"##;
        let out: serde_json::Value =
            serde_json::from_str(&make_optional_properties_nullable(spec).unwrap()).unwrap();
        let props = &out["components"]["schemas"]["Page"]["properties"];
        assert_eq!(props["items"].get("nullable"), None);
        assert_eq!(props["next"]["nullable"], true);
        assert_eq!(props["nested"]["nullable"], true);
        assert_eq!(
            props["nested"]["allOf"][0]["$ref"],
            "#/components/schemas/X"
        );
        let text = make_optional_properties_nullable(spec).unwrap();
        assert!(text.find("\"type\": \"object\"") < text.find("\"required\""));
    }
}
