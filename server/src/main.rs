use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a request allocates and frees many
/// small buffers (rows, JSON, headers) on two worker threads, and glibc's
/// malloc took ~14 % of the service's CPU under feed reads (bench/README.md,
/// "the service's allocator and build").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    tidings_server::cli::run().await
}
