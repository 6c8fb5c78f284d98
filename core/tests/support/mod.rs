//! Helpers shared by the integration tests and the crosscheck example.
pub mod cases;
