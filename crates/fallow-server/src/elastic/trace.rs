//! The replayed host (`--host-memory-trace FILE`): a script of the host's available memory over time, for
//! tests and experiments. Format: `#` comments; an optional `total <size>` line (host RAM to assume, else
//! the real MemTotal); then `<seconds> <available>` lines, seconds a float since fallow started, sizes like
//! `512mb`, `3gb`, `1.5gb` or plain bytes. A value holds until the next line, and after the last forever.
//!
//! A scripted figure is what MemAvailable would read with fallow's pool empty: the sample reports
//! `available − pool resident`, as the real host would once fallow holds memory, so the target follows the
//! script (target = script − reserve) instead of creeping up as the pool fills.
use super::source::{HostMemory, HostSource};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A parsed trace file.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub total_bytes: Option<u64>,
    /// (seconds since start, available bytes), seconds non-decreasing; never empty.
    pub points: Vec<(f64, u64)>,
}

impl Trace {
    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut trace = Trace {
            total_bytes: None,
            points: Vec::new(),
        };
        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            trace
                .add_line(line)
                .map_err(|error| format!("line {}: {error}", index + 1))?;
        }
        if trace.points.is_empty() {
            return Err("no '<seconds> <available>' lines".into());
        }
        Ok(trace)
    }

    fn add_line(&mut self, line: &str) -> Result<(), String> {
        let mut words = line.split_whitespace();
        let (Some(first), Some(second), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("expected two fields, got '{line}'"));
        };
        if first.eq_ignore_ascii_case("total") {
            if !self.points.is_empty() || self.total_bytes.is_some() {
                return Err("'total' must come once, before the samples".into());
            }
            self.total_bytes = Some(parse_size(second)?);
            return Ok(());
        }
        let seconds: f64 = first
            .parse()
            .ok()
            .filter(|seconds: &f64| seconds.is_finite() && *seconds >= 0.0)
            .ok_or_else(|| format!("invalid time '{first}'"))?;
        if self.points.last().is_some_and(|&(last, _)| seconds < last) {
            return Err(format!("time {seconds} goes backwards"));
        }
        self.points.push((seconds, parse_size(second)?));
        Ok(())
    }

    /// The scripted availability at `seconds` (the first value before the first line).
    pub fn available_at(&self, seconds: f64) -> u64 {
        let after = self.points.partition_point(|&(at, _)| at <= seconds);
        self.points[after.saturating_sub(1)].1
    }
}

/// A size with an optional fraction: `3gb`, `1.5gb`, `512mb`, `1000`; units as in `config::parse_bytes`.
fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(split);
    let unit_bytes = crate::units::parse_bytes(&format!("1{unit}"))?;
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid size '{text}'"))?;
    Ok((value * unit_bytes as f64) as u64)
}

/// Seconds since the trace started.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

/// Replays a `Trace` against a clock (real time since fallow started; tests pass their own).
pub struct TraceSource {
    trace: Trace,
    total_bytes: u64,
    clock: Clock,
}

impl TraceSource {
    /// Reads `path`; without a `total` line the host's real MemTotal (from `proc_root`) is assumed.
    pub fn open(path: &Path, started: Instant, proc_root: &Path) -> Result<TraceSource, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let trace = Trace::parse(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        let real_total = std::fs::read_to_string(proc_root.join("meminfo"))
            .ok()
            .and_then(|text| super::source::parse_meminfo(&text))
            .map_or(0, |(total, _)| total);
        let clock: Clock = Arc::new(move || started.elapsed().as_secs_f64());
        Ok(TraceSource::with_clock(trace, real_total, clock))
    }

    pub fn with_clock(trace: Trace, real_total_bytes: u64, clock: Clock) -> TraceSource {
        let total_bytes = trace.total_bytes.unwrap_or(real_total_bytes);
        TraceSource {
            trace,
            total_bytes,
            clock,
        }
    }
}

impl HostSource for TraceSource {
    fn sample(&mut self, pool_resident_bytes: u64) -> std::io::Result<HostMemory> {
        let scripted = self.trace.available_at((self.clock)());
        Ok(HostMemory {
            total_bytes: self.total_bytes,
            available_bytes: scripted.saturating_sub(pool_resident_bytes),
            ..HostMemory::default()
        })
    }

    fn kind(&self) -> &'static str {
        "trace"
    }

    fn pressure_file(&self) -> Option<PathBuf> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const SCRIPT: &str = "# a test host\ntotal 8gb\n0 2gb\n1.5 1gb   # a hog starts\n3 3.5gb\n";

    #[test]
    fn parses_sizes_and_header() {
        let trace = Trace::parse(SCRIPT).unwrap();
        assert_eq!(trace.total_bytes, Some(8 << 30));
        assert_eq!(
            trace.points,
            vec![(0.0, 2 << 30), (1.5, 1 << 30), (3.0, 7 << 29)]
        );
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("512mb").unwrap(), 512 << 20);
    }

    #[test]
    fn rejects_bad_files() {
        for bad in [
            "",
            "# only a comment\n",
            "1 2gb\n0 1gb\n",
            "0 lots\n",
            "x 1gb\n",
            "0 1gb extra\n",
            "0 1gb\ntotal 8gb\n",
            "-1 1gb\n",
        ] {
            assert!(Trace::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let error = Trace::parse("0 1gb\n1 nope\n").unwrap_err();
        assert!(error.starts_with("line 2"), "{error}");
    }

    #[test]
    fn values_hold_until_the_next_line() {
        let trace = Trace::parse("0.5 100\n1 200\n1 300\n2 400\n").unwrap();
        assert_eq!(trace.available_at(0.0), 100, "before the first line");
        assert_eq!(trace.available_at(0.99), 100);
        assert_eq!(trace.available_at(1.0), 300, "the last of equal times wins");
        assert_eq!(trace.available_at(1.99), 300);
        assert_eq!(trace.available_at(1e9), 400, "the last value holds forever");
    }

    #[test]
    fn replays_against_an_injected_clock() {
        let millis = Arc::new(AtomicU64::new(0));
        let clock_millis = millis.clone();
        let clock: Clock = Arc::new(move || clock_millis.load(Ordering::Relaxed) as f64 / 1000.0);
        let mut source = TraceSource::with_clock(Trace::parse(SCRIPT).unwrap(), 123, clock);
        let sample = source.sample(0).unwrap();
        assert_eq!(
            (sample.total_bytes, sample.available_bytes),
            (8 << 30, 2 << 30)
        );
        millis.store(1600, Ordering::Relaxed);
        assert_eq!(source.sample(0).unwrap().available_bytes, 1 << 30);
        // The pool's own bytes are not available any more.
        assert_eq!(source.sample(1 << 29).unwrap().available_bytes, 1 << 29);
        assert_eq!(source.sample(3 << 30).unwrap().available_bytes, 0);
        assert_eq!(source.kind(), "trace");
        assert!(source.pressure_file().is_none());
    }

    #[test]
    fn total_defaults_to_the_real_host() {
        let clock: Clock = Arc::new(|| 0.0);
        let mut source = TraceSource::with_clock(Trace::parse("0 1gb\n").unwrap(), 4096, clock);
        assert_eq!(source.sample(0).unwrap().total_bytes, 4096);
    }
}
