use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a request allocates and frees many
/// small buffers (rows, JSON, headers) across two worker threads, and glibc's
/// arenas spent ~14 % of the service's CPU on it under feed reads
/// (bench/README.md, "the service's allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    tidings_server::cli::run().await
}
