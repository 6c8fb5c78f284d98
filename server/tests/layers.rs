//! The layering rules of ARCHITECTURE.md, checked on the source: the store
//! and the configuration import nothing above them, and the modules of the
//! server form no cycle except through the shared state handle (`app::state`).
//!
//! It reads `server/src` as text: every `use crate::…`/`use super::…` tree
//! and every inline `crate::…` path outside comments, resolved to the file
//! module it names.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file module: `alerts::plan` → its path.
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable src") {
            let path = entry.expect("dir entry").path();
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name.to_string());
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if !matches!(name, "mod" | "lib" | "main") {
                    module.push(name.to_string());
                }
                if module.is_empty() && name == "main" {
                    continue;
                }
                out.insert(module.join("::"), path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&src(), &[], &mut out);
    out
}

/// The code of a module: without comments (a `//` inside a string literal
/// stays) and without its unit tests (`#[cfg(test)]` to the end of the file,
/// where this codebase keeps them).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = String::new();
    for line in text.lines() {
        let mut in_string = false;
        let mut prev = '\0';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if c == '"' && prev != '\\' {
                in_string = !in_string;
            }
            if !in_string && c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// Expands a use tree (`a::{b, c::{d, e}}`) into paths.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect();
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::").to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// The modules `module` refers to, as `a::b::c` paths from the crate root.
fn references(module: &str, code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let parent: Vec<&str> = {
        let mut p: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        p.pop();
        p
    };
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        let tree = &after[..end];
        for path in expand(tree) {
            if let Some(p) = path.strip_prefix("crate::") {
                refs.insert(p.to_string());
            } else if let Some(p) = path.strip_prefix("super::") {
                let mut full: Vec<&str> = parent.clone();
                full.push(p);
                refs.insert(full.join("::"));
            } else if let Some(p) = path.strip_prefix("self::") {
                refs.insert(format!("{module}::{p}"));
            }
        }
        rest = &after[end..];
    }
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + 7..];
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(after.len());
        let path = after[..end].trim_end_matches(':');
        if !path.is_empty() {
            refs.insert(path.to_string());
        }
        rest = &after[end..];
    }
    refs
}

/// The file module a path lands in: its longest prefix that is one.
fn resolve(path: &str, modules: &BTreeMap<String, PathBuf>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains_key(m))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let mut graph = BTreeMap::new();
    for (module, path) in &modules {
        let code = code_of(&std::fs::read_to_string(path).expect("readable module"));
        let deps: BTreeSet<String> = references(module, &code)
            .iter()
            .filter_map(|r| resolve(r, &modules))
            .filter(|d| d != module)
            .collect();
        graph.insert(module.clone(), deps);
    }
    graph
}

#[test]
fn the_store_imports_only_the_store_and_leaf_value_types() {
    let allowed = |dep: &str| dep.starts_with("store") || dep == "deliveries::status";
    for (module, deps) in graph() {
        if module.starts_with("store") {
            let above: Vec<&String> = deps.iter().filter(|d| !allowed(d)).collect();
            assert!(above.is_empty(), "{module} imports {above:?}");
        }
    }
}

#[test]
fn configuration_and_leaf_value_types_import_nothing_of_the_server() {
    let graph = graph();
    for leaf in [
        "app::config",
        "app::instruments",
        "app::shutdown",
        "alerts::payload",
        "deliveries::status",
        "http::json_nul",
        "http::request_id",
        "store::paging",
        "tenants::credentials",
        "tenants::secrets",
        "workers::backoff",
    ] {
        assert_eq!(
            graph[leaf],
            BTreeSet::new(),
            "{leaf} imports {:?}",
            graph[leaf]
        );
    }
}

/// Services and the store return domain values and errors: no poem type, no
/// `ApiError`, no credential scheme, nothing of `api`.
#[test]
fn services_and_the_store_know_no_http() {
    let modules = modules();
    let graph = graph();
    // The services, their leaves and the background modules that hold no
    // front door: every module outside `http` and `app`, except the NATS
    // inbox (a front door: it parses the alert body of `http::alerts`).
    let checked = modules.keys().filter(|m| {
        !(m.is_empty()
            || m.starts_with("http")
            || m.starts_with("app")
            || m.as_str() == "workers::nats_inbox")
    });
    for module in checked {
        let http: Vec<&String> = graph[module]
            .iter()
            .filter(|d| d.starts_with("http"))
            .collect();
        assert!(http.is_empty(), "{module} imports {http:?}");
        let code = code_of(&std::fs::read_to_string(&modules[module]).expect("readable"));
        // One exception, on purpose: the delivery status enum derives its
        // OpenAPI schema, so the schema and the column cannot disagree.
        if *module != "deliveries::status" {
            assert!(!code.contains("poem"), "{module} uses poem");
        }
    }
}

/// Cycles are allowed only through `app::state` (every handler and worker holds
/// the shared handle, and the handle holds the caches): with it taken
/// out, the module graph is acyclic.
#[test]
fn no_module_cycles_except_through_the_state_handle() {
    let mut graph = graph();
    graph.remove("app::state");
    for deps in graph.values_mut() {
        deps.remove("app::state");
    }
    // Kahn: repeatedly remove modules nothing remaining depends on.
    let mut remaining = graph.clone();
    loop {
        let sinks: Vec<String> = remaining
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !remaining.contains_key(d)))
            .map(|(m, _)| m.clone())
            .collect();
        if sinks.is_empty() {
            break;
        }
        for s in sinks {
            remaining.remove(&s);
        }
    }
    assert!(
        remaining.is_empty(),
        "modules on a cycle: {:?}",
        remaining.keys().collect::<Vec<_>>()
    );
}

#[test]
fn the_reader_sees_imports() {
    // The checks above are only as good as this reader.
    let refs = references(
        "alerts::expansion",
        &code_of("use super::submit::{fan_out, X};\nuse crate::{a::b, c::{d, e}}; // crate::z\nlet x = crate::f::g(\"//\");"),
    );
    let want: BTreeSet<String> = [
        "alerts::submit::fan_out",
        "alerts::submit::X",
        "a::b",
        "c::d",
        "c::e",
        "f::g",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(refs, want);
}
