//! The `fallow` binary: loads configuration, starts logging and the runtime, serves until SIGINT/SIGTERM.
use clap::Parser;
use fallow_server::config::{Cli, Config};
use fallow_server::server::Server;
use std::sync::Arc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(tool) = &cli.tool {
        return fallow_server::tools::run(tool);
    }
    let mut config = match Config::load(&cli) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("fallow: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let filter = fallow_server::config::log_filter(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Before the runtime opens its descriptors: raise the open-file limit, or lower maxclients to it.
    if let Err(error) = fallow_server::fdlimit::fit_at_start(&mut config.maxclients) {
        tracing::error!("{error}");
        return std::process::ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .thread_name("fallow-worker")
        .enable_all()
        .build()
        .expect("tokio runtime");
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        threads = config.threads,
        shards = config.shards,
        "fallow starting"
    );
    let server = Arc::new(Server::new(config));
    let result = runtime.block_on(fallow_server::net::serve(server, shutdown_signal()));
    match result {
        Ok(()) => {
            tracing::info!("fallow stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "fallow failed");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}
