//! Round trips of one connection over TCP, the Unix socket and a shared-memory channel: median and 99th
//! percentile of `GET k`, in µs.
//!
//! ```text
//! cargo run --release -p fallow-client --example shm_round_trip -- 127.0.0.1:6379 unix:/path/to/s.sock [count]
//! ```
//! `FALLOW_SHM_SPIN_US` sets the channel's spin budget (default 50).
use fallow_client::connection::{Connection, ConnectionSettings, Transport};
use std::time::Instant;

/// Round trips measured per transport when no count is given.
const COUNT_DEFAULT: usize = 50_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, tcp, unix, rest @ ..] = &args[..] else {
        return Err("usage: shm_round_trip HOST:PORT unix:PATH [count]".into());
    };
    let count = match rest.first() {
        Some(text) => text.parse()?,
        None => COUNT_DEFAULT,
    };
    assert!(count > 0, "count must be positive");
    for (name, address, shm) in [
        ("tcp", tcp, false),
        ("unix", unix, false),
        ("shm", unix, true),
    ] {
        let settings = ConnectionSettings {
            shm_channels: shm,
            ..ConnectionSettings::default()
        };
        let mut connection = Connection::open(address, settings)?;
        if shm && connection.transport() != Transport::Shm {
            return Err(format!("no channel: {:?}", connection.shm_refusal()).into());
        }
        let mut samples_us = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            connection.call(&[b"GET", b"k"])?;
            samples_us.push(started.elapsed().as_secs_f64() * 1e6);
        }
        samples_us.sort_by(f64::total_cmp);
        println!(
            "{name:5} GET median {:7.2} µs  p99 {:7.2} µs  ({count} round trips)",
            samples_us[count / 2],
            samples_us[count * 99 / 100]
        );
    }
    Ok(())
}
