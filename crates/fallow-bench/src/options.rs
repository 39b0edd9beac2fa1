//! The options of `fallow-bench run` and their value types. Every value type parses from the text the
//! command line takes and prints back the same text, so the JSON record holds what the user typed.
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context};

/// Largest value the generator sends; also bounds the pattern buffer every value is sliced from.
pub const VALUE_BYTES_MAX: usize = 64 << 20;
/// Longest key: memcached refuses keys over 250 bytes.
pub const KEY_BYTES_MAX: usize = 250;
/// Most connections one run may open (each holds buffers; the OS limit on descriptors is the other bound).
pub const CONNECTIONS_MAX: usize = 100_000;
/// Deepest pipeline: the in-flight ring of every connection is allocated at this size.
pub const PIPELINE_MAX: usize = 65_536;

/// `fallow-bench run`: drive a RESP or memcached server and measure throughput and latency.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOptions {
    /// Server address: tcp://HOST:PORT, unix:/path/to/socket, or unix: for $FALLOW_SOCKET (else the
    /// default socket of port 6379; `fallow socket-path --port N` prints another port's).
    #[arg(long, default_value = "tcp://127.0.0.1:6379")]
    pub server: ServerAddr,
    /// Wire protocol: resp2, resp3 (sends HELLO 3 first), memcache-text (get/set) or memcache-meta (mg/ms).
    #[arg(long, value_enum, default_value_t = Protocol::Resp2)]
    pub protocol: Protocol,
    /// Client threads; each drives its own connections with one event loop.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Connections per thread.
    #[arg(long, default_value_t = 25)]
    pub connections: usize,
    /// Requests kept outstanding per connection (closed loop), or the most allowed (open loop).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Total open-loop rate in requests/s spread evenly over all connections; 0 = closed loop. Open-loop
    /// latency is measured from each request's intended send time, so a slow server is not hidden.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// SET:GET mix, e.g. 1:10, 0:1 (GET only) or 1:0 (SET only).
    #[arg(long, default_value = "1:10")]
    pub ratio: Ratio,
    /// Size of the key space: keys are PREFIX0 .. PREFIX(N-1).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Text before the key number.
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Pad key numbers with zeros so every key has this many bytes (0 = no padding).
    #[arg(long, default_value_t = 0)]
    pub key_bytes: usize,
    /// Key distribution: uniform, zipf:ALPHA, sequential or hotset:KEY_FRACTION:REQUEST_FRACTION.
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
    /// Value size in bytes for SETs: 32 (fixed), 32-1024 (uniform range) or 32,1024,65536 (one of a list).
    #[arg(long, default_value = "32")]
    pub value_size: ValueSizes,
    /// Measured run time, e.g. 10s, 500ms, 2m (default 10s unless --requests is given).
    #[arg(long, conflicts_with = "requests")]
    pub duration: Option<HumanDuration>,
    /// Stop after this many measured requests instead of after a duration.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Run this long before measuring; replies that arrive in it are not counted.
    #[arg(long, default_value = "0s")]
    pub warmup: HumanDuration,
    /// SET every key once (pipelined) before the run, so GETs hit.
    #[arg(long)]
    pub prefill: bool,
    /// Seed of the key, value-size and operation choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Give each connection its own seed (otherwise all connections make the same choices).
    #[arg(long)]
    pub distinct_client_seed: bool,
    /// Write the JSON record to FILE (`-` = stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write a PNG with the latency CDF and throughput over time.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// No live progress line on stderr (the summary is still printed).
    #[arg(long)]
    pub quiet: bool,
    /// Free text copied into the JSON record.
    #[arg(long)]
    pub label: Option<String>,
    /// Total connections, split as evenly as possible over the threads; overrides threads x connections.
    /// For library callers (the null-server probe) that need a total not divisible by the thread count.
    #[arg(skip)]
    pub connections_total: Option<usize>,
}

impl RunOptions {
    /// The options `fallow-bench run` would get with no flags.
    pub fn defaults() -> RunOptions {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            options: RunOptions,
        }
        Wrapper::parse_from(["fallow-bench"]).options
    }

    /// The measured duration when the run is time-bound (the default when neither is given: 10 s).
    pub fn duration_limit(&self) -> Option<Duration> {
        match (self.duration, self.requests) {
            (Some(d), _) => Some(d.0),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        }
    }

    /// Connections of each thread.
    pub fn connections_per_thread(&self) -> Vec<usize> {
        match self.connections_total {
            None => vec![self.connections; self.threads],
            Some(total) => {
                let threads = self.threads.clamp(1, total.max(1));
                (0..threads)
                    .map(|t| total / threads + usize::from(t < total % threads))
                    .collect()
            }
        }
    }

    /// Checks the combinations that each flag alone cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 || self.threads > 1024 {
            bail!("--threads must be between 1 and 1024");
        }
        let total: usize = self.connections_per_thread().iter().sum();
        if total == 0 || self.connections_per_thread().contains(&0) {
            bail!("every thread needs at least one connection");
        }
        if total > CONNECTIONS_MAX {
            bail!("{total} connections in all is over the limit of {CONNECTIONS_MAX}");
        }
        if self.pipeline == 0 || self.pipeline > PIPELINE_MAX {
            bail!("--pipeline must be between 1 and {PIPELINE_MAX}");
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            bail!("--rate must be a finite number >= 0");
        }
        if self.keys == 0 {
            bail!("--keys must be at least 1");
        }
        if self.requests == Some(0) {
            bail!("--requests must be at least 1");
        }
        if self.duration.is_some_and(|d| d.0.is_zero()) {
            bail!("--duration must be longer than 0");
        }
        self.validate_keys()?;
        self.distribution.validate(self.keys)
    }

    fn validate_keys(&self) -> anyhow::Result<()> {
        if self.key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            bail!("--key-prefix must not contain spaces or control characters (memcached splits on them)");
        }
        let digits = decimal_digits(self.keys - 1);
        let natural = self.key_prefix.len() + digits;
        if self.key_bytes != 0 && self.key_bytes < natural {
            bail!(
                "--key-bytes {} is too short for prefix {:?} and {} keys (needs {natural})",
                self.key_bytes,
                self.key_prefix,
                self.keys
            );
        }
        if natural.max(self.key_bytes) > KEY_BYTES_MAX {
            bail!("keys would be longer than {KEY_BYTES_MAX} bytes");
        }
        Ok(())
    }
}

/// Number of decimal digits of `n` (1 for 0).
pub fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddr {
    /// host:port, resolved at connect time.
    Tcp(String),
    Unix(PathBuf),
}

impl FromStr for ServerAddr {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<ServerAddr> {
        if let Some(rest) = text.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .with_context(|| format!("{text:?}: expected tcp://HOST:PORT"))?;
            if host.is_empty() {
                bail!("{text:?}: the host is empty");
            }
            port.parse::<u16>()
                .with_context(|| format!("{text:?}: bad port {port:?}"))?;
            return Ok(ServerAddr::Tcp(rest.to_string()));
        }
        let path = text
            .strip_prefix("unix://")
            .or_else(|| text.strip_prefix("unix:"));
        match path {
            Some(p) if !p.is_empty() => Ok(ServerAddr::Unix(PathBuf::from(p))),
            // The local server's socket as every fallow program finds it: $FALLOW_SOCKET, else the
            // default path for port 6379.
            Some(_) => Ok(ServerAddr::Unix(fallow_proto::socket_path::socket_path(
                6379,
            ))),
            None => bail!("{text:?}: expected tcp://HOST:PORT, unix:/path or unix:"),
        }
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddr::Tcp(hp) => write!(f, "tcp://{hp}"),
            ServerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The wire protocol the generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Resp2,
    Resp3,
    MemcacheText,
    MemcacheMeta,
}

impl Protocol {
    /// The name the command line takes.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Resp2 => "resp2",
            Protocol::Resp3 => "resp3",
            Protocol::MemcacheText => "memcache-text",
            Protocol::MemcacheMeta => "memcache-meta",
        }
    }

    /// True for the two RESP versions.
    pub fn is_resp(self) -> bool {
        matches!(self, Protocol::Resp2 | Protocol::Resp3)
    }
}

/// SET:GET weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub sets: u32,
    pub gets: u32,
}

impl FromStr for Ratio {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<Ratio> {
        let (s, g) = text
            .split_once(':')
            .with_context(|| format!("{text:?}: expected SET:GET, e.g. 1:10"))?;
        let sets = s
            .trim()
            .parse()
            .with_context(|| format!("{text:?}: bad SET weight"))?;
        let gets = g
            .trim()
            .parse()
            .with_context(|| format!("{text:?}: bad GET weight"))?;
        if sets == 0 && gets == 0 {
            bail!("{text:?}: SET and GET weights are both 0");
        }
        // Both weights are summed in a u32 when choosing an operation.
        if u64::from(sets) + u64::from(gets) > u64::from(u32::MAX) {
            bail!("{text:?}: weights too large");
        }
        Ok(Ratio { sets, gets })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.sets, self.gets)
    }
}

/// How keys are drawn from the key space.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    Uniform,
    /// Zipf with exponent alpha over key ranks (key 0 is the most popular).
    Zipf {
        alpha: f64,
    },
    /// Each connection walks the key space in order from its own starting point, wrapping at the end.
    Sequential,
    /// `request_fraction` of requests go to the first `key_fraction` of the keys, the rest to the others.
    HotSet {
        key_fraction: f64,
        request_fraction: f64,
    },
}

impl Distribution {
    fn validate(&self, keys: u64) -> anyhow::Result<()> {
        if let Distribution::HotSet { key_fraction, .. } = *self {
            let hot = (key_fraction * keys as f64).round() as u64;
            if hot == 0 {
                bail!("hotset: {key_fraction} of {keys} keys is no key at all");
            }
        }
        Ok(())
    }
}

fn parse_fraction(text: &str, what: &str) -> anyhow::Result<f64> {
    let value: f64 = text
        .parse()
        .with_context(|| format!("{what}: {text:?} is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        bail!("{what}: {value} is not between 0 and 1");
    }
    Ok(value)
}

impl FromStr for Distribution {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<Distribution> {
        let mut parts = text.split(':');
        let kind = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        match (kind, rest.as_slice()) {
            ("uniform", []) => Ok(Distribution::Uniform),
            ("sequential", []) => Ok(Distribution::Sequential),
            ("zipf", [alpha]) => {
                let alpha: f64 = alpha
                    .parse()
                    .with_context(|| format!("{text:?}: bad zipf exponent"))?;
                if !alpha.is_finite() || alpha < 0.0 {
                    bail!("{text:?}: the zipf exponent must be a finite number >= 0");
                }
                Ok(Distribution::Zipf { alpha })
            }
            ("hotset", [keys, requests]) => {
                let key_fraction = parse_fraction(keys, "hotset KEY_FRACTION")?;
                if key_fraction == 0.0 {
                    bail!("hotset KEY_FRACTION must be above 0");
                }
                Ok(Distribution::HotSet {
                    key_fraction,
                    request_fraction: parse_fraction(requests, "hotset REQUEST_FRACTION")?,
                })
            }
            _ => bail!(
                "{text:?}: expected uniform, zipf:ALPHA, sequential or hotset:KEY_FRACTION:REQUEST_FRACTION"
            ),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Sequential => write!(f, "sequential"),
            Distribution::Zipf { alpha } => write!(f, "zipf:{alpha}"),
            Distribution::HotSet {
                key_fraction,
                request_fraction,
            } => write!(f, "hotset:{key_fraction}:{request_fraction}"),
        }
    }
}

/// Value sizes of SETs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueSizes {
    Fixed(usize),
    /// Uniform over `min..=max`.
    Range {
        min: usize,
        max: usize,
    },
    /// One of these, picked uniformly.
    List(Vec<usize>),
}

impl ValueSizes {
    /// The largest size this spec can produce.
    pub fn max(&self) -> usize {
        match self {
            ValueSizes::Fixed(n) => *n,
            ValueSizes::Range { max, .. } => *max,
            ValueSizes::List(sizes) => sizes.iter().copied().max().unwrap_or(0),
        }
    }
}

/// Parses a byte count: digits with an optional k/m suffix (powers of 1024), e.g. 32, 4k, 1m.
pub fn parse_bytes(text: &str) -> anyhow::Result<usize> {
    let lower = text.trim().to_ascii_lowercase();
    let trimmed = lower.trim_end_matches('b').trim_end_matches('i');
    let (digits, scale) = match trimmed.as_bytes().last() {
        Some(b'k') => (&trimmed[..trimmed.len() - 1], 1usize << 10),
        Some(b'm') => (&trimmed[..trimmed.len() - 1], 1 << 20),
        _ => (trimmed, 1),
    };
    let n: usize = digits
        .parse()
        .with_context(|| format!("{text:?} is not a byte count"))?;
    let bytes = n
        .checked_mul(scale)
        .with_context(|| format!("{text:?} is too large"))?;
    if bytes > VALUE_BYTES_MAX {
        bail!("{text:?}: values over {VALUE_BYTES_MAX} bytes are not supported");
    }
    Ok(bytes)
}

impl FromStr for ValueSizes {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<ValueSizes> {
        if text.contains(',') {
            let sizes = text
                .split(',')
                .map(parse_bytes)
                .collect::<anyhow::Result<Vec<_>>>()?;
            return Ok(ValueSizes::List(sizes));
        }
        if let Some((lo, hi)) = text.split_once('-') {
            let (min, max) = (parse_bytes(lo)?, parse_bytes(hi)?);
            if min > max {
                bail!("{text:?}: the range is empty ({min} > {max})");
            }
            return Ok(ValueSizes::Range { min, max });
        }
        Ok(ValueSizes::Fixed(parse_bytes(text)?))
    }
}

impl fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSizes::Fixed(n) => write!(f, "{n}"),
            ValueSizes::Range { min, max } => write!(f, "{min}-{max}"),
            ValueSizes::List(sizes) => {
                let texts: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
                write!(f, "{}", texts.join(","))
            }
        }
    }
}

/// A duration written as a number with a unit: 10s, 500ms, 2m, 1h, 250us; a bare number is seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<HumanDuration> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let value: f64 = number
            .parse()
            .with_context(|| format!("{text:?}: expected a duration such as 10s or 500ms"))?;
        let seconds_per_unit = match unit {
            "" | "s" => 1.0,
            "ms" => 1e-3,
            "us" => 1e-6,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => bail!("{text:?}: unknown unit {unit:?} (use us, ms, s, m or h)"),
        };
        let seconds = value * seconds_per_unit;
        if !seconds.is_finite() || seconds > 1e7 {
            bail!("{text:?}: duration out of range");
        }
        Ok(HumanDuration(Duration::from_secs_f64(seconds)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        options: RunOptions,
    }

    fn parse(args: &[&str]) -> Result<RunOptions, clap::Error> {
        let mut argv = vec!["fallow-bench"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.options)
    }

    #[test]
    fn value_sizes_parse_fixed_range_and_list() {
        assert_eq!("32".parse::<ValueSizes>().unwrap(), ValueSizes::Fixed(32));
        assert_eq!(
            "32-1024".parse::<ValueSizes>().unwrap(),
            ValueSizes::Range { min: 32, max: 1024 }
        );
        assert_eq!(
            "32,1k,64KiB".parse::<ValueSizes>().unwrap(),
            ValueSizes::List(vec![32, 1024, 65536])
        );
        for bad in ["", "x", "10-5", "1,,2", "-3", "65m", "1-"] {
            assert!(bad.parse::<ValueSizes>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn value_sizes_print_what_they_parse() {
        for text in ["32", "32-1024", "32,1024,65536"] {
            assert_eq!(text.parse::<ValueSizes>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn distributions_parse_and_reject_bad_parameters() {
        assert_eq!(
            "zipf:0.99".parse::<Distribution>().unwrap(),
            Distribution::Zipf { alpha: 0.99 }
        );
        assert_eq!(
            "hotset:0.1:0.9".parse::<Distribution>().unwrap(),
            Distribution::HotSet {
                key_fraction: 0.1,
                request_fraction: 0.9
            }
        );
        for bad in [
            "zipf",
            "zipf:-1",
            "zipf:nan",
            "hotset:0:0.5",
            "hotset:0.1",
            "hotset:1.5:0.5",
            "gauss",
            "uniform:3",
        ] {
            assert!(bad.parse::<Distribution>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn durations_take_units() {
        let ms = |t: &str| t.parse::<HumanDuration>().unwrap().0.as_millis();
        assert_eq!(ms("10s"), 10_000);
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("2m"), 120_000);
        assert_eq!(ms("1.5"), 1500);
        for bad in ["", "s", "10x", "-1s", "1e99h"] {
            assert!(bad.parse::<HumanDuration>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn servers_parse_tcp_and_unix() {
        assert_eq!(
            "tcp://127.0.0.1:7379".parse::<ServerAddr>().unwrap(),
            ServerAddr::Tcp("127.0.0.1:7379".into())
        );
        assert_eq!(
            "unix:/tmp/s.sock".parse::<ServerAddr>().unwrap(),
            ServerAddr::Unix("/tmp/s.sock".into())
        );
        assert_eq!(
            "unix:".parse::<ServerAddr>().unwrap(),
            ServerAddr::Unix(fallow_proto::socket_path::socket_path(6379)),
            "unix: alone is the shared default"
        );
        for bad in [
            "127.0.0.1:6379",
            "tcp://host",
            "tcp://:1",
            "tcp://h:99999",
            "udp://h:1",
        ] {
            assert!(bad.parse::<ServerAddr>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn ratio_rejects_zero_zero_and_garbage() {
        assert_eq!(
            "1:10".parse::<Ratio>().unwrap(),
            Ratio { sets: 1, gets: 10 }
        );
        for bad in ["0:0", "1", "a:b", "1:-1", "4294967295:1"] {
            assert!(bad.parse::<Ratio>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn defaults_match_the_contract() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.server, ServerAddr::Tcp("127.0.0.1:6379".into()));
        assert_eq!((o.threads, o.connections, o.pipeline), (2, 25, 1));
        assert_eq!(o.ratio, Ratio { sets: 1, gets: 10 });
        assert_eq!(o.duration_limit(), Some(Duration::from_secs(10)));
        o.validate().unwrap();
    }

    #[test]
    fn option_errors_are_reported() {
        assert!(parse(&["--duration", "1s", "--requests", "5"]).is_err());
        assert!(parse(&["--protocol", "http"]).is_err());
        assert!(parse(&["--value-size", "abc"]).is_err());
        let invalid = |args: &[&str]| parse(args).unwrap().validate().is_err();
        assert!(invalid(&["--threads", "0"]));
        assert!(invalid(&["--pipeline", "0"]));
        assert!(invalid(&["--keys", "0"]));
        assert!(invalid(&["--rate=-5"]));
        assert!(invalid(&["--key-bytes", "5", "--keys", "1000000"]));
        assert!(invalid(&["--key-prefix", "a b"]));
        assert!(invalid(&[
            "--distribution",
            "hotset:0.00001:0.5",
            "--keys",
            "10"
        ]));
    }

    #[test]
    fn total_connections_split_evenly() {
        let mut o = RunOptions::defaults();
        o.connections_total = Some(25);
        assert_eq!(o.connections_per_thread(), vec![13, 12]);
        o.connections_total = Some(1);
        assert_eq!(o.connections_per_thread(), vec![1]);
    }
}
