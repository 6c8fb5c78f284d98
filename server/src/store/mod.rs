//! The store layer: every SQL statement of the server lives here, in functions
//! named verb_noun that take an executor (pool or transaction) and the tenant.

pub mod alerts;
pub mod deliveries;
pub mod events;
pub mod feed;
pub mod gauges;
pub mod horizon;
pub mod idempotency;
pub mod inbox;
pub mod notify;
pub mod outbox;
pub mod replication;
pub mod retention;
pub mod stream;
pub mod teams;
pub mod tenants;
pub mod users;
pub mod webhook_endpoints;
