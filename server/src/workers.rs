//! Background workers started by `tidings serve`. Each takes a `Shutdown` and
//! returns when it is requested.

use tokio::task::JoinHandle;

use crate::{shutdown::Shutdown, state::AppState};

pub fn spawn_all(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    let mut workers = vec![
        tokio::spawn(crate::cache::run_listener(
            state.listen_pool.clone(),
            state.caches.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::alerts::expansion::run(
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::idempotency::run_purge(
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::gauges::run(state.clone(), shutdown.clone())),
        tokio::spawn(crate::retention::run(state.clone(), shutdown.clone())),
    ];
    if state.settings.alerts.nats_url.is_some() {
        workers.push(tokio::spawn(crate::nats_inbox::run(
            state.clone(),
            shutdown.clone(),
        )));
    }
    workers.extend(state.replicas.spawn_checks(shutdown.clone()));
    workers.extend(crate::outbox::spawn(state, shutdown));
    workers.extend(crate::stream::spawn(state, shutdown));
    workers
}
