//! Bulk load (`fallow load FILE`) and sorted export (`fallow dump --sorted FILE`) of record files, and the
//! sort-benchmark record generator (`fallow-bench gensort N`). Formats: `records`; docs: docs/bulk.md.
pub mod client;
pub mod dump;
pub mod gensort;
pub mod load;
pub mod records;

use records::{Format, Limits};
use std::path::PathBuf;
use std::time::Duration;

/// What to do with a malformed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Count it, report where it was at the end, and go on.
    Skip,
    /// Stop at it, naming its line/offset.
    Fail,
}

/// `fallow load`: stream a record file into a running fallow.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Record file (format from --format or the extension: .sort/.dat, .tsv/.txt, .csv).
    pub file: PathBuf,
    /// Server: tcp://HOST:PORT, unix:/path, or unix: for $FALLOW_SOCKET (else port 6379's default socket).
    #[arg(long, default_value = "tcp://127.0.0.1:6379")]
    pub server: String,
    /// Parallel connections, each sending pipelined commands. Defaults here and for --pipeline and
    /// --batch are the fastest measured on a 2-core machine (docs/bulk.md).
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    /// Commands in flight per connection (sent together, then their replies read).
    #[arg(long, default_value_t = 8)]
    pub pipeline: usize,
    /// Records per command: 1 sends SET, more sends MSET with that many records.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Malformed records: fail (stop, naming the line/offset) or skip (count and report them at the end).
    #[arg(long, value_enum, default_value_t = OnError::Fail)]
    pub on_error: OnError,
    /// Largest key, e.g. 64KiB; longer keys are malformed records.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    pub max_key_bytes: usize,
    /// Largest value, e.g. 512MiB (the server's own limit); longer values are malformed records.
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    pub max_value_bytes: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl LoadArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            key_bytes_max: self.max_key_bytes,
            value_bytes_max: self.max_value_bytes,
        }
    }
}

/// `fallow dump`: export every string key and its value.
#[derive(clap::Args, Debug, Clone)]
pub struct DumpArgs {
    /// Output file (format from --format or the extension: .sort/.dat, .tsv/.txt, .csv).
    pub file: PathBuf,
    /// Write records in bytewise key order (each shard's records sorted, then merged).
    #[arg(long)]
    pub sorted: bool,
    /// Server: tcp://HOST:PORT, unix:/path, or unix: for $FALLOW_SOCKET (else port 6379's default socket).
    #[arg(long, default_value = "tcp://127.0.0.1:6379")]
    pub server: String,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Parallel connections, each scanning its share of the shards (0 = one per shard, at most 4).
    #[arg(long, default_value_t = 0)]
    pub connections: usize,
    /// Keys each SHARDSCAN step visits (and so the most the server copies per shard lock hold).
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Records the format cannot hold (sort: a key not of 10 bytes or a value not of 90): fail or skip
    /// (count and report).
    #[arg(long, value_enum, default_value_t = OnError::Fail)]
    pub on_error: OnError,
    /// Client memory a --sorted dump may hold (it keeps every record until the merge), e.g. 8GiB;
    /// default three quarters of the memory available at start.
    #[arg(long, value_parser = parse_size)]
    pub max_memory: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `fallow-bench gensort`: write sort-benchmark records (100 bytes: 10-byte key, 90-byte value).
#[derive(clap::Args, Debug, Clone)]
pub struct GensortArgs {
    /// Number of records, e.g. 10000, 10M (K/M/G = 10^3/10^6/10^9).
    #[arg(value_parser = parse_count)]
    pub records: u64,
    /// Output file (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keys of printable ASCII (as gensort -a) instead of uniformly random bytes.
    #[arg(long)]
    pub ascii_keys: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run_load(args: &LoadArgs) -> anyhow::Result<()> {
    load::run(args)
}

pub fn run_dump(args: &DumpArgs) -> anyhow::Result<()> {
    dump::run(args)
}

pub fn run_gensort(args: &GensortArgs) -> anyhow::Result<()> {
    gensort::run(args)
}

/// A record count: digits with an optional K, M or G (decimal) suffix.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let (digits, scale) = split_suffix(
        text,
        &[("k", 1_000), ("m", 1_000_000), ("g", 1_000_000_000)],
    );
    digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(scale))
        .ok_or_else(|| format!("bad count {text:?}: use digits with an optional K, M or G"))
}

/// A byte size: digits with an optional KiB/MiB/GiB (or K/M/G, also binary) suffix.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let suffixes = [
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("kb", 1 << 10),
        ("mb", 1 << 20),
        ("gb", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("b", 1),
    ];
    let (digits, scale) = split_suffix(text, &suffixes);
    digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(scale))
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| format!("bad size {text:?}: use e.g. 4096, 64KiB, 512MiB, 8GiB"))
}

fn split_suffix<'a>(text: &'a str, suffixes: &[(&str, u64)]) -> (&'a str, u64) {
    let lower = text.trim().to_ascii_lowercase();
    for (suffix, scale) in suffixes {
        if lower.ends_with(suffix) {
            return (&text.trim()[..lower.len() - suffix.len()], *scale);
        }
    }
    (text.trim(), 1)
}

/// A progress bar on stderr (hidden when stderr is not a terminal, or with --quiet).
fn progress_bar(total: u64, template: &str, quiet: bool) -> indicatif::ProgressBar {
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(total)
    };
    let style = indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Megabytes (10^6 bytes) per second.
fn mb_per_sec(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sizes_parse() {
        assert_eq!(parse_count("10M"), Ok(10_000_000));
        assert_eq!(parse_count("1500"), Ok(1500));
        assert_eq!(parse_count("4g"), Ok(4_000_000_000));
        assert!(parse_count("x").is_err());
        assert!(parse_count("99999999999G").is_err());
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("100b"), Ok(100));
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn args_parse_with_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: Command,
        }
        #[derive(clap::Subcommand)]
        enum Command {
            Load(LoadArgs),
            Dump(DumpArgs),
            Gensort(GensortArgs),
        }
        let cli = Cli::try_parse_from(["x", "load", "a.csv", "--on-error", "skip"]).unwrap();
        let Command::Load(load) = cli.command else {
            panic!("load")
        };
        assert_eq!(load.on_error, OnError::Skip);
        assert_eq!(load.limits().key_bytes_max, 64 << 10);
        let cli = Cli::try_parse_from(["x", "dump", "o.tsv", "--sorted"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Dump(DumpArgs { sorted: true, .. })
        ));
        let cli = Cli::try_parse_from(["x", "gensort", "2k", "--seed", "9"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Gensort(GensortArgs {
                records: 2000,
                seed: 9,
                ..
            })
        ));
    }
}
