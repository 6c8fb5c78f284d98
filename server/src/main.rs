use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tidings_server::cli::run().await
}
