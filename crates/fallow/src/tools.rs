//! The tool subcommands of the `fallow` binary: `fallow model ...`, `fallow load ...`, `fallow dump ...`,
//! `fallow socket-path`, `fallow fs ...`.
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum Tool {
    /// The Krevat performance model (optimal runtimes, efficiency) and this machine's calibration.
    Model(fallow_model::cli::ModelArgs),
    /// Stream a record file (sort-benchmark, key<TAB>value or CSV) into a running fallow.
    Load(fallow_bench::bulk::LoadArgs),
    /// Export all string keys and values from a running fallow to a record file, optionally in key order.
    Dump(fallow_bench::bulk::DumpArgs),
    /// Print the Unix socket path tools and clients use for the server on a port: $FALLOW_SOCKET when
    /// set, else the default the server binds (see docs/configuration.md, `unixsocket`).
    SocketPath(SocketPathArgs),
    /// Mount a passthrough filesystem over a backing directory whose file blocks are cached in fallow's
    /// pool, with feedback-directed read-ahead (docs/fs.md). Runs until SIGINT/SIGTERM, then unmounts.
    Fs(fallow_fs::FsArgs),
}

#[derive(clap::Args, Debug)]
pub struct SocketPathArgs {
    /// The server's RESP port.
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Print the server's default path, ignoring $FALLOW_SOCKET.
    #[arg(long)]
    pub default: bool,
}

fn socket_path(args: &SocketPathArgs) -> anyhow::Result<()> {
    use fallow_proto::socket_path::{default_socket_path, socket_path};
    let path = if args.default {
        default_socket_path(args.port)
    } else {
        socket_path(args.port)
    };
    println!("{}", path.display());
    Ok(())
}

/// Runs a tool and maps its error to exit status 1 with a message on stderr.
pub fn run(tool: &Tool) -> ExitCode {
    let result = match tool {
        Tool::Model(args) => fallow_model::cli::run(args, &fallow_bench::nullserver::probe),
        Tool::Load(args) => fallow_bench::bulk::run_load(args),
        Tool::Dump(args) => fallow_bench::bulk::run_dump(args),
        Tool::SocketPath(args) => socket_path(args),
        Tool::Fs(args) => fallow_fs::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fallow: {error:#}");
            ExitCode::FAILURE
        }
    }
}
