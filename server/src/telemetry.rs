//! Structured logs. RUST_LOG filters (default `info`); logs go to stderr so that
//! stdout carries only what scripts read (the bound address, `openapi` output).

use tracing_subscriber::{fmt, EnvFilter};

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,poem=info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second init (tests calling into the library twice) is harmless; ignore it.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
