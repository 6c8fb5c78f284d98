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
    let manifest = Path::new(&manifest);
    let js = manifest.join(CORE_JS);
    let wasm = manifest.join(CORE_WASM);
    let embedded = js.is_file() && wasm.is_file();
    watch_wasm_core(manifest, embedded);
    let code = if embedded {
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

/// The core's two files, relative to this package (as cargo reads
/// `rerun-if-changed` paths).
const CORE_JS: &str = "../wasm/pkg/web/tidings_core.js";
const CORE_WASM: &str = "../wasm/pkg/web/tidings_core_bg.wasm";

/// Tells cargo when to run this script again: when the embedded files change
/// or go, or when they appear. Only paths that exist are named: cargo counts
/// a `rerun-if-changed` path that does not exist as changed on every build,
/// so naming `wasm/pkg` in a checkout without it rebuilt the server every
/// time. A directory is scanned recursively (the newest mtime of everything
/// under it, per cargo's build-script reference), so the nearest existing
/// directory on the way to the files notices them appear, without watching
/// the rest of `wasm/` (its tests and npm files) once they are there.
fn watch_wasm_core(manifest: &Path, embedded: bool) {
    if embedded {
        // A new build-wasm writes both anew; deleting one is a missing path,
        // which reruns this and drops the page's core.
        println!("cargo:rerun-if-changed={CORE_JS}");
        println!("cargo:rerun-if-changed={CORE_WASM}");
        return;
    }
    // wasm/ is committed, so one of these exists in any checkout.
    if let Some(dir) = ["../wasm/pkg/web", "../wasm/pkg", "../wasm"]
        .into_iter()
        .find(|dir| manifest.join(dir).is_dir())
    {
        println!("cargo:rerun-if-changed={dir}");
    }
}
