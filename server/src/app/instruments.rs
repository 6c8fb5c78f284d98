//! Every metric Tidings exports, in one place: names, labels, units and the
//! one function each call site calls. Call sites stay one line
//! (`instruments::cache_lookup(hit)`), so the modules being instrumented do
//! not learn about Prometheus, and a metric is renamed here, once.
//!
//! Values go to the `metrics` facade; `serve` installs the Prometheus
//! recorder ([`install`]) and `GET /metrics` renders it ([`render`]). Without
//! a recorder (unit tests, `tidings worker`) every call is a cheap no-op.
//! Gauges that need a query (outbox depth, horizon lag) are sampled
//! periodically by `crate::workers::gauges`, not per scrape.
//!
//! A leaf: it imports nothing of the server. Labels are small closed sets
//! (route templates, channel and status names): never a tenant, user or raw
//! path, so the number of series stays bounded.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Histogram buckets, in seconds: 1 ms to 10 s, for requests and purge batches.
const BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls are no-ops).
pub fn install() {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if let Err(err) = metrics::set_global_recorder(recorder) {
            tracing::warn!(error = %err, "a metrics recorder was already installed");
        }
        describe();
        handle
    });
}

/// The Prometheus text exposition of every metric, or `None` before [`install`].
pub fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

/// Drains histogram samples into their buckets; run periodically so memory
/// stays flat between scrapes.
pub fn upkeep() {
    if let Some(handle) = HANDLE.get() {
        handle.run_upkeep();
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        "tidings_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP requests by method, route template and status"
    );
    describe_gauge!(
        "tidings_db_pool_connections",
        "Database pool connections by state (in_use, idle, max)"
    );
    describe_gauge!(
        "tidings_db_pool_acquire_seconds",
        Unit::Seconds,
        "Time the periodic probe waited for a pool connection (above zero only when callers wait)"
    );
    describe_gauge!(
        "tidings_outbox_deliveries",
        "Deliveries not yet final (pending, retrying, sending) by channel and status"
    );
    describe_gauge!(
        "tidings_outbox_oldest_age_seconds",
        Unit::Seconds,
        "Age of the oldest delivery not yet final, by channel and status"
    );
    describe_gauge!(
        "tidings_outbox_dead_deliveries",
        "Dead deliveries currently stored, by channel"
    );
    describe_counter!(
        "tidings_limit_refusals_total",
        "Requests refused by a limit per tenant or user, by bucket (or pool_share)."
    );
    describe_counter!(
        "tidings_inbox_panics_total",
        "NATS inbox messages whose handling panicked (each dead-lettered; the consumer goes on)"
    );
    describe_counter!(
        "tidings_deliveries_finished_total",
        "Deliveries that reached a final status (sent, skipped, dead) in this process"
    );
    describe_counter!(
        "tidings_delivery_retries_total",
        "Failed attempts scheduled for a retry"
    );
    describe_gauge!(
        "tidings_feed_horizon_lag_seconds",
        Unit::Seconds,
        "Age of the oldest running transaction holding an xid: how far the feed horizon lags the newest write"
    );
    describe_gauge!("tidings_stream_connections", "Open live feed streams");
    describe_gauge!(
        "tidings_http_connections",
        "Open HTTP connections on the API listener"
    );
    describe_counter!(
        "tidings_http_connections_refused_total",
        "Connections closed on accept because the listener was at TIDINGS_HTTP_MAX_CONNECTIONS"
    );
    describe_counter!(
        "tidings_http_connections_timed_out_total",
        "Connections closed by a timeout, by reason (idle_timeout, header_read_timeout, write_timeout)"
    );
    describe_counter!(
        "tidings_stream_pushes_total",
        "Items pushed to live feed streams"
    );
    describe_counter!(
        "tidings_cache_lookups_total",
        "Cache lookups by cache and result (hit, miss, bypass while untrusted)"
    );
    describe_counter!(
        "tidings_counts_bases_stored_total",
        "Badge counts bases written to the database for other instances' first reads, \
         by result (stored, dropped while the queue was full, failed)"
    );
    describe_counter!(
        "tidings_retention_purged_rows_total",
        "Rows deleted by the retention worker, by table"
    );
    describe_histogram!(
        "tidings_retention_batch_duration_seconds",
        Unit::Seconds,
        "Duration of one retention purge batch (one short transaction), by table"
    );
    describe_gauge!(
        "tidings_listen_up",
        "1 while this instance's LISTEN connection on a channel is up"
    );
    describe_counter!(
        "tidings_gauge_sample_failures_total",
        "Periodic gauge queries that failed"
    );
}

/// One answered HTTP request. `route` is the matched template (`/v1/alerts/:id`),
/// or `unmatched`: never the raw path. The method is one of the standard ones
/// or `other` ([`method_label`]).
pub fn http_request(method: &str, route: &str, status: u16, elapsed: Duration) {
    histogram!(
        "tidings_http_request_duration_seconds",
        "method" => method_label(method),
        "route" => route.to_string(),
        "status" => status.to_string(),
    )
    .record(elapsed.as_secs_f64());
}

/// The `method` label of a request: a client may send any token as its
/// method, and every distinct label value is a series kept (and rendered on
/// every scrape) for the life of the process, so methods outside the
/// standard set share one value.
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// Pool connections at this instant (read at scrape time: cheap and exact).
pub fn db_pool(size: u32, idle: usize, max: u32) {
    let idle = idle as f64;
    gauge!("tidings_db_pool_connections", "state" => "in_use").set(f64::from(size) - idle);
    gauge!("tidings_db_pool_connections", "state" => "idle").set(idle);
    gauge!("tidings_db_pool_connections", "state" => "max").set(f64::from(max));
}

pub fn db_pool_acquire(waited: Duration) {
    gauge!("tidings_db_pool_acquire_seconds").set(waited.as_secs_f64());
}

/// One sampled row of the outbox backlog.
pub fn outbox_backlog(channel: &str, status: &str, deliveries: i64, oldest: Duration) {
    let labels = [
        ("channel", channel.to_string()),
        ("status", status.to_string()),
    ];
    gauge!("tidings_outbox_deliveries", &labels).set(deliveries as f64);
    gauge!("tidings_outbox_oldest_age_seconds", &labels).set(oldest.as_secs_f64());
}

pub fn outbox_dead(channel: &str, deliveries: i64) {
    gauge!("tidings_outbox_dead_deliveries", "channel" => channel.to_string())
        .set(deliveries as f64);
}

/// A delivery reached a final status (`sent`, `skipped`, `dead`).
///
/// Labels are `&'static str`: once per delivery, so no label is allocated.
pub fn delivery_finished(channel: &'static str, status: &'static str) {
    counter!(
        "tidings_deliveries_finished_total",
        "channel" => channel,
        "status" => status,
    )
    .increment(1);
}

/// A failed attempt that will be retried.
pub fn delivery_retried(channel: &'static str) {
    counter!("tidings_delivery_retries_total", "channel" => channel).increment(1);
}

pub fn feed_horizon_lag(lag: Duration) {
    gauge!("tidings_feed_horizon_lag_seconds").set(lag.as_secs_f64());
}

/// One open live stream; the gauge goes down when the guard is dropped, however
/// the stream ends.
#[must_use = "the stream counts as open while the guard lives"]
pub struct StreamGuard(());

pub fn stream_opened() -> StreamGuard {
    gauge!("tidings_stream_connections").increment(1.0);
    StreamGuard(())
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        gauge!("tidings_stream_connections").decrement(1.0);
    }
}

#[must_use = "the connection counts as open while the guard lives"]
pub struct HttpConnectionGuard(());

pub fn http_connection_opened() -> HttpConnectionGuard {
    gauge!("tidings_http_connections").increment(1.0);
    HttpConnectionGuard(())
}

impl Drop for HttpConnectionGuard {
    fn drop(&mut self) {
        gauge!("tidings_http_connections").decrement(1.0);
    }
}

pub fn http_connection_refused() {
    counter!("tidings_http_connections_refused_total").increment(1);
}

/// `reason` is one of the listener's closed set (`idle_timeout`, `header_read_timeout`).
pub fn http_connection_timed_out(reason: &'static str) {
    counter!("tidings_http_connections_timed_out_total", "reason" => reason).increment(1);
}

/// Items pushed on a live stream.
pub fn stream_pushed(items: u64) {
    counter!("tidings_stream_pushes_total").increment(items);
}

#[derive(Debug, Clone, Copy)]
pub enum CacheLookup {
    Hit,
    Miss,
    /// The cache could not be trusted (its LISTEN connection is down).
    Bypass,
}

pub fn cache_lookup(cache: &'static str, result: CacheLookup) {
    let result = match result {
        CacheLookup::Hit => "hit",
        CacheLookup::Miss => "miss",
        CacheLookup::Bypass => "bypass",
    };
    counter!("tidings_cache_lookups_total", "cache" => cache, "result" => result).increment(1);
}

/// What became of a counts base to be stored in the database.
#[derive(Debug, Clone, Copy)]
pub enum BaseStore {
    Stored,
    /// Not queued: the queue was full.
    Dropped,
    Failed,
}

pub fn counts_base_stored(result: BaseStore, bases: u64) {
    let result = match result {
        BaseStore::Stored => "stored",
        BaseStore::Dropped => "dropped",
        BaseStore::Failed => "failed",
    };
    counter!("tidings_counts_bases_stored_total", "result" => result).increment(bases);
}

/// One retention batch on `table`: rows deleted and how long it took.
pub fn retention_batch(table: &'static str, rows: u64, started: Instant) {
    counter!("tidings_retention_purged_rows_total", "table" => table).increment(rows);
    histogram!("tidings_retention_batch_duration_seconds", "table" => table)
        .record(started.elapsed().as_secs_f64());
}

/// Rows a batch on another table deleted with it (notifications and alerts go
/// with their last delivery).
pub fn retention_rows(table: &'static str, rows: u64) {
    counter!("tidings_retention_purged_rows_total", "table" => table).increment(rows);
}

pub fn listen_up(channel: &'static str, up: bool) {
    gauge!("tidings_listen_up", "channel" => channel).set(if up { 1.0 } else { 0.0 });
}

/// A request refused by a limit: `limit` is the bucket that was empty
/// (`writes`, `user_reads`, …) or `pool_share`.
pub fn limit_refused(limit: &'static str) {
    counter!("tidings_limit_refusals_total", "limit" => limit).increment(1);
}

/// A NATS inbox message whose handling panicked (`workers::nats_inbox`).
pub fn inbox_panicked() {
    counter!("tidings_inbox_panics_total").increment(1);
}

/// A refusal held before it is answered (`limits::Limits::hold_refusal`).
#[must_use = "the refusal counts as held while the guard lives"]
pub struct RefusalHeldGuard(());

pub fn refusal_held() -> RefusalHeldGuard {
    gauge!("tidings_limit_refusals_held").increment(1.0);
    RefusalHeldGuard(())
}

impl Drop for RefusalHeldGuard {
    fn drop(&mut self) {
        gauge!("tidings_limit_refusals_held").decrement(1.0);
    }
}

/// A refusal answered at once because its tenant's held refusals were at
/// their cap.
pub fn refusal_not_held() {
    counter!("tidings_limit_refusals_unheld_total").increment(1);
}

pub fn gauge_sample_failed() {
    counter!("tidings_gauge_sample_failures_total").increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the one sample line that starts with `series` (name and labels).
    fn value_of(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    #[test]
    fn recorded_values_render_as_prometheus_text() {
        install();
        http_request("GET", "/v1/alerts/:id", 404, Duration::from_millis(3));
        delivery_finished("webhook", "sent");
        let guard = stream_opened();
        let text = render().expect("installed");
        assert!(
            text.contains("# TYPE tidings_http_request_duration_seconds histogram"),
            "{text}"
        );
        let count = r#"tidings_http_request_duration_seconds_count{method="GET",route="/v1/alerts/:id",status="404"}"#;
        assert_eq!(value_of(&text, count), Some(1.0), "{text}");
        let sent = r#"tidings_deliveries_finished_total{channel="webhook",status="sent"}"#;
        assert_eq!(value_of(&text, sent), Some(1.0), "{text}");
        assert_eq!(
            value_of(&text, "tidings_stream_connections "),
            Some(1.0),
            "{text}"
        );
        drop(guard);
        let text = render().unwrap();
        assert_eq!(
            value_of(&text, "tidings_stream_connections "),
            Some(0.0),
            "{text}"
        );
    }
}
