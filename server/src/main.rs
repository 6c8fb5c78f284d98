use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a request allocates and frees many
/// small buffers (rows, JSON, headers) on two worker threads, and glibc's
/// malloc took ~14 % of the service's CPU under feed reads
/// (bench/findings/allocator-and-build.md, "Why").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    tidings_server::app::cli::run().await
}
