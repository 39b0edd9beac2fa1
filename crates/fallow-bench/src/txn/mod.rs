//! `fallow-bench txn raw|rubis|retwis`: Claret's §6 experiments on fallow's transactions (issue 5). Each
//! run compares the modes (non-transactional, r/w locks, +boosting, +phasing, +combining) over a sweep of
//! client counts and writes JSON, a Markdown table and PNG plots; see docs/transactions.md "Benchmarks".
pub mod backend;
pub mod commands;
pub mod driver;
pub mod experiment;
pub mod raw;
pub mod report;
pub mod retwis;
pub mod rmat;
pub mod rubis;
pub mod server;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

pub use experiment::run_txn;

/// What retries after a lock conflict when phasing is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictRetry {
    /// The refused command, while the transaction keeps its locks (Claret's baseline, TXN.BEGIN BUSY).
    Operation,
    /// The whole transaction, after it aborts.
    Transaction,
}

/// A concurrency-control configuration: the server's CONFIG settings plus the client's combining.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The same operations as plain commands, no TXN.* (the upper bound).
    Nontxn,
    /// Reader/writer locks, fail fast and retry with backoff (Claret's baseline; see `--conflict-retry`).
    Rw,
    /// Abstract locks (boosting), fail fast and retry (see `--conflict-retry`).
    Boosting,
    /// Abstract locks, waiting in the record's phaser.
    Phasing,
    /// Abstract locks, phasing, and the client merging combinable operations.
    Combining,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Nontxn,
        Mode::Rw,
        Mode::Boosting,
        Mode::Phasing,
        Mode::Combining,
    ];

    /// `txn-locks` and `txn-phasing`.
    pub fn server_settings(self) -> (&'static str, &'static str) {
        match self {
            Mode::Rw => ("rw", "no"),
            Mode::Boosting => ("abstract", "no"),
            Mode::Nontxn | Mode::Phasing | Mode::Combining => ("abstract", "yes"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Nontxn => "nontxn",
            Mode::Rw => "rw",
            Mode::Boosting => "boosting",
            Mode::Phasing => "phasing",
            Mode::Combining => "combining",
        }
    }
}

#[derive(Args, Debug)]
pub struct TxnArgs {
    #[command(subcommand)]
    pub workload: TxnWorkload,
}

#[derive(Subcommand, Debug)]
pub enum TxnWorkload {
    /// Claret §6.1: 4 set operations per transaction (SADD/SCARD), zipf keys; sweeps add fraction and skew.
    Raw {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        raw: RawArgs,
    },
    /// Claret §6.2: RUBiS auctions, bid-heavy and read-heavy mixes.
    Rubis {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        rubis: RubisArgs,
    },
    /// Claret §6.3: Retwis over an R-MAT follower graph, post-heavy and read-heavy mixes.
    Retwis {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        retwis: RetwisArgs,
    },
}

/// The options every workload takes.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// A running fallow, HOST:PORT (ignored with --spawn).
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub server: String,
    /// Its pid, for server CPU time (default: INFO's process_id when the server is on this host).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Start fallow on a free port (and redis-server beside it for the nontxn comparison, when installed).
    #[arg(long)]
    pub spawn: bool,
    /// The fallow binary --spawn starts (default: `fallow` beside this binary).
    #[arg(long)]
    pub fallow_bin: Option<PathBuf>,
    /// With --spawn, do not start redis-server.
    #[arg(long)]
    pub no_redis: bool,
    /// Modes to compare, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Mode::ALL.to_vec())]
    pub modes: Vec<Mode>,
    /// Concurrent transactions (client threads) to sweep [default: 4,16,64,128; --quick: 4,16].
    #[arg(long, value_delimiter = ',')]
    pub clients: Option<Vec<usize>>,
    /// Measured seconds per cell [default: 10; --quick: 1].
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Unmeasured seconds before each cell [default: 2; --quick: 0.3].
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// A smoke run of about a minute: fewer points, clients and seconds, and smaller data.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the JSON, Markdown and PNG results.
    #[arg(long, default_value = "target/txn-bench")]
    pub out: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Attempts beyond the first before a transaction is counted as failed.
    #[arg(long, default_value_t = 1000)]
    pub retries_max: u32,
    #[arg(long, default_value_t = 100)]
    pub backoff_initial_us: u64,
    #[arg(long, default_value_t = 20_000)]
    pub backoff_max_us: u64,
    /// No progress bars or lines (the table is still printed).
    #[arg(long)]
    pub quiet: bool,
    /// Send every command in a round trip of its own: no writes behind the next command, no commit behind
    /// the last (for comparison with runs before both).
    #[arg(long)]
    pub no_pipelining: bool,
    /// What retries after a lock conflict in the modes without phasing (rw, boosting): `transaction`, the
    /// whole transaction after an abort (it gives its locks up while it backs off), or `operation`, the
    /// refused command after a backoff while the transaction keeps its locks (Claret's baseline, §6;
    /// commands then go one per round trip).
    #[arg(long, value_enum, default_value_t = ConflictRetry::Transaction)]
    pub conflict_retry: ConflictRetry,
    /// Emulate a network: every request of fallow-client (all modes, Redis included) waits this long
    /// before it is written, so each round trip takes that much longer and locks are held across it.
    /// Models a cluster's links (Claret's round trips took 150 µs) on loopback; the report gives the
    /// PING round trip measured with it. 0 = plain loopback.
    #[arg(long, default_value_t = 0)]
    pub link_delay_us: u64,
    /// Start the modes at this index of `--modes` (wrapping). Modes take turns at each client count, and
    /// their order turns by one per client count; rounds with 0, 1, 2, ... also vary which goes first.
    #[arg(long, default_value_t = 0)]
    pub rotate_modes: usize,
}

impl CommonArgs {
    pub fn clients(&self) -> Vec<usize> {
        let default = if self.quick {
            vec![4, 16]
        } else {
            vec![4, 16, 64, 128]
        };
        self.clients.clone().unwrap_or(default)
    }

    pub fn duration_s(&self) -> f64 {
        self.duration_s
            .unwrap_or(if self.quick { 1.0 } else { 10.0 })
    }

    pub fn warmup_s(&self) -> f64 {
        self.warmup_s.unwrap_or(if self.quick { 0.3 } else { 2.0 })
    }
}

#[derive(Args, Debug, Clone)]
pub struct RawArgs {
    /// Sets in the key space.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    #[arg(long, default_value_t = 4)]
    pub ops_per_txn: usize,
    /// The add-fraction sweep, run at --add-sweep-zipf [default: 0,0.25,0.5,0.75,1; --quick: none].
    #[arg(long, value_delimiter = ',')]
    pub add_fractions: Option<Vec<f64>>,
    #[arg(long, default_value_t = 0.6)]
    pub add_sweep_zipf: f64,
    /// The skew sweep, run at --zipf-sweep-add [default: 0.6,0.8,1.0,1.2,1.4; --quick: 0.6,1.2].
    #[arg(long, value_delimiter = ',')]
    pub zipfs: Option<Vec<f64>>,
    #[arg(long, default_value_t = 0.5)]
    pub zipf_sweep_add: f64,
    /// How a transaction orders its operations and takes its locks: `claret` (as drawn, Claret's mix),
    /// `declared` (sets both sized and added to are locked up front with TXN.LOCK), `ordered` (declared,
    /// and in one global order of sets, hottest last: no deadlocks).
    #[arg(long, value_enum, default_value_t = raw::Discipline::Claret)]
    pub discipline: raw::Discipline,
}

#[derive(Args, Debug, Clone)]
pub struct RubisArgs {
    /// Items on sale [default: 30000; --quick: 3000].
    #[arg(long)]
    pub items: Option<u64>,
    /// Registered users [default: 100000; --quick: 5000].
    #[arg(long)]
    pub users: Option<u64>,
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [rubis::RubisMix::BidHeavy, rubis::RubisMix::ReadHeavy])]
    pub mixes: Vec<rubis::RubisMix>,
    /// Every auction closes and reopens once per period; bids crowd into its last tenth.
    #[arg(long, default_value_t = 30.0)]
    pub auction_period_s: f64,
    /// Bids kept per item (TopN's k).
    #[arg(long, default_value_t = 10)]
    pub topn_k: u64,
}

#[derive(Args, Debug, Clone)]
pub struct RetwisArgs {
    /// 2^scale users [default: 16, 65,536 users; --quick: 12].
    #[arg(long)]
    pub scale: Option<u32>,
    /// Followers per user on average.
    #[arg(long, default_value_t = 16)]
    pub edge_factor: u32,
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [retwis::RetwisMix::PostHeavy, retwis::RetwisMix::ReadHeavy])]
    pub mixes: Vec<retwis::RetwisMix>,
}
