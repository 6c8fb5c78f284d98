//! The store layer: every SQL statement of the server lives here, in functions
//! named verb_noun that take an executor (pool or transaction) and the tenant.

pub mod outbox;
pub mod tenants;
