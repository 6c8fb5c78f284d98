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
const PAGE_JS: &str = include_str!("../../inbox/page.js");
const INBOX_JS: &str = include_str!("../../inbox/inbox.js");
const ELEMENT_JS: &str = include_str!("../../inbox/tidings-inbox.js");
const MODEL_JS: &str = include_str!("../../inbox/model.js");
const PREFERENCES_JS: &str = include_str!("../../inbox/preferences.js");
const INBOX_CSS: &str = include_str!("../../inbox/inbox.css");

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
static PAGE: Asset = Asset::new(JS, PAGE_JS.as_bytes());
static INBOX: Asset = Asset::new(JS, INBOX_JS.as_bytes());
static ELEMENT: Asset = Asset::new(JS, ELEMENT_JS.as_bytes());
static MODEL: Asset = Asset::new(JS, MODEL_JS.as_bytes());
static PREFERENCES: Asset = Asset::new(JS, PREFERENCES_JS.as_bytes());
static CSS: Asset = Asset::new("text/css; charset=utf-8", INBOX_CSS.as_bytes());
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
    Route::new()
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
        .at("/page.js", serve(&PAGE))
        .at("/inbox.js", serve(&INBOX))
        .at("/tidings-inbox.js", serve(&ELEMENT))
        .at("/model.js", serve(&MODEL))
        .at("/preferences.js", serve(&PREFERENCES))
        .at("/inbox.css", serve(&CSS))
        .at("/core/tidings_core.js", serve(&CORE_JS))
        .at("/core/tidings_core_bg.wasm", serve(&CORE_WASM))
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
        static ASSET: Asset = Asset::new(JS, INBOX_JS.as_bytes());
        let asset = &ASSET;
        let mut unzipped = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(asset.gzipped()),
            &mut unzipped,
        )
        .expect("gunzip");
        assert_eq!(unzipped, INBOX_JS);
        assert!(asset.gzipped().len() < INBOX_JS.len() / 2);
    }
}
