use std::{env, fs, path::Path};

fn main() {
    // sqlx::migrate! embeds migrations/ at compile time; without this, adding a
    // migration file would not rebuild the binary.
    println!("cargo:rerun-if-changed=../migrations");
    embed_wasm_core();
}

/// The inbox page (`/inbox/`) runs the WebAssembly core that
/// `scripts/build-wasm` writes to `wasm/pkg/web` (not committed). When it is
/// there, the binary embeds it; when it is not, the page answers 503 saying
/// how to build it, and everything else works.
fn embed_wasm_core() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let pkg = Path::new(&manifest).join("../wasm/pkg/web");
    let js = pkg.join("tidings_core.js");
    let wasm = pkg.join("tidings_core_bg.wasm");
    // A directory is scanned for any change, also before pkg/ exists.
    println!("cargo:rerun-if-changed=../wasm/pkg");
    println!("cargo:rerun-if-changed=../wasm");
    let code = if js.is_file() && wasm.is_file() {
        format!(
            "pub const CORE: Option<(&str, &[u8])> = Some((include_str!({:?}), include_bytes!({:?})));\n",
            fs::canonicalize(&js).expect("core js"),
            fs::canonicalize(&wasm).expect("core wasm"),
        )
    } else {
        "pub const CORE: Option<(&str, &[u8])> = None;\n".to_owned()
    };
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("inbox_core.rs");
    fs::write(out, code).expect("write inbox_core.rs");
}
