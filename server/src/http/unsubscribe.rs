//! One-click unsubscribe (RFC 8058): `/u/{token}`, the link of an email's
//! `List-Unsubscribe` header. Outside the OpenAPI document: mail clients
//! and people reach it, not API clients.
//!
//! - `POST /u/{token}` with the body `List-Unsubscribe=One-Click` (form
//!   encoded, or the same field as multipart): the token's category × email
//!   turns off for its user, recorded as one-click. No other credential: the
//!   token is one (`alerts::preferences::token`). 200, never a redirect
//!   (the RFC forbids one), and again 200 for the same token.
//! - `GET /u/{token}`: a small page with a button that makes that POST. It
//!   never unsubscribes: mail scanners and link previews fetch links.
//! - A forged, truncated or altered token (another tenant's included) is a
//!   404 and changes nothing.

use poem::{
    handler,
    http::{header, StatusCode},
    web::{Data, Path},
    Body, Response, Route,
};

use crate::{
    alerts::preferences::{self, token::TokenKeys},
    app::state::AppState,
    http::error::{ApiError, ProblemCode},
};

/// What RFC 8058 has mail clients POST.
const ONE_CLICK: &str = "List-Unsubscribe=One-Click";
/// More than any one-click body: anything longer is not one.
const MAX_BODY_BYTES: usize = 4096;

pub fn routes() -> Route {
    Route::new().at("/:token", poem::get(page).post(one_click))
}

fn not_found() -> Response {
    ApiError::not_found(
        ProblemCode::UnsubscribeLinkNotFound,
        "this unsubscribe link is not valid",
    )
    .to_problem()
    .into_response(&[])
}

fn html(status: StatusCode, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .header("Referrer-Policy", "no-referrer")
        .header("X-Robots-Tag", "noindex")
        .body(body)
}

fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '&' => "&amp;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
}

/// Whether `body` is the one-click request: the urlencoded form, or a
/// multipart form with the field `List-Unsubscribe` set to `One-Click`.
fn is_one_click(body: &str) -> bool {
    body.split('&').any(|pair| pair.trim() == ONE_CLICK)
        || (body.contains("name=\"List-Unsubscribe\"") && body.contains("One-Click"))
}

#[handler]
async fn page(Path(token): Path<String>, state: Data<&std::sync::Arc<AppState>>) -> Response {
    let keys = TokenKeys::new(&state.secrets);
    let Some(what) = keys.verify(&token) else {
        return not_found();
    };
    let label =
        match crate::store::preferences::get_category(&state.pool, what.tenant, &what.category)
            .await
        {
            Ok(Some(row)) => row.label,
            Ok(None) => return not_found(),
            Err(err) => return ApiError::from(err).to_problem().into_response(&[]),
        };
    let panel = if state.settings.inbox_page {
        "<p><a href=\"/inbox/\">Manage all your notification preferences</a></p>"
    } else {
        ""
    };
    html(
        StatusCode::OK,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width\"><title>Unsubscribe</title></head>\
             <body><h1>Unsubscribe</h1><p>Stop emails about <strong>{}</strong>?</p>\
             <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
             <button type=\"submit\">Unsubscribe</button></form>{panel}</body></html>",
            escape(&label)
        ),
    )
}

#[handler]
async fn one_click(
    Path(token): Path<String>,
    body: Body,
    state: Data<&std::sync::Arc<AppState>>,
) -> Response {
    let keys = TokenKeys::new(&state.secrets);
    let Some(what) = keys.verify(&token) else {
        return not_found();
    };
    let body = match body.into_bytes_limit(MAX_BODY_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    if !is_one_click(&body) {
        return ApiError::bad_request(
            ProblemCode::NotOneClick,
            format!("the body must be {ONE_CLICK} (RFC 8058)"),
        )
        .to_problem()
        .into_response(&[]);
    }
    match preferences::unsubscribe(&state.pool, &what).await {
        Ok(true) => {
            tracing::info!(tenant = %what.tenant, category = %what.category, "one-click unsubscribe");
            html(
                StatusCode::OK,
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Unsubscribed</title></head>\
                 <body><p>You are unsubscribed. You will no longer get these emails.</p></body></html>"
                    .into(),
            )
        }
        Ok(false) => not_found(),
        Err(err) => ApiError::from(err).to_problem().into_response(&[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_one_click_body_counts() {
        assert!(is_one_click("List-Unsubscribe=One-Click"));
        assert!(is_one_click("a=b&List-Unsubscribe=One-Click"));
        assert!(is_one_click(
            "--x\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--x--"
        ));
        assert!(!is_one_click(""));
        assert!(!is_one_click("List-Unsubscribe=Maybe"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
    }
}
