//! RESP request parsing: multibulk frames (`*N\r\n$len\r\n...`) and inline commands (`SET a b\r\n`).
//!
//! The parser is stateless and zero-copy: it reports the byte ranges of the arguments inside the caller's
//! buffer, so a command executes straight from the read buffer. It rescans only frame headers when a frame
//! arrives in pieces, never bulk bodies. Error texts match Redis 7.0 so clients behave as with Redis.
use std::ops::Range;

/// Limits on what one request may contain; each breach is a protocol error.
#[derive(Clone, Debug)]
pub struct RespLimits {
    /// Largest argument count of one multibulk request.
    pub multibulk_len_max: usize,
    /// Largest single bulk argument (Redis `proto-max-bulk-len`).
    pub bulk_len_max: usize,
    /// Longest inline command line and longest `*`/`$` header line.
    pub inline_len_max: usize,
}

impl Default for RespLimits {
    fn default() -> Self {
        RespLimits {
            multibulk_len_max: 1 << 20,
            bulk_len_max: 512 << 20,
            inline_len_max: 64 << 10,
        }
    }
}

/// What one parse attempt found at the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed; at least `bytes_needed_min` in total if known (0 when unknown).
    Incomplete { bytes_needed_min: usize },
    /// A multibulk request: its arguments are the ranges pushed into `args`.
    Multibulk { consumed: usize },
    /// An inline request, whose arguments needed unquoting and so are owned.
    Inline { consumed: usize, args: Vec<Vec<u8>> },
    /// Bytes that carry no request (an empty inline line, `*0`, `*-1`): skip them.
    Empty { consumed: usize },
    /// A protocol error: the text after `-ERR `; the connection cannot resynchronise and must close.
    Error(String),
}

/// Parses one request from the start of `buf`. For `Multibulk`, `args` receives the argument ranges
/// (cleared first).
pub fn parse_request(buf: &[u8], limits: &RespLimits, args: &mut Vec<Range<usize>>) -> Parsed {
    args.clear();
    match buf.first() {
        None => Parsed::Incomplete {
            bytes_needed_min: 0,
        },
        Some(b'*') => parse_multibulk(buf, limits, args),
        Some(_) => parse_inline(buf, limits),
    }
}

/// Finds `\r\n` from `start`; returns the index of `\r`.
fn find_crlf(buf: &[u8], start: usize) -> Option<usize> {
    let mut from = start;
    while let Some(offset) = memchr::memchr(b'\r', &buf[from..]) {
        let at = from + offset;
        if at + 1 >= buf.len() {
            return None;
        }
        if buf[at + 1] == b'\n' {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Parses a signed decimal the way Redis's string2ll does (no spaces, no plus sign, no leading zeros).
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let (negative, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = (digit - b'0') as i64;
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

enum Header {
    Value { value: i64, next: usize },
    Incomplete,
    Invalid,
    TooLong,
}

/// Reads the number on a `*N` or `$N` header line starting at `start` (the type byte).
fn read_header(buf: &[u8], start: usize, limits: &RespLimits) -> Header {
    match find_crlf(buf, start) {
        None if buf.len() - start > limits.inline_len_max => Header::TooLong,
        None => Header::Incomplete,
        Some(end) => match parse_i64(&buf[start + 1..end]) {
            Some(value) => Header::Value {
                value,
                next: end + 2,
            },
            None => Header::Invalid,
        },
    }
}

fn parse_multibulk(buf: &[u8], limits: &RespLimits, args: &mut Vec<Range<usize>>) -> Parsed {
    let (count, mut pos) = match read_header(buf, 0, limits) {
        Header::Incomplete => {
            return Parsed::Incomplete {
                bytes_needed_min: 0,
            }
        }
        Header::TooLong => {
            return Parsed::Error("Protocol error: too big mbulk count string".into())
        }
        Header::Invalid => return Parsed::Error("Protocol error: invalid multibulk length".into()),
        Header::Value { value, next } => (value, next),
    };
    if count <= 0 {
        return Parsed::Empty { consumed: pos };
    }
    if count as u64 > limits.multibulk_len_max as u64 {
        return Parsed::Error("Protocol error: invalid multibulk length".into());
    }
    for _ in 0..count {
        match buf.get(pos) {
            None => {
                return Parsed::Incomplete {
                    bytes_needed_min: 0,
                }
            }
            Some(b'$') => {}
            Some(&other) => {
                return Parsed::Error(format!(
                    "Protocol error: expected '$', got '{}'",
                    other as char
                ))
            }
        }
        let (len, body) = match read_header(buf, pos, limits) {
            Header::Incomplete => {
                return Parsed::Incomplete {
                    bytes_needed_min: 0,
                }
            }
            Header::TooLong => {
                return Parsed::Error("Protocol error: too big bulk count string".into())
            }
            Header::Invalid => return Parsed::Error("Protocol error: invalid bulk length".into()),
            Header::Value { value, next } => (value, next),
        };
        if len < 0 || len as u64 > limits.bulk_len_max as u64 {
            return Parsed::Error("Protocol error: invalid bulk length".into());
        }
        let end = body + len as usize;
        if end + 2 > buf.len() {
            return Parsed::Incomplete {
                bytes_needed_min: end + 2,
            };
        }
        args.push(body..end);
        pos = end + 2;
    }
    Parsed::Multibulk { consumed: pos }
}

fn parse_inline(buf: &[u8], limits: &RespLimits) -> Parsed {
    let Some(newline) = memchr::memchr(b'\n', buf) else {
        if buf.len() > limits.inline_len_max {
            return Parsed::Error("Protocol error: too big inline request".into());
        }
        return Parsed::Incomplete {
            bytes_needed_min: 0,
        };
    };
    if newline > limits.inline_len_max {
        return Parsed::Error("Protocol error: too big inline request".into());
    }
    let line = match buf[..newline].last() {
        Some(b'\r') => &buf[..newline - 1],
        _ => &buf[..newline],
    };
    match split_args(line) {
        None => Parsed::Error("Protocol error: unbalanced quotes in request".into()),
        Some(args) if args.is_empty() => Parsed::Empty {
            consumed: newline + 1,
        },
        Some(args) => Parsed::Inline {
            consumed: newline + 1,
            args,
        },
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|value| value as u8)
}

/// Splits a line into arguments like Redis's sdssplitargs: spaces separate, `"..."` takes C escapes
/// (`\n \r \t \b \a \\ \" \xHH`), `'...'` takes only `\'`. None when quotes are unbalanced.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut pos = 0;
    loop {
        while pos < line.len() && line[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let Some(&byte) = line.get(pos) else {
                if in_double || in_single {
                    return None;
                }
                break;
            };
            if in_double {
                if byte == b'\\' && pos + 3 < line.len() && line[pos + 1] == b'x' {
                    if let (Some(high), Some(low)) =
                        (hex_value(line[pos + 2]), hex_value(line[pos + 3]))
                    {
                        current.push(high * 16 + low);
                        pos += 4;
                        continue;
                    }
                }
                if byte == b'\\' && pos + 1 < line.len() {
                    current.push(match line[pos + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    pos += 2;
                    continue;
                }
                if byte == b'"' {
                    // A closing quote must be followed by a space or the end.
                    if line
                        .get(pos + 1)
                        .is_some_and(|next| !next.is_ascii_whitespace())
                    {
                        return None;
                    }
                    pos += 1;
                    break;
                }
                current.push(byte);
            } else if in_single {
                if byte == b'\\' && line.get(pos + 1) == Some(&b'\'') {
                    current.push(b'\'');
                    pos += 2;
                    continue;
                }
                if byte == b'\'' {
                    if line
                        .get(pos + 1)
                        .is_some_and(|next| !next.is_ascii_whitespace())
                    {
                        return None;
                    }
                    pos += 1;
                    break;
                }
                current.push(byte);
            } else {
                match byte {
                    byte if byte.is_ascii_whitespace() => break,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => current.push(byte),
                }
            }
            pos += 1;
        }
        args.push(current);
    }
}

/// Encodes a request as a RESP multibulk frame (what clients send).
pub fn encode_request(args: &[&[u8]], out: &mut Vec<u8>) {
    encode_array_header(args.len(), out);
    for arg in args {
        encode_bulk(arg, out);
    }
}

/// Appends a multibulk header `*len`; the caller appends `len` bulk strings after it (`encode_bulk`), which
/// lets a client stream a long command (MSET of many records) without first collecting its arguments.
pub fn encode_array_header(len: usize, out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk string `$len\r\narg\r\n`.
pub fn encode_bulk(arg: &[u8], out: &mut Vec<u8>) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(arg.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(buf: &[u8]) -> (Parsed, Vec<Vec<u8>>) {
        let mut ranges = Vec::new();
        let parsed = parse_request(buf, &RespLimits::default(), &mut ranges);
        let args = ranges
            .iter()
            .map(|range| buf[range.clone()].to_vec())
            .collect();
        (parsed, args)
    }

    #[test]
    fn multibulk_and_errors() {
        let (parsed, args) = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        assert_eq!(parsed, Parsed::Multibulk { consumed: 20 });
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(parse_all(b"*0\r\n").0, Parsed::Empty { consumed: 4 });
        assert_eq!(
            parse_all(b"*x\r\n").0,
            Parsed::Error("Protocol error: invalid multibulk length".into())
        );
        assert_eq!(
            parse_all(b"*1\r\n:3\r\n").0,
            Parsed::Error("Protocol error: expected '$', got ':'".into())
        );
        assert_eq!(
            parse_all(b"*1\r\n$600000000\r\n").0,
            Parsed::Error("Protocol error: invalid bulk length".into())
        );
        assert_eq!(
            parse_all(b"*1\r\n$5\r\nab").0,
            Parsed::Incomplete {
                bytes_needed_min: 15
            }
        );
    }

    #[test]
    fn inline_commands() {
        assert_eq!(
            parse_all(b"SET a \"b c\\x41\\n\" 'it\\'s'\r\n").0,
            Parsed::Inline {
                consumed: 27,
                args: vec![
                    b"SET".to_vec(),
                    b"a".to_vec(),
                    b"b cA\n".to_vec(),
                    b"it's".to_vec()
                ]
            }
        );
        assert_eq!(parse_all(b"\r\n").0, Parsed::Empty { consumed: 2 });
        assert_eq!(
            parse_all(b"SET \"a\r\n").0,
            Parsed::Error("Protocol error: unbalanced quotes in request".into())
        );
        assert_eq!(
            parse_all(b"PING").0,
            Parsed::Incomplete {
                bytes_needed_min: 0
            }
        );
        let long = vec![b'a'; 70_000];
        assert_eq!(
            parse_all(&long).0,
            Parsed::Error("Protocol error: too big inline request".into())
        );
    }

    #[test]
    fn integers_parse_like_redis() {
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"9223372036854775808"[..],
            b"01",
            b"+1",
            b" 1",
            b"",
            b"-",
            b"-0",
            b"1a",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn round_trip_and_split_reads(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)) {
            let refs: Vec<&[u8]> = args.iter().map(|arg| arg.as_slice()).collect();
            let mut frame = Vec::new();
            encode_request(&refs, &mut frame);
            let (parsed, decoded) = parse_all(&frame);
            prop_assert_eq!(parsed, Parsed::Multibulk { consumed: frame.len() });
            prop_assert_eq!(&decoded, &args);
            for cut in 0..frame.len() {
                let (parsed, _) = parse_all(&frame[..cut]);
                prop_assert!(matches!(parsed, Parsed::Incomplete { .. }), "cut {} gave {:?}", cut, parsed);
            }
        }

        #[test]
        fn mutated_frames_never_panic(
            args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 1..5),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let refs: Vec<&[u8]> = args.iter().map(|arg| arg.as_slice()).collect();
            let mut frame = Vec::new();
            encode_request(&refs, &mut frame);
            for (index, byte) in flips {
                let at = index.index(frame.len());
                frame[at] = byte;
            }
            // A pipeline of the mutated frame parsed to the end: every step consumes bytes or stops.
            let mut rest: &[u8] = &frame;
            let mut ranges = Vec::new();
            while let Parsed::Multibulk { consumed } | Parsed::Inline { consumed, .. } | Parsed::Empty { consumed } =
                parse_request(rest, &RespLimits::default(), &mut ranges)
            {
                prop_assert!(consumed > 0 && consumed <= rest.len());
                rest = &rest[consumed..];
            }
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut ranges = Vec::new();
            match parse_request(&bytes, &RespLimits::default(), &mut ranges) {
                Parsed::Multibulk { consumed } | Parsed::Inline { consumed, .. } | Parsed::Empty { consumed } => {
                    prop_assert!(consumed > 0 && consumed <= bytes.len());
                    for range in ranges { prop_assert!(range.end <= consumed); }
                }
                Parsed::Incomplete { .. } | Parsed::Error(_) => {}
            }
        }
    }
}
