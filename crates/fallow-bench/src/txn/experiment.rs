//! One `fallow-bench txn` run: the targets, the points of the workload's sweep, and for each point every
//! mode at every client count (Redis: nontxn only), then the report.
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::backend::{ping_round_trip_us, ClientBackend, ClientKind, RetryPolicy};
use super::driver::{min_window_mean, run_cell, CellTiming, Workload};
use super::raw::{Discipline, Raw, RawParams};
use super::report::{self, CellResult, PointReport, RunReport};
use super::retwis::Retwis;
use super::rmat::{self, Graph};
use super::rubis::{self, Rubis, RubisMix, RubisParams};
use super::server::{self, progress_bar, ServerProbe, Target};
use super::{
    CommonArgs, ConflictRetry, Mode, RawArgs, RetwisArgs, RubisArgs, TxnArgs, TxnWorkload,
};
use crate::options::ServerAddr;

/// Seconds per window of the minimum-throughput figure (Claret §6.2).
const MIN_WINDOW_S: usize = 5;

/// A workload with its sweep.
trait Experiment {
    fn name(&self) -> &'static str;
    /// Each point's label and parameters.
    fn points(&self) -> Vec<(String, serde_json::Value)>;
    /// Puts the data set into a freshly started (or given) server.
    fn load(&self, target: &Target, quiet: bool) -> anyhow::Result<()>;
    fn workload<'a>(&'a self, point: usize, target: &Target, nonce: u64) -> Box<dyn Workload + 'a>;
}

struct RawExperiment {
    points: Vec<RawParams>,
    /// Per point: (in the add-fraction sweep, in the zipf sweep).
    sweeps: Vec<(bool, bool)>,
}

impl RawExperiment {
    fn new(args: &RawArgs, quick: bool) -> RawExperiment {
        let (adds, zipfs) = match quick {
            true => (vec![], vec![0.6, 1.2]),
            false => (
                vec![0.0, 0.25, 0.5, 0.75, 1.0],
                vec![0.6, 0.8, 1.0, 1.2, 1.4],
            ),
        };
        let point = |add_fraction, zipf| RawParams {
            keys: args.keys,
            ops_per_txn: args.ops_per_txn,
            add_fraction,
            zipf,
            discipline: args.discipline,
        };
        let (mut points, mut sweeps): (Vec<RawParams>, Vec<(bool, bool)>) =
            (Vec::new(), Vec::new());
        let add_sweep = args.add_fractions.clone().unwrap_or(adds);
        let zipf_sweep = args.zipfs.clone().unwrap_or(zipfs);
        let candidates = add_sweep
            .iter()
            .map(|&a| (point(a, args.add_sweep_zipf), (true, false)))
            .chain(
                zipf_sweep
                    .iter()
                    .map(|&z| (point(args.zipf_sweep_add, z), (false, true))),
            );
        for (p, (in_add, in_zipf)) in candidates {
            // The two sweeps meet at one point; it runs once.
            let same = |q: &RawParams| q.add_fraction == p.add_fraction && q.zipf == p.zipf;
            match points.iter().position(same) {
                Some(i) => sweeps[i] = (sweeps[i].0 || in_add, sweeps[i].1 || in_zipf),
                None => {
                    points.push(p);
                    sweeps.push((in_add, in_zipf));
                }
            }
        }
        RawExperiment { points, sweeps }
    }
}

impl Experiment for RawExperiment {
    fn name(&self) -> &'static str {
        "raw"
    }

    fn points(&self) -> Vec<(String, serde_json::Value)> {
        self.points
            .iter()
            .zip(&self.sweeps)
            .map(|(p, (in_add_sweep, in_zipf_sweep))| {
                let mut label = format!("zipf {} add {}%", p.zipf, p.add_fraction * 100.0);
                if p.discipline != Discipline::Claret {
                    label += &format!(", {}", p.discipline.name());
                }
                let params = serde_json::json!({"keys": p.keys, "ops_per_txn": p.ops_per_txn,
                    "add_fraction": p.add_fraction, "zipf": p.zipf, "discipline": p.discipline,
                    "in_add_sweep": in_add_sweep, "in_zipf_sweep": in_zipf_sweep});
                (label, params)
            })
            .collect()
    }

    fn load(&self, _target: &Target, _quiet: bool) -> anyhow::Result<()> {
        // The sets start empty and grow with the adds.
        Ok(())
    }

    fn workload<'a>(&'a self, point: usize, _: &Target, _: u64) -> Box<dyn Workload + 'a> {
        Box::new(Raw {
            params: self.points[point],
        })
    }
}

struct RubisExperiment {
    params: RubisParams,
    mixes: Vec<RubisMix>,
    epoch: Instant,
}

impl Experiment for RubisExperiment {
    fn name(&self) -> &'static str {
        "rubis"
    }

    fn points(&self) -> Vec<(String, serde_json::Value)> {
        let p = &self.params;
        self.mixes
            .iter()
            .map(|mix| {
                let params = serde_json::json!({"mix": mix.name(), "weights": mix.weights(),
                    "kinds": rubis::KINDS, "items": p.items, "users": p.users,
                    "regions": rubis::REGIONS, "categories": rubis::CATEGORIES,
                    "auction_period_s": p.auction_period_s, "topn_k": p.topn_k});
                (mix.name().to_string(), params)
            })
            .collect()
    }

    fn load(&self, target: &Target, quiet: bool) -> anyhow::Result<()> {
        let count = rubis::load_command_count(&self.params, target.dialect);
        let commands = rubis::load_commands(&self.params, target.dialect);
        target.load("items and users", commands, count, quiet)
    }

    fn workload<'a>(&'a self, point: usize, target: &Target, nonce: u64) -> Box<dyn Workload + 'a> {
        Box::new(Rubis {
            params: self.params,
            mix: self.mixes[point],
            dialect: target.dialect,
            run_nonce: nonce,
            epoch: self.epoch,
        })
    }
}

struct RetwisExperiment {
    graph: Graph,
    scale: u32,
    mixes: Vec<super::retwis::RetwisMix>,
}

impl Experiment for RetwisExperiment {
    fn name(&self) -> &'static str {
        "retwis"
    }

    fn points(&self) -> Vec<(String, serde_json::Value)> {
        self.mixes
            .iter()
            .map(|mix| {
                let params = serde_json::json!({"mix": mix.name(), "weights": mix.weights(),
                    "actions": super::retwis::ACTIONS, "users": self.graph.users(),
                    "rmat_scale": self.scale, "mean_followers": self.graph.mean_followers(),
                    "max_followers": self.graph.followers.iter().map(Vec::len).max()});
                (mix.name().to_string(), params)
            })
            .collect()
    }

    fn load(&self, target: &Target, quiet: bool) -> anyhow::Result<()> {
        let commands = super::retwis::load_commands(&self.graph);
        let count = commands.len() as u64;
        target.load("follower graph", commands.into_iter(), count, quiet)
    }

    fn workload<'a>(&'a self, point: usize, target: &Target, nonce: u64) -> Box<dyn Workload + 'a> {
        Box::new(Retwis {
            graph: &self.graph,
            mix: self.mixes[point],
            dialect: target.dialect,
            run_nonce: nonce,
        })
    }
}

fn experiment(workload: &TxnWorkload) -> (&CommonArgs, Box<dyn Experiment>) {
    match workload {
        TxnWorkload::Raw { common, raw } => {
            (common, Box::new(RawExperiment::new(raw, common.quick)))
        }
        TxnWorkload::Rubis { common, rubis } => {
            (common, Box::new(rubis_experiment(rubis, common.quick)))
        }
        TxnWorkload::Retwis { common, retwis } => {
            (common, Box::new(retwis_experiment(retwis, common)))
        }
    }
}

fn rubis_experiment(args: &RubisArgs, quick: bool) -> RubisExperiment {
    RubisExperiment {
        params: RubisParams {
            items: args.items.unwrap_or(if quick { 3_000 } else { 30_000 }),
            users: args.users.unwrap_or(if quick { 5_000 } else { 100_000 }),
            auction_period_s: args.auction_period_s,
            topn_k: args.topn_k,
        },
        mixes: args.mixes.clone(),
        epoch: Instant::now(),
    }
}

fn retwis_experiment(args: &RetwisArgs, common: &CommonArgs) -> RetwisExperiment {
    let scale = args.scale.unwrap_or(if common.quick { 12 } else { 16 });
    let started = Instant::now();
    let graph = rmat::generate(scale, args.edge_factor, common.seed);
    if !common.quiet {
        eprintln!(
            "R-MAT graph: {} users, {} follows, at most {} followers ({:.1} s)",
            graph.users(),
            graph.edges.len(),
            graph.followers.iter().map(Vec::len).max().unwrap_or(0),
            started.elapsed().as_secs_f64()
        );
    }
    RetwisExperiment {
        graph,
        scale,
        mixes: args.mixes.clone(),
    }
}

/// The servers: fallow first, then Redis for the nontxn comparison.
fn targets(common: &CommonArgs) -> anyhow::Result<Vec<Target>> {
    if !common.spawn {
        let addr: ServerAddr = format!("tcp://{}", common.server).parse()?;
        return Ok(vec![server::existing(addr, common.server_pid)?]);
    }
    let bin = common
        .fallow_bin
        .clone()
        .unwrap_or_else(server::default_fallow_bin);
    let mut targets = vec![server::spawn_fallow(&bin)?];
    if !common.no_redis {
        match server::spawn_redis()? {
            Some(redis) => targets.push(redis),
            None if !common.quiet => eprintln!("note: redis-server is not installed; no Redis row"),
            None => {}
        }
    }
    Ok(targets)
}

/// `fallow-bench txn ...`.
pub fn run_txn(args: &TxnArgs) -> anyhow::Result<()> {
    let (common, experiment) = experiment(&args.workload);
    let targets = targets(common)?;
    let mut round_trips_us = Vec::new();
    for target in &targets {
        let round_trip_us = ping_round_trip_us(&target.addr, common.link_delay_us)?;
        if !common.quiet {
            eprintln!(
                "{}: median PING round trip {round_trip_us:.0} µs (link delay {} µs)",
                target.name, common.link_delay_us
            );
        }
        round_trips_us.push((target.name, round_trip_us));
    }
    let mut points: Vec<PointReport> = experiment
        .points()
        .into_iter()
        .map(|(label, params)| PointReport::new(label, params))
        .collect();
    for target in &targets {
        experiment.load(target, common.quiet)?;
        for (index, point) in points.iter_mut().enumerate() {
            for (clients, mode) in schedule(&modes_of(target, common), &common.clients()) {
                let workload = experiment.workload(index, target, nonce());
                let cell = run_one(common, target, &*workload, mode, clients, &point.label)?;
                point.cells.push(cell);
            }
        }
        // What is done so far is on disk, should a later target fail.
        let taken = std::mem::take(&mut points);
        let so_far = RunReport::new(experiment.name(), common, round_trips_us.clone(), taken);
        report::write_all(&so_far, &common.out)?;
        points = so_far.points;
    }
    let report = RunReport::new(experiment.name(), common, round_trips_us, points);
    print!("{}", report::markdown(&report));
    if !common.quiet {
        eprintln!("results in {}", common.out.display());
    }
    Ok(())
}

/// The modes a target runs: all asked for on fallow, starting at `--rotate-modes`; nontxn alone on Redis.
fn modes_of(target: &Target, common: &CommonArgs) -> Vec<Mode> {
    match target.name {
        "fallow" => rotated(&common.modes, common.rotate_modes),
        _ => vec![Mode::Nontxn],
    }
}

/// The cells of one point in the order they run: every mode at the first client count, then every mode
/// at the next, the modes' order turning by one each time. Modes thus take turns on the data (which changes
/// as the run goes) and each compares with the others in about the same state, none always first or last.
fn schedule(modes: &[Mode], clients: &[usize]) -> Vec<(usize, Mode)> {
    clients
        .iter()
        .enumerate()
        .flat_map(|(turn, &count)| {
            rotated(modes, turn)
                .into_iter()
                .map(move |mode| (count, mode))
        })
        .collect()
}

/// `modes` starting at index `by` (mod their count): rounds run with 0, 1, 2, ... let no mode always run
/// last on data that changes as the run goes (sets fill, timelines grow, auctions close).
fn rotated(modes: &[Mode], by: usize) -> Vec<Mode> {
    let mut modes = modes.to_vec();
    if !modes.is_empty() {
        let by = by % modes.len();
        modes.rotate_left(by);
    }
    modes
}

/// Differs between cells and between runs, so client-made ids do not repeat on the same data.
fn nonce() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn backend(
    common: &CommonArgs,
    target: &Target,
    mode: Mode,
    clients: usize,
) -> anyhow::Result<ClientBackend> {
    let retry = RetryPolicy {
        retries_max: common.retries_max,
        backoff_initial_us: common.backoff_initial_us,
        backoff_max_us: common.backoff_max_us,
    };
    let transactional = mode != Mode::Nontxn;
    let combining = mode == Mode::Combining;
    let retry_operations = matches!(mode, Mode::Rw | Mode::Boosting)
        && common.conflict_retry == ConflictRetry::Operation;
    let kind = ClientKind {
        transactional,
        combining,
        retry_operations,
        pipelining: !common.no_pipelining,
        link_delay_us: common.link_delay_us,
    };
    ClientBackend::connect(&target.addr, kind, retry, clients)
}

fn run_one(
    common: &CommonArgs,
    target: &Target,
    workload: &dyn Workload,
    mode: Mode,
    clients: usize,
    point: &str,
) -> anyhow::Result<CellResult> {
    target.set_mode(mode)?;
    let backend = backend(common, target, mode, clients)?;
    let timing = CellTiming {
        warmup: Duration::from_secs_f64(common.warmup_s()),
        duration: Duration::from_secs_f64(common.duration_s()),
    };
    let label = format!("{} {point} {} x{clients}", target.name, mode.name());
    let bar = progress_bar(
        (timing.duration.as_secs_f64() * 10.0) as u64,
        common.quiet,
        &label,
    );
    let progress = |t_s: f64, commits: u64| {
        bar.set_position((t_s * 10.0) as u64);
        bar.set_message(format!(
            "{label}: {:.0} txn/s",
            commits as f64 / t_s.max(1e-3)
        ));
    };
    let mut probe = ServerProbe::new(target);
    let measured = run_cell(
        workload,
        &backend,
        clients,
        timing,
        common.seed,
        &mut probe,
        &progress,
    )
    .with_context(|| label.clone())?;
    bar.finish_and_clear();
    let min_window = min_window_mean(&measured.timeline_txn_per_s, MIN_WINDOW_S);
    let cell = CellResult::new(
        target.name,
        mode,
        clients,
        &measured,
        &probe,
        min_window,
        &backend.stats(),
    );
    if !common.quiet {
        eprintln!("{}", cell.line(point));
    }
    Ok(cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotating_modes_starts_elsewhere_and_keeps_every_mode() {
        let all = Mode::ALL.to_vec();
        assert_eq!(rotated(&all, 0), all);
        assert_eq!(rotated(&all, 2)[0], Mode::Boosting);
        assert_eq!(rotated(&all, 2)[4], Mode::Rw);
        assert_eq!(rotated(&all, 7), rotated(&all, 2));
        assert!(rotated(&[], 3).is_empty());
    }

    #[test]
    fn schedule_alternates_modes_per_client_count_and_turns_their_order() {
        let modes = [Mode::Nontxn, Mode::Rw, Mode::Phasing];
        let cells = schedule(&modes, &[4, 16, 64]);
        assert_eq!(cells.len(), 9);
        for (turn, chunk) in cells.chunks(3).enumerate() {
            assert!(chunk
                .iter()
                .all(|&(clients, _)| clients == [4, 16, 64][turn]));
            let mut ran: Vec<Mode> = chunk.iter().map(|&(_, mode)| mode).collect();
            assert_eq!(
                ran[0], modes[turn],
                "each client count starts one mode later"
            );
            ran.sort_by_key(|mode| modes.iter().position(|m| m == mode));
            assert_eq!(ran, modes, "every mode once per client count");
        }
        assert_eq!(schedule(&[Mode::Nontxn], &[4, 16]).len(), 2);
    }
}
