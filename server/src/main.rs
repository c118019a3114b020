//! The `taskbroker` command: `serve` and `migrate`.

use std::sync::Arc;

use clap::{Parser, Subcommand};
use taskbroker_server::app::{self, AppConfig};
use taskbroker_server::config::{DatabaseArgs, ServeArgs};
use taskbroker_server::service::SystemClock;

#[derive(Parser)]
#[command(
    name = "taskbroker",
    version,
    about = "A gRPC task broker with a durable task table"
)]
struct Cli {
    /// Log format on stderr: text or json.
    #[arg(
        long,
        global = true,
        env = "TASKBROKER_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(Box<ServeArgs>),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = args.settings().map_err(anyhow::Error::msg)?;
    let config = AppConfig {
        listen: args.listen,
        database_url: args.database.database_url.clone(),
        db_max_connections: args.database.db_max_connections,
        reclaim_interval: args.reclaim_interval,
        settings,
    };
    let mut app = app::start(config, Arc::new(SystemClock)).await?;
    let addr = app.addr;
    println!("taskbroker listening on {addr}");
    println!("  database: {}", redact(&args.database.database_url));
    println!("  try: taskbroker submit emails --payload hello --addr http://{addr}");
    tracing::info!(%addr, backend = app.broker.store().backend(), "serving");
    tokio::select! {
        r = app.wait() => r?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down: draining long-polls and in-flight calls");
            app.shutdown(args.shutdown_grace).await?;
        }
    }
    Ok(())
}

/// The URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{user}:***@{}", &url[..s], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Migrate(db) => {
            async {
                let store = taskbroker_server::store::connect(&db.database_url, 1).await?;
                store.migrate().await?;
                println!("migrated {}", redact(&db.database_url));
                Ok(())
            }
            .await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One plain line for people; the chain is in the log.
            eprintln!("taskbroker: {e}");
            tracing::debug!(error = ?e, "exiting with error");
            std::process::ExitCode::FAILURE
        }
    }
}
