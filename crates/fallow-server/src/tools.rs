//! The tool subcommands of the `fallow` binary: `fallow model ...`, `fallow load ...`, `fallow dump ...`.
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum Tool {
    /// The Krevat performance model (optimal runtimes, efficiency) and this machine's calibration.
    Model(fallow_model::cli::ModelArgs),
    /// Stream a record file (sort-benchmark, key<TAB>value or CSV) into a running fallow.
    Load(fallow_bench::bulk::LoadArgs),
    /// Export all string keys and values from a running fallow to a record file, optionally in key order.
    Dump(fallow_bench::bulk::DumpArgs),
}

/// Runs a tool and maps its error to exit status 1 with a message on stderr.
pub fn run(tool: &Tool) -> ExitCode {
    let result = match tool {
        Tool::Model(args) => fallow_model::cli::run(args, &fallow_bench::nullserver::probe),
        Tool::Load(args) => fallow_bench::bulk::run_load(args),
        Tool::Dump(args) => fallow_bench::bulk::run_dump(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fallow: {error:#}");
            ExitCode::FAILURE
        }
    }
}
