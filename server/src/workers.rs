//! Background workers started by `tidings serve`. Each takes a `Shutdown` and
//! returns when it is requested.

use tokio::task::JoinHandle;

use crate::{shutdown::Shutdown, state::AppState};

pub fn spawn_all(_state: &AppState, _shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    Vec::new()
}
