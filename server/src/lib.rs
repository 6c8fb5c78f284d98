//! tidings-server: the HTTP API, the store layer (all SQL lives there), and the
//! background workers. Pure logic lives in `tidings-core`.

#![warn(clippy::unwrap_used)]

pub mod alerts;
pub mod app;
pub mod db;
pub mod deliveries;
pub mod feed;
pub mod http;
pub mod store;
pub mod stream;
pub mod tenants;
pub mod workers;
