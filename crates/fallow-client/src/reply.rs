//! Server replies: the `Reply` type and a RESP2 reply parser over a byte buffer (no I/O, so it is tested
//! and fuzzed alone). fallow-proto parses requests only; replies need their own reader on the client side.
use std::fmt;

/// One reply. A top-level error reply becomes a `ClientError`; errors nested in an array (a failed write in
/// TXN.COMMIT's reply) stay `Reply::Error`.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Simple(String),
    Error(String),
    Array(Vec<Reply>),
    /// `+QUEUED`: a write inside a transaction, applied at commit.
    Queued,
}

impl Reply {
    /// The integer of an `Int`, or of a bulk string holding one (GET of a counter).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(value) => Some(*value),
            Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(bytes) => Some(bytes),
            Reply::Simple(text) => Some(text.as_bytes()),
            _ => None,
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Nil => write!(f, "Nil"),
            Reply::Int(value) => write!(f, "Int({value})"),
            Reply::Bulk(bytes) => write!(f, "Bulk({:?})", String::from_utf8_lossy(bytes)),
            Reply::Simple(text) => write!(f, "Simple({text:?})"),
            Reply::Error(text) => write!(f, "Error({text:?})"),
            Reply::Array(items) => f.debug_tuple("Array").field(items).finish(),
            Reply::Queued => write!(f, "Queued"),
        }
    }
}

/// Bounds on what the parser accepts, so a bad or hostile server cannot make the client allocate without
/// limit or recurse without end.
#[derive(Clone, Copy, Debug)]
pub struct ReplyLimits {
    pub bulk_bytes_max: usize,
    pub array_len_max: usize,
    pub depth_max: usize,
}

impl Default for ReplyLimits {
    fn default() -> Self {
        ReplyLimits {
            bulk_bytes_max: 512 << 20,
            array_len_max: 1 << 24,
            depth_max: 32,
        }
    }
}

/// The outcome of parsing the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum ParsedReply {
    /// A whole reply and the number of bytes it took.
    Complete(Reply, usize),
    /// More bytes are needed.
    Incomplete,
    /// The bytes are not a valid reply within the limits; the connection cannot resynchronise.
    Invalid(String),
}

/// Parses one reply from the start of `buf`.
pub fn parse_reply(buf: &[u8], limits: &ReplyLimits) -> ParsedReply {
    match parse_at(buf, 0, limits, 0) {
        Ok(Some((reply, end))) => ParsedReply::Complete(reply, end),
        Ok(None) => ParsedReply::Incomplete,
        Err(message) => ParsedReply::Invalid(message),
    }
}

type Step = Result<Option<(Reply, usize)>, String>;

fn parse_at(buf: &[u8], start: usize, limits: &ReplyLimits, depth: usize) -> Step {
    let Some((line, after)) = line_at(buf, start)? else {
        return Ok(None);
    };
    let Some((&kind, body)) = line.split_first() else {
        return Err("empty reply line".into());
    };
    let text = || String::from_utf8_lossy(body).into_owned();
    match kind {
        b'+' if body == b"QUEUED" => Ok(Some((Reply::Queued, after))),
        b'+' => Ok(Some((Reply::Simple(text()), after))),
        b'-' => Ok(Some((Reply::Error(text()), after))),
        b':' => Ok(Some((Reply::Int(number(body)?), after))),
        b'_' => Ok(Some((Reply::Nil, after))),
        b'$' => parse_bulk(buf, after, number(body)?, limits),
        b'*' => parse_array(buf, after, number(body)?, limits, depth),
        other => Err(format!("unexpected reply type byte {:?}", other as char)),
    }
}

fn parse_bulk(buf: &[u8], start: usize, len: i64, limits: &ReplyLimits) -> Step {
    if len < 0 {
        return Ok(Some((Reply::Nil, start)));
    }
    let len = len as usize;
    if len > limits.bulk_bytes_max {
        return Err(format!(
            "bulk of {len} bytes over the limit of {}",
            limits.bulk_bytes_max
        ));
    }
    let end = start + len;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err("bulk string not followed by CRLF".into());
    }
    Ok(Some((Reply::Bulk(buf[start..end].to_vec()), end + 2)))
}

fn parse_array(buf: &[u8], start: usize, len: i64, limits: &ReplyLimits, depth: usize) -> Step {
    if len < 0 {
        return Ok(Some((Reply::Nil, start)));
    }
    if depth >= limits.depth_max {
        return Err(format!("reply nested deeper than {}", limits.depth_max));
    }
    let len = len as usize;
    if len > limits.array_len_max {
        return Err(format!(
            "array of {len} items over the limit of {}",
            limits.array_len_max
        ));
    }
    // Each item takes at least 3 bytes, which bounds the allocation by what has arrived.
    let mut items = Vec::with_capacity(len.min(buf.len().saturating_sub(start) / 3));
    let mut position = start;
    for _ in 0..len {
        let Some((item, next)) = parse_at(buf, position, limits, depth + 1)? else {
            return Ok(None);
        };
        items.push(item);
        position = next;
    }
    Ok(Some((Reply::Array(items), position)))
}

/// The line starting at `start` (without CRLF) and the offset after it; None while incomplete.
fn line_at(buf: &[u8], start: usize) -> Result<Option<(&[u8], usize)>, String> {
    let Some(found) = memchr::memchr(b'\n', &buf[start.min(buf.len())..]) else {
        return Ok(None);
    };
    let newline = start + found;
    if newline == start || buf[newline - 1] != b'\r' {
        return Err("reply line without CRLF".into());
    }
    Ok(Some((&buf[start..newline - 1], newline + 1)))
}

fn number(body: &[u8]) -> Result<i64, String> {
    fallow_proto::resp::parse_i64(body)
        .ok_or_else(|| format!("bad number {:?}", String::from_utf8_lossy(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> ParsedReply {
        parse_reply(bytes, &ReplyLimits::default())
    }

    #[test]
    fn parses_every_resp2_type() {
        let cases: Vec<(&[u8], Reply)> = vec![
            (b"+OK\r\n", Reply::Simple("OK".into())),
            (b"+QUEUED\r\n", Reply::Queued),
            (b"-ERR bad\r\n", Reply::Error("ERR bad".into())),
            (b":-42\r\n", Reply::Int(-42)),
            (b"$3\r\nabc\r\n", Reply::Bulk(b"abc".to_vec())),
            (b"$0\r\n\r\n", Reply::Bulk(Vec::new())),
            (b"$-1\r\n", Reply::Nil),
            (b"*-1\r\n", Reply::Nil),
            (b"_\r\n", Reply::Nil),
            (
                b"*2\r\n:1\r\n*1\r\n-TXNABORT conflict\r\n",
                Reply::Array(vec![
                    Reply::Int(1),
                    Reply::Array(vec![Reply::Error("TXNABORT conflict".into())]),
                ]),
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                parse(bytes),
                ParsedReply::Complete(expected, bytes.len()),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn every_proper_prefix_is_incomplete() {
        let whole = b"*3\r\n$5\r\nhello\r\n:7\r\n*1\r\n+QUEUED\r\n";
        for cut in 0..whole.len() {
            assert_eq!(
                parse(&whole[..cut]),
                ParsedReply::Incomplete,
                "cut at {cut}"
            );
        }
        assert!(matches!(parse(whole), ParsedReply::Complete(_, n) if n == whole.len()));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let limits = ReplyLimits {
            bulk_bytes_max: 4,
            array_len_max: 2,
            depth_max: 2,
        };
        for bytes in [
            &b"?x\r\n"[..],
            b"+no cr\n",
            b"\r\n",
            b":12a\r\n",
            b"$5\r\nhello\r\n",
            b"$2\r\nabXY",
            b"*3\r\n",
            b"*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(
                matches!(parse_reply(bytes, &limits), ParsedReply::Invalid(_)),
                "{bytes:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = parse(&bytes);
        }
    }
}
