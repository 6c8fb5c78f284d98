//! Dispatches the command line to the library.

use std::process::ExitCode;

use clap::Parser;

use crate::{
    app,
    app::config::{Cli, Command, TenantCommand},
    app::telemetry,
    db, http,
};

pub async fn run() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => app::serve(*args).await,
        Command::Migrate(args) => migrate(args).await,
        Command::Worker(args) => crate::workers::outbox::run_worker(args).await,
        Command::Openapi => {
            print!("{}", http::openapi_json());
            Ok(())
        }
        Command::Tenant(TenantCommand::Create {
            name,
            json,
            database,
        }) => create_tenant(&name, json, database).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(args: crate::app::config::DatabaseArgs) -> anyhow::Result<()> {
    let (pool, embedded) = db::open(&args).await?;
    db::migrate(&pool).await?;
    // Sealing stored secrets belongs to migrating (rows written before
    // encryption at rest existed).
    let sealed = crate::tenants::open_secret_keys(&pool, &args).await;
    pool.close().await;
    if let Some(mut pg) = embedded {
        tokio::task::spawn_blocking(move || pg.stop()).await.ok();
    }
    sealed?;
    eprintln!("migrations applied");
    Ok(())
}

async fn create_tenant(
    name: &str,
    json: bool,
    args: crate::app::config::DatabaseArgs,
) -> anyhow::Result<()> {
    let (pool, embedded) = db::open(&args).await?;
    db::migrate(&pool).await?;
    let created = match crate::tenants::open_secret_keys(&pool, &args).await {
        Ok(keys) => crate::tenants::create_tenant(&pool, &keys, name)
            .await
            .map_err(|e| anyhow::anyhow!("{e}")),
        Err(err) => Err(err),
    };
    pool.close().await;
    if let Some(mut pg) = embedded {
        tokio::task::spawn_blocking(move || pg.stop()).await.ok();
    }
    let t = created?;
    if json {
        println!("{}", serde_json::to_string_pretty(&t)?);
    } else {
        println!("tenant_id:      {}", t.tenant_id);
        println!("name:           {}", t.name);
        println!(
            "api_key:        {}   (shown once; stored only as a hash)",
            t.api_key
        );
        println!("signing_secret: {}", t.signing_secret);
    }
    Ok(())
}
