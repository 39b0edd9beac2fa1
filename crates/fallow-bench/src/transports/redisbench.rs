//! Item 4: the unmodified `redis-benchmark -t get,set -P 1` against fallow over TCP, over TCP with the
//! preload library (its connections moved onto shared-memory channels), over fallow's Unix socket, and
//! against Redis on its Unix socket.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// One way of pointing redis-benchmark at a server.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    /// `-h/-p` or `-s` arguments.
    pub args: Vec<String>,
    /// Extra environment (the preload library's variables).
    pub env: Vec<(String, String)>,
}

/// One redis-benchmark test's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RbResult {
    /// Set by the caller (the run does not know where it was placed).
    pub placement: super::Placement,
    pub target: String,
    pub clients: usize,
    pub test: String,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Target {
    pub fn tcp(name: &str, port: u16) -> Target {
        Target {
            name: name.into(),
            args: vec![
                "-h".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
            env: Vec::new(),
        }
    }

    pub fn unix(name: &str, socket: &Path) -> Target {
        Target {
            name: name.into(),
            args: vec!["-s".into(), socket.display().to_string()],
            env: Vec::new(),
        }
    }

    /// TCP to fallow with the preload library, which opens a channel on `socket` for connections to
    /// 127.0.0.1:`port`.
    pub fn preload(library: &Path, port: u16, socket: &Path) -> Target {
        let mut target = Target::tcp("fallow tcp+preload (shm)", port);
        target.env = vec![
            ("LD_PRELOAD".into(), library.display().to_string()),
            ("FALLOW_PRELOAD_TARGETS".into(), format!("127.0.0.1:{port}")),
            ("FALLOW_SOCKET".into(), socket.display().to_string()),
        ];
        target
    }
}

/// `libfallow_preload.so` beside the running binary (target/release), if built.
pub fn default_preload() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let library = exe.parent()?.join("libfallow_preload.so");
    library.is_file().then_some(library)
}

/// Runs `redis-benchmark -t get,set -P 1 -c clients -n requests -d value_bytes --csv` on `target`.
pub fn run(
    target: &Target,
    clients: usize,
    requests: usize,
    value_bytes: usize,
) -> anyhow::Result<Vec<RbResult>> {
    let output = Command::new("redis-benchmark")
        .args(&target.args)
        .args(["-t", "get,set", "-P", "1", "--csv"])
        .args(["-c", &clients.to_string()])
        .args(["-n", &requests.to_string()])
        .args(["-d", &value_bytes.to_string()])
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .output()
        .context("running redis-benchmark")?;
    if !output.status.success() {
        bail!(
            "redis-benchmark on {} exited with {}: {}",
            target.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let results = parse_csv(
        &String::from_utf8_lossy(&output.stdout),
        &target.name,
        clients,
    )?;
    if results.len() != 2 {
        bail!(
            "redis-benchmark on {} gave {} results: {}",
            target.name,
            results.len(),
            String::from_utf8_lossy(&output.stdout)
        );
    }
    Ok(results)
}

/// redis-benchmark 7's CSV: a header naming the columns, then one row per test.
pub fn parse_csv(text: &str, target: &str, clients: usize) -> anyhow::Result<Vec<RbResult>> {
    let split = |line: &str| -> Vec<String> {
        line.split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = split(lines.next().context("redis-benchmark printed nothing")?);
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("no {name} column in {header:?}"))
    };
    let (rps, p50, p99) = (
        column("rps")?,
        column("p50_latency_ms")?,
        column("p99_latency_ms")?,
    );
    lines
        .map(|line| {
            let fields = split(line);
            let number = |i: usize| -> anyhow::Result<f64> {
                fields
                    .get(i)
                    .and_then(|f| f.parse().ok())
                    .with_context(|| format!("bad row {line:?}"))
            };
            let requests_per_s = number(rps)?;
            if !requests_per_s.is_finite() {
                // redis-benchmark times whole milliseconds: a test that took none has no rate.
                bail!("redis-benchmark on {target} finished too fast to time ({line:?}): give more --rb-requests");
            }
            Ok(RbResult {
                placement: super::Placement::Free,
                target: target.to_string(),
                clients,
                test: fields.first().cloned().unwrap_or_default(),
                requests_per_s,
                p50_ms: number(p50)?,
                p99_ms: number(p99)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_become_results() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"SET\",\"40000.00\",\"0.030\",\"0.016\",\"0.031\",\"0.039\",\"0.055\",\"0.303\"\n\"GET\",\"41000.00\",\"0.029\",\"0.016\",\"0.029\",\"0.039\",\"0.047\",\"0.199\"\n";
        let results = parse_csv(text, "x", 1).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].test, "GET");
        assert_eq!(results[1].requests_per_s, 41000.0);
        assert_eq!(results[0].p99_ms, 0.055);
        assert!(parse_csv("\"test\"\n\"SET\"\n", "x", 1).is_err());
        let untimed = text.replace("40000.00", "inf");
        assert!(parse_csv(&untimed, "x", 1).is_err());
    }
}
