//! `fallow dump FILE [--sorted]`: N connections each read a share of the shards with SHARDSCAN. Unsorted,
//! each step's records go straight to the writer, in scan order. Sorted, each connection thread sorts a
//! whole shard's records by key (bytewise) and the main thread k-way merges the per-shard runs into the
//! file. The file is fsynced at the end.
use super::client::{parse_server, Conn, Reply};
use super::records::{Format, RecordWriter, WriteError};
use super::{mb_per_sec, progress_bar, DumpArgs, OnError};
use anyhow::{bail, Context};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An unsorted dump hands records to the writer in runs of about this many bytes.
const UNSORTED_RUN_BYTES: usize = 4 << 20;
/// Runs queued per connection for the writer (unsorted dumps).
const QUEUED_RUNS_PER_CONNECTION: usize = 4;
/// Largest SHARDSCAN reply element the client accepts (the server's value limit).
const REPLY_ELEMENT_BYTES_MAX: usize = 512 << 20;
const CONNECTIONS_DEFAULT_MAX: usize = 4;
const REPORTED_MAX: usize = 10;

/// Records back to back in one buffer, with an index that sorts without touching the buffer.
#[derive(Default)]
pub struct Run {
    data: Vec<u8>,
    entries: Vec<Entry>,
}

#[derive(Clone, Copy)]
struct Entry {
    /// The key's first 8 bytes, big-endian, zero-padded: most comparisons end here.
    prefix: u64,
    start: usize,
    key_len: u32,
    value_len: u32,
}

impl Run {
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
        self.entries.push(Entry {
            prefix: key_prefix(key),
            start,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn bytes(&self) -> usize {
        self.data.len() + self.entries.len() * std::mem::size_of::<Entry>()
    }

    fn key(&self, entry: &Entry) -> &[u8] {
        &self.data[entry.start..entry.start + entry.key_len as usize]
    }

    pub fn record(&self, index: usize) -> (&[u8], &[u8]) {
        let entry = &self.entries[index];
        let key_end = entry.start + entry.key_len as usize;
        (
            &self.data[entry.start..key_end],
            &self.data[key_end..key_end + entry.value_len as usize],
        )
    }

    /// Sorts by key and keeps one record per key: the one scanned last. A key shows up twice only when
    /// it moved during the scan (rewritten, or moved by compaction), and the later copy is the newer.
    /// Returns the duplicates dropped.
    pub fn sort_dedup(&mut self) -> usize {
        let data = &self.data;
        let key = |entry: &Entry| &data[entry.start..entry.start + entry.key_len as usize];
        self.entries.sort_unstable_by(|left, right| {
            left.prefix
                .cmp(&right.prefix)
                .then_with(|| key(left).cmp(key(right)))
                .then_with(|| right.start.cmp(&left.start))
        });
        let before = self.entries.len();
        self.entries.dedup_by(|later, earlier| {
            later.prefix == earlier.prefix && key(later) == key(earlier)
        });
        let duplicates = before - self.entries.len();
        self.lay_out_in_order();
        duplicates
    }

    /// Copies the records into a new buffer in entry order, so the merge reads each run sequentially
    /// instead of jumping around memory for every record (which made it cache-miss bound).
    fn lay_out_in_order(&mut self) {
        let live_bytes = self
            .entries
            .iter()
            .map(|entry| entry.key_len as usize + entry.value_len as usize)
            .sum();
        let mut data = Vec::with_capacity(live_bytes);
        for entry in &mut self.entries {
            let len = entry.key_len as usize + entry.value_len as usize;
            let start = data.len();
            data.extend_from_slice(&self.data[entry.start..entry.start + len]);
            entry.start = start;
        }
        self.data = data;
    }
}

/// A merge cursor: the run's current record, ordered by key (prefix first), then run index.
struct Head<'a> {
    prefix: u64,
    key: &'a [u8],
    run: usize,
    position: usize,
}

impl<'a> Head<'a> {
    fn at(runs: &'a [Run], run: usize, position: usize) -> Option<Head<'a>> {
        let entry = runs[run].entries.get(position)?;
        Some(Head {
            prefix: entry.prefix,
            key: runs[run].key(entry),
            run,
            position,
        })
    }
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key))
            .then_with(|| self.run.cmp(&other.run))
    }
}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Head<'_> {}

fn key_prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let len = key.len().min(8);
    bytes[..len].copy_from_slice(&key[..len]);
    u64::from_be_bytes(bytes)
}

/// Counters shared with the progress display.
#[derive(Default)]
struct Shared {
    records_scanned: AtomicU64,
    skipped_non_strings: AtomicU64,
    duplicates: AtomicU64,
    held_bytes: AtomicUsize,
    abort: AtomicBool,
}

pub fn run(args: &DumpArgs) -> anyhow::Result<()> {
    let format = Format::resolve(args.format, &args.file)?;
    let addr = parse_server(&args.server)?;
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let started = Instant::now();
    let mut control = Conn::connect(&addr, REPLY_ELEMENT_BYTES_MAX)?;
    let shards = shard_count(&mut control)?;
    let total_keys = match control.call(&[b"DBSIZE"])? {
        Reply::Int(keys) => keys.max(0) as u64,
        other => bail!("unexpected DBSIZE reply {other:?}"),
    };
    let connections = match args.connections {
        0 => shards.min(CONNECTIONS_DEFAULT_MAX),
        wanted => wanted.min(shards),
    };
    let memory_max = args.max_memory.unwrap_or_else(default_memory_max);
    let file = std::fs::File::create(&args.file)
        .with_context(|| format!("cannot create {}", args.file.display()))?;
    let mut writer = Writer {
        records: RecordWriter::new(file, format),
        on_error: args.on_error,
        written: 0,
        unrepresentable: 0,
        examples: Vec::new(),
    };
    let shared = Arc::new(Shared::default());
    let bar = progress_bar(
        total_keys,
        "dump {bar:30} {pos}/{len} records {per_sec} {msg} eta {eta}",
        args.quiet,
    );
    let (run_tx, run_rx) = std::sync::mpsc::sync_channel::<Run>(if args.sorted {
        shards
    } else {
        connections * QUEUED_RUNS_PER_CONNECTION
    });
    let scanners: Vec<_> = (0..connections)
        .map(|first| {
            let conn = Conn::connect(&addr, REPLY_ELEMENT_BYTES_MAX)?;
            let my_shards: Vec<usize> = (first..shards).step_by(connections).collect();
            let (tx, shared, args) = (run_tx.clone(), shared.clone(), args.clone());
            Ok(std::thread::spawn(move || {
                let scan = ShardScan {
                    conn,
                    shared: &shared,
                    args: &args,
                    memory_max,
                };
                let result = scan.run(&my_shards, tx);
                if result.is_err() {
                    shared.abort.store(true, Ordering::Relaxed);
                }
                result
            }))
        })
        .collect::<anyhow::Result<_>>()?;
    drop(run_tx);
    let mut scan_seconds = 0.0;
    let written = if args.sorted {
        let mut runs = Vec::with_capacity(shards);
        loop {
            match run_rx.recv_timeout(Duration::from_millis(200)) {
                Ok(run) => runs.push(run),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            bar.set_position(shared.records_scanned.load(Ordering::Relaxed));
        }
        scan_seconds = started.elapsed().as_secs_f64();
        bar.set_message("merging");
        merge_runs(&runs, &mut writer, &bar)
    } else {
        write_runs(run_rx, &mut writer, &bar, &shared)
    };
    for scanner in scanners {
        scanner.join().expect("scanner thread")?;
    }
    written?;
    let sync_started = Instant::now();
    let output_bytes = writer.records.bytes_written();
    let Writer {
        records,
        written,
        unrepresentable,
        examples,
        ..
    } = writer;
    let file = records.finish().context("writing the dump")?;
    file.sync_all().context("fsync of the dump")?;
    bar.finish_and_clear();
    let timing = Timing {
        total_s: started.elapsed().as_secs_f64(),
        scan_s: scan_seconds,
        sync_s: sync_started.elapsed().as_secs_f64(),
    };
    let outcome = Outcome {
        written,
        unrepresentable,
        examples,
        output_bytes,
    };
    report(&outcome, &shared, &timing, args.sorted);
    Ok(())
}

/// What was written, for the report.
struct Outcome {
    written: u64,
    unrepresentable: u64,
    examples: Vec<String>,
    output_bytes: u64,
}

fn shard_count(control: &mut Conn) -> anyhow::Result<usize> {
    match control.call(&[b"SHARDS"])? {
        Reply::Int(shards) if (1..=4096).contains(&shards) => Ok(shards as usize),
        Reply::Error(message) => {
            bail!("the server does not support SHARDS ({message}): dump needs a fallow server")
        }
        other => bail!("unexpected SHARDS reply {other:?}"),
    }
}

/// Three quarters of MemAvailable (what a sorted dump may hold); 4 GiB when /proc/meminfo is unreadable.
fn default_memory_max() -> usize {
    let available_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| fallow_model::calibrate::machine::kib_field_bytes(&text, "MemAvailable"));
    available_bytes.map_or(4 << 30, |bytes| bytes as usize / 1024 / 4 * 3 * 1024)
}

struct Timing {
    total_s: f64,
    /// Sorted: until every shard was scanned and sorted (the merge follows).
    scan_s: f64,
    sync_s: f64,
}

/// The output side: encodes records, applying --on-error to records the format cannot hold.
struct Writer {
    records: RecordWriter<std::fs::File>,
    on_error: OnError,
    written: u64,
    unrepresentable: u64,
    examples: Vec<String>,
}

impl Writer {
    fn write(&mut self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        match self.records.write(key, value) {
            Ok(()) => self.written += 1,
            Err(WriteError::Unrepresentable(message)) if self.on_error == OnError::Skip => {
                self.unrepresentable += 1;
                if self.examples.len() < REPORTED_MAX {
                    self.examples
                        .push(format!("key {:?}: {message}", String::from_utf8_lossy(key)));
                }
            }
            Err(WriteError::Unrepresentable(message)) => {
                bail!("key {:?}: {message}", String::from_utf8_lossy(key))
            }
            Err(WriteError::Io(error)) => return Err(error).context("writing the dump"),
        }
        Ok(())
    }
}

/// One connection reading its shards.
struct ShardScan<'a> {
    conn: Conn,
    shared: &'a Shared,
    args: &'a DumpArgs,
    memory_max: usize,
}

impl ShardScan<'_> {
    fn run(mut self, shards: &[usize], runs: SyncSender<Run>) -> anyhow::Result<()> {
        for &shard in shards {
            let mut run = Run::default();
            let mut cursor = b"0".to_vec();
            loop {
                if self.shared.abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let held_before = run.bytes();
                cursor = self.step(shard, &cursor, &mut run)?;
                self.hold(run.bytes() - held_before)?;
                let done = cursor == b"0";
                if !self.args.sorted && (done || run.data.len() >= UNSORTED_RUN_BYTES) {
                    let full = std::mem::take(&mut run);
                    self.release(full.bytes());
                    if runs.send(full).is_err() {
                        return Ok(());
                    }
                }
                if done {
                    break;
                }
            }
            if self.args.sorted {
                let duplicates = run.sort_dedup();
                self.shared
                    .duplicates
                    .fetch_add(duplicates as u64, Ordering::Relaxed);
                if runs.send(run).is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Counts bytes a sorted dump keeps until the merge, failing past --max-memory.
    fn hold(&self, bytes: usize) -> anyhow::Result<()> {
        let held = self.shared.held_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.args.sorted && held > self.memory_max {
            bail!(
                "a sorted dump needs more than {} bytes of client memory (--max-memory): raise it or dump unsorted",
                self.memory_max
            );
        }
        Ok(())
    }

    fn release(&self, bytes: usize) {
        self.shared.held_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// One SHARDSCAN step: appends its records to `run` and returns the next cursor.
    fn step(&mut self, shard: usize, cursor: &[u8], run: &mut Run) -> anyhow::Result<Vec<u8>> {
        let shard_text = shard.to_string();
        let count_text = self.args.count.to_string();
        self.conn.push_command(&[
            b"SHARDSCAN",
            shard_text.as_bytes(),
            cursor,
            b"COUNT",
            count_text.as_bytes(),
        ]);
        self.conn.send().context("sending SHARDSCAN")?;
        let conn = &mut self.conn;
        if conn.read_array_len().context("SHARDSCAN")? != 3 {
            bail!("SHARDSCAN reply is not [cursor, records, skipped]");
        }
        let next = conn.read_bulk()?.context("null cursor")?.to_vec();
        let items = conn.read_array_len()?;
        if items < 0 || items % 2 != 0 {
            bail!("SHARDSCAN returned {items} items, not key/value pairs");
        }
        let mut key = Vec::new();
        for _ in 0..items / 2 {
            key.clear();
            key.extend_from_slice(conn.read_bulk()?.context("null key")?);
            let value = conn.read_bulk()?.context("null value")?;
            run.push(&key, value);
        }
        match conn.read_reply()? {
            Reply::Int(skipped) => self
                .shared
                .skipped_non_strings
                .fetch_add(skipped.max(0) as u64, Ordering::Relaxed),
            other => bail!("SHARDSCAN skipped count is {other:?}"),
        };
        self.shared
            .records_scanned
            .fetch_add(items as u64 / 2, Ordering::Relaxed);
        Ok(next)
    }
}

/// Writes runs in the order they arrive (unsorted dump).
fn write_runs(
    runs: std::sync::mpsc::Receiver<Run>,
    writer: &mut Writer,
    bar: &indicatif::ProgressBar,
    shared: &Shared,
) -> anyhow::Result<()> {
    loop {
        match runs.recv_timeout(Duration::from_millis(200)) {
            Ok(run) => {
                for index in 0..run.len() {
                    let (key, value) = run.record(index);
                    writer.write(key, value)?;
                }
                bar.set_position(writer.written);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if shared.abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// K-way merge of sorted runs (keys are unique across runs: each key lives in one shard).
fn merge_runs(
    runs: &[Run],
    writer: &mut Writer,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    bar.set_position(0);
    let mut heap: BinaryHeap<Reverse<Head>> = (0..runs.len())
        .filter_map(|run| Head::at(runs, run, 0).map(Reverse))
        .collect();
    while let Some(mut top) = heap.peek_mut() {
        let (run, position) = (top.0.run, top.0.position);
        let (key, value) = runs[run].record(position);
        writer.write(key, value)?;
        // Replacing the top sifts once, where pop + push would sift twice.
        match Head::at(runs, run, position + 1) {
            Some(next) => *top = Reverse(next),
            None => drop(std::collections::binary_heap::PeekMut::pop(top)),
        }
        if writer.written.is_multiple_of(65536) {
            bar.set_position(writer.written);
        }
    }
    Ok(())
}

fn report(outcome: &Outcome, shared: &Shared, timing: &Timing, sorted: bool) {
    for example in &outcome.examples {
        eprintln!("dump: skipped {example}");
    }
    let skipped = shared.skipped_non_strings.load(Ordering::Relaxed);
    let duplicates = shared.duplicates.load(Ordering::Relaxed);
    let phases = if sorted {
        format!(
            " (scan+sort {:.3} s, merge+write {:.3} s, fsync {:.3} s)",
            timing.scan_s,
            timing.total_s - timing.scan_s - timing.sync_s,
            timing.sync_s
        )
    } else {
        format!(" (fsync {:.3} s)", timing.sync_s)
    };
    println!(
        "dump: {} records, {} bytes, {:.3} s, {:.1} MB/s, {skipped} non-string keys skipped, \
         {} unrepresentable skipped, {duplicates} duplicates dropped{phases}",
        outcome.written,
        outcome.output_bytes,
        timing.total_s,
        mb_per_sec(outcome.output_bytes, timing.total_s),
        outcome.unrepresentable,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prefixes_order_like_keys() {
        let keys: [&[u8]; 6] = [b"", b"a", b"a\0", b"a\0\x01", b"abcdefgh", b"abcdefgh\0"];
        for pair in keys.windows(2) {
            assert!(key_prefix(pair[0]) <= key_prefix(pair[1]));
        }
        assert!(key_prefix(b"b") > key_prefix(b"abcdefghij"));
    }

    #[test]
    fn sort_keeps_the_last_scanned_copy_of_a_key() {
        let mut run = Run::default();
        run.push(b"b", b"old");
        run.push(b"a", b"1");
        run.push(b"b", b"new");
        assert_eq!(run.sort_dedup(), 1);
        let records: Vec<(&[u8], &[u8])> = (0..run.len()).map(|index| run.record(index)).collect();
        assert_eq!(
            records,
            vec![(&b"a"[..], &b"1"[..]), (&b"b"[..], &b"new"[..])]
        );
    }

    proptest! {
        #[test]
        fn sorted_runs_merge_into_key_order(
            keys in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..12), 0..200),
            run_count in 1usize..6,
        ) {
            let mut runs: Vec<Run> = (0..run_count).map(|_| Run::default()).collect();
            for (index, key) in keys.iter().enumerate() {
                runs[index % run_count].push(key, &[index as u8]);
            }
            for run in &mut runs {
                prop_assert_eq!(run.sort_dedup(), 0);
            }
            let path = std::env::temp_dir().join(format!("fallow-merge-{}.tsv", std::process::id()));
            let mut writer = Writer {
                records: RecordWriter::new(std::fs::File::create(&path).unwrap(), Format::Tsv),
                on_error: OnError::Fail,
                written: 0,
                unrepresentable: 0,
                examples: Vec::new(),
            };
            merge_runs(&runs, &mut writer, &indicatif::ProgressBar::hidden()).unwrap();
            writer.records.finish().unwrap();
            let text = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            let mut reader = super::super::records::RecordReader::new(
                &text[..], Format::Tsv, Default::default());
            let mut batch = super::super::records::Batch::default();
            while reader.read_into(&mut batch).unwrap() {}
            let merged: Vec<Vec<u8>> = batch.iter().map(|(key, _)| key.to_vec()).collect();
            let expected: Vec<Vec<u8>> = keys.into_iter().collect();
            prop_assert_eq!(merged, expected);
        }
    }
}
