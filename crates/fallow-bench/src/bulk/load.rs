//! `fallow load FILE`: one reader thread parses the file into chunks of records; N connection threads
//! take chunks from a bounded queue and send each as one pipelined round of SET (or MSET) commands, then
//! read every reply. Error replies are counted and reported; malformed records fail or are skipped and
//! reported, per --on-error.
use super::client::{parse_server, Conn};
use super::records::{Batch, Format, ReadError, RecordError, RecordReader};
use super::{mb_per_sec, progress_bar, LoadArgs, OnError};
use anyhow::{bail, Context};
use fallow_proto::resp::{encode_array_header, encode_bulk};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A chunk also ends at this many bytes of keys and values, whatever its record count.
const CHUNK_DATA_BYTES_MAX: usize = 4 << 20;
/// Malformed records and error replies listed in full at the end; the rest are counted.
const REPORTED_MAX: usize = 10;
/// Chunks queued per connection between the reader and the senders.
const QUEUED_CHUNKS_PER_CONNECTION: usize = 2;

/// Counters the threads share with the progress display.
#[derive(Default)]
struct Shared {
    records_acked: AtomicU64,
    bytes_read: AtomicU64,
    error_replies: AtomicU64,
    failed_records: AtomicU64,
    error_messages: Mutex<Vec<String>>,
    /// Set when a thread fails, so the others stop early.
    abort: AtomicBool,
}

/// What the reader found.
#[derive(Default)]
struct ReadSummary {
    records: u64,
    bytes: u64,
    skipped: u64,
    skipped_examples: Vec<RecordError>,
    /// The malformed record that stopped the load (--on-error fail).
    failed_at: Option<RecordError>,
}

pub fn run(args: &LoadArgs) -> anyhow::Result<()> {
    check_args(args)?;
    let format = Format::resolve(args.format, &args.file)?;
    let addr = parse_server(&args.server)?;
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("cannot open {}", args.file.display()))?;
    let file_bytes = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    // Connect first, so a wrong address fails before any reading.
    let conns = (0..args.connections)
        .map(|_| Conn::connect(&addr, 64 << 20))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let started = Instant::now();
    let shared = Arc::new(Shared::default());
    let (chunk_tx, chunk_rx) =
        std::sync::mpsc::sync_channel::<Batch>(args.connections * QUEUED_CHUNKS_PER_CONNECTION);
    let chunk_rx = Arc::new(Mutex::new(chunk_rx));
    // Every thread reports on `done` when it ends, so the progress loop wakes at once for the last one.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let senders: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            let (rx, shared, args) = (chunk_rx.clone(), shared.clone(), args.clone());
            let done = done_tx.clone();
            std::thread::spawn(move || {
                let result = send_chunks(conn, &rx, &shared, &args);
                if result.is_err() {
                    shared.abort.store(true, Ordering::Relaxed);
                }
                let _ = done.send(());
                result
            })
        })
        .collect();
    let reader = {
        let (shared, args) = (shared.clone(), args.clone());
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let result = read_chunks(file, format, &args, chunk_tx, &shared);
            let _ = done.send(());
            result
        })
    };
    drop(done_tx);
    let bar = progress_bar(
        file_bytes,
        "load {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg} eta {eta}",
        args.quiet,
    );
    let mut running = senders.len() + 1;
    while running > 0 {
        match done_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => running -= 1,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        show_progress(&bar, &shared, started);
    }
    bar.finish_and_clear();
    let read = reader.join().expect("reader thread")?;
    for sender in senders {
        sender.join().expect("sender thread")?;
    }
    report(&read, &shared, started.elapsed().as_secs_f64())
}

fn check_args(args: &LoadArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.connections > 1024 {
        bail!("--connections must be 1..=1024");
    }
    if args.pipeline == 0 || args.pipeline > 100_000 {
        bail!("--pipeline must be 1..=100000");
    }
    if args.batch == 0 || args.batch > 100_000 {
        bail!("--batch must be 1..=100000");
    }
    Ok(())
}

fn show_progress(bar: &indicatif::ProgressBar, shared: &Shared, started: Instant) {
    let records = shared.records_acked.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    bar.set_position(shared.bytes_read.load(Ordering::Relaxed));
    bar.set_message(format!(
        "{records} records, {:.0} records/s",
        records as f64 / seconds
    ));
}

/// Parses the file into chunks of `pipeline * batch` records (or CHUNK_DATA_BYTES_MAX) for the senders.
fn read_chunks(
    file: std::fs::File,
    format: Format,
    args: &LoadArgs,
    chunks: SyncSender<Batch>,
    shared: &Shared,
) -> anyhow::Result<ReadSummary> {
    let chunk_records = args.pipeline * args.batch;
    let mut reader = RecordReader::new(file, format, args.limits());
    let mut summary = ReadSummary::default();
    let mut chunk = Batch::default();
    loop {
        let more = match reader.read_into(&mut chunk) {
            Ok(more) => more,
            Err(ReadError::Io(error)) => {
                return Err(error).with_context(|| format!("reading {}", args.file.display()))
            }
            Err(ReadError::Record(error)) if args.on_error == OnError::Skip => {
                summary.skipped += 1;
                if summary.skipped_examples.len() < REPORTED_MAX {
                    summary.skipped_examples.push(error);
                }
                continue;
            }
            Err(ReadError::Record(error)) => {
                summary.failed_at = Some(error);
                false
            }
        };
        let full = chunk.len() >= chunk_records || chunk.data_bytes() >= CHUNK_DATA_BYTES_MAX;
        if (full || !more) && !chunk.is_empty() {
            summary.records += chunk.len() as u64;
            shared.bytes_read.store(reader.offset(), Ordering::Relaxed);
            if shared.abort.load(Ordering::Relaxed) || chunks.send(chunk).is_err() {
                break;
            }
            chunk = Batch::default();
        }
        if !more {
            break;
        }
    }
    summary.bytes = reader.offset();
    shared.bytes_read.store(summary.bytes, Ordering::Relaxed);
    Ok(summary)
}

/// One connection: takes chunks until the queue closes, one pipelined round per chunk.
fn send_chunks(
    mut conn: Conn,
    chunks: &Mutex<Receiver<Batch>>,
    shared: &Shared,
    args: &LoadArgs,
) -> anyhow::Result<()> {
    loop {
        let next = chunks.lock().expect("queue lock").recv();
        let Ok(chunk) = next else {
            return Ok(());
        };
        if shared.abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        let commands = encode_chunk(&chunk, args.batch, &mut conn.out);
        conn.send().context("sending to the server")?;
        for command in 0..commands {
            let records_in_command = args.batch.min(chunk.len() - command * args.batch);
            read_set_reply(&mut conn, shared, records_in_command as u64)?;
        }
        shared
            .records_acked
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
}

/// Encodes a chunk as SET commands (batch 1) or MSETs of `batch` records; returns the command count.
fn encode_chunk(chunk: &Batch, batch: usize, out: &mut Vec<u8>) -> usize {
    let mut commands = 0;
    let mut index = 0;
    while index < chunk.len() {
        let records = batch.min(chunk.len() - index);
        if batch == 1 {
            encode_array_header(3, out);
            encode_bulk(b"SET", out);
        } else {
            encode_array_header(1 + 2 * records, out);
            encode_bulk(b"MSET", out);
        }
        for record in index..index + records {
            let (key, value) = chunk.get(record);
            encode_bulk(key, out);
            encode_bulk(value, out);
        }
        index += records;
        commands += 1;
    }
    commands
}

fn read_set_reply(conn: &mut Conn, shared: &Shared, records: u64) -> anyhow::Result<()> {
    match conn.read_reply().context("reading a reply")? {
        super::client::Reply::Simple(_) => {}
        super::client::Reply::Error(message) => {
            shared.error_replies.fetch_add(1, Ordering::Relaxed);
            shared.failed_records.fetch_add(records, Ordering::Relaxed);
            let mut messages = shared.error_messages.lock().expect("messages lock");
            if messages.len() < REPORTED_MAX {
                messages.push(message);
            }
        }
        other => bail!("unexpected reply to SET/MSET: {other:?}"),
    }
    Ok(())
}

fn report(read: &ReadSummary, shared: &Shared, seconds: f64) -> anyhow::Result<()> {
    for error in &read.skipped_examples {
        eprintln!("load: skipped malformed record at {error}");
    }
    if read.skipped > read.skipped_examples.len() as u64 {
        eprintln!(
            "load: ... and {} more malformed records skipped",
            read.skipped - read.skipped_examples.len() as u64
        );
    }
    let messages = shared.error_messages.lock().expect("messages lock");
    for message in messages.iter() {
        eprintln!("load: server error reply: {message}");
    }
    let error_replies = shared.error_replies.load(Ordering::Relaxed);
    let failed_records = shared.failed_records.load(Ordering::Relaxed);
    let loaded = shared.records_acked.load(Ordering::Relaxed) - failed_records;
    println!(
        "load: {loaded} records, {} bytes, {seconds:.3} s, {:.1} MB/s, {:.0} records/s, {error_replies} errors, {} skipped",
        read.bytes,
        mb_per_sec(read.bytes, seconds),
        loaded as f64 / seconds.max(1e-9),
        read.skipped
    );
    if let Some(error) = &read.failed_at {
        bail!(
            "malformed record at {error} (the {} records before it were sent; --on-error skip goes on past bad records)",
            read.records
        );
    }
    if error_replies > 0 {
        bail!("{error_replies} error replies: {failed_records} records were not stored");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_encode_as_set_or_mset() {
        let mut chunk = Batch::default();
        for index in 0..5u8 {
            chunk.push(&[b'k', index], &[b'v', index]);
        }
        let mut out = Vec::new();
        assert_eq!(encode_chunk(&chunk, 1, &mut out), 5);
        assert!(out.starts_with(b"*3\r\n$3\r\nSET\r\n$2\r\nk\x00\r\n$2\r\nv\x00\r\n"));
        out.clear();
        assert_eq!(encode_chunk(&chunk, 2, &mut out), 3, "2 + 2 + 1 records");
        assert!(out.starts_with(b"*5\r\n$4\r\nMSET\r\n"));
        assert!(out.ends_with(b"*3\r\n$4\r\nMSET\r\n$2\r\nk\x04\r\n$2\r\nv\x04\r\n"));
    }
}
