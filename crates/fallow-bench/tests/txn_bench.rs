//! `fallow-bench txn raw --quick` and `fallow-bench transports --quick` end to end against a fallow they
//! start themselves: the JSON must hold every cell with sane positive figures. No timing is asserted
//! (goals belong in the benchmark report).
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// `$FALLOW_BIN` (as the Python e2e tests), else `fallow` beside this build's fallow-bench. It must be
/// built from the same tree (`cargo build --release -p fallow`): an older one has no TXN.*.
fn fallow_bin() -> PathBuf {
    std::env::var_os("FALLOW_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_fallow-bench")).with_file_name("fallow"),
        PathBuf::from,
    )
}

fn positive(cell: &Value, field: &str) -> f64 {
    let value = cell[field].as_f64().unwrap_or(f64::NAN);
    assert!(value > 0.0, "{field} = {value} in {cell}");
    value
}

fn check_cell(cell: &Value) {
    positive(cell, "txn_per_s");
    positive(cell, "committed");
    positive(cell, "duration_s");
    positive(cell, "server_cpu_us_per_txn");
    let retries = cell["retries_per_commit"].as_f64().unwrap();
    assert!(retries >= 0.0 && retries.is_finite(), "{cell}");
    let latency = &cell["latency_us"];
    let (p50, p99) = (positive(latency, "p50"), positive(latency, "p99"));
    assert!(p50 <= p99, "{latency}");
    let raw = cell["committed_by_kind"]["raw"].as_u64().unwrap();
    assert_eq!(raw, cell["committed"].as_u64().unwrap(), "{cell}");
}

#[test]
fn quick_raw_run_reports_every_mode() {
    if !fallow_bin().is_file() {
        eprintln!("note: {} is not built; skipping", fallow_bin().display());
        return;
    }
    let out = std::env::temp_dir().join(format!("fallow-txn-bench-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_fallow-bench"))
        .args([
            "txn",
            "raw",
            "--quick",
            "--spawn",
            "--quiet",
            "--fallow-bin",
        ])
        .arg(fallow_bin())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running fallow-bench");
    assert!(
        run.status.success(),
        "fallow-bench txn raw --quick failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("| rw |"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw.json")).unwrap()).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "quick runs two skews");
    for point in points {
        let cells = point["cells"].as_array().unwrap();
        let fallow_modes: Vec<&str> = cells
            .iter()
            .filter(|c| c["target"] == "fallow")
            .map(|c| c["mode"].as_str().unwrap())
            .collect();
        for mode in ["nontxn", "rw", "boosting", "phasing"] {
            // Two client counts each.
            assert_eq!(
                fallow_modes.iter().filter(|m| **m == mode).count(),
                2,
                "{mode}"
            );
        }
        cells.iter().for_each(check_cell);
    }
    for file in ["raw.md", "raw-sweeps.png", "raw-zipf-1.2-add-50.png"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn positive_at(value: &Value, field: &str) -> f64 {
    let number = value[field].as_f64().unwrap_or(f64::NAN);
    assert!(
        number > 0.0 && number.is_finite(),
        "{field} = {number} in {value}"
    );
    number
}

/// Every item of `fallow-bench transports --quick`: four transports' round trips (the ring floor included),
/// the goals computed from them, throughput cells with CPU per op, large values, the spin policy, and
/// redis-benchmark when installed; the PNGs are written.
#[test]
fn quick_transports_run_reports_every_item() {
    if !fallow_bin().is_file() {
        eprintln!("note: {} is not built; skipping", fallow_bin().display());
        return;
    }
    let out = std::env::temp_dir().join(format!("fallow-transports-bench-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_fallow-bench"))
        .args(["transports", "--quick", "--quiet", "--idle-s", "0.2"])
        .arg("--fallow-bin")
        .arg(fallow_bin())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running fallow-bench");
    assert!(
        run.status.success(),
        "fallow-bench transports --quick failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("| shm | GET |"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("transports.json")).unwrap())
            .unwrap();
    let latency = report["latency"].as_array().unwrap();
    // Pinned and free placements where there are two CPUs; free alone on one.
    let placements = report["goals"].as_array().unwrap().len();
    assert!((1..=2).contains(&placements), "{}", report["goals"]);
    assert_eq!(
        latency.len(),
        8 * placements,
        "tcp, unix, shm and ring, GET and SET"
    );
    for result in latency {
        let (p50, p99) = (
            positive_at(result, "p50_ns"),
            positive_at(result, "pooled_p99_ns"),
        );
        assert!(p50 <= p99 * 1.01 + 1.0, "{result}");
        assert_eq!(result["round_p50_ns"].as_array().unwrap().len(), 2);
    }
    positive_at(&report["inproc"], "get_ns");
    for goals in report["goals"].as_array().unwrap() {
        positive_at(goals, "unix_over_shm");
        positive_at(goals, "shm_bound_ns");
    }
    let throughput = report["throughput"].as_array().unwrap();
    assert_eq!(
        throughput.len(),
        placements * 2 * 2 * 3,
        "placements x connections 1,4 x pipelines 1,16 x 3 transports"
    );
    for cell in throughput {
        positive_at(cell, "ops_per_s");
        positive_at(cell, "client_cpu_us_per_op");
        assert!(
            cell["server_cpu_us_per_op"].as_f64().unwrap() >= 0.0,
            "{cell}"
        );
    }
    let large = report["large"].as_array().unwrap();
    assert_eq!(large.len(), 2 * 2 * 3, "2 sizes x GET, SET x 3 transports");
    for cell in large {
        positive_at(cell, "bytes_per_s");
    }
    let spin = report["spin"].as_array().unwrap();
    assert_eq!(spin.len(), 3, "shm-spin-us 0, 50, 1000");
    for cost in spin {
        assert!(cost["sparse_ops"].as_u64().unwrap() > 0, "{cost}");
        assert!(cost["idle_server_cores"].as_f64().unwrap() >= 0.0, "{cost}");
    }
    if on_path("redis-benchmark") {
        for result in report["redis_benchmark"].as_array().unwrap() {
            positive_at(result, "requests_per_s");
        }
    }
    let mut pngs = vec!["latency", "large", "throughput-free"];
    // No pinned placement on a machine with one CPU.
    if placements == 2 {
        pngs.push("throughput-pinned");
    }
    for png in pngs {
        let path = out.join(format!("transports-{png}.png"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
