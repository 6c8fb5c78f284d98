//! Background workers started by `tidings serve`. Each takes a `Shutdown` and
//! returns when it is requested.

use tokio::task::JoinHandle;

use crate::{shutdown::Shutdown, state::AppState};

pub fn spawn_all(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    vec![tokio::spawn(crate::cache::run_listener(
        state.pool.clone(),
        state.caches.clone(),
        shutdown.clone(),
    ))]
}
