//! `fallow model ...`: the subcommands and their flags.
use crate::bulk::{self, BulkDirection, BulkJob};
use crate::calibrate::{self, CalibrateOptions, Calibration, NullProbe, Transport};
use crate::kv::{self, KvOp, KvProtocol, KvWorkload};
use crate::mapreduce::{self, MapReduceParams, Resource, SortChoice};
use crate::units::{
    format_bytes, format_mb_per_sec, format_seconds, non_negative_arg, positive_arg, size_arg, MB,
};
use anyhow::{bail, Result};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

/// `fallow model`: the Krevat performance model and this machine's calibration.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Optimal runtime of a map-reduce job (Krevat et al., Table 3) from per-node bandwidths.
    ///
    /// Prints the optimum and each phase's bottleneck (disk or network); with --measured-s, the efficiency
    /// (optimum / measured) and the nodes an optimal system would need (n × optimum / measured). Units are
    /// decimal: 1 MB = 10^6 bytes, 1 TB = 10^12 (the paper's figures only come out with them).
    ///
    /// Example (Hadoop TeraSort, 8.86 s): fallow model mapreduce --nodes 1460 --input 1TB --disk-mbps 260
    /// --net-mbps 110
    Mapreduce(MapReduceArgs),
    /// Ceiling of a key-value workload on this machine, from a calibration file.
    ///
    /// The lowest of: the null server's rate at the same transport, protocol, pipeline and connections;
    /// loopback bandwidth / wire bytes per operation; memory copy bandwidth / bytes copied per operation.
    /// With --measured-ops-per-sec, the efficiency (measured / ceiling).
    Kv(KvArgs),
    /// Optimum of a bulk load or sorted dump on this machine, from a calibration file.
    ///
    /// The stages are pipelined, so the optimum is the slowest resource's time: load = disk read, loopback,
    /// memory copy; dump = memory copy, loopback, disk write. With --measured-s, the efficiency
    /// (optimum / measured).
    Bulk(BulkArgs),
    /// Measure this machine's application-level bandwidths and write them to a JSON file.
    ///
    /// Memory (STREAM copy and triad, arrays >= 4 x last-level cache, best of 10, 1 and all threads), disk
    /// (sequential write with fsync, cached pages dropped, sequential read), loopback TCP and Unix stream
    /// bandwidth, and the null server's request rate (RESP over TCP and Unix, memcached over TCP; 50
    /// connections; pipeline 1 and 16; 1 and 2 server threads). Takes about a minute.
    Calibrate(CalibrateArgs),
}

#[derive(clap::Args, Debug)]
pub struct MapReduceArgs {
    /// n: nodes in the cluster.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub nodes: u64,
    /// i: total input size, e.g. 1TB, 1PB, 250GB (decimal), 4GiB (binary) or plain bytes.
    #[arg(long, value_parser = size_arg)]
    pub input: u64,
    /// D: disk bandwidth of one node in MB/s (10^6 bytes/s), for reads and writes alike (e.g. 4 disks of
    /// 65 MB/s = 260).
    #[arg(long, value_parser = positive_arg)]
    pub disk_mbps: Option<f64>,
    /// D_r: disk read bandwidth of one node in MB/s; overrides --disk-mbps for reads.
    #[arg(long, value_parser = positive_arg)]
    pub disk_read_mbps: Option<f64>,
    /// D_w: disk write bandwidth of one node in MB/s; overrides --disk-mbps for writes.
    #[arg(long, value_parser = positive_arg)]
    pub disk_write_mbps: Option<f64>,
    /// N: network bandwidth of one node in MB/s (e.g. 110 for gigabit Ethernet as applications see it).
    #[arg(long, value_parser = positive_arg)]
    pub net_mbps: f64,
    /// r: replication factor of the output (1 = no replication).
    #[arg(long, default_value_t = 1.0, value_parser = positive_arg)]
    pub replication: f64,
    /// e_M: map output bytes per input byte (1 for sort; 0 for grep, which gives eq. 1).
    #[arg(long, default_value_t = 1.0, value_parser = non_negative_arg)]
    pub map_ratio: f64,
    /// e_R: reduce output bytes per reduce input byte (1 for sort and grep).
    #[arg(long, default_value_t = 1.0, value_parser = non_negative_arg)]
    pub reduce_ratio: f64,
    /// Phase 1 writes a backup copy of the map output to disk (protects long jobs against failures).
    #[arg(long)]
    pub backup_write: bool,
    /// Memory per node for the sort; with --sort auto the sort is in-memory when the map output per node
    /// (d_m = i e_M / n) is below it. The default is the paper's cluster nodes.
    #[arg(long, default_value = "16GB", value_parser = size_arg)]
    pub memory_per_node: u64,
    /// Sort type: in-memory, external (sorted runs written and read back), or auto (by memory).
    #[arg(long, value_enum, default_value_t = SortChoice::Auto)]
    pub sort: SortChoice,
    /// A measured runtime in seconds, to report efficiency = optimum / measured and the nodes an optimal
    /// system would need (n × optimum / measured).
    #[arg(long, value_parser = positive_arg)]
    pub measured_s: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct KvArgs {
    /// Calibration file written by `fallow model calibrate`.
    #[arg(long, default_value = "fallow-calibration.json")]
    pub calibration: PathBuf,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub pipeline: u64,
    /// Client connections in total.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections: u64,
    /// Value size, e.g. 32, 1KB, 64KiB.
    #[arg(long, value_parser = size_arg)]
    pub value_bytes: u64,
    /// Key size in bytes (default 10, like "key:000001").
    #[arg(long, default_value = "10", value_parser = size_arg)]
    pub key_bytes: u64,
    /// The operation (a GET is assumed to hit).
    #[arg(long, value_enum, default_value_t = KvOp::Get)]
    pub op: KvOp,
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    pub transport: Transport,
    /// Wire protocol: resp (Redis) or memcache (memcached text).
    #[arg(long, value_enum, default_value_t = KvProtocol::Resp)]
    pub protocol: KvProtocol,
    /// A measured throughput, to report efficiency = measured / ceiling.
    #[arg(long, value_parser = positive_arg)]
    pub measured_ops_per_sec: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct BulkArgs {
    /// Calibration file written by `fallow model calibrate`.
    #[arg(long, default_value = "fallow-calibration.json")]
    pub calibration: PathBuf,
    /// load: file -> disk read -> loopback -> store; dump: store -> loopback -> disk write.
    #[arg(long, value_enum)]
    pub direction: BulkDirection,
    /// Size of the record file, e.g. 1GB, 4GB.
    #[arg(long, value_parser = size_arg)]
    pub bytes: u64,
    /// Records in the file (used to estimate the wire bytes when --wire-bytes is not given).
    #[arg(long)]
    pub records: Option<u64>,
    /// Bytes on the wire in both directions, if known (e.g. from fallow-bench's JSON).
    #[arg(long, value_parser = size_arg)]
    pub wire_bytes: Option<u64>,
    /// Key size for the wire estimate (10 in the sort-benchmark format).
    #[arg(long, default_value = "10", value_parser = size_arg)]
    pub key_bytes: u64,
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    pub transport: Transport,
    /// A measured time in seconds, to report efficiency = optimum / measured.
    #[arg(long, value_parser = positive_arg)]
    pub measured_s: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Where to write the JSON.
    #[arg(long, default_value = "fallow-calibration.json")]
    pub out: PathBuf,
    /// Directory for the disk test file (on the disk you want measured).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Size of the disk test file (default 1GiB; 16MiB with --quick).
    #[arg(long, value_parser = size_arg)]
    pub disk_bytes: Option<u64>,
    /// Small sizes and short runs (seconds instead of about a minute); the figures are rough.
    #[arg(long)]
    pub quick: bool,
}

/// Runs a `fallow model` subcommand; `null_probe` measures a null server's rate during calibration.
pub fn run(args: &ModelArgs, null_probe: &NullProbe) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_to(args, null_probe, &mut out, &mut |line| eprintln!("{line}"))
}

/// `run`, writing the report to `out` and progress lines to `progress`.
pub fn run_to(
    args: &ModelArgs,
    null_probe: &NullProbe,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let report = match &args.command {
        ModelCommand::Mapreduce(args) => mapreduce_report(args)?,
        ModelCommand::Kv(args) => kv_report(args)?,
        ModelCommand::Bulk(args) => bulk_report(args)?,
        ModelCommand::Calibrate(args) => calibrate_report(args, null_probe, progress)?,
    };
    writeln!(out, "{report}")?;
    Ok(())
}

fn mapreduce_params(args: &MapReduceArgs) -> Result<MapReduceParams> {
    let Some(disk_read_mbps) = args.disk_read_mbps.or(args.disk_mbps) else {
        bail!("give the disk bandwidth: --disk-mbps (reads and writes) or --disk-read-mbps");
    };
    let Some(disk_write_mbps) = args.disk_write_mbps.or(args.disk_mbps) else {
        bail!("give the disk bandwidth: --disk-mbps (reads and writes) or --disk-write-mbps");
    };
    Ok(MapReduceParams {
        nodes: args.nodes,
        input_bytes: args.input as f64,
        disk_read_bytes_per_sec: disk_read_mbps * MB,
        disk_write_bytes_per_sec: disk_write_mbps * MB,
        net_bytes_per_sec: args.net_mbps * MB,
        replication: args.replication,
        map_ratio: args.map_ratio,
        reduce_ratio: args.reduce_ratio,
        backup_write: args.backup_write,
        memory_per_node_bytes: args.memory_per_node as f64,
        sort: args.sort,
    })
}

fn mapreduce_report(args: &MapReduceArgs) -> Result<String> {
    let params = mapreduce_params(args)?;
    let optimum = mapreduce::optimum(&params)?;
    let efficiency = args
        .measured_s
        .map(|measured_s| mapreduce::efficiency(optimum.optimum_s, params.nodes, measured_s))
        .transpose()?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&json!({
            "model": "mapreduce", "params": params, "optimum": optimum, "measured": efficiency,
        }))?);
    }
    let sort = match optimum.sort {
        mapreduce::SortKind::InMemory => "in-memory sort",
        mapreduce::SortKind::External => "external sort",
    };
    let backup = if optimum.backup_write {
        "with backup write"
    } else {
        "without backup write"
    };
    let mut lines = vec![
        format!(
            "optimum: {} s (Krevat et al. Table 3: {sort}, {backup})",
            format_seconds(optimum.optimum_s)
        ),
        format!(
            "  n = {}, i = {}, D_r = {}, D_w = {}, N = {}, r = {}, e_M = {}, e_R = {}",
            params.nodes,
            format_bytes(params.input_bytes),
            format_mb_per_sec(params.disk_read_bytes_per_sec),
            format_mb_per_sec(params.disk_write_bytes_per_sec),
            format_mb_per_sec(params.net_bytes_per_sec),
            params.replication,
            params.map_ratio,
            params.reduce_ratio
        ),
        format!(
            "  per node: d_i = {} input, d_m = {} map output, d_o = {} output",
            format_bytes(optimum.input_per_node_bytes),
            format_bytes(optimum.map_output_per_node_bytes),
            format_bytes(optimum.output_per_node_bytes)
        ),
    ];
    for (label, phase) in [
        ("phase 1 (map)   ", &optimum.map),
        ("phase 2 (reduce)", &optimum.reduce),
    ] {
        lines.push(format!(
            "  {label}: disk {} s, network {} s -> {}: {} s",
            format_seconds(phase.disk_s),
            format_seconds(phase.net_s),
            bottleneck_words(phase.bottleneck),
            format_seconds(phase.time_s)
        ));
    }
    if let Some(efficiency) = efficiency {
        lines.push(format!(
            "measured: {} s -> efficiency {:.1}% (optimum / measured); an optimal system would need {:.1} nodes \
             (n x optimum / measured) instead of {}",
            format_seconds(efficiency.measured_s),
            efficiency.efficiency * 100.0,
            efficiency.nodes_needed,
            params.nodes
        ));
    }
    Ok(lines.join("\n"))
}

fn bottleneck_words(resource: Resource) -> &'static str {
    match resource {
        Resource::Disk => "disk-bound",
        Resource::Network => "network-bound",
        Resource::None => "no data moved",
    }
}

fn kv_report(args: &KvArgs) -> Result<String> {
    let calibration = Calibration::load(&args.calibration)?;
    let workload = KvWorkload {
        op: args.op,
        protocol: args.protocol,
        transport: args.transport,
        pipeline: usize::try_from(args.pipeline)?,
        connections: usize::try_from(args.connections)?,
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes,
    };
    let ceiling = kv::ceiling(&calibration, &workload)?;
    let efficiency = args
        .measured_ops_per_sec
        .map(|measured| kv::efficiency(&ceiling, measured))
        .transpose()?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&json!({
            "model": "kv", "calibration": args.calibration, "ceiling": ceiling,
            "measured_ops_per_sec": args.measured_ops_per_sec, "efficiency": efficiency,
        }))?);
    }
    let mut lines = vec![format!(
        "ceiling: {:.0} ops/s, bound by the {} ({} {} over {}, key {} B, value {} B, pipeline {}, {} connections)",
        ceiling.ceiling_ops_per_sec,
        ceiling.bottleneck.name(),
        workload.op.name(),
        workload.protocol.name(),
        workload.transport.name(),
        workload.key_bytes,
        workload.value_bytes,
        workload.pipeline,
        workload.connections
    )];
    for bound in &ceiling.bounds {
        lines.push(format!(
            "  {}: {:.0} ops/s ({})",
            bound.resource.name(),
            bound.ops_per_sec,
            bound.detail
        ));
    }
    if let (Some(measured), Some(efficiency)) = (args.measured_ops_per_sec, efficiency) {
        lines.push(format!(
            "measured: {measured:.0} ops/s -> efficiency {:.1}% (measured / ceiling)",
            efficiency * 100.0
        ));
    }
    Ok(lines.join("\n"))
}

fn bulk_report(args: &BulkArgs) -> Result<String> {
    let calibration = Calibration::load(&args.calibration)?;
    let job = BulkJob {
        direction: args.direction,
        file_bytes: args.bytes,
        records: args.records,
        wire_bytes: args.wire_bytes,
        key_bytes: args.key_bytes,
        transport: args.transport,
    };
    let optimum = bulk::optimum(&calibration, &job)?;
    let efficiency = args
        .measured_s
        .map(|measured_s| bulk::efficiency(&optimum, measured_s))
        .transpose()?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&json!({
            "model": "bulk", "calibration": args.calibration, "optimum": optimum,
            "measured_s": args.measured_s, "efficiency": efficiency,
        }))?);
    }
    let mut lines = vec![format!(
        "optimum: {} s to {} {}, bound by {} (stages pipelined: the slowest sets the time)",
        format_seconds(optimum.optimum_s),
        job.direction.name(),
        format_bytes(job.file_bytes as f64),
        optimum.bottleneck.name()
    )];
    for bound in &optimum.bounds {
        lines.push(format!(
            "  {}: {} at {} -> {} s",
            bound.resource.name(),
            format_bytes(bound.bytes as f64),
            format_mb_per_sec(bound.bytes_per_sec),
            format_seconds(bound.time_s)
        ));
    }
    lines.push(format!("  wire bytes {}", optimum.wire_note));
    if let (Some(measured_s), Some(efficiency)) = (args.measured_s, efficiency) {
        lines.push(format!(
            "measured: {} s -> efficiency {:.1}% (optimum / measured)",
            format_seconds(measured_s),
            efficiency * 100.0
        ));
    }
    Ok(lines.join("\n"))
}

fn calibrate_report(
    args: &CalibrateArgs,
    null_probe: &NullProbe,
    progress: &mut dyn FnMut(&str),
) -> Result<String> {
    let default_disk_bytes = if args.quick { 16 << 20 } else { 1 << 30 };
    let options = CalibrateOptions::new(
        args.dir.clone(),
        args.disk_bytes.unwrap_or(default_disk_bytes),
        args.quick,
    );
    if options.disk_bytes == 0 {
        bail!("--disk-bytes must be more than 0");
    }
    progress("calibrating this machine (about a minute; --quick for a rough figure in seconds)");
    let calibration = calibrate::calibrate(&options, null_probe, progress)?;
    calibration.save(&args.out)?;
    Ok(format!(
        "{}\nwritten to {}",
        calibrate::summary(&calibration),
        args.out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct TestCli {
        #[command(flatten)]
        model: ModelArgs,
    }

    fn never_probe(_: &calibrate::NullProbeSpec) -> Result<f64> {
        anyhow::bail!("no null server in this test")
    }

    fn output(argv: &[&str]) -> Result<String> {
        let cli = TestCli::try_parse_from(std::iter::once("model").chain(argv.iter().copied()))?;
        let mut out = Vec::new();
        run_to(&cli.model, &never_probe, &mut out, &mut |_| {})?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn the_issue_example_prints_8_86_s() {
        let text = output(&[
            "mapreduce",
            "--nodes",
            "1460",
            "--input",
            "1TB",
            "--disk-mbps",
            "260",
            "--net-mbps",
            "110",
        ])
        .unwrap();
        assert!(text.starts_with("optimum: 8.86 s"), "{text}");
        assert!(
            text.contains("in-memory sort, without backup write"),
            "{text}"
        );
        assert!(
            text.contains("phase 1 (map)   : disk 2.63 s, network 6.22 s -> network-bound: 6.22 s"),
            "{text}"
        );
        assert!(
            text.contains("phase 2 (reduce): disk 2.63 s, network 0 s -> disk-bound: 2.63 s"),
            "{text}"
        );
    }

    #[test]
    fn petasort_flags_and_measured_time() {
        let text = output(&[
            "mapreduce",
            "--nodes",
            "4000",
            "--input",
            "1PB",
            "--disk-mbps",
            "780",
            "--net-mbps",
            "110",
            "--replication",
            "3",
            "--backup-write",
            "--sort",
            "external",
            "--measured-s",
            "21720",
        ])
        .unwrap();
        assert!(
            text.starts_with(
                "optimum: 6818 s (Krevat et al. Table 3: external sort, with backup write)"
            ),
            "{text}"
        );
        assert!(text.contains("efficiency 31.4%"), "{text}");
        assert!(text.contains("would need 1255.5 nodes"), "{text}");
    }

    #[test]
    fn separate_read_and_write_bandwidths_and_json() {
        let text = output(&[
            "mapreduce",
            "--nodes",
            "1",
            "--input",
            "1GB",
            "--disk-read-mbps",
            "108",
            "--disk-write-mbps",
            "97",
            "--net-mbps",
            "110",
            "--json",
        ])
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["params"]["disk_read_bytes_per_sec"], 108e6);
        assert_eq!(value["params"]["disk_write_bytes_per_sec"], 97e6);
        // One node sends nothing: 1e9/108e6 + 1e9/97e6 s.
        let expected = 1e9 / 108e6 + 1e9 / 97e6;
        assert!((value["optimum"]["optimum_s"].as_f64().unwrap() - expected).abs() < 1e-9);
        assert!(value["measured"].is_null());
    }

    #[test]
    fn bad_mapreduce_flags_are_clear_errors() {
        let missing_disk = output(&[
            "mapreduce",
            "--nodes",
            "2",
            "--input",
            "1TB",
            "--net-mbps",
            "110",
        ])
        .unwrap_err();
        assert!(
            missing_disk.to_string().contains("--disk-mbps"),
            "{missing_disk}"
        );
        for bad in [
            vec![
                "mapreduce",
                "--nodes",
                "0",
                "--input",
                "1TB",
                "--disk-mbps",
                "1",
                "--net-mbps",
                "1",
            ],
            vec![
                "mapreduce",
                "--nodes",
                "2",
                "--input",
                "1XB",
                "--disk-mbps",
                "1",
                "--net-mbps",
                "1",
            ],
            vec![
                "mapreduce",
                "--nodes",
                "2",
                "--input",
                "1TB",
                "--disk-mbps",
                "-1",
                "--net-mbps",
                "1",
            ],
            vec![
                "mapreduce",
                "--nodes",
                "2",
                "--input",
                "1TB",
                "--disk-mbps",
                "1",
                "--net-mbps",
                "1",
                "--sort",
                "bubble",
            ],
            vec![
                "mapreduce",
                "--nodes",
                "2",
                "--input",
                "1TB",
                "--disk-mbps",
                "1",
                "--net-mbps",
                "1",
                "--replication",
                "0.5",
            ],
        ] {
            assert!(output(&bad).is_err(), "{bad:?} accepted");
        }
    }

    fn calibration_file(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fallow-model-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("calibration.json");
        crate::test_support::synthetic_calibration()
            .save(&path)
            .unwrap();
        path
    }

    #[test]
    fn kv_prints_the_ceiling_and_efficiency() {
        let path = calibration_file("kv");
        let path_text = path.to_str().unwrap();
        let text = output(&[
            "kv",
            "--calibration",
            path_text,
            "--pipeline",
            "1",
            "--connections",
            "50",
            "--value-bytes",
            "32",
            "--measured-ops-per-sec",
            "120000",
        ])
        .unwrap();
        assert!(
            text.starts_with("ceiling: 150000 ops/s, bound by the null server (GET resp over tcp"),
            "{text}"
        );
        assert!(text.contains("efficiency 80.0%"), "{text}");
        let json_text = output(&[
            "kv",
            "--calibration",
            path_text,
            "--value-bytes",
            "1MB",
            "--op",
            "set",
            "--json",
        ])
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&json_text).unwrap();
        assert_eq!(value["ceiling"]["bottleneck"], "loopback");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn bulk_prints_the_optimum_and_efficiency() {
        let path = calibration_file("bulk");
        let text = output(&[
            "bulk",
            "--calibration",
            path.to_str().unwrap(),
            "--direction",
            "load",
            "--bytes",
            "1GB",
            "--records",
            "10000000",
            "--measured-s",
            "2.5",
        ])
        .unwrap();
        assert!(
            text.starts_with("optimum: 2.00 s to load 1 GB, bound by disk read"),
            "{text}"
        );
        assert!(text.contains("efficiency 80.0%"), "{text}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn kv_without_a_calibration_says_how_to_make_one() {
        let error = output(&[
            "kv",
            "--calibration",
            "/nonexistent/cal.json",
            "--value-bytes",
            "32",
        ])
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("fallow model calibrate"),
            "{error:#}"
        );
    }

    #[test]
    fn calibrate_flags_parse() {
        let cli = TestCli::try_parse_from([
            "model",
            "calibrate",
            "--out",
            "x.json",
            "--dir",
            "/tmp",
            "--disk-bytes",
            "4GiB",
            "--quick",
        ])
        .unwrap();
        let ModelCommand::Calibrate(args) = cli.model.command else {
            panic!("not calibrate")
        };
        assert_eq!(args.out, PathBuf::from("x.json"));
        assert_eq!(args.disk_bytes, Some(4 << 30));
        assert!(args.quick);
    }

    #[test]
    fn calibrate_quick_writes_the_file_with_missing_null_server_rates() {
        let dir =
            std::env::temp_dir().join(format!("fallow-model-cli-calibrate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out_path = dir.join("out.json");
        let text = output(&[
            "calibrate",
            "--quick",
            "--disk-bytes",
            "4MiB",
            "--dir",
            dir.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ])
        .unwrap();
        assert!(
            text.contains("missing (no null server in this test)"),
            "{text}"
        );
        let calibration = Calibration::load(&out_path).unwrap();
        assert!(calibration
            .null_server
            .iter()
            .all(|point| point.requests_per_sec.is_none()));
        assert_eq!(calibration.disk.file_bytes, 4 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
