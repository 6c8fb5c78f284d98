//! `tidings serve`: the HTTP API plus background workers, with one shutdown path.

pub mod cli;
pub mod config;
pub mod instruments;
pub mod shutdown;
pub mod state;
pub mod telemetry;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;

use std::{io::Write, time::Duration};

use anyhow::Context;

use crate::{
    app::config::ServeArgs,
    app::shutdown::OsSignals,
    app::state::{AppState, Settings},
    db, http,
};

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let signals = OsSignals::install().context("installing signal handlers")?;
    crate::app::instruments::install();
    #[cfg(feature = "test-hooks")]
    crate::app::test_hooks::announce();
    // Refused before anything starts.
    let admin_token = match args.admin_token.clone().filter(|t| !t.is_empty()) {
        Some(token) => {
            crate::app::config::check_admin_token(&token)?;
            token
        }
        None => {
            let token = crate::tenants::credentials::random_token(32);
            // Printed once, deliberately on stderr with the logs: not stored anywhere.
            eprintln!("TIDINGS_ADMIN_TOKEN was not set; this run's admin token is: {token}");
            token
        }
    };
    let outbox = crate::app::config::OutboxConfig::from_args(&args.worker)?;
    // Fail at start-up, not at the first email.
    outbox.channels()?;
    args.retention.validate(&args.alerts)?;
    args.limits.validate()?;
    args.http.validate()?;
    args.ops.validate()?;
    args.check_pool_size()?;
    let secrets = crate::tenants::load_secret_keys(&args.database)?;
    let (pool, embedded) = db::open(&args.database).await?;
    db::migrate(&pool).await?;
    crate::tenants::seal_at_start(&pool, &secrets).await?;
    let replicas = crate::db::replicas::Replicas::connect(
        pool.clone(),
        &args.replicas,
        args.database.db_max_connections,
        args.database.session_timeouts(),
    )?;
    let state = AppState::new(
        pool,
        Settings {
            max_body_bytes: args.max_body_bytes,
            body_timeout: args.http.body_timeout(),
            outbox,
            admin_token,
            alerts: args.alerts.clone(),
            ops: args.ops.clone(),
            retention: args.retention.clone(),
            inbox_page: args.inbox_page,
            auth: args.auth.clone(),
            stream: args.stream.clone(),
            limits: args.limits.clone(),
            bounds: args.bounds.clone(),
            db_max_connections: args.database.db_max_connections,
            cors_origins: crate::app::config::cors_origins(&args.cors_origins)?,
            trusted_proxies: args.http.trusted_proxies()?,
        },
        secrets,
    )
    .with_replicas(replicas);

    let (trigger, shutdown) = shutdown::channel();
    let mut workers = crate::workers::spawn_all(&state, &shutdown);
    if let Some(addr) = args.ops.metrics_listen {
        workers.push(http::metrics::serve_apart(&state, addr, shutdown.clone()).await?);
    } else if !args.ops.metrics_on_api_listener() {
        tracing::info!(
            "/metrics is not served: set TIDINGS_METRICS_LISTEN (an address of its own) \
             or TIDINGS_METRICS_TOKEN (on this listener, behind the token)"
        );
    }

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr().context("listener has no address")?;
    // The one line on stdout: scripts and tests read the bound address from it.
    println!("tidings listening on http://{local}");
    std::io::stdout().flush().ok();
    tracing::info!(%local, docs = %format!("http://{local}/docs"), "serving");

    let limits = crate::http::listener::Limits {
        header_read: args.http.header_read_timeout(),
        idle: args.http.idle_timeout(),
        max_connections: args.http.http_max_connections,
        write: args.http.write_timeout(),
    };
    let server = crate::http::listener::serve(
        listener,
        http::routes(&state),
        limits,
        async move {
            signals.recv().await;
            trigger.trigger();
        },
        Duration::from_secs(args.shutdown_grace_secs),
    );
    let served = server.await;

    // In-flight requests are done; let workers finish their current step.
    drop(shutdown);
    for worker in workers {
        if let Err(err) = worker.await {
            tracing::error!(error = %err, "worker panicked");
        }
    }
    state.pool.close().await;
    if let Some(mut pg) = embedded {
        tokio::task::spawn_blocking(move || pg.stop()).await.ok();
    }
    served.context("HTTP server failed")
}
