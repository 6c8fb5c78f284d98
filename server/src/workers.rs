//! Background workers started by `tidings serve`. Each takes a `Shutdown` and
//! returns when it is requested.

use tokio::task::JoinHandle;

use crate::{shutdown::Shutdown, state::AppState};

pub fn spawn_all(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    handles.extend(crate::outbox::spawn(state, shutdown));
    handles
}
