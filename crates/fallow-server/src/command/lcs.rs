//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN] (Redis 7.0's lcsCommand), of the string
//! family: reading the strings, the options, the bound on the transient table and the reply. The dynamic
//! program and its walk are the store's (`fallow_store::types::lcs`).
//!
//! The table takes 4 bytes per cell of (len1 + 1) x (len2 + 1). As in Redis, a table past
//! `proto-max-bulk-len` is refused. The strings are copied and the shards let go before the table is
//! filled (outside EXEC and scripts, which keep their locks), so a long LCS holds up no other client's keys;
//! and since Redis fills one table at a time, fallow's workers share one budget of `proto-max-bulk-len`
//! bytes for the tables being filled: past it, the command gets Redis's allocation failure.
use super::{is, parse_int, Ctx, Handler, NOT_INTEGER, SYNTAX};
use fallow_store::types::lcs::{self, LcsError, Match, Wanted};
use fallow_store::WrongType;
use std::sync::atomic::{AtomicU64, Ordering};

pub const HANDLERS: &[(&str, Handler)] = &[("lcs", lcs)];

const NOT_STRINGS: &str = "ERR The specified keys must contain string values";
const TABLE_TOO_LARGE: &str =
    "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len";
const NO_MEMORY: &str = "ERR Insufficient memory, failed allocating transient memory for LCS";

/// Bytes of the LCS tables being filled now, server-wide.
static TABLES_BYTES: AtomicU64 = AtomicU64::new(0);

/// A share of `TABLES_BYTES`, given back when dropped.
struct TableBudget(u64);

impl TableBudget {
    /// Takes `bytes` if the tables being filled stay within `max_bytes` with them.
    fn take(bytes: u64, max_bytes: u64) -> Option<TableBudget> {
        let mut used = TABLES_BYTES.load(Ordering::Relaxed);
        loop {
            let wanted = used
                .checked_add(bytes)
                .filter(|&total| total <= max_bytes)?;
            match TABLES_BYTES.compare_exchange_weak(
                used,
                wanted,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(TableBudget(bytes)),
                Err(now) => used = now,
            }
        }
    }
}

impl Drop for TableBudget {
    fn drop(&mut self) {
        TABLES_BYTES.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// LCS's options.
#[derive(Debug, Default, PartialEq)]
struct Options {
    len: bool,
    idx: bool,
    with_match_len: bool,
    min_match_len: u64,
}

fn parse_options(args: &[&[u8]]) -> Result<Options, &'static str> {
    let mut options = Options::default();
    let mut index = 0;
    while index < args.len() {
        let option = args[index];
        let left = args.len() - index - 1;
        if is(option, "idx") {
            options.idx = true;
        } else if is(option, "len") {
            options.len = true;
        } else if is(option, "withmatchlen") {
            options.with_match_len = true;
        } else if is(option, "minmatchlen") && left >= 1 {
            let min = parse_int(args[index + 1]).ok_or(NOT_INTEGER)?;
            options.min_match_len = min.max(0) as u64;
            index += 1;
        } else {
            return Err(SYNTAX);
        }
        index += 1;
    }
    if options.len && options.idx {
        return Err("ERR If you want both the length and indexes, please just use IDX.");
    }
    Ok(options)
}

/// A string value copied out; a missing key is the empty string.
fn read_string(ctx: &mut Ctx, key: &[u8]) -> Result<Vec<u8>, WrongType> {
    let (db, now_ms) = (ctx.keyspace(), ctx.now_ms);
    let found = ctx.guards.shard(key).get_string(db, key, now_ms)?;
    Ok(found.map_or_else(Vec::new, |(value, _)| value.to_vec()))
}

fn lcs(ctx: &mut Ctx, args: &[&[u8]]) {
    // Both keys are read before the options, as Redis looks them up first.
    let (a, b) = (read_string(ctx, args[1]), read_string(ctx, args[2]));
    let (Ok(a), Ok(b)) = (a, b) else {
        return ctx.out.error(NOT_STRINGS);
    };
    let options = match parse_options(&args[3..]) {
        Ok(options) => options,
        Err(error) => return ctx.out.error(error),
    };
    if lcs::too_long(a.len()) || lcs::too_long(b.len()) {
        return ctx.out.error("ERR String too long for LCS");
    }
    let max_bytes = ctx.server.config.read().proto_max_bulk_len_bytes;
    let Some(table_bytes) = lcs::table_bytes(a.len(), b.len()) else {
        return ctx.out.error(NO_MEMORY);
    };
    if table_bytes > max_bytes {
        return ctx.out.error(TABLE_TOO_LARGE);
    }
    let wanted = Wanted {
        sequence: !options.len,
        matches: options.idx,
        min_match_len: options.min_match_len,
    };
    // The length alone needs two rows of the table, not all of it.
    let needed_bytes = if options.len {
        8 * (b.len() as u64 + 1)
    } else {
        table_bytes
    };
    let Some(_budget) = TableBudget::take(needed_bytes, max_bytes) else {
        return ctx.out.error(NO_MEMORY);
    };
    if !ctx.in_exec {
        ctx.guards = ctx.server.store.lock_keys(std::iter::empty::<&[u8]>());
    }
    match lcs::lcs(&a, &b, wanted) {
        Ok(found) if options.idx => reply_matches(ctx, &found.matches, found.len, &options),
        Ok(found) if options.len => ctx.out.int(i64::from(found.len)),
        Ok(found) => ctx.out.bulk(&found.sequence),
        Err(LcsError::TooLong) => ctx.out.error("ERR String too long for LCS"),
        Err(LcsError::NoMemory) => ctx.out.error(NO_MEMORY),
    }
}

/// IDX: a map of "matches" (each [[start1, end1], [start2, end2]] and, WITHMATCHLEN, its length) and "len".
fn reply_matches(ctx: &mut Ctx, matches: &[Match], len: u32, options: &Options) {
    let out = &mut *ctx.out;
    out.map_len(2);
    out.bulk(b"matches");
    out.array_len(matches.len());
    for found in matches {
        out.array_len(2 + usize::from(options.with_match_len));
        for (start, end) in [found.a, found.b] {
            out.array_len(2);
            out.int(i64::from(start));
            out.int(i64::from(end));
        }
        if options.with_match_len {
            out.int(i64::from(found.len));
        }
    }
    out.bulk(b"len");
    out.int(i64::from(len));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_like_redis() {
        let parsed = parse_options(&[b"IDX", b"minmatchlen", b"-3", b"WithMatchLen"]).unwrap();
        assert_eq!(
            parsed,
            Options {
                idx: true,
                with_match_len: true,
                ..Options::default()
            }
        );
        assert_eq!(parse_options(&[b"minmatchlen", b"x"]), Err(NOT_INTEGER));
        assert_eq!(parse_options(&[b"minmatchlen"]), Err(SYNTAX));
        assert!(parse_options(&[b"len", b"idx"])
            .unwrap_err()
            .contains("just use IDX"));
    }

    #[test]
    fn table_budgets_add_up_and_give_back() {
        let first = TableBudget::take(600, 1000).expect("fits");
        assert!(TableBudget::take(600, 1000).is_none());
        drop(first);
        assert!(TableBudget::take(600, 1000).is_some());
    }
}
