//! Placeholder until the core lands.
