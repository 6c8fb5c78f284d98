//! `GET /metrics`: the Prometheus text exposition. Served on the main listener,
//! or only on `TIDINGS_METRICS_LISTEN` when that is set (`serve_apart`).
//! Outside the OpenAPI document: it is for Prometheus, not for API clients.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use poem::{
    get, handler,
    listener::{Acceptor, Listener, TcpListener},
    web::Data,
    EndpointExt, Response, Route, Server,
};
use tokio::task::JoinHandle;

use crate::{instruments, shutdown::Shutdown, state::AppState};

pub const PATH: &str = "/metrics";

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[handler]
pub fn metrics(Data(state): Data<&Arc<AppState>>) -> Response {
    let pool = state.pool.inner();
    instruments::db_pool(
        pool.size(),
        pool.num_idle(),
        pool.options().get_max_connections(),
    );
    let body = instruments::render().unwrap_or_default();
    Response::builder().content_type(CONTENT_TYPE).body(body)
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
