//! tidings-server: the HTTP API, the store layer (all SQL lives there), and the
//! background workers. Pure logic lives in `tidings-core`.

#![warn(clippy::unwrap_used)]

pub mod alerts;
pub mod api;
pub mod app;
pub mod auth;
pub mod backoff;
pub mod cache;
pub mod channels;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod db;
pub mod deliveries;
pub mod embedded_pg;
pub mod error;
pub mod events;
pub mod feed;
pub mod gauges;
pub mod horizon;
pub mod http_server;
pub mod idempotency;
pub mod instruments;
pub mod json_nul;
pub mod limits;
pub mod listen;
pub mod nats_inbox;
pub mod outbox;
pub mod paging;
pub mod payload;
pub mod pipeline;
pub mod replicas;
pub mod request_id;
pub mod retention;
pub mod secrets;
pub mod shutdown;
pub mod state;
pub mod store;
pub mod stream;
pub mod teams;
pub mod telemetry;
pub mod tenants;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod webhook_endpoints;
pub mod workers;
