//! The inbox page, `/inbox/`: static ES modules (`server/inbox/`) and the
//! WebAssembly core (`wasm/pkg/web`, embedded at build time by `build.rs`),
//! served from the binary. It calls the API like any front end, with a user
//! token from the URL fragment or from a host page (the `<tidings-inbox>`
//! element of `tidings-inbox.js`, or `mountInbox`). Turned off by
//! `TIDINGS_INBOX_PAGE=false`.

use std::{io::Write, sync::OnceLock};

use flate2::{write::GzEncoder, Compression};
use poem::{
    endpoint::make_sync,
    http::{header, HeaderMap, StatusCode},
    web::Redirect,
    IntoResponse, Response, Route,
};

use crate::http::error::{Problem, ProblemCode};

mod core_files {
    include!(concat!(env!("OUT_DIR"), "/inbox_core.rs"));
}

const INDEX_HTML: &str = include_str!("../../inbox/index.html");

const JS: &str = "text/javascript; charset=utf-8";

/// Whether this binary embeds the WebAssembly core the page needs.
pub fn core_embedded() -> bool {
    core_files::CORE.is_some()
}

/// One file of the page: its bytes and their gzip, made once on first
/// request (the page is a download a user waits for; the wasm shrinks to
/// under half).
struct Asset {
    content_type: &'static str,
    body: &'static [u8],
    gzip: OnceLock<Vec<u8>>,
    /// The HTML page's policy headers; none for its modules.
    policy: &'static [(&'static str, &'static str)],
}

/// The page's Content-Security-Policy: its own scripts (no inline code) and
/// the WebAssembly core, calls to this origin only, and no framing (a page
/// that marks things read must not be clickjacked); no Referer leaves it.
const PAGE_POLICY: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("referrer-policy", "no-referrer"),
];

impl Asset {
    const fn new(content_type: &'static str, body: &'static [u8]) -> Asset {
        Asset {
            content_type,
            body,
            gzip: OnceLock::new(),
            policy: &[],
        }
    }

    const fn page(body: &'static [u8]) -> Asset {
        Asset {
            content_type: "text/html; charset=utf-8",
            body,
            gzip: OnceLock::new(),
            policy: PAGE_POLICY,
        }
    }

    fn gzipped(&'static self) -> &'static [u8] {
        self.gzip.get_or_init(|| {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
            encoder
                .write_all(self.body)
                .and_then(|()| encoder.finish())
                .expect("gzip into memory cannot fail")
        })
    }

    fn respond(&'static self, request_headers: &HeaderMap) -> Response {
        let mut builder = Response::builder()
            .content_type(self.content_type)
            // Static code, no credentials: a host page on another origin may
            // load the module (`mountInbox`), which module scripts fetch with CORS.
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            // Revalidate on every load: an upgraded server serves new code at once.
            .header(header::CACHE_CONTROL, "no-cache")
            .header(header::VARY, "accept-encoding")
            .header("x-content-type-options", "nosniff");
        for (name, value) in self.policy {
            builder = builder.header(*name, *value);
        }
        if accepts_gzip(request_headers) {
            builder
                .header(header::CONTENT_ENCODING, "gzip")
                .body(self.gzipped())
        } else {
            builder.body(self.body)
        }
    }
}

/// Whether `Accept-Encoding` lists gzip (or `*`) with a weight above zero.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !zero
        })
}

static INDEX: Asset = Asset::page(INDEX_HTML.as_bytes());
/// The page's modules and style sheet, by the path they are served at under
/// `/inbox/`. errors, retry, consistency and stream are @tidings/client's
/// browser parts the element is built on, compiled from
/// clients/typescript/src by scripts/gen-clients (its `--check` fails when
/// they are stale).
static FILES: [(&str, Asset); 10] = [
    (
        "/page.js",
        Asset::new(JS, include_bytes!("../../inbox/page.js")),
    ),
    (
        "/tidings-inbox.js",
        Asset::new(JS, include_bytes!("../../inbox/tidings-inbox.js")),
    ),
    (
        "/inbox.js",
        Asset::new(JS, include_bytes!("../../inbox/inbox.js")),
    ),
    (
        "/model.js",
        Asset::new(JS, include_bytes!("../../inbox/model.js")),
    ),
    (
        "/preferences.js",
        Asset::new(JS, include_bytes!("../../inbox/preferences.js")),
    ),
    (
        "/errors.js",
        Asset::new(JS, include_bytes!("../../inbox/errors.js")),
    ),
    (
        "/retry.js",
        Asset::new(JS, include_bytes!("../../inbox/retry.js")),
    ),
    (
        "/consistency.js",
        Asset::new(JS, include_bytes!("../../inbox/consistency.js")),
    ),
    (
        "/stream.js",
        Asset::new(JS, include_bytes!("../../inbox/stream.js")),
    ),
    (
        "/inbox.css",
        Asset::new(
            "text/css; charset=utf-8",
            include_bytes!("../../inbox/inbox.css"),
        ),
    ),
];
static CORE_JS: Asset = Asset::new(
    JS,
    match core_files::CORE {
        Some((js, _)) => js.as_bytes(),
        None => &[],
    },
);
static CORE_WASM: Asset = Asset::new(
    "application/wasm",
    match core_files::CORE {
        Some((_, wasm)) => wasm,
        None => &[],
    },
);

fn missing_core() -> Response {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::InboxCoreMissing,
        Some(
            "this binary was built without the WebAssembly core: run scripts/build-wasm, then rebuild"
                .into(),
        ),
    )
    .into_response(&[])
}

pub fn routes() -> Route {
    let serve = |asset: &'static Asset| {
        make_sync(move |req| {
            if core_embedded() {
                asset.respond(req.headers())
            } else {
                missing_core()
            }
        })
    };
    let route = Route::new()
        .at(
            "/",
            make_sync(|req| {
                // `/inbox` without the slash: the page's relative imports need it.
                if !req.original_uri().path().ends_with('/') {
                    return Redirect::permanent("/inbox/").into_response();
                }
                if core_embedded() {
                    INDEX.respond(req.headers())
                } else {
                    missing_core()
                }
            }),
        )
        .at("/core/tidings_core.js", serve(&CORE_JS))
        .at("/core/tidings_core_bg.wasm", serve(&CORE_WASM));
    FILES
        .iter()
        .fold(route, |route, (path, asset)| route.at(*path, serve(asset)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, accept.parse().expect("header"));
        h
    }

    #[test]
    fn gzip_is_sent_only_where_accepted() {
        assert!(accepts_gzip(&headers("gzip, deflate, br, zstd")));
        assert!(accepts_gzip(&headers("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&headers("*")));
        assert!(!accepts_gzip(&headers("br, zstd")));
        assert!(!accepts_gzip(&headers("gzip;q=0, br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_gzip_body_is_the_file() {
        let (_, asset) = FILES
            .iter()
            .find(|(path, _)| *path == "/inbox.js")
            .expect("inbox.js is served");
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(asset.gzipped()),
            &mut unzipped,
        )
        .expect("gunzip");
        assert_eq!(unzipped, asset.body);
        assert!(asset.gzipped().len() < asset.body.len() / 2);
    }
}
