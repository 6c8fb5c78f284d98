//! Background team expansion: large team alerts are written in batches, each in
//! its own transaction that also advances the job's cursor (see
//! `alerts::expand_next_batch`). Any number of processes may run this; jobs are
//! claimed with SKIP LOCKED. Woken by `NotifyChannel::Expansion`, with polling
//! as the fallback when a notification is missed or the listener is down.

use std::time::Duration;

use crate::{alerts, listen, shutdown::Shutdown, state::AppState, store::notify::NotifyChannel};

const POLL_INTERVAL: Duration = Duration::from_secs(2);

pub async fn run(state: AppState, mut shutdown: Shutdown) {
    let thresholds = state.settings.alerts.thresholds();
    let (waker, mut woken) = listen::spawn_waker(
        state.pool.clone(),
        NotifyChannel::Expansion,
        shutdown.clone(),
    );
    while !shutdown.is_requested() {
        // Notifications from now on wake the wait below, even those that
        // arrive while this batch runs.
        woken.borrow_and_update();
        match alerts::expand_next_batch(&state.pool, &thresholds).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "team expansion batch failed; will retry");
            }
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            changed = woken.changed() => {
                // The waker stopped (shutting down): the poll interval remains.
                if changed.is_err() && shutdown.sleep(POLL_INTERVAL).await {
                    break;
                }
            }
        }
    }
    waker.await.ok();
}
