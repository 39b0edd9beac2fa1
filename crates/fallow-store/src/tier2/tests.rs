use super::device::Fault;
use super::record::{RecordClass, RecordKind};
use super::*;
use crate::types::Kind;

/// A temporary directory removed on drop.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "fallow-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn config(dir: &TempDir, regions: usize, fsync: FsyncPolicy) -> Tier2Config {
    let region_bytes = 64 << 10;
    Tier2Config {
        path: dir.0.join("tier2"),
        size_bytes: FILE_HEADER_BYTES + (regions * region_bytes) as u64,
        region_bytes,
        fsync,
    }
}

fn header(key: &[u8], value: &[u8]) -> RecordHeader {
    value_header(
        Kind::String,
        RecordClass::Swap,
        0,
        0,
        0,
        key.len(),
        value.len(),
    )
}

fn opened(config: Tier2Config) -> (Arc<Tier2>, Vec<(u32, u64)>) {
    let opened = Tier2::open(config).unwrap();
    opened.tier2.start(1);
    (opened.tier2, opened.regions)
}

/// (key, value) of a record.
type KeyValue = (Vec<u8>, Vec<u8>);

/// Every record of every region, in replay order, and the corrupt records skipped.
fn replay(tier2: &Tier2, regions: &[(u32, u64)]) -> (Vec<KeyValue>, u64) {
    let mut records = Vec::new();
    let mut corrupt = 0;
    let mut reader = tier2.read_regions(regions);
    while let Some(read) = reader.next_region() {
        let (index, region) = read.unwrap();
        corrupt += walk_region(&tier2.config, index, region, |_, header, encoded| {
            records.push((
                record::key_of(header, encoded).to_vec(),
                record::value_of(header, encoded).to_vec(),
            ));
        });
    }
    (records, corrupt)
}

#[test]
fn slots_pack_position_and_length() {
    let slot = Slot::new(FILE_HEADER_BYTES + 72, 4096);
    assert_eq!((slot.position(), slot.padded_bytes()), (4168, 4096));
    assert!(!slot.is_none() && Slot::NONE.is_none());
}

#[test]
fn records_read_back_before_and_after_they_are_written_and_after_a_restart() {
    let dir = TempDir::new("tier2-rw");
    let (tier2, regions) = opened(config(&dir, 8, FsyncPolicy::Always));
    assert!(regions.is_empty());
    let mut slots = Vec::new();
    for i in 0..200u32 {
        let value = vec![i as u8; 1000 + i as usize];
        let (slot, lsn) = tier2
            .append(&header(&i.to_le_bytes(), &value), &i.to_le_bytes(), &value)
            .unwrap();
        assert_eq!(lsn, i as u64 + 1);
        slots.push(slot);
        // Readable at once, from the region buffer.
        let encoded = tier2.read(slot).unwrap();
        let decoded = record::decode(&encoded).unwrap();
        assert_eq!(record::value_of(&decoded, &encoded), &value[..]);
    }
    tier2.wait_durable(200, Duration::from_secs(5)).unwrap();
    assert!(tier2.stats.syncs.load(Ordering::Relaxed) >= 1);
    let encoded = tier2.read(slots[3]).unwrap();
    assert_eq!(
        record::key_of(&record::decode(&encoded).unwrap(), &encoded),
        3u32.to_le_bytes()
    );
    tier2.shutdown().unwrap();
    drop(tier2);

    let (tier2, regions) = opened(config(&dir, 8, FsyncPolicy::Always));
    assert!(
        regions.len() >= 3,
        "200 records of ~1 KB fill several 64 KiB regions"
    );
    let (records, corrupt) = replay(&tier2, &regions);
    assert_eq!(corrupt, 0);
    assert_eq!(records.len(), 200);
    assert!(records
        .iter()
        .enumerate()
        .all(|(i, (key, value))| key == &(i as u32).to_le_bytes() && value.len() == 1000 + i));
    let encoded = tier2.read(slots[150]).unwrap();
    assert_eq!(
        record::value_of(&record::decode(&encoded).unwrap(), &encoded)[0],
        150
    );
}

#[test]
fn a_full_log_refuses_client_appends_but_keeps_a_region_for_cleaning() {
    let dir = TempDir::new("tier2-full");
    let (tier2, _) = opened(config(&dir, 3, FsyncPolicy::No));
    let value = vec![7u8; 30_000];
    let mut appended = 0;
    let error = loop {
        match tier2.append(&header(b"k", &value), b"k", &value) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
    };
    assert_eq!(error, Tier2Error::Full);
    assert_eq!(
        appended, 4,
        "two 64 KiB regions of two 30 KB records; the third is kept"
    );
    let mut encoded = Vec::new();
    record::encode(&header(b"k", &value), b"k", &value, &mut encoded);
    tier2.append_encoded(&encoded, 0).unwrap();
}

#[test]
fn records_too_large_for_a_region_are_refused() {
    let dir = TempDir::new("tier2-large");
    let (tier2, _) = opened(config(&dir, 3, FsyncPolicy::No));
    let value = vec![0u8; 64 << 10];
    assert!(matches!(
        tier2.append(&header(b"k", &value), b"k", &value),
        Err(Tier2Error::TooLarge { .. })
    ));
}

#[test]
fn a_write_error_stops_writes_and_wakes_waiters_with_the_error() {
    let dir = TempDir::new("tier2-eio");
    let (tier2, _) = opened(config(&dir, 4, FsyncPolicy::Always));
    tier2.set_fault(Fault::WriteError);
    let (_, lsn) = tier2.append(&header(b"k", b"v"), b"k", b"v").unwrap();
    assert!(matches!(
        tier2.wait_durable(lsn, Duration::from_secs(5)),
        Err(Tier2Error::Io(_))
    ));
    assert!(tier2.failure().unwrap().contains("Input/output error"));
    assert!(matches!(
        tier2.append(&header(b"k", b"v"), b"k", b"v"),
        Err(Tier2Error::Io(_))
    ));
    assert!(tier2.stats.write_errors.load(Ordering::Relaxed) >= 1);
}

#[test]
fn read_errors_and_corrupt_records_are_reported_not_served() {
    let dir = TempDir::new("tier2-corrupt");
    let (tier2, _) = opened(config(&dir, 4, FsyncPolicy::Always));
    let mut slots = Vec::new();
    for i in 0..3u8 {
        let value = [i; 100];
        slots.push(tier2.append(&header(&[i], &value), &[i], &value).unwrap().0);
    }
    tier2.shutdown().unwrap();
    drop(tier2);
    // Flip a byte of the second record's value on the device.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("tier2"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    file.write_all_at(&[0xff], slots[1].position() + 60)
        .unwrap();
    drop(file);
    let (tier2, regions) = opened(config(&dir, 4, FsyncPolicy::Always));
    let (records, corrupt) = replay(&tier2, &regions);
    assert_eq!(corrupt, 1);
    assert_eq!(
        records.iter().map(|(key, _)| key[0]).collect::<Vec<_>>(),
        [0, 2]
    );
    assert_eq!(tier2.read(slots[1]), Err(Tier2Error::Corrupt));
    tier2.set_fault(Fault::ReadError);
    assert!(matches!(tier2.read(slots[0]), Err(Tier2Error::Io(_))));
}

#[test]
fn a_truncated_file_loses_only_what_was_cut() {
    let dir = TempDir::new("tier2-truncated");
    let (tier2, _) = opened(config(&dir, 8, FsyncPolicy::Always));
    let value = vec![1u8; 5000];
    for i in 0..40u32 {
        tier2
            .append(&header(&i.to_le_bytes(), &value), &i.to_le_bytes(), &value)
            .unwrap();
    }
    tier2.shutdown().unwrap();
    drop(tier2);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("tier2"))
        .unwrap();
    let length = file.metadata().unwrap().len();
    file.set_len(length - 10_000).unwrap();
    drop(file);
    let (tier2, regions) = opened(config(&dir, 8, FsyncPolicy::Always));
    let (records, _) = replay(&tier2, &regions);
    assert!(
        records.len() >= 35 && records.len() < 40,
        "{} records",
        records.len()
    );
    assert!(records
        .iter()
        .enumerate()
        .all(|(i, (key, _))| key == &(i as u32).to_le_bytes()));
}

#[test]
fn freed_regions_are_reused_and_their_old_records_never_replayed() {
    let dir = TempDir::new("tier2-reuse");
    let (tier2, _) = opened(config(&dir, 4, FsyncPolicy::Always));
    let value = vec![3u8; 20_000];
    for i in 0..6u32 {
        tier2
            .append(&header(&i.to_le_bytes(), &value), &i.to_le_bytes(), &value)
            .unwrap();
    }
    tier2.flush_and_sync().unwrap();
    // The oldest region (records 0..3) is cleaned away, then new, smaller records fill it again.
    let (oldest, _) = tier2.oldest_region().unwrap();
    tier2.free_oldest_region(oldest).unwrap();
    let small = vec![4u8; 100];
    for i in 100..400u32 {
        if tier2
            .append(&header(&i.to_le_bytes(), &small), &i.to_le_bytes(), &small)
            .is_err()
        {
            break;
        }
    }
    tier2.shutdown().unwrap();
    drop(tier2);
    let (tier2, regions) = opened(config(&dir, 4, FsyncPolicy::Always));
    let (records, corrupt) = replay(&tier2, &regions);
    assert_eq!(corrupt, 0);
    let keys: Vec<u32> = records
        .iter()
        .map(|(key, _)| u32::from_le_bytes(key[..].try_into().unwrap()))
        .collect();
    assert!(
        !keys.iter().any(|&key| key < 3),
        "records of the freed region stay gone: {keys:?}"
    );
    assert!(keys.contains(&3) && keys.contains(&100));
    let _ = RecordKind::Tombstone;
}

/// Value bytes per record, repeating: two records that each fill most of a 64 KiB region, then one that
/// leaves most of its region empty (the next record does not fit after it). Regions alternate between the
/// reader's two buffers, so every short region lands in a buffer that last held a long one.
const LONG_LONG_SHORT_VALUE_BYTES: [usize; 3] = [62_000, 62_000, 5_000];

/// Appends `cycles` × long, long, short records (one region each), keys 0.., and writes them.
fn write_long_long_short(tier2: &Tier2, cycles: u32) -> Vec<Slot> {
    let mut slots = Vec::new();
    for i in 0..cycles * 3 {
        let value = vec![i as u8; LONG_LONG_SHORT_VALUE_BYTES[i as usize % 3]];
        let key = i.to_le_bytes();
        slots.push(tier2.append(&header(&key, &value), &key, &value).unwrap().0);
    }
    tier2.shutdown().unwrap();
    slots
}

#[test]
fn reused_read_buffers_return_every_record_once_and_no_stale_bytes() {
    let dir = TempDir::new("tier2-read-ahead");
    let cycles = 6;
    let (tier2, _) = opened(config(&dir, 3 * cycles as usize + 2, FsyncPolicy::No));
    let slots = write_long_long_short(&tier2, cycles);
    drop(tier2);
    // Corrupt a value byte of a long record in the middle: skipped and counted, its neighbours kept.
    let corrupted = 7;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("tier2"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    file.write_all_at(&[0xff], slots[corrupted].position() + 1000)
        .unwrap();
    drop(file);

    let (tier2, regions) = opened(config(&dir, 3 * cycles as usize + 2, FsyncPolicy::No));
    assert_eq!(regions.len(), 3 * cycles as usize, "one record per region");
    let mut keys = Vec::new();
    let mut corrupt = 0;
    let mut reader = tier2.read_regions(&regions);
    while let Some(read) = reader.next_region() {
        let (index, region) = read.unwrap();
        let mut records_end = REGION_HEADER_BYTES;
        corrupt += walk_region(&tier2.config, index, region, |slot, header, encoded| {
            let value = record::value_of(header, encoded);
            let key = u32::from_le_bytes(record::key_of(header, encoded).try_into().unwrap());
            assert_eq!(value.len(), LONG_LONG_SHORT_VALUE_BYTES[key as usize % 3]);
            assert!(value.iter().all(|&byte| byte == key as u8));
            keys.push(key);
            records_end = (slot.position() - region_position(&tier2.config, index)) as usize
                + slot.padded_bytes();
        });
        // A short region read into a buffer that held a long one: past its record, only zeros (holes
        // and the end of the file), nothing of the long region.
        let short = LONG_LONG_SHORT_VALUE_BYTES[2] + 1000;
        if records_end > REGION_HEADER_BYTES && records_end < short {
            assert!(
                region[records_end..].iter().all(|&byte| byte == 0),
                "stale bytes after region {index}'s records"
            );
        }
    }
    assert_eq!(corrupt, 1);
    let expected: Vec<u32> = (0..cycles * 3).filter(|&key| key != 7).collect();
    assert_eq!(keys, expected, "every intact record once, in order");
}

#[test]
fn a_reused_region_buffer_puts_no_stale_bytes_on_the_device() {
    let dir = TempDir::new("tier2-buffer-reuse");
    let config = config(&dir, 12, FsyncPolicy::No);
    let region_bytes = config.region_bytes as u64;
    let (tier2, _) = opened(config);
    // Each record is written before the next is appended, so each region from the third on opens on
    // the buffer of the region two before it: a short record lands on a long one's bytes.
    let mut slots = Vec::new();
    for i in 0..9u32 {
        let value = vec![i as u8 + 1; LONG_LONG_SHORT_VALUE_BYTES[i as usize % 3]];
        let key = i.to_le_bytes();
        slots.push(tier2.append(&header(&key, &value), &key, &value).unwrap().0);
        tier2.flush_and_sync().unwrap();
    }
    for (i, slot) in slots.iter().enumerate() {
        let encoded = tier2.read(*slot).unwrap();
        let header = record::decode(&encoded).unwrap();
        assert!(record::value_of(&header, &encoded)
            .iter()
            .all(|&byte| byte == i as u8 + 1));
    }
    tier2.shutdown().unwrap();
    let file = std::fs::read(dir.0.join("tier2")).unwrap();
    for slot in slots.iter().skip(2).step_by(3) {
        let end = (slot.position() + slot.padded_bytes() as u64) as usize;
        let region_end = FILE_HEADER_BYTES
            + (slot.position() - FILE_HEADER_BYTES).next_multiple_of(region_bytes);
        let tail = &file[end..(region_end as usize).min(file.len())];
        assert!(
            !tail.is_empty() && tail.iter().all(|&byte| byte == 0),
            "bytes after the short record at {} are zeros",
            slot.position()
        );
    }
}

#[test]
fn a_region_reader_stops_at_a_read_error_and_can_be_dropped_early() {
    let dir = TempDir::new("tier2-read-ahead-error");
    let (tier2, _) = opened(config(&dir, 8, FsyncPolicy::No));
    write_long_long_short(&tier2, 2);
    drop(tier2);
    let (tier2, regions) = opened(config(&dir, 8, FsyncPolicy::No));
    // Dropped with reads in flight and a buffer held: the thread is joined, nothing hangs.
    let mut reader = tier2.read_regions(&regions);
    assert!(reader.next_region().unwrap().is_ok());
    drop(reader);
    tier2.set_fault(Fault::ReadError);
    let mut reader = tier2.read_regions(&regions);
    assert!(matches!(reader.next_region(), Some(Err(Tier2Error::Io(_)))));
    assert!(reader.next_region().is_none());
    assert_eq!(tier2.stats.read_errors.load(Ordering::Relaxed), 1);
}

/// Reads `slots` through io_uring, reaping until every callback ran (at most 5 s): the outcomes in order.
fn read_async_all(tier2: &Tier2, slots: &[Slot]) -> Vec<Result<Vec<u8>, Tier2Error>> {
    let (sender, receiver) = mpsc::channel();
    for (index, &slot) in slots.iter().enumerate() {
        let sender = sender.clone();
        let done = Box::new(move |record| sender.send((index, record)).unwrap());
        assert!(tier2.read_async(slot, done).is_ok(), "the ring takes it");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut outcomes: Vec<Option<Result<Vec<u8>, Tier2Error>>> = vec![None; slots.len()];
    while outcomes.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "io_uring reads complete");
        tier2.reap_reads();
        while let Ok((index, record)) = receiver.try_recv() {
            outcomes[index] = Some(record);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    outcomes.into_iter().map(Option::unwrap).collect()
}

#[test]
fn io_uring_reads_return_what_blocking_reads_return() {
    let dir = TempDir::new("tier2-uring");
    let (tier2, _) = opened(config(&dir, 8, FsyncPolicy::Always));
    let slot_of = |i: u32| {
        let value = vec![i as u8; 3000 + 7 * i as usize];
        let key = i.to_le_bytes();
        tier2.append(&header(&key, &value), &key, &value).unwrap().0
    };
    let slots: Vec<Slot> = (0..60).map(slot_of).collect();
    tier2.wait_durable(60, Duration::from_secs(5)).unwrap();
    // Without `enable_async_reads` every read is handed back.
    assert!(tier2.read_async(slots[0], Box::new(|_| {})).is_err());
    if let Err(error) = tier2.enable_async_reads(READS_IN_FLIGHT_MAX as u32) {
        eprintln!("io_uring refused here ({error}): nothing to test");
        return;
    }
    // On the device, and (the newest) still in the open region's buffer.
    let more: Vec<Slot> = (60..64).map(slot_of).collect();
    let all: Vec<Slot> = slots.iter().chain(&more).copied().collect();
    let outcomes = read_async_all(&tier2, &all);
    for (slot, outcome) in all.iter().zip(outcomes) {
        assert_eq!(outcome.unwrap(), tier2.read(*slot).unwrap());
    }
    tier2.set_fault(Fault::ReadError);
    assert!(matches!(
        &read_async_all(&tier2, &slots[..1])[0],
        Err(Tier2Error::Io(_))
    ));
    tier2.set_fault(Fault::None);
    // A slot pointing into the middle of a record: refused by the record check, never served.
    let wrong = Slot::new(slots[5].position() + 64, slots[5].padded_bytes());
    assert_eq!(
        read_async_all(&tier2, &[wrong])[0],
        Err(Tier2Error::Corrupt)
    );
}

#[test]
fn io_uring_refuses_reads_beyond_its_size_and_drops_with_reads_in_flight() {
    let dir = TempDir::new("tier2-uring-full");
    let (tier2, _) = opened(config(&dir, 8, FsyncPolicy::Always));
    let value = [9u8; 5000];
    let slots: Vec<Slot> = (0..40u32)
        .map(|i| {
            let key = i.to_le_bytes();
            tier2.append(&header(&key, &value), &key, &value).unwrap().0
        })
        .collect();
    tier2.wait_durable(40, Duration::from_secs(5)).unwrap();
    if tier2.enable_async_reads(4).is_err() {
        return;
    }
    let (sender, receiver) = mpsc::channel();
    let submit = |slot| {
        let sender = sender.clone();
        tier2.read_async(
            slot,
            Box::new(move |record: Result<Vec<u8>, Tier2Error>| {
                sender.send(record.is_ok()).unwrap()
            }),
        )
    };
    // The first 30 are on the device (the newest few are still in the open region's buffer).
    let taken = slots[..30]
        .iter()
        .filter(|&&slot| submit(slot).is_ok())
        .count();
    assert_eq!(taken, 4, "at most the ring's size in flight");
    tier2.shutdown().unwrap();
    // Dropping the ring waits for the kernel before freeing the reads' buffers and tells each reader.
    drop(tier2);
    assert_eq!(receiver.try_iter().count(), 4);
}

#[test]
fn decode_verified_trusts_the_checksum_but_not_the_lengths() {
    let (key, value) = (b"key".as_slice(), vec![7u8; 5000]);
    let mut encoded = Vec::new();
    record::encode(&header(key, &value), key, &value, &mut encoded);
    let at = record::RECORD_HEADER_BYTES + key.len();
    encoded[at] ^= 1; // a flipped value byte: only the checksum sees it
    assert_eq!(record::decode(&encoded), Err(record::RecordError::Corrupt));
    let decoded = record::decode_verified(&encoded).unwrap();
    assert_eq!(record::key_of(&decoded, &encoded), key);
    encoded[48] ^= 1; // the value length no longer adds up
    assert_eq!(
        record::decode_verified(&encoded),
        Err(record::RecordError::Corrupt)
    );
    assert_eq!(
        record::decode_verified(&encoded[..10]),
        Err(record::RecordError::NoRecord)
    );
}
