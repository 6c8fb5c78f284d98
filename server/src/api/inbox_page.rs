//! The inbox page, `/inbox/`: static ES modules (`server/inbox/`) and the
//! WebAssembly core (`wasm/pkg/web`, embedded at build time by `build.rs`),
//! served from the binary. It calls the API like any front end, with a user
//! token from the URL fragment or from a host page (`mountInbox`). Turned off
//! by `TIDINGS_INBOX_PAGE=false`.

use poem::{
    endpoint::make_sync,
    http::{header, StatusCode},
    web::Redirect,
    IntoResponse, Response, Route,
};

use crate::error::Problem;

mod core_files {
    include!(concat!(env!("OUT_DIR"), "/inbox_core.rs"));
}

const INDEX_HTML: &str = include_str!("../../inbox/index.html");
const INBOX_JS: &str = include_str!("../../inbox/inbox.js");
const MODEL_JS: &str = include_str!("../../inbox/model.js");
const INBOX_CSS: &str = include_str!("../../inbox/inbox.css");

const JS: &str = "text/javascript; charset=utf-8";

/// Whether this binary embeds the WebAssembly core the page needs.
pub fn core_embedded() -> bool {
    core_files::CORE.is_some()
}

fn asset(content_type: &'static str, body: impl Into<poem::Body>) -> Response {
    Response::builder()
        .content_type(content_type)
        // Static code, no credentials: a host page on another origin may load
        // the module (`mountInbox`), which module scripts fetch with CORS.
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        // Revalidate on every load: an upgraded server serves new code at once.
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-content-type-options", "nosniff")
        .body(body)
}

fn missing_core() -> Response {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "inbox_core_missing",
        Some(
            "this binary was built without the WebAssembly core: run scripts/build-wasm, then rebuild"
                .into(),
        ),
    )
    .into_response(&[])
}

pub fn routes() -> Route {
    let page = |content_type: &'static str, text: &'static str| {
        make_sync(move |_| {
            if core_embedded() {
                asset(content_type, text)
            } else {
                missing_core()
            }
        })
    };
    Route::new()
        .at(
            "/",
            make_sync(|req| {
                // `/inbox` without the slash: the page's relative imports need it.
                if !req.original_uri().path().ends_with('/') {
                    return Redirect::permanent("/inbox/").into_response();
                }
                if core_embedded() {
                    asset("text/html; charset=utf-8", INDEX_HTML)
                } else {
                    missing_core()
                }
            }),
        )
        .at("/inbox.js", page(JS, INBOX_JS))
        .at("/model.js", page(JS, MODEL_JS))
        .at("/inbox.css", page("text/css; charset=utf-8", INBOX_CSS))
        .at(
            "/core/tidings_core.js",
            make_sync(|_| match core_files::CORE {
                Some((js, _)) => asset(JS, js),
                None => missing_core(),
            }),
        )
        .at(
            "/core/tidings_core_bg.wasm",
            make_sync(|_| match core_files::CORE {
                Some((_, wasm)) => asset("application/wasm", wasm),
                None => missing_core(),
            }),
        )
}
