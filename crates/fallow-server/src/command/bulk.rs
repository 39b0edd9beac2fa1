//! Bulk export: SHARDS and SHARDSCAN, which `fallow dump` uses to read every string key with its value,
//! one shard per connection in parallel. SHARDSCAN locks only the shard it reads (SCAN would lock them
//! all), so parallel dumps of different shards do not wait on each other and other clients see at most
//! one shard held, for one bounded step.
use super::{is, parse_int, Ctx, Handler, NOT_INTEGER, SYNTAX};
use fallow_store::{Kind, Shard};
use std::hash::BuildHasher;
use std::sync::LazyLock;

pub const HANDLERS: &[(&str, Handler)] = &[("shards", shards), ("shardscan", shardscan)];

/// Keys one SHARDSCAN step may visit at most, whatever COUNT asks (bounds the time the shard stays locked).
const SHARDSCAN_COUNT_MAX: usize = 1 << 16;
const SHARDSCAN_COUNT_DEFAULT: usize = 10;

fn shards(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.out.int(ctx.server.store.shard_count() as i64);
}

/// A step's result: the string keys and values, already encoded as RESP bulk strings (one buffer, no
/// allocation per key), and how many other-typed keys were passed over.
#[derive(Default, Debug)]
struct ShardStep {
    encoded: Vec<u8>,
    pairs: usize,
    skipped: u64,
    next_cursor: u64,
}

fn shardscan(ctx: &mut Ctx, args: &[&[u8]]) {
    let shard_count = ctx.server.store.shard_count();
    let shard_index = match parse_int(args[1]) {
        Some(index) if index >= 0 && (index as usize) < shard_count => index as usize,
        _ => {
            return ctx.out.error(&format!(
                "ERR invalid shard index: shards are 0..{}",
                shard_count - 1
            ))
        }
    };
    let db = ctx.keyspace();
    let Some(cursor) = Cursor::parse(args[2], shard_index, db) else {
        return ctx.out.error("ERR invalid cursor");
    };
    let count = match parse_count(&args[3..]) {
        Ok(count) => count,
        Err(reply) => return ctx.out.error(reply),
    };
    let now = ctx.now_ms;
    let step = with_shard(ctx, shard_index, |shard| {
        scan_strings(shard, db, cursor, count, now)
    });
    ctx.out.array_len(3);
    let token = Cursor::format(step.next_cursor, shard_index, db);
    ctx.out.bulk(token.as_bytes());
    ctx.out.array_len(step.pairs * 2);
    ctx.out.buf.extend_from_slice(&step.encoded);
    ctx.out.int(step.skipped as i64);
}

fn parse_count(options: &[&[u8]]) -> Result<usize, &'static str> {
    match options {
        [] => Ok(SHARDSCAN_COUNT_DEFAULT),
        [option, value] if is(option, "count") => {
            let count = parse_int(value).ok_or(NOT_INTEGER)?;
            if count < 1 {
                return Err(SYNTAX);
            }
            Ok((count as u64).min(SHARDSCAN_COUNT_MAX as u64) as usize)
        }
        _ => Err(SYNTAX),
    }
}

/// Runs `visit` on one shard: through the locks the command holds when it holds them all (inside EXEC),
/// otherwise by locking that shard alone.
fn with_shard<R>(ctx: &mut Ctx, index: usize, visit: impl FnOnce(&mut Shard) -> R) -> R {
    if ctx.guards.holds_all() {
        let shard = ctx.guards.iter_mut().nth(index).expect("index < shards");
        visit(shard)
    } else {
        visit(&mut ctx.server.store.lock(index))
    }
}

/// One bounded step of the shard scan: visits up to `count` live keys of `db` from `cursor` on and copies
/// the string values. Expired keys are not visited; keys of other types are counted in `skipped`.
fn scan_strings(shard: &mut Shard, db: usize, cursor: u64, count: usize, now_ms: u64) -> ShardStep {
    let mut step = ShardStep::default();
    step.next_cursor = shard.scan_items(db, cursor, count, now_ms, |key, kind, value| {
        if kind == Kind::String {
            push_bulk(&mut step.encoded, key);
            push_bulk(&mut step.encoded, value);
            step.pairs += 1;
        } else {
            step.skipped += 1;
        }
    });
    step
}

fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// SHARDSCAN cursors are `<shard cursor>-<check>`: the check, a keyed hash of the shard cursor, shard and
/// database, rejects a cursor that this server did not hand out for this shard. The store trusts a scan
/// cursor to point at an item boundary, so a forged or misplaced one must never reach it.
struct Cursor;

static CURSOR_KEY: LazyLock<foldhash::quality::RandomState> =
    LazyLock::new(foldhash::quality::RandomState::default);

impl Cursor {
    fn check(shard_cursor: u64, shard_index: usize, db: usize) -> u64 {
        CURSOR_KEY.hash_one((shard_cursor, shard_index, db))
    }

    /// "0" starts and ends a scan, as with SCAN.
    fn format(shard_cursor: u64, shard_index: usize, db: usize) -> String {
        if shard_cursor == 0 {
            return "0".to_string();
        }
        let check = Self::check(shard_cursor, shard_index, db);
        format!("{shard_cursor}-{check:016x}")
    }

    fn parse(token: &[u8], shard_index: usize, db: usize) -> Option<u64> {
        if token == b"0" {
            return Some(0);
        }
        let text = std::str::from_utf8(token).ok()?;
        let (cursor, check) = text.split_once('-')?;
        let cursor: u64 = cursor.parse().ok()?;
        let check = u64::from_str_radix(check, 16).ok()?;
        (cursor != 0 && check == Self::check(cursor, shard_index, db)).then_some(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_store::{Store, StoreConfig};

    fn store_with(strings: usize, lists: usize) -> Store {
        let store = Store::new(&StoreConfig {
            shards: 4,
            segment_bytes: 4096,
            ..Default::default()
        });
        let mut guards = store.lock_all();
        for index in 0..strings {
            let key = format!("key:{index}");
            let value = format!("value:{index}");
            guards
                .shard(key.as_bytes())
                .set_string(0, key.as_bytes(), value.as_bytes(), 0, 0, 0);
        }
        for index in 0..lists {
            let key = format!("list:{index}");
            let list = fallow_store::Collection::List(Default::default());
            guards
                .shard(key.as_bytes())
                .put_collection(0, key.as_bytes(), list, 0, 0);
        }
        guards
            .shard(b"other-db")
            .set_string(1, b"other-db", b"x", 0, 0, 0);
        drop(guards);
        store
    }

    /// Splits a run of RESP bulk strings.
    fn decode_bulks(mut encoded: &[u8]) -> Vec<Vec<u8>> {
        let mut items = Vec::new();
        while !encoded.is_empty() {
            let line_end = encoded.iter().position(|&byte| byte == b'\r').unwrap();
            let len: usize = std::str::from_utf8(&encoded[1..line_end])
                .unwrap()
                .parse()
                .unwrap();
            let body = line_end + 2;
            items.push(encoded[body..body + len].to_vec());
            assert_eq!(&encoded[body + len..body + len + 2], b"\r\n");
            encoded = &encoded[body + len + 2..];
        }
        items
    }

    #[test]
    fn shard_steps_return_every_string_once_and_count_the_rest() {
        let store = store_with(500, 30);
        let (mut pairs, mut skipped) = (Vec::new(), 0);
        for index in 0..store.shard_count() {
            let mut cursor = 0;
            loop {
                let step = scan_strings(&mut store.lock(index), 0, cursor, 7, 0);
                assert!(step.pairs as u64 + step.skipped <= 7, "COUNT bounds a step");
                let decoded = decode_bulks(&step.encoded);
                assert_eq!(decoded.len(), step.pairs * 2);
                pairs.extend(
                    decoded
                        .chunks_exact(2)
                        .map(|pair| (pair[0].clone(), pair[1].clone())),
                );
                skipped += step.skipped;
                cursor = step.next_cursor;
                if cursor == 0 {
                    break;
                }
            }
        }
        pairs.sort();
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = (0..500)
            .map(|index| {
                let pair = (format!("key:{index}"), format!("value:{index}"));
                (pair.0.into_bytes(), pair.1.into_bytes())
            })
            .collect();
        expected.sort();
        assert_eq!(pairs, expected, "each string once, nothing from db 1");
        assert_eq!(skipped, 30, "the lists are skipped and counted");
    }

    #[test]
    fn expired_keys_are_not_returned() {
        let store = store_with(0, 0);
        store
            .lock(store.shard_index(b"gone"))
            .set_string(0, b"gone", b"v", 100, 0, 0);
        let index = store.shard_index(b"gone");
        let step = scan_strings(&mut store.lock(index), 0, 0, 100, 1_000);
        assert_eq!(step.pairs, 0);
        assert_eq!(step.skipped, 0);
    }

    #[test]
    fn cursors_are_checked() {
        let token = Cursor::format(12345, 2, 0);
        assert_eq!(Cursor::parse(token.as_bytes(), 2, 0), Some(12345));
        assert_eq!(Cursor::parse(token.as_bytes(), 3, 0), None, "other shard");
        assert_eq!(Cursor::parse(token.as_bytes(), 2, 1), None, "other db");
        assert_eq!(Cursor::parse(b"12345", 2, 0), None, "no check");
        assert_eq!(Cursor::parse(b"12346-00", 2, 0), None, "forged");
        assert_eq!(Cursor::format(0, 2, 0), "0");
        assert_eq!(Cursor::parse(b"0", 5, 3), Some(0));
    }

    #[test]
    fn count_option_parses() {
        assert_eq!(parse_count(&[]), Ok(SHARDSCAN_COUNT_DEFAULT));
        assert_eq!(parse_count(&[b"COUNT", b"50"]), Ok(50));
        assert_eq!(parse_count(&[b"count", b"0"]), Err(SYNTAX));
        assert_eq!(parse_count(&[b"count", b"x"]), Err(NOT_INTEGER));
        assert_eq!(parse_count(&[b"count"]), Err(SYNTAX));
        assert_eq!(parse_count(&[b"match", b"*"]), Err(SYNTAX));
        assert_eq!(
            parse_count(&[b"count", b"99999999999"]),
            Ok(SHARDSCAN_COUNT_MAX)
        );
    }
}
