//! `fallow-bench`: the load generator (`run`), the null server (`null-server`), the sort-benchmark
//! record generator (`gensort`) and the experiment drivers (`elastic`, `txn`, `transports`, `fs`).
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fallow_bench::nullserver::{run_null_server, NullServerArgs};
use fallow_bench::{plot, report, RunOptions};

#[derive(Parser, Debug)]
#[command(
    name = "fallow-bench",
    version,
    about = "Load generator and experiment drivers for fallow"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Drive a RESP or memcached server; print throughput, hit ratio and latency percentiles.
    Run(Box<RunOptions>),
    /// A minimal server that answers every request with one fixed reply (the ceiling of this machine).
    NullServer(NullServerArgs),
    /// Write sort-benchmark records (100 bytes: 10-byte key, 90-byte value).
    Gensort(fallow_bench::bulk::GensortArgs),
    /// Run an elastic-memory experiment (issue 4; the drivers in scripts/bench/elastic/).
    Elastic(fallow_bench::experiments::ElasticArgs),
    /// Transactions (issue 5, Claret §6): raw operation mix, RUBiS or Retwis, every concurrency-control mode.
    Txn(Box<fallow_bench::txn::TxnArgs>),
    /// Transports (issue 20): TCP, Unix socket and shared-memory channels; round trips, throughput, large
    /// values, the spin policy and redis-benchmark with the preload library.
    Transports(Box<fallow_bench::transports::TransportsArgs>),
    /// File cache (issue 21, Mortar §6.7): slowcat, video server and OLTP over prefetch policies and cache
    /// sizes, cache-hit bandwidth against a null FUSE file system, and the pool halved during a video run,
    /// over an emulated slow device (root, fio, fuse3).
    Fs(Box<fallow_bench::fs::FsArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(options) => run(options),
        Command::NullServer(args) => run_null_server(args),
        Command::Gensort(args) => fallow_bench::bulk::run_gensort(args),
        Command::Elastic(args) => fallow_bench::experiments::run_elastic(args),
        Command::Txn(args) => fallow_bench::txn::run_txn(args),
        Command::Transports(args) => fallow_bench::transports::run_transports(args),
        Command::Fs(args) => fallow_bench::fs::run_fs(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fallow-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `fallow-bench run`: the summary goes to stdout, or to stderr when the JSON record takes stdout.
fn run(options: &RunOptions) -> anyhow::Result<()> {
    let results = fallow_bench::run(options)?;
    let summary = report::summary(options, &results);
    if options.json.as_deref() == Some("-") {
        eprint!("{summary}");
    } else {
        print!("{summary}");
    }
    if let Some(target) = &options.json {
        report::write_json(target, options, &results)?;
    }
    if let Some(path) = &options.plot {
        let title = options
            .label
            .clone()
            .unwrap_or_else(|| format!("{} {}", options.server, options.protocol.name()));
        plot::write_plot(path, &title, &results.histogram, &results.timeline)?;
    }
    Ok(())
}
