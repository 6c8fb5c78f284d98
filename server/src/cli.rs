//! Dispatches the command line to the library.

use std::process::ExitCode;

use clap::Parser;

use crate::{
    api, app,
    config::{Cli, Command},
    db, telemetry,
};

pub async fn run() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => app::serve(args).await,
        Command::Migrate(args) => migrate(args).await,
        Command::Worker(args) => crate::outbox::run_worker(args).await,
        Command::Openapi => {
            print!("{}", api::openapi_json());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(args: crate::config::DatabaseArgs) -> anyhow::Result<()> {
    let (pool, embedded) = db::open(&args).await?;
    db::migrate(&pool).await?;
    pool.close().await;
    if let Some(mut pg) = embedded {
        tokio::task::spawn_blocking(move || pg.stop()).await.ok();
    }
    eprintln!("migrations applied");
    Ok(())
}
