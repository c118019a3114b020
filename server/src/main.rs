//! The `taskbroker` command: `serve` and `migrate`, plus the client subcommands
//! (`submit`, `get`, `list`, ...) from `taskbroker_client::cli`.

use std::sync::Arc;

use clap::{Parser, Subcommand};
use taskbroker_server::app;
use taskbroker_server::config::{DatabaseArgs, ServeArgs, redact_url};
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
enum ConfigCommand {
    /// Print the effective configuration (defaults, file, env, flags) as TOML,
    /// with secrets redacted, after validating it.
    Print(Box<ServeArgs>),
}

// Parsed once at start-up; the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the broker on SQLite (one broker), Postgres or MySQL/MariaDB (several
    /// replicas): see --database-url.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Show the effective configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check a running broker end to end: health, then Submit, Lease and Complete
    /// of one task on a fresh queue (what `helm test` runs).
    Smoke(taskbroker_server::smoke::SmokeArgs),
    /// Print the store's statements as a database receives them (fragments
    /// expanded), to paste into psql, sqlite3 or mariadb and EXPLAIN: every
    /// statement's name, or one statement's text.
    Sql(SqlArgs),
    #[command(flatten)]
    Client(taskbroker_client::cli::ClientCommand),
}

#[derive(clap::Args)]
struct SqlArgs {
    /// The database: sqlite, postgres or mysql.
    store: String,
    /// A statement's name; without one, every name with its file.
    name: Option<String>,
}

fn print_sql(a: &SqlArgs) -> anyhow::Result<()> {
    let all = taskbroker_server::store::sql::statements(&a.store).ok_or_else(|| {
        anyhow::anyhow!("store must be sqlite, postgres or mysql, not {}", a.store)
    })?;
    match &a.name {
        None => {
            for s in all {
                println!("{}\t{}", s.name, s.file);
            }
        }
        Some(name) => {
            let s = all
                .iter()
                .find(|s| s.name == name.as_str())
                .ok_or_else(|| anyhow::anyhow!("{} has no statement {name}", a.store))?;
            println!("{};", s.text);
        }
    }
    Ok(())
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
    // Everything is checked before a port is bound.
    let config = args.load().map_err(anyhow::Error::msg)?;
    let valid = config.validate().map_err(anyhow::Error::msg)?;
    let (tokens, tls) = (!valid.app.auth.is_empty(), valid.app.tls.is_some());
    let mut app = app::start(valid.app, Arc::new(SystemClock)).await?;
    let addr = app.addr;
    print!(
        "{}",
        app::banner(
            addr,
            &redact_url(&config.database_url),
            app.metrics_addr,
            tokens,
            tls
        )
    );
    tracing::info!(%addr, backend = app.broker.store().backend(), "serving");
    tokio::select! {
        r = app.wait() => r?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down: draining long-polls and in-flight calls");
            app.shutdown(valid.shutdown_grace).await?;
            tracing::info!("stopped");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let telemetry = match taskbroker_server::telemetry::init(&cli.log_format) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("taskbroker: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Migrate(db) => {
            async {
                let store = taskbroker_server::store::connect(&db.database_url, 1).await?;
                store.migrate().await?;
                println!("migrated {}", redact_url(&db.database_url));
                Ok(())
            }
            .await
        }
        Command::Config(ConfigCommand::Print(args)) => args
            .load()
            .and_then(|c| c.validate().map(|_| c))
            .map(|c| print!("{}", c.redacted_toml()))
            .map_err(anyhow::Error::msg),
        Command::Sql(args) => print_sql(&args),
        Command::Smoke(args) => taskbroker_server::smoke::run(args)
            .await
            .map(|report| print!("{report}"))
            .map_err(anyhow::Error::from),
        Command::Client(cmd) => taskbroker_client::cli::run(cmd)
            .await
            .map_err(anyhow::Error::from),
    };
    telemetry.shutdown();
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
