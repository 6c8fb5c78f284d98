//! Preference resolution against `core/preferences.json`: vectors written by
//! hand from the precedence in docs/design/preferences.md, so a change of
//! the rules fails here (and in `wasm/test/preferences.test.js`, which runs
//! the same file against the WebAssembly build) until the file says so too.

mod support;

use serde_json::{json, Value};
use support::cases::run;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/preferences.json");

#[test]
fn rust_resolution_matches_every_vector() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("read {VECTORS}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse: {e}"));
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20, "the vectors are there");
    let mut levels = std::collections::BTreeSet::new();
    for case in cases {
        let got = match run(case["op"].as_str().expect("op"), &case["input"]) {
            Ok(v) => json!({ "ok": v }),
            Err(e) => json!({ "error": e }),
        };
        assert_eq!(got, case["expect"], "{}", case["name"]);
        if let Some(level) = case["expect"]["ok"]["level"].as_str() {
            levels.insert(level.to_owned());
        }
    }
    for level in tidings_core::Level::ALL {
        assert!(
            levels.contains(level.as_str()),
            "no vector decided by {level}"
        );
    }
}
