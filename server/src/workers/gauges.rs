//! The sampled gauges: what needs a query (outbox backlog, dead deliveries,
//! the feed horizon's lag, a pool acquire probe) is read every
//! `TIDINGS_METRICS_SAMPLE_SECS` by one task and kept in the recorder, so a
//! scrape costs nothing however often Prometheus comes. Values are up to one
//! interval old.

use std::time::{Duration, Instant};

use tidings_core::Channel;

use crate::{
    app::instruments, app::shutdown::Shutdown, app::state::AppState, db::PrimaryPool,
    deliveries::status::DeliveryStatus, store::gauges as store,
};

pub async fn run(state: AppState, mut shutdown: Shutdown) {
    let interval = state.settings.ops.metrics_sample_interval();
    loop {
        if let Err(err) = sample(&state.pool).await {
            instruments::gauge_sample_failed();
            tracing::debug!(error = %err, "sampling gauges failed");
        }
        instruments::upkeep();
        if shutdown.sleep(interval).await {
            break;
        }
    }
}

async fn sample(pool: &PrimaryPool) -> sqlx::Result<()> {
    let started = Instant::now();
    drop(pool.inner().acquire().await?);
    instruments::db_pool_acquire(started.elapsed());

    let rows = store::read_outbox_backlog(pool).await?;
    // Every (channel, status) is set, to zero when absent: a drained backlog
    // must read 0, not its last non-zero value.
    for channel in Channel::ALL {
        // The statuses the backlog query reads: not yet final.
        for status in DeliveryStatus::UNFINISHED {
            let row = rows
                .iter()
                .find(|r| r.channel == channel.as_str() && r.status == status);
            let (deliveries, oldest) = row.map_or((0, 0.0), |r| (r.deliveries, r.oldest_secs));
            instruments::outbox_backlog(
                channel.as_str(),
                status.as_str(),
                deliveries,
                Duration::from_secs_f64(oldest.max(0.0)),
            );
        }
    }
    let dead = store::count_dead_deliveries(pool).await?;
    for channel in Channel::ALL {
        let count = dead
            .iter()
            .find(|(c, _)| c == channel.as_str())
            .map_or(0, |(_, n)| *n);
        instruments::outbox_dead(channel.as_str(), count);
    }
    let lag = store::read_horizon_lag(pool).await?;
    instruments::feed_horizon_lag(Duration::from_secs_f64(lag.max(0.0)));
    Ok(())
}
