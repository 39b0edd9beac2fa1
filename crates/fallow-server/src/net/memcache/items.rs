//! Item operations shared by the text, meta and binary protocols: expiry conversion, reads, the store
//! modes, counters, touch and delete. memcached items are strings with client flags in database 0 of
//! the listener's tenant: every function takes that keyspace address as `db` (see `crate::tenants`).
use crate::server::Server;
use fallow_proto::memcache::StoreMode;
use fallow_store::{now_ms, ItemInfo, Kind, Shard};
use fallow_txn::Access;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// memcached items live in database 0 of the listener tenant's namespace.
pub const DB_INDEX: usize = 0;
/// memcached reads a larger exptime as an absolute Unix time.
pub const RELATIVE_EXPTIME_MAX_S: i64 = 60 * 60 * 24 * 30;

/// When an item stops being visible, from a memcached exptime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Never,
    AtMs(u64),
    /// Negative or already past: the item is invisible at once.
    Expired,
}

impl Expiry {
    /// 0 = never, negative = expired, up to 30 days = relative seconds, else absolute Unix seconds.
    pub fn from_exptime(exptime_s: i64, now_ms: u64) -> Expiry {
        let at_ms = match exptime_s {
            0 => return Expiry::Never,
            e if e < 0 => return Expiry::Expired,
            e if e <= RELATIVE_EXPTIME_MAX_S => now_ms.saturating_add(e as u64 * 1000),
            e => (e as u64).saturating_mul(1000),
        };
        if at_ms <= now_ms {
            Expiry::Expired
        } else {
            Expiry::AtMs(at_ms)
        }
    }

    /// The store's `expire_at_ms` (0 = never); None when the item would be dead on arrival.
    fn expire_at_ms(self) -> Option<u64> {
        match self {
            Expiry::Never => Some(0),
            Expiry::AtMs(at_ms) => Some(at_ms),
            Expiry::Expired => None,
        }
    }
}

/// Remaining time to live in whole seconds (rounded up), -1 for none.
pub fn ttl_s(info: &ItemInfo, now_ms: u64) -> i64 {
    if info.expire_at_ms == 0 {
        return -1;
    }
    (info.expire_at_ms.saturating_sub(now_ms).div_ceil(1000)) as i64
}

/// The lock a read takes on its item: `read`, or the exclusive `write` when it also changes the item (gat,
/// mg with a TTL).
pub fn access(changes_the_item: bool) -> Access {
    if changes_the_item {
        Access::ReadMutate
    } else {
        Access::Read
    }
}

/// The string item under `key` without recording an access; other types are invisible to memcached.
pub fn peek(shard: &mut Shard, db: usize, key: &[u8], now_ms: u64) -> Option<ItemInfo> {
    shard
        .peek(db, key, now_ms)
        .filter(|info| info.kind == Kind::String)
}

/// Reads an item as a fetch (records the access).
pub fn read<'s>(
    shard: &'s mut Shard,
    db: usize,
    key: &[u8],
    now_ms: u64,
) -> Option<(&'s [u8], ItemInfo)> {
    shard.get_string(db, key, now_ms).ok().flatten()
}

/// A storage request, whatever protocol it came in.
pub struct StoreArgs<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub client_flags: u32,
    pub exptime_s: i64,
    /// CAS to compare: required by `Cas`, optional for append/prepend.
    pub compare_cas: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored { cas: u64 },
    NotStored,
    Exists,
    NotFound,
}

/// Executes set/add/replace/append/prepend/cas on the locked shard.
pub fn store(
    shard: &mut Shard,
    db: usize,
    args: &StoreArgs,
    value_len_max: usize,
    now_ms: u64,
) -> StoreOutcome {
    let existing = peek(shard, db, args.key, now_ms);
    let cas_mismatch = |info: &ItemInfo| args.compare_cas.is_some_and(|cas| cas != info.cas);
    match (args.mode, existing) {
        (StoreMode::Add, _) if shard.exists(db, args.key, now_ms) => StoreOutcome::NotStored,
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
            StoreOutcome::NotStored
        }
        (StoreMode::Cas, None) => StoreOutcome::NotFound,
        (StoreMode::Cas | StoreMode::Append | StoreMode::Prepend, Some(info))
            if cas_mismatch(&info) =>
        {
            StoreOutcome::Exists
        }
        (StoreMode::Append | StoreMode::Prepend, Some(info)) => {
            concatenate(shard, db, args, &info, value_len_max, now_ms)
        }
        _ => {
            let expiry = Expiry::from_exptime(args.exptime_s, now_ms);
            write(
                shard,
                db,
                args.key,
                args.value,
                expiry,
                args.client_flags,
                now_ms,
            )
        }
    }
}

/// append/prepend: the item keeps its flags and expiry.
fn concatenate(
    shard: &mut Shard,
    db: usize,
    args: &StoreArgs,
    info: &ItemInfo,
    value_len_max: usize,
    now_ms: u64,
) -> StoreOutcome {
    let Some((old, _)) = read(shard, db, args.key, now_ms) else {
        return StoreOutcome::NotStored;
    };
    if old.len().saturating_add(args.value.len()) > value_len_max {
        return StoreOutcome::NotStored;
    }
    let mut value = Vec::with_capacity(old.len() + args.value.len());
    if args.mode == StoreMode::Append {
        value.extend_from_slice(old);
        value.extend_from_slice(args.value);
    } else {
        value.extend_from_slice(args.value);
        value.extend_from_slice(old);
    }
    let cas = shard.set_string(
        db,
        args.key,
        &value,
        info.expire_at_ms,
        info.client_flags,
        now_ms,
    );
    StoreOutcome::Stored { cas }
}

/// Writes an item; one that is expired on arrival replaces (deletes) the old one, as in memcached.
fn write(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    value: &[u8],
    expiry: Expiry,
    client_flags: u32,
    now_ms: u64,
) -> StoreOutcome {
    match expiry.expire_at_ms() {
        Some(expire_at_ms) => StoreOutcome::Stored {
            cas: shard.set_string(db, key, value, expire_at_ms, client_flags, now_ms),
        },
        None => {
            shard.remove(db, key, now_ms);
            StoreOutcome::Stored { cas: 0 }
        }
    }
}

/// Parses a stored counter like memcached's `safe_strtoull`: optional leading spaces, digits, then
/// the end or whitespace (incr pads shorter results with spaces).
pub fn parse_counter(bytes: &[u8]) -> Option<u64> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &bytes[start..];
    let rest = rest.strip_prefix(b"+").unwrap_or(rest);
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    rest[..digits].iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// incr wraps at 2^64; decr stops at 0.
pub fn apply_delta(value: u64, incr: bool, delta: u64) -> u64 {
    if incr {
        value.wrapping_add(delta)
    } else {
        value.saturating_sub(delta)
    }
}

/// The bytes memcached stores for a new counter value: a shorter number is padded with spaces to the
/// old length (memcached rewrites the item in place), a longer one makes a longer item.
pub fn counter_bytes(value: u64, old_len: usize) -> Vec<u8> {
    let mut text = itoa::Buffer::new().format(value).as_bytes().to_vec();
    if text.len() < old_len {
        text.resize(old_len, b' ');
    }
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    Done {
        value: u64,
        cas: u64,
    },
    NotFound,
    NonNumeric,
    /// `compare_cas` did not match.
    Exists,
}

/// incr/decr an existing counter, keeping its flags and expiry.
pub fn arith(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    incr: bool,
    delta: u64,
    compare_cas: Option<u64>,
    now_ms: u64,
) -> ArithOutcome {
    let Some(info) = peek(shard, db, key, now_ms) else {
        return ArithOutcome::NotFound;
    };
    if compare_cas.is_some_and(|cas| cas != info.cas) {
        return ArithOutcome::Exists;
    }
    let Some((old, _)) = read(shard, db, key, now_ms) else {
        return ArithOutcome::NotFound;
    };
    let Some(current) = parse_counter(old) else {
        return ArithOutcome::NonNumeric;
    };
    let value = apply_delta(current, incr, delta);
    let bytes = counter_bytes(value, old.len());
    let cas = shard.set_string(
        db,
        key,
        &bytes,
        info.expire_at_ms,
        info.client_flags,
        now_ms,
    );
    ArithOutcome::Done { value, cas }
}

/// Creates a counter on an incr/decr miss (binary initial value, meta `N`/`J`); returns its CAS.
pub fn create_counter(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    initial: u64,
    exptime_s: i64,
    now_ms: u64,
) -> u64 {
    let expiry = Expiry::from_exptime(exptime_s, now_ms);
    let text = itoa::Buffer::new().format(initial).as_bytes().to_vec();
    match write(shard, db, key, &text, expiry, 0, now_ms) {
        StoreOutcome::Stored { cas } => cas,
        _ => 0,
    }
}

/// Sets a new expiry on an item; false when it does not exist.
pub fn touch(shard: &mut Shard, db: usize, key: &[u8], exptime_s: i64, now_ms: u64) -> bool {
    if peek(shard, db, key, now_ms).is_none() {
        return false;
    }
    let at_ms = match Expiry::from_exptime(exptime_s, now_ms) {
        Expiry::Never => None,
        Expiry::AtMs(at_ms) => Some(at_ms),
        Expiry::Expired => Some(now_ms),
    };
    shard.set_expire_at(db, key, now_ms, at_ms)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
}

/// Deletes an item, optionally only when its CAS matches.
pub fn delete(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    compare_cas: Option<u64>,
    now_ms: u64,
) -> DeleteOutcome {
    let Some(info) = peek(shard, db, key, now_ms) else {
        return DeleteOutcome::NotFound;
    };
    if compare_cas.is_some_and(|cas| cas != info.cas) {
        return DeleteOutcome::Exists;
    }
    shard.remove(db, key, now_ms);
    DeleteOutcome::Deleted
}

/// flush_all [delay]: now, or at the deadline (a later flush_all cancels a pending one, as a new
/// flush_all replaces memcached's single flush deadline).
pub fn flush_all(server: &Arc<Server>, db: usize, delay_s: i64) {
    let generation = server
        .memcache
        .flush_generation
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    server.memcache.cmd_flush.fetch_add(1, Ordering::Relaxed);
    let now = now_ms();
    let Expiry::AtMs(at_ms) = Expiry::from_exptime(delay_s, now) else {
        return flush_now(server, db);
    };
    let server = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
        if server.memcache.flush_generation.load(Ordering::Relaxed) == generation {
            flush_now(&server, db);
        }
    });
}

/// Empties the listener's database (`db`) with every shard locked: a transaction open across it then
/// aborts, as across FLUSHDB.
fn flush_now(server: &Server, db: usize) {
    let mut guards = server.store.lock_all();
    server.txns.note_keyspace_write();
    guards.iter_mut().for_each(|shard| shard.flush_db(db));
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_store::{MemoryCounters, ShardConfig};

    const NOW_MS: u64 = 1_700_000_000_000;
    /// The default tenant's database 0.
    const DB: usize = 0;

    #[test]
    fn flush_all_empties_the_database_at_once_as_a_keyspace_write() {
        let server = Arc::new(Server::for_tests());
        let now = now_ms();
        for key in [&b"a"[..], b"b", b"c"] {
            let mut guards = server.store.lock_keys([key]);
            guards.shard(key).set_string(DB, key, b"v", 0, 0, now);
        }
        let before = server.txns.keyspace_writes();
        flush_all(&server, DB, 0);
        // Transactions open across it abort (`flush`), as across FLUSHDB.
        assert_eq!(server.txns.keyspace_writes(), before + 1);
        for key in [&b"a"[..], b"b", b"c"] {
            let mut guards = server.store.lock_keys([key]);
            assert!(peek(guards.shard(key), DB, key, now).is_none());
        }
    }

    fn shard() -> Shard {
        let config = ShardConfig {
            databases: 1,
            segment_bytes: 1 << 16,
            epoch_ms: NOW_MS,
            shards: 1,
        };
        Shard::new(0, config, Arc::new(MemoryCounters::default()))
    }

    fn args<'a>(mode: StoreMode, value: &'a [u8], compare_cas: Option<u64>) -> StoreArgs<'a> {
        StoreArgs {
            mode,
            key: b"k",
            value,
            client_flags: 7,
            exptime_s: 0,
            compare_cas,
        }
    }

    fn value_of(shard: &mut Shard) -> Option<Vec<u8>> {
        read(shard, DB, b"k", NOW_MS).map(|(value, _)| value.to_vec())
    }

    #[test]
    fn exptime_conversion() {
        assert_eq!(Expiry::from_exptime(0, NOW_MS), Expiry::Never);
        assert_eq!(Expiry::from_exptime(-1, NOW_MS), Expiry::Expired);
        assert_eq!(
            Expiry::from_exptime(10, NOW_MS),
            Expiry::AtMs(NOW_MS + 10_000)
        );
        assert_eq!(
            Expiry::from_exptime(RELATIVE_EXPTIME_MAX_S, NOW_MS),
            Expiry::AtMs(NOW_MS + RELATIVE_EXPTIME_MAX_S as u64 * 1000)
        );
        // beyond 30 days: absolute Unix seconds
        let absolute_s = NOW_MS as i64 / 1000 + 60;
        assert_eq!(
            Expiry::from_exptime(absolute_s, NOW_MS),
            Expiry::AtMs(absolute_s as u64 * 1000)
        );
        assert_eq!(
            Expiry::from_exptime(RELATIVE_EXPTIME_MAX_S + 1, NOW_MS),
            Expiry::Expired
        );
        assert_eq!(
            Expiry::from_exptime(i64::MAX, NOW_MS).expire_at_ms(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn ttl_reporting() {
        let mut info = peek_after_set(&mut shard(), 0);
        assert_eq!(ttl_s(&info, NOW_MS), -1);
        info.expire_at_ms = NOW_MS + 99_500;
        assert_eq!(ttl_s(&info, NOW_MS), 100);
        assert_eq!(ttl_s(&info, NOW_MS + 200_000), 0);
    }

    fn peek_after_set(shard: &mut Shard, exptime_s: i64) -> ItemInfo {
        let mut a = args(StoreMode::Set, b"v", None);
        a.exptime_s = exptime_s;
        store(shard, DB, &a, 1024, NOW_MS);
        peek(shard, DB, b"k", NOW_MS).expect("stored")
    }

    #[test]
    fn counter_parsing() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"42  "), Some(42));
        assert_eq!(parse_counter(b" 7"), Some(7));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"abc"), None);
        assert_eq!(parse_counter(b"12abc"), None);
        assert_eq!(parse_counter(b"-1"), None);
    }

    #[test]
    fn incr_decr_arithmetic() {
        assert_eq!(apply_delta(10, true, 5), 15);
        assert_eq!(apply_delta(u64::MAX, true, 1), 0);
        assert_eq!(apply_delta(u64::MAX, true, 3), 2);
        assert_eq!(apply_delta(10, false, 3), 7);
        assert_eq!(apply_delta(10, false, 20), 0);
        assert_eq!(apply_delta(0, false, u64::MAX), 0);
        // shorter results keep the item's length, padded with spaces
        assert_eq!(counter_bytes(9, 2), b"9 ");
        assert_eq!(counter_bytes(100, 2), b"100");
        assert_eq!(counter_bytes(5, 0), b"5");
    }

    #[test]
    fn arith_on_items() {
        let mut s = shard();
        assert_eq!(
            arith(&mut s, DB, b"k", true, 1, None, NOW_MS),
            ArithOutcome::NotFound
        );
        store(&mut s, DB, &args(StoreMode::Set, b"10", None), 1024, NOW_MS);
        assert!(matches!(
            arith(&mut s, DB, b"k", false, 1, None, NOW_MS),
            ArithOutcome::Done { value: 9, .. }
        ));
        assert_eq!(value_of(&mut s).unwrap(), b"9 ");
        assert!(matches!(
            arith(&mut s, DB, b"k", true, 991, None, NOW_MS),
            ArithOutcome::Done { value: 1000, .. }
        ));
        assert_eq!(value_of(&mut s).unwrap(), b"1000");
        assert_eq!(peek(&mut s, DB, b"k", NOW_MS).unwrap().client_flags, 7);
        assert_eq!(
            arith(&mut s, DB, b"k", true, 1, Some(1), NOW_MS),
            ArithOutcome::Exists
        );
        store(&mut s, DB, &args(StoreMode::Set, b"x1", None), 1024, NOW_MS);
        assert_eq!(
            arith(&mut s, DB, b"k", true, 1, None, NOW_MS),
            ArithOutcome::NonNumeric
        );
        assert!(create_counter(&mut s, DB, b"n", 5, 0, NOW_MS) > 0);
        assert_eq!(read(&mut s, DB, b"n", NOW_MS).unwrap().0, b"5");
    }

    #[test]
    fn store_modes() {
        let mut s = shard();
        let limit = 8;
        assert_eq!(
            store(
                &mut s,
                DB,
                &args(StoreMode::Replace, b"a", None),
                limit,
                NOW_MS
            ),
            StoreOutcome::NotStored
        );
        assert_eq!(
            store(
                &mut s,
                DB,
                &args(StoreMode::Append, b"a", None),
                limit,
                NOW_MS
            ),
            StoreOutcome::NotStored
        );
        assert_eq!(
            store(
                &mut s,
                DB,
                &args(StoreMode::Cas, b"a", Some(1)),
                limit,
                NOW_MS
            ),
            StoreOutcome::NotFound
        );
        assert!(matches!(
            store(&mut s, DB, &args(StoreMode::Add, b"b", None), limit, NOW_MS),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(
            store(&mut s, DB, &args(StoreMode::Add, b"c", None), limit, NOW_MS),
            StoreOutcome::NotStored
        );
        store(
            &mut s,
            DB,
            &args(StoreMode::Append, b"c", None),
            limit,
            NOW_MS,
        );
        store(
            &mut s,
            DB,
            &args(StoreMode::Prepend, b"a", None),
            limit,
            NOW_MS,
        );
        assert_eq!(value_of(&mut s).unwrap(), b"abc");
        assert_eq!(
            store(
                &mut s,
                DB,
                &args(StoreMode::Append, b"123456", None),
                limit,
                NOW_MS
            ),
            StoreOutcome::NotStored
        );
        let cas = peek(&mut s, DB, b"k", NOW_MS).unwrap().cas;
        assert_eq!(
            store(
                &mut s,
                DB,
                &args(StoreMode::Cas, b"x", Some(cas + 1)),
                limit,
                NOW_MS
            ),
            StoreOutcome::Exists
        );
        assert!(matches!(
            store(&mut s, DB, &args(StoreMode::Cas, b"x", Some(cas)), limit, NOW_MS),
            StoreOutcome::Stored { cas: new } if new != cas
        ));
        let mut expired = args(StoreMode::Set, b"y", None);
        expired.exptime_s = -1;
        assert!(matches!(
            store(&mut s, DB, &expired, limit, NOW_MS),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(value_of(&mut s), None);
    }

    #[test]
    fn touch_and_delete() {
        let mut s = shard();
        assert!(!touch(&mut s, DB, b"k", 10, NOW_MS));
        peek_after_set(&mut s, 0);
        assert!(touch(&mut s, DB, b"k", 10, NOW_MS));
        assert_eq!(
            peek(&mut s, DB, b"k", NOW_MS).unwrap().expire_at_ms,
            NOW_MS + 10_000
        );
        assert!(touch(&mut s, DB, b"k", -1, NOW_MS));
        assert!(peek(&mut s, DB, b"k", NOW_MS).is_none());
        let cas = peek_after_set(&mut s, 0).cas;
        assert_eq!(
            delete(&mut s, DB, b"k", Some(cas + 1), NOW_MS),
            DeleteOutcome::Exists
        );
        assert_eq!(
            delete(&mut s, DB, b"k", Some(cas), NOW_MS),
            DeleteOutcome::Deleted
        );
        assert_eq!(
            delete(&mut s, DB, b"k", None, NOW_MS),
            DeleteOutcome::NotFound
        );
    }
}
