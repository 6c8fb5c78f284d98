//! `GET /metrics`: the Prometheus text exposition. Served on
//! `TIDINGS_METRICS_LISTEN` when that is set (`serve_apart`), else on the main
//! listener only behind `TIDINGS_METRICS_TOKEN`, else nowhere: the main
//! listener is public, and a scrape costs time and memory in proportion to
//! the series (docs/design/operations.md, "Watching it"). With a token set, every scrape,
//! wherever served, must carry it.
//! Outside the OpenAPI document: it is for Prometheus, not for API clients.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use poem::{
    get, handler,
    listener::{Acceptor, Listener, TcpListener},
    web::{
        headers::{authorization::Bearer, Authorization, HeaderMapExt},
        Data,
    },
    EndpointExt, Request, Response, Route, Server,
};
use tokio::task::JoinHandle;

use crate::{
    app::instruments,
    app::shutdown::Shutdown,
    app::state::AppState,
    http::{auth::constant_time_eq, error::ApiError},
};

pub const PATH: &str = "/metrics";

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[handler]
pub fn metrics(req: &Request, Data(state): Data<&Arc<AppState>>) -> poem::Result<Response> {
    if let Some(token) = state.settings.ops.metrics_token() {
        let presented = req
            .headers()
            .typed_get::<Authorization<Bearer>>()
            .map(|auth| auth.token().to_owned())
            .unwrap_or_default();
        if !constant_time_eq(presented.as_bytes(), token.as_bytes()) {
            return Err(ApiError::unauthorized("/metrics takes the TIDINGS_METRICS_TOKEN").into());
        }
    }
    let pool = state.pool.inner();
    instruments::db_pool(
        pool.size(),
        pool.num_idle(),
        pool.options().get_max_connections(),
    );
    let body = instruments::render().unwrap_or_default();
    Ok(Response::builder().content_type(CONTENT_TYPE).body(body))
}

/// Serves `/metrics` alone on `addr` until shutdown.
pub async fn serve_apart(
    state: &AppState,
    addr: SocketAddr,
    mut shutdown: Shutdown,
) -> anyhow::Result<JoinHandle<()>> {
    let acceptor = TcpListener::bind(addr.to_string())
        .into_acceptor()
        .await
        .with_context(|| format!("binding TIDINGS_METRICS_LISTEN {addr}"))?;
    let local = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied());
    tracing::info!(addr = ?local, "serving /metrics apart from the API");
    let app = Route::new()
        .at(PATH, get(metrics))
        .data(Arc::new(state.clone()));
    Ok(tokio::spawn(async move {
        let served = Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(app, async move { shutdown.wait().await }, None)
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "the metrics listener failed");
        }
    }))
}
