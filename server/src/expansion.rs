//! Background team expansion: large team alerts are written in batches, each in
//! its own transaction that also advances the job's cursor (see
//! `alerts::expand_next_batch`). Any number of processes may run this; jobs are
//! claimed with SKIP LOCKED. Woken by NOTIFY `tidings_expansion`, with polling as
//! the fallback when a notification is missed or the listener is down.

use std::time::Duration;

use sqlx::postgres::PgListener;

use crate::{alerts, shutdown::Shutdown, state::AppState};

const POLL_INTERVAL: Duration = Duration::from_secs(2);
pub const CHANNEL: &str = "tidings_expansion";

pub async fn run(state: AppState, mut shutdown: Shutdown) {
    let thresholds = state.settings.alerts.thresholds();
    let mut listener = connect_listener(&state).await;
    while !shutdown.is_requested() {
        match alerts::expand_next_batch(&state.pool, &thresholds).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "team expansion batch failed; will retry");
            }
        }
        let wake = async {
            match listener.as_mut() {
                Some(l) => l.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            woke = wake => {
                if let Err(err) = woke {
                    tracing::warn!(error = %err, "expansion listener failed; polling until it reconnects");
                    listener = None;
                }
            }
        }
        if listener.is_none() {
            listener = connect_listener(&state).await;
        }
    }
}

async fn connect_listener(state: &AppState) -> Option<PgListener> {
    let mut listener = PgListener::connect_with(&state.pool).await.ok()?;
    listener.listen(CHANNEL).await.ok()?;
    Some(listener)
}
