//! Background workers started by `tidings serve`. Each takes a `Shutdown` and
//! returns when it is requested.

pub mod backoff;
pub mod channels;
pub mod digests;
pub mod gauges;
pub mod nats_inbox;
pub mod outbox;
pub mod retention;

use tokio::task::JoinHandle;

use crate::{app::shutdown::Shutdown, app::state::AppState};

pub fn spawn_all(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    let mut workers = vec![
        tokio::spawn(crate::feed::cache::run_listener(
            state.listen_pool.clone(),
            state.caches.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::alerts::expansion::run(
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::alerts::idempotency::run_purge(
            state.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(crate::workers::gauges::run(state.clone(), shutdown.clone())),
        tokio::spawn(crate::workers::retention::run(
            state.clone(),
            shutdown.clone(),
        )),
    ];
    if state.settings.alerts.nats_url.is_some() {
        workers.push(tokio::spawn(crate::workers::nats_inbox::run(
            state.clone(),
            shutdown.clone(),
        )));
    }
    workers.extend(state.replicas.spawn_checks(shutdown.clone()));
    workers.extend(crate::workers::outbox::spawn(state, shutdown));
    workers.extend(crate::stream::spawn(state, shutdown));
    workers
}
