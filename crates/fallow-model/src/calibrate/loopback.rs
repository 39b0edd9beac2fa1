//! Stream bandwidth over loopback: sender threads writing 1 MiB buffers, receiver threads reading them,
//! over TCP (127.0.0.1) and a Unix stream socket; bytes received / receiver time, summed over the
//! concurrent streams, best of N. One stream cannot fill loopback on a multi-core host (the kernel's copy
//! runs on the two threads' cores), so the calibration also tries one stream per core: a server with
//! many connections reaches that aggregate, and a ceiling it can exceed would be no ceiling.
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Bytes per write and per read.
pub const WRITE_BYTES: usize = 1 << 20;

/// Best TCP bandwidth over `trials` transfers of about `duration` each, on `streams` concurrent connections.
pub fn tcp_bytes_per_sec(duration: Duration, trials: u32, streams: usize) -> Result<f64> {
    best_of(trials, || concurrently(streams, || tcp_stream(duration)))
}

/// Best Unix-socket bandwidth over `trials` transfers of about `duration` each, on `streams` socket pairs.
pub fn unix_bytes_per_sec(duration: Duration, trials: u32, streams: usize) -> Result<f64> {
    best_of(trials, || concurrently(streams, || unix_stream(duration)))
}

fn tcp_stream(duration: Duration) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a loopback TCP listener")?;
    let address = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> Result<f64> {
        let (stream, _) = listener
            .accept()
            .context("accepting the loopback connection")?;
        receive(stream)
    });
    let sender = TcpStream::connect(address).context("connecting over loopback TCP")?;
    sender.set_nodelay(true)?;
    send(&sender, duration)?;
    sender.shutdown(Shutdown::Write)?;
    join(receiver)
}

fn unix_stream(duration: Duration) -> Result<f64> {
    let (sender, receiving_end) = UnixStream::pair().context("creating a Unix socket pair")?;
    let receiver = std::thread::spawn(move || receive(receiving_end));
    send(&sender, duration)?;
    sender.shutdown(Shutdown::Write)?;
    join(receiver)
}

/// Runs `streams` transfers at once and sums their rates.
fn concurrently(streams: usize, transfer: impl Fn() -> Result<f64> + Sync) -> Result<f64> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..streams.max(1))
            .map(|_| scope.spawn(&transfer))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("a loopback stream thread panicked"))?
            })
            .sum()
    })
}

fn best_of(trials: u32, mut trial: impl FnMut() -> Result<f64>) -> Result<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..trials.max(1) {
        best = best.max(trial()?);
    }
    assert!(
        best.is_finite() && best > 0.0,
        "a calibrated rate is positive and finite (every transfer moved data): {best} B/s"
    );
    Ok(best)
}

fn join(receiver: std::thread::JoinHandle<Result<f64>>) -> Result<f64> {
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the loopback receiver thread panicked"))?
}

/// Writes 1 MiB buffers until `duration` has passed.
fn send(mut stream: impl Write, duration: Duration) -> Result<()> {
    let buffer = vec![0x5Au8; WRITE_BYTES];
    let start = Instant::now();
    while start.elapsed() < duration {
        stream.write_all(&buffer).context("loopback send")?;
    }
    Ok(())
}

/// Reads until end of stream; bytes per second from the first byte to the end.
fn receive(mut stream: impl Read) -> Result<f64> {
    let mut buffer = vec![0u8; WRITE_BYTES];
    let mut total: u64 = 0;
    let mut first_byte: Option<Instant> = None;
    loop {
        let read = stream.read(&mut buffer).context("loopback receive")?;
        if read == 0 {
            break;
        }
        first_byte.get_or_insert_with(Instant::now);
        total += read as u64;
    }
    let seconds = first_byte.map_or(0.0, |start| start.elapsed().as_secs_f64());
    anyhow::ensure!(
        total > 0 && seconds > 0.0,
        "the loopback receiver got no data"
    );
    Ok(total as f64 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_unix_move_data() {
        let tcp = tcp_bytes_per_sec(Duration::from_millis(100), 1, 1).unwrap();
        let unix = unix_bytes_per_sec(Duration::from_millis(100), 1, 2).unwrap();
        assert!(tcp > 1e6 && unix > 1e6, "tcp {tcp} unix {unix}");
    }
}
