//! `fallow-bench transports`: fallow over TCP, its Unix socket and shared-memory channels (issue 20,
//! YASMIN), beside a ring echo with no server behind it (the floor) and fallow's in-process GET cost.
//! Items: round trips of 64-byte GET and SET (1), throughput over connections and pipeline depth with CPU
//! per operation (2), large values against the machine's memcpy bandwidth (3), the unmodified
//! redis-benchmark with and without the preload library beside Redis (4), and the spin policy's idle cost.
//! Writes JSON, Markdown and PNG plots; see docs/shm.md "Benchmarks".
pub mod affinity;
pub mod echo;
pub mod inproc;
pub mod measure;
pub mod plots;
pub mod redisbench;
pub mod report;
pub mod servers;
pub mod wire;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use fallow_shm::SpinPolicy;
use indicatif::ProgressBar;

use measure::{Endpoints, Op};
use report::{LatencyResult, Report};
use servers::{spawn_fallow, Spawned};
use wire::{ClientSpin, Conn, Transport};

/// The benchmark's items, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Item {
    /// 1: round trips, one connection, GET and SET, every transport and the ring floor.
    Latency,
    /// 2: ops/s and CPU per op over connections and pipeline depth.
    Throughput,
    /// 3: large values, bytes/s against memcpy.
    Large,
    /// 4: redis-benchmark with and without the preload library, beside Redis.
    RedisBenchmark,
    /// The spin policy's CPU cost: an idle channel and sparse requests at several shm-spin-us.
    Spin,
}

#[derive(Args, Debug)]
pub struct TransportsArgs {
    /// The fallow binary (default: `fallow` beside this binary).
    #[arg(long)]
    pub fallow_bin: Option<PathBuf>,
    /// A smoke run of a few seconds: fewer rounds, cells and sizes, shorter cells.
    #[arg(long)]
    pub quick: bool,
    /// Items to run [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub items: Option<Vec<Item>>,
    /// Directory for transports.json, transports.md and the PNG plots.
    #[arg(long, default_value = "target/transports-bench")]
    pub out: PathBuf,
    /// Value size of the round-trip and throughput items, in bytes.
    #[arg(long, default_value_t = 64)]
    pub value_bytes: usize,
    /// Latency rounds; every transport runs once per round, in a rotating order [default: 5; --quick: 2].
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Timed round trips per transport, operation and round [default: 10000; --quick: 2000].
    #[arg(long)]
    pub round_trips: Option<usize>,
    /// Connection counts of the throughput item [default: 1,4,16,64; --quick: 1,4].
    #[arg(long, value_delimiter = ',')]
    pub connections: Option<Vec<usize>>,
    /// Pipeline depths of the throughput item.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16])]
    pub pipelines: Vec<usize>,
    /// Client threads of the throughput item; connections are shared out among them [default: one per
    /// client CPU when pinned, else 2].
    #[arg(long)]
    pub client_threads: Option<usize>,
    /// Seconds per throughput cell [default: 0.5; --quick: 0.2].
    #[arg(long)]
    pub cell_s: Option<f64>,
    /// Value sizes of the large-value item, in bytes [default: 4096,16384,65536,262144,1048576;
    /// --quick: 4096,1048576].
    #[arg(long, value_delimiter = ',')]
    pub large_bytes: Option<Vec<usize>>,
    /// Seconds per large-value cell [default: 0.4; --quick: 0.1].
    #[arg(long)]
    pub large_s: Option<f64>,
    /// Ring bytes the shared-memory client asks for (SHM.OPEN RING-BYTES); default: the server's.
    #[arg(long)]
    pub ring_bytes: Option<usize>,
    /// How the shared-memory client (and the ring's) waits for a reply: `adaptive` as fallow-client, or
    /// `fixed`, the channel's own spin-then-sleep. `FALLOW_SHM_SPIN_US` sets the budget (default 50).
    #[arg(long, value_enum, default_value_t = ClientSpin::Adaptive)]
    pub client_spin: ClientSpin,
    /// shm-spin-us settings of the spin item (fallow restarted for each).
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 50, 1000])]
    pub spin_us: Vec<u64>,
    /// Seconds of each spin measurement (no client, idle channel, sparse GETs) [default: 2; --quick: 0.5].
    #[arg(long)]
    pub idle_s: Option<f64>,
    /// Microseconds between the spin item's sparse GETs.
    #[arg(long, default_value_t = 1000)]
    pub sparse_interval_us: u64,
    /// Requests per redis-benchmark test (it times whole milliseconds) [default: 20000; --quick: 4000].
    #[arg(long)]
    pub rb_requests: Option<usize>,
    /// redis-benchmark rounds (targets rotate per round; medians reported) [default: 2; --quick: 1].
    #[arg(long)]
    pub rb_rounds: Option<usize>,
    /// The preload library (default: libfallow_preload.so beside this binary; skipped when absent).
    #[arg(long)]
    pub preload: Option<PathBuf>,
    /// Calibration written by `fallow model calibrate`, for the memcpy bandwidth (default:
    /// docs/calibration.json of the source tree).
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Placements of the round trips, throughput and redis-benchmark: `pinned` (client on the last CPU,
    /// servers on the others) and `free` (where the scheduler puts them). Large values and the spin
    /// item run in the first. See docs/shm.md "Benchmarks".
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Placement::Pinned, Placement::Free])]
    pub placements: Vec<Placement>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Where client and server run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The client thread on the last CPU, the server's threads (fallow's, or the ring echo) on the others.
    Pinned,
    /// Wherever the scheduler puts them.
    Free,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Pinned => "pinned",
            Placement::Free => "free",
        }
    }
}

/// The settings after --quick and the defaults.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    pub items: Vec<Item>,
    pub value_bytes: usize,
    pub rounds: usize,
    pub round_trips: usize,
    pub warmup_round_trips: usize,
    pub connections: Vec<usize>,
    pub pipelines: Vec<usize>,
    /// None: one per client CPU when pinned, else 2.
    pub client_threads: Option<usize>,
    pub cell_s: f64,
    pub large_bytes: Vec<usize>,
    pub large_s: f64,
    pub ring_bytes: Option<usize>,
    pub client_spin: ClientSpin,
    /// The client's spin budget (`FALLOW_SHM_SPIN_US`).
    pub client_spin_ns: u64,
    pub spin_us: Vec<u64>,
    pub idle_s: f64,
    pub sparse_interval_us: u64,
    pub rb_requests: usize,
    pub rb_rounds: usize,
    pub inproc_iterations: usize,
    pub placements: Vec<Placement>,
    pub quick: bool,
}

impl TransportsArgs {
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let q = self.quick;
        let settings = Settings {
            items: self
                .items
                .clone()
                .unwrap_or_else(|| Item::value_variants().to_vec()),
            value_bytes: self.value_bytes,
            rounds: self.rounds.unwrap_or(if q { 2 } else { 5 }),
            round_trips: self.round_trips.unwrap_or(if q { 2000 } else { 10_000 }),
            warmup_round_trips: if q { 200 } else { 2000 },
            connections: self.connections.clone().unwrap_or(if q {
                vec![1, 4]
            } else {
                vec![1, 4, 16, 64]
            }),
            pipelines: self.pipelines.clone(),
            client_threads: self.client_threads,
            cell_s: self.cell_s.unwrap_or(if q { 0.2 } else { 0.5 }),
            large_bytes: self.large_bytes.clone().unwrap_or(if q {
                vec![4 << 10, 1 << 20]
            } else {
                vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
            }),
            large_s: self.large_s.unwrap_or(if q { 0.1 } else { 0.4 }),
            ring_bytes: self.ring_bytes,
            client_spin: self.client_spin,
            client_spin_ns: SpinPolicy::from_env().spin_ns,
            spin_us: self.spin_us.clone(),
            idle_s: self.idle_s.unwrap_or(if q { 0.5 } else { 2.0 }),
            sparse_interval_us: self.sparse_interval_us,
            rb_requests: self.rb_requests.unwrap_or(if q { 4000 } else { 20_000 }),
            rb_rounds: self.rb_rounds.unwrap_or(if q { 1 } else { 2 }),
            inproc_iterations: if q { 20_000 } else { 200_000 },
            placements: self.placements.clone(),
            quick: q,
        };
        settings.check()?;
        Ok(settings)
    }
}

/// Limits that keep a run bounded in time and memory.
const CONNECTIONS_MAX: usize = 1024;
const CELL_S_MAX: f64 = 600.0;
const LARGE_BYTES_MAX: usize = 64 << 20;

impl Settings {
    fn check(&self) -> anyhow::Result<()> {
        if self.rounds == 0 || self.round_trips == 0 || self.rb_rounds == 0 || self.rb_requests == 0
        {
            bail!("--rounds, --round-trips, --rb-rounds and --rb-requests must be at least 1");
        }
        if self.client_threads == Some(0) {
            bail!("--client-threads must be at least 1");
        }
        if self.placements.is_empty() {
            bail!("--placements: at least one");
        }
        if self
            .connections
            .iter()
            .any(|&c| c == 0 || c > CONNECTIONS_MAX)
        {
            bail!("--connections: each from 1 to {CONNECTIONS_MAX}");
        }
        if self
            .pipelines
            .iter()
            .any(|&p| p == 0 || p > crate::options::PIPELINE_MAX)
        {
            bail!(
                "--pipelines: each from 1 to {}",
                crate::options::PIPELINE_MAX
            );
        }
        if self
            .large_bytes
            .iter()
            .any(|&b| b == 0 || b > LARGE_BYTES_MAX)
        {
            bail!("--large-bytes: each from 1 to {LARGE_BYTES_MAX}");
        }
        if self.value_bytes == 0 || self.value_bytes > LARGE_BYTES_MAX {
            bail!("--value-bytes: from 1 to {LARGE_BYTES_MAX}");
        }
        for (name, s) in [
            ("--cell-s", self.cell_s),
            ("--large-s", self.large_s),
            ("--idle-s", self.idle_s),
        ] {
            if !(s > 0.0 && s <= CELL_S_MAX) {
                bail!("{name}: more than 0 and at most {CELL_S_MAX} seconds");
            }
        }
        Ok(())
    }

    fn runs(&self, item: Item) -> bool {
        self.items.contains(&item)
    }
}

/// The source tree's docs/calibration.json.
fn default_calibration() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/calibration.json")
}

/// The memcpy bandwidth of a calibration: (all threads, one thread), bytes/s.
fn memcpy_bandwidth(path: &Path) -> Option<(f64, f64)> {
    match fallow_model::calibrate::Calibration::load(path) {
        Ok(calibration) => Some((
            calibration.memory.memcpy_bytes_per_sec(),
            calibration.memory.copy_single_thread_bytes_per_sec / 2.0,
        )),
        Err(error) => {
            eprintln!("note: no memcpy line: {error:#}");
            None
        }
    }
}

pub fn run_transports(args: &TransportsArgs) -> anyhow::Result<()> {
    let settings = args.settings()?;
    let bin = args
        .fallow_bin
        .clone()
        .unwrap_or_else(crate::txn::server::default_fallow_bin);
    if !bin.is_file() {
        bail!("no fallow binary at {} (give --fallow-bin)", bin.display());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let calibration = args.calibration.clone().unwrap_or_else(default_calibration);
    let mut report = Report::new(
        settings.clone(),
        &bin,
        &calibration,
        memcpy_bandwidth(&calibration),
    );
    let bar = crate::txn::server::progress_bar(step_count(&settings), args.quiet, "transports");
    run_items(&settings, &bin, args, &mut report, &bar)?;
    bar.finish_and_clear();
    print!("{}", report.markdown());
    report.write(&args.out)?;
    plots::write_all(&report, &args.out)?;
    eprintln!(
        "wrote {}/transports.{{json,md}} and PNG plots",
        args.out.display()
    );
    Ok(())
}

/// Steps of the progress bar: one per round, cell or server start.
fn step_count(s: &Settings) -> u64 {
    let mut steps = 0;
    if s.runs(Item::Latency) {
        steps += s.placements.len() * s.rounds + 1;
    }
    if s.runs(Item::Throughput) {
        steps += s.placements.len() * s.connections.len() * s.pipelines.len() * 3;
    }
    if s.runs(Item::Large) {
        steps += s.large_bytes.len() * 2;
    }
    if s.runs(Item::RedisBenchmark) {
        steps += s.placements.len() * s.rb_rounds * 2;
    }
    if s.runs(Item::Spin) {
        steps += s.spin_us.len();
    }
    steps as u64
}

fn step(bar: &ProgressBar, message: String) {
    bar.set_message(message);
    bar.inc(1);
}

/// The CPU split (client CPU, server CPUs) when there are two CPUs or more.
fn cpu_split(s: &Settings, report: &mut Report) -> Option<(usize, Vec<usize>)> {
    let split = affinity::split();
    match &split {
        Some((client, server)) => report.notes.push(format!(
            "pinned placement: client on CPU {client}, servers on CPUs {server:?}"
        )),
        None if s.placements.contains(&Placement::Pinned) => report
            .notes
            .push("fewer than two CPUs: the pinned placement is skipped".into()),
        None => {}
    }
    split
}

/// Pins this thread and `pids` per `split` (nothing when None).
fn pinned(
    split: &Option<(usize, Vec<usize>)>,
    pids: &[u32],
) -> anyhow::Result<Option<affinity::Pinned>> {
    split
        .as_ref()
        .map(|(client, server)| affinity::Pinned::new(*client, server, pids))
        .transpose()
        .context("pinning client and server to CPUs")
}

/// The CPUs of a placement: the split when pinned (None when there is no split), nothing when free.
fn split_of(
    placement: Placement,
    split: &Option<(usize, Vec<usize>)>,
) -> Option<(usize, Vec<usize>)> {
    match placement {
        Placement::Pinned => split.clone(),
        Placement::Free => None,
    }
}

/// The placements that can run here: pinned needs two CPUs.
fn usable_placements(s: &Settings, split: &Option<(usize, Vec<usize>)>) -> Vec<Placement> {
    s.placements
        .iter()
        .copied()
        .filter(|&p| p == Placement::Free || split.is_some())
        .collect()
}

fn run_items(
    s: &Settings,
    bin: &Path,
    args: &TransportsArgs,
    report: &mut Report,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let value = vec![b'x'; s.value_bytes];
    let key: &[u8] = b"bench:transports";
    let split = cpu_split(s, report);
    let placements = usable_placements(s, &split);
    // The one-connection items after the round trips run in the first placement.
    let single = placements.first().copied().unwrap_or(Placement::Free);
    let single_split = split_of(single, &split);
    let needs_fallow = [
        Item::Latency,
        Item::Throughput,
        Item::Large,
        Item::RedisBenchmark,
    ];
    if needs_fallow.iter().any(|&item| s.runs(item)) {
        let fallow = spawn_fallow(bin, &ring_flags(s))?;
        let endpoints = Endpoints::of(&fallow, SpinPolicy::from_env(), s.ring_bytes, s.client_spin);
        Conn::tcp(&endpoints.tcp_addr)?.call(&Op::Set.request(key, &value))?;
        let started = Instant::now();
        if s.runs(Item::Latency) {
            step(bar, "in-process GET".into());
            {
                let _pinned = pinned(&single_split, &[fallow.pid])?;
                report.inproc = Some(inproc::measure(s.value_bytes, s.inproc_iterations)?);
            }
            for &placement in &placements {
                let split = split_of(placement, &split);
                let _pinned = pinned(&split, &[fallow.pid])?;
                let server_cpus = split.as_ref().map(|(_, server)| server.clone());
                report.latency.extend(latency_item(
                    s,
                    &endpoints,
                    key,
                    &value,
                    placement,
                    server_cpus,
                    bar,
                )?);
            }
        }
        report.timed(Item::Latency, started);
        let started = Instant::now();
        if s.runs(Item::Throughput) {
            for &placement in &placements {
                let split = split_of(placement, &split);
                let _pinned = pinned(&split, &[fallow.pid])?;
                // Pinned: one thread per client CPU (two spinning clients on one CPU take turns by
                // spinning out their budgets).
                let threads = s
                    .client_threads
                    .unwrap_or(if split.is_some() { 1 } else { 2 });
                report.throughput.extend(throughput_item(
                    s, &endpoints, &fallow, key, placement, threads, bar,
                )?);
            }
        }
        report.timed(Item::Throughput, started);
        let started = Instant::now();
        if s.runs(Item::Large) {
            let _pinned = pinned(&single_split, &[fallow.pid])?;
            report.large_placement = Some(single);
            report.large = large_item(s, &endpoints, report.memcpy_bytes_per_s(), bar)?;
        }
        report.timed(Item::Large, started);
        let started = Instant::now();
        if s.runs(Item::RedisBenchmark) {
            redis_benchmark_item(s, &fallow, args, &placements, &split, report, bar)?;
        }
        report.timed(Item::RedisBenchmark, started);
    }
    let started = Instant::now();
    if s.runs(Item::Spin) {
        report.spin_placement = Some(single);
        for &spin_us in &s.spin_us {
            step(bar, format!("spin {spin_us} us"));
            let mut flags = ring_flags(s);
            flags.extend(["--shm-spin-us".to_string(), spin_us.to_string()]);
            let fallow = spawn_fallow(bin, &flags)?;
            Conn::tcp(&fallow.tcp_addr())?.call(&Op::Set.request(key, &value))?;
            let _pinned = pinned(&single_split, &[fallow.pid])?;
            report.spin.push(measure::spin_cost(
                &fallow,
                spin_us,
                key,
                s.value_bytes,
                s.idle_s,
                Duration::from_micros(s.sparse_interval_us),
                s.client_spin,
            )?);
        }
    }
    report.timed(Item::Spin, started);
    Ok(())
}

/// `--shm-ring-bytes` when the client asks for a size, so the server allows it.
fn ring_flags(s: &Settings) -> Vec<String> {
    match s.ring_bytes {
        Some(bytes) => vec![
            "--shm-ring-bytes-max".into(),
            bytes.max(4 << 20).to_string(),
        ],
        None => Vec::new(),
    }
}

fn latency_item(
    s: &Settings,
    endpoints: &Endpoints,
    key: &[u8],
    value: &[u8],
    placement: Placement,
    server_cpus: Option<Vec<usize>>,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<LatencyResult>> {
    let transports = [
        Transport::Tcp,
        Transport::Unix,
        Transport::Shm,
        Transport::Ring,
    ];
    let ops = [Op::Get, Op::Set];
    let echo_dir = std::env::temp_dir().join(format!("fallow-bench-ring-{}", std::process::id()));
    std::fs::create_dir_all(&echo_dir)?;
    // One connection per transport and operation, open for all rounds (the ring has one echo per op).
    let mut echoes = Vec::new();
    let mut conns = Vec::new();
    for op in ops {
        for transport in transports {
            let conn = if transport == Transport::Ring {
                let echo = echo::RingEcho::start(
                    &echo_dir.join(format!("{}.sock", op.name())),
                    op.request(key, value).len(),
                    op.reply_bytes(value),
                    s.ring_bytes.unwrap_or(256 << 10),
                    endpoints.spin,
                    server_cpus.clone(),
                )?;
                let conn = Conn::shm(&echo.path, None, endpoints.spin, endpoints.client_spin)?;
                echoes.push(echo);
                conn
            } else {
                endpoints.connect(transport)?
            };
            conns.push(((transport, op), conn));
        }
    }
    let mut results: Vec<LatencyResult> = conns
        .iter()
        .map(|((t, op), _)| LatencyResult::new(*t, *op, placement))
        .collect();
    for ((_, op), conn) in conns.iter_mut() {
        let mut warm = measure::histogram();
        let request = op.request(key, value);
        measure::timed_round_trips(
            conn,
            &request,
            &op.expected(value.len()),
            s.warmup_round_trips,
            &mut warm,
        )?;
    }
    for round in 0..s.rounds {
        step(
            bar,
            format!(
                "latency {} round {}/{}",
                placement.name(),
                round + 1,
                s.rounds
            ),
        );
        for index in measure::rotated(&(0..conns.len()).collect::<Vec<_>>(), round) {
            let ((_, op), conn) = &mut conns[index];
            let mut histogram = measure::histogram();
            let request = op.request(key, value);
            measure::timed_round_trips(
                conn,
                &request,
                &op.expected(value.len()),
                s.round_trips,
                &mut histogram,
            )?;
            results[index].add_round(&histogram);
        }
    }
    drop(conns);
    for echo in echoes {
        echo.finish()?;
    }
    let _ = std::fs::remove_dir_all(&echo_dir);
    Ok(results)
}

fn throughput_item(
    s: &Settings,
    endpoints: &Endpoints,
    fallow: &Spawned,
    key: &[u8],
    placement: Placement,
    client_threads: usize,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<measure::ThroughputCell>> {
    let transports = [Transport::Tcp, Transport::Unix, Transport::Shm];
    let mut cells = Vec::new();
    let mut turn = 0;
    for &connections in &s.connections {
        for &pipeline in &s.pipelines {
            for transport in measure::rotated(&transports, turn) {
                let what = format!("{} c{connections} P{pipeline}", transport.name());
                step(bar, format!("{} {what}", placement.name()));
                let mut cell = measure::throughput_cell(
                    endpoints,
                    fallow,
                    transport,
                    connections,
                    pipeline,
                    client_threads,
                    key,
                    s.value_bytes,
                    s.cell_s,
                )?;
                cell.placement = placement;
                cells.push(cell);
            }
            turn += 1;
        }
    }
    Ok(cells)
}

fn large_item(
    s: &Settings,
    endpoints: &Endpoints,
    memcpy_bytes_per_s: Option<f64>,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<measure::LargeCell>> {
    let transports = [Transport::Tcp, Transport::Unix, Transport::Shm];
    let mut conns: Vec<Conn> = transports
        .iter()
        .map(|&t| endpoints.connect(t))
        .collect::<anyhow::Result<_>>()?;
    let mut cells = Vec::new();
    for (turn, &bytes) in s.large_bytes.iter().enumerate() {
        let value = vec![b'L'; bytes];
        let key = format!("bench:large:{bytes}").into_bytes();
        // SET first: it leaves the value GET then reads.
        for op in [Op::Set, Op::Get] {
            step(bar, format!("large {} {bytes} B", op.name()));
            for index in measure::rotated(&[0, 1, 2], turn) {
                cells.push(measure::large_cell(
                    &mut conns[index],
                    transports[index],
                    op,
                    &key,
                    &value,
                    s.large_s,
                    memcpy_bytes_per_s,
                )?);
            }
        }
    }
    Ok(cells)
}

fn redis_benchmark_item(
    s: &Settings,
    fallow: &Spawned,
    args: &TransportsArgs,
    placements: &[Placement],
    split: &Option<(usize, Vec<usize>)>,
    report: &mut Report,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    if !crate::txn::server::on_path("redis-benchmark") {
        report
            .notes
            .push("redis-benchmark is not installed: item 4 skipped".into());
        return Ok(());
    }
    let redis = servers::spawn_redis()?;
    let mut targets = vec![
        redisbench::Target::tcp("fallow tcp", fallow.port),
        redisbench::Target::unix("fallow unix", &fallow.socket),
    ];
    match args.preload.clone().or_else(redisbench::default_preload) {
        Some(library) if library.is_file() => {
            report
                .notes
                .push(format!("preload library: {}", library.display()));
            targets.push(redisbench::Target::preload(
                &library,
                fallow.port,
                &fallow.socket,
            ));
        }
        _ => report.notes.push(
            "libfallow_preload.so is not built: redis-benchmark ran without the preload library"
                .into(),
        ),
    }
    match &redis {
        Some(redis) => targets.push(redisbench::Target::unix("redis unix", &redis.socket)),
        None => report
            .notes
            .push("redis-server is not installed: no Redis beside fallow".into()),
    }
    // redis-benchmark inherits this thread's CPU; both servers go to the server CPUs.
    let pids: Vec<u32> = [Some(fallow.pid), redis.as_ref().map(|r| r.pid)]
        .into_iter()
        .flatten()
        .collect();
    for &placement in placements {
        let _pinned = pinned(&split_of(placement, split), &pids)?;
        for round in 0..s.rb_rounds {
            for clients in [1usize, 50] {
                let what = format!("c{clients} round {}", round + 1);
                step(bar, format!("redis-benchmark {} {what}", placement.name()));
                for target in measure::rotated(&(0..targets.len()).collect::<Vec<_>>(), round) {
                    let target = &targets[target];
                    let results = redisbench::run(target, clients, s.rb_requests, s.value_bytes)?;
                    report.redis_benchmark.extend(
                        results
                            .into_iter()
                            .map(|r| redisbench::RbResult { placement, ..r }),
                    );
                }
            }
        }
    }
    Ok(())
}
