//! `fallow-bench txn raw --quick` end to end against a fallow it starts itself: the JSON must hold every
//! mode's cells with sane positive figures. No timing is asserted (goals belong in the benchmark report).
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
