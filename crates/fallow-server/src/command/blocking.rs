//! What the blocking and multi-key pops share (BLPOP/BRPOP/BLMOVE/BLMPOP and BZPOPMIN/BZPOPMAX/BZMPOP,
//! with LMPOP and ZMPOP): timeouts, the request to block, and *MPOP's arguments and core. A blocking
//! command that finds nothing sets `ctx.conn.block` and writes no reply; the connection loop re-runs it
//! when a push wakes its keys, or writes the timeout reply. A leaf beside the families: any of them may
//! use it without depending on another family.
use super::{is, parse_float, parse_int, Ctx, NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::connection::{BlockRequest, TimeoutReply};
use fallow_proto::ReplyWriter;
use fallow_store::WrongType;

/// A blocking command's timeout; 0 = wait forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    pub ms: u64,
}

/// Parses a timeout in (fractional) seconds as Redis's getTimeoutFromObjectOrReply does: rounded up
/// to whole milliseconds; a value past the i64 range wraps negative in Redis, so it is "negative" here.
pub fn parse_timeout(arg: &[u8]) -> Result<Timeout, &'static str> {
    let seconds = parse_float(arg).ok_or("ERR timeout is not a float or out of range")?;
    let ms = (seconds * 1000.0).ceil();
    if !(0.0..i64::MAX as f64).contains(&ms) {
        return Err("ERR timeout is negative");
    }
    Ok(Timeout { ms: ms as u64 })
}

/// Parses a timeout in whole milliseconds (XREAD BLOCK, WAIT, CLIENT PAUSE), with Redis's errors.
pub fn parse_timeout_ms(arg: &[u8]) -> Result<Timeout, &'static str> {
    match super::parse_int(arg) {
        None => Err("ERR timeout is not an integer or out of range"),
        Some(ms) if ms < 0 => Err("ERR timeout is negative"),
        Some(ms) => Ok(Timeout { ms: ms as u64 }),
    }
}

/// Asks the connection loop to wait for `keys`; inside EXEC, replies `exec_reply` at once, what a
/// timeout would. (Redis 7.0 answers a timed-out BLMOVE with a null array but a BLMOVE inside EXEC with
/// a null bulk.)
pub fn block_on(ctx: &mut Ctx, keys: &[&[u8]], timeout: Timeout, exec_reply: TimeoutReply) {
    block_then_retry(ctx, keys, timeout, exec_reply, None);
}

/// `block_on`, re-running `retry_args` (when given) instead of the command as sent.
pub fn block_then_retry(
    ctx: &mut Ctx,
    keys: &[&[u8]],
    timeout: Timeout,
    exec_reply: TimeoutReply,
    retry_args: Option<Vec<Vec<u8>>>,
) {
    if ctx.in_exec {
        return match exec_reply {
            TimeoutReply::NullArray => ctx.out.nil_array(),
            TimeoutReply::NullBulk => ctx.out.nil(),
        };
    }
    ctx.conn.block = Some(BlockRequest {
        keys: keys.iter().map(|key| key.to_vec()).collect(),
        timeout_ms: timeout.ms,
        timeout_reply: TimeoutReply::NullArray,
        retry_args,
    });
}

/// *MPOP arguments from `numkeys` on: the keys, the end (`parse_end` reads LEFT/RIGHT or MIN/MAX) and the
/// count. Shared by LMPOP/BLMPOP and ZMPOP/BZMPOP.
pub fn parse_mpop_with<'a, E>(
    args: &'a [&'a [u8]],
    parse_end: impl Fn(&[u8]) -> Option<E>,
) -> Result<(&'a [&'a [u8]], E, usize), &'static str> {
    let numkeys = parse_int(args[0]).ok_or(NOT_INTEGER)?;
    if numkeys <= 0 {
        return Err("ERR numkeys should be greater than 0");
    }
    let numkeys = numkeys as usize;
    if numkeys >= args.len() {
        return Err(SYNTAX);
    }
    let keys = &args[1..1 + numkeys];
    let rest = &args[1 + numkeys..];
    let end = parse_end(rest[0]).ok_or(SYNTAX)?;
    let count = match rest {
        [_] => 1,
        [_, option, count] if is(option, "count") => match parse_int(count) {
            Some(count) if count > 0 => count as usize,
            _ => return Err("ERR count should be greater than 0"),
        },
        _ => return Err(SYNTAX),
    };
    Ok((keys, end, count))
}

/// *MPOP's core, shared by lists and sorted sets: pops from the first key that yields something and
/// replies `[key, popped]` (or WRONGTYPE). True when it replied.
pub fn pop_first_of<T>(
    ctx: &mut Ctx,
    keys: &[&[u8]],
    mut pop: impl FnMut(&mut Ctx, &[u8]) -> Result<Option<Vec<T>>, WrongType>,
    reply: impl Fn(&mut ReplyWriter, &[T]),
) -> bool {
    for key in keys {
        match pop(ctx, key) {
            Ok(Some(popped)) if !popped.is_empty() => {
                ctx.out.array_len(2);
                ctx.out.bulk(key);
                reply(ctx.out, &popped);
                return true;
            }
            Ok(_) => {}
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_redis() {
        assert_eq!(parse_timeout(b"0"), Ok(Timeout { ms: 0 }));
        assert_eq!(parse_timeout(b"0.3"), Ok(Timeout { ms: 300 }));
        assert_eq!(parse_timeout(b"0.0001"), Ok(Timeout { ms: 1 }));
        assert_eq!(parse_timeout(b"-1"), Err("ERR timeout is negative"));
        assert_eq!(parse_timeout(b"1e16"), Err("ERR timeout is negative"));
        assert_eq!(
            parse_timeout(b"abc"),
            Err("ERR timeout is not a float or out of range")
        );
    }

    #[test]
    fn mpop_arguments_parse_like_redis() {
        let end = |arg: &[u8]| is(arg, "left").then_some(());
        let args: [&[u8]; 3] = [b"x", b"a", b"LEFT"];
        assert_eq!(parse_mpop_with(&args, end).err(), Some(NOT_INTEGER));
        let args: [&[u8]; 2] = [b"2", b"a"];
        assert_eq!(parse_mpop_with(&args, end).err(), Some(SYNTAX));
        let args: [&[u8]; 3] = [b"1", b"a", b"UP"];
        assert_eq!(parse_mpop_with(&args, end).err(), Some(SYNTAX));
        let args: [&[u8]; 5] = [b"1", b"a", b"LEFT", b"COUNT", b"0"];
        assert_eq!(
            parse_mpop_with(&args, end).err(),
            Some("ERR count should be greater than 0")
        );
    }
}
