//! The `fallow` binary: without a subcommand it loads the server's configuration, starts logging and the
//! runtime, and serves until SIGINT/SIGTERM; with one it runs a tool (`tools`) instead.
mod tools;

use clap::Parser;
use fallow_server::config::Config;
use fallow_server::server::Server;
use std::sync::Arc;

/// The command line: the server's flags (`fallow_server::config::Cli`, each also a `FALLOW_*` environment
/// variable), or a tool subcommand.
#[derive(Parser, Debug)]
#[command(
    name = "fallow",
    version,
    about = "fallow: a Redis- and memcached-compatible store that lives in a host's idle memory",
    long_about = "fallow serves the Redis protocol (RESP2/RESP3) and the memcached protocols (text, meta, binary) \
from one sharded, memory-accounted store.\n\nPrecedence of settings: built-in defaults < TOML file (--config) < \
FALLOW_* environment variables < command-line flags. See docs/configuration.md.\n\nWithout a subcommand \
fallow starts the server; the subcommands are tools that work with a running one or with this machine.",
    args_conflicts_with_subcommands = true
)]
struct CommandLine {
    /// A tool to run instead of the server.
    #[command(subcommand)]
    tool: Option<tools::Tool>,
    #[command(flatten)]
    server: fallow_server::config::Cli,
}

fn main() -> std::process::ExitCode {
    let cli = CommandLine::parse();
    if let Some(tool) = &cli.tool {
        return tools::run(tool);
    }
    let mut config = match Config::load(&cli.server) {
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
    // The data directory is locked and tier 2 replayed before any listener opens.
    let server = match Server::open(config) {
        Ok(server) => Arc::new(server),
        Err(error) => {
            tracing::error!("{error}");
            eprintln!("fallow: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    // So are the function libraries saved there; a damaged file is set aside and reported.
    fallow_server::command::scripting::function::restore_saved(&server);
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

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_is_consistent() {
        // clap's own checks (unique names and groups, flattened options beside subcommands), which would
        // otherwise fail only at run time.
        <super::CommandLine as clap::CommandFactory>::command().debug_assert();
    }
}
