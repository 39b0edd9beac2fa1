//! Classic memcached text protocol: line framing, command parsing, reply
//! encoders, and `encode_request` (request encoder for clients and tests).

use bytes::Bytes;

use super::meta;
use super::{McError, McLimits, McRequest, Parsed, StoreMode};

const BAD_FORMAT: &str = "bad command line format";

/// Split a command line on spaces (runs of spaces collapse, like memcached).
pub(crate) fn tokenize(line: &[u8]) -> Vec<&[u8]> {
    line.split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect()
}

pub(crate) fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in t {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

pub(crate) fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|n| u32::try_from(n).ok())
}

/// Signed 32-bit range like memcached's `safe_strtol`, widened to i64.
pub(crate) fn parse_i32(t: &[u8]) -> Option<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    let n = parse_u64(digits)? as i64;
    let n = if neg { -n } else { n };
    i32::try_from(n).ok().map(i64::from)
}

fn is_multiget(buf: &[u8]) -> bool {
    buf.starts_with(b"get ")
        || buf.starts_with(b"gets ")
        || buf.starts_with(b"gat ")
        || buf.starts_with(b"gats ")
}

fn line_limit(buf: &[u8], limits: &McLimits) -> usize {
    if is_multiget(buf) {
        limits.multiget_line_bytes_max.max(limits.line_len_max)
    } else {
        limits.line_len_max
    }
}

fn err(msg: &str, consumed: usize) -> Parsed {
    Parsed::Error {
        error: McError::client(msg),
        consumed: Some(consumed),
    }
}

fn unknown(consumed: usize) -> Parsed {
    Parsed::Error {
        error: McError::Error,
        consumed: Some(consumed),
    }
}

/// Where a data block of `len` bytes (+CRLF) starting at `start` ends, or
/// the parse outcome when it is not (yet) a valid block.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Block {
    Ready(Bytes, usize),
    Done(Parsed),
}

pub(crate) fn data_block(buf: &[u8], start: usize, len: usize, limits: &McLimits) -> Block {
    let end = start.saturating_add(len).saturating_add(2);
    if len > limits.value_len_max {
        return Block::Done(Parsed::Error {
            error: McError::ServerError("object too large for cache".into()),
            consumed: Some(end),
        });
    }
    if buf.len() < end {
        return Block::Done(Parsed::Incomplete);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Block::Done(err("bad data chunk", end));
    }
    Block::Ready(Bytes::copy_from_slice(&buf[start..start + len]), end)
}

/// Parse one text (classic or meta) request from the front of `buf`.
pub fn parse_text(buf: &[u8], limits: &McLimits) -> Parsed {
    let limit = line_limit(buf, limits);
    let nl = match memchr::memchr(b'\n', buf) {
        Some(p) => p,
        None if buf.len() > limit => {
            return Parsed::Error {
                error: McError::client("line too long"),
                consumed: None,
            }
        }
        None => return Parsed::Incomplete,
    };
    if nl > limit {
        return Parsed::Error {
            error: McError::client("line too long"),
            consumed: None,
        };
    }
    let consumed = nl + 1;
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let toks = tokenize(line);
    let Some(&cmd) = toks.first() else {
        return unknown(consumed);
    };
    if cmd.len() == 2 && cmd[0] == b'm' {
        return meta::parse_meta(buf, &toks, consumed, limits);
    }
    let ok = |request| Parsed::Request { request, consumed };
    let key_ok = |k: &[u8]| k.len() <= limits.key_len_max;
    let noreply = toks.last() == Some(&&b"noreply"[..]);
    let n = toks.len();
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let touch = cmd.starts_with(b"gat");
            let first_key = if touch { 2 } else { 1 };
            if n < 2 {
                return unknown(consumed);
            }
            let touch_exptime = if touch {
                match parse_i32(toks[1]) {
                    Some(e) => Some(e),
                    None => return err("invalid exptime argument", consumed),
                }
            } else {
                None
            };
            let keys = &toks[first_key..];
            if !keys.iter().all(|k| key_ok(k)) {
                return err(BAD_FORMAT, consumed);
            }
            ok(McRequest::Get {
                keys: keys.iter().map(|k| Bytes::copy_from_slice(k)).collect(),
                return_cas: cmd.ends_with(b"s"),
                touch_exptime,
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let mode = match cmd {
                b"set" => StoreMode::Set,
                b"add" => StoreMode::Add,
                b"replace" => StoreMode::Replace,
                b"append" => StoreMode::Append,
                b"prepend" => StoreMode::Prepend,
                _ => StoreMode::Cas,
            };
            let base = if mode == StoreMode::Cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                return unknown(consumed);
            }
            let key = toks[1];
            if !key_ok(key) {
                return err(BAD_FORMAT, consumed);
            }
            let (Some(flags), Some(exptime), Some(vlen)) =
                (parse_u32(toks[2]), parse_i32(toks[3]), parse_i32(toks[4]))
            else {
                return err(BAD_FORMAT, consumed);
            };
            if vlen < 0 {
                return err(BAD_FORMAT, consumed);
            }
            let cas_unique = if mode == StoreMode::Cas {
                match parse_u64(toks[5]) {
                    Some(c) => c,
                    None => return err(BAD_FORMAT, consumed),
                }
            } else {
                0
            };
            let noreply = n == base + 1 && noreply;
            match data_block(buf, consumed, vlen as usize, limits) {
                Block::Done(p) => p,
                Block::Ready(value, end) => Parsed::Request {
                    request: McRequest::Store {
                        mode,
                        key: Bytes::copy_from_slice(key),
                        flags,
                        exptime,
                        value,
                        cas_unique,
                        noreply,
                    },
                    consumed: end,
                },
            }
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return unknown(consumed);
            }
            if !key_ok(toks[1]) {
                return err(BAD_FORMAT, consumed);
            }
            let Some(delta) = parse_u64(toks[2]) else {
                return err("invalid numeric delta argument", consumed);
            };
            ok(McRequest::Arith {
                key: Bytes::copy_from_slice(toks[1]),
                delta,
                incr: cmd == b"incr",
                noreply: n == 4 && noreply,
            })
        }
        b"touch" => {
            if n != 3 && n != 4 {
                return unknown(consumed);
            }
            if !key_ok(toks[1]) {
                return err(BAD_FORMAT, consumed);
            }
            let Some(exptime) = parse_i32(toks[2]) else {
                return err("invalid exptime argument", consumed);
            };
            ok(McRequest::Touch {
                key: Bytes::copy_from_slice(toks[1]),
                exptime,
                noreply: n == 4 && noreply,
            })
        }
        b"delete" => {
            if !(2..=4).contains(&n) {
                return unknown(consumed);
            }
            if !key_ok(toks[1]) {
                return err(BAD_FORMAT, consumed);
            }
            let hold_zero = n > 2 && toks[2] == b"0";
            let valid =
                n == 2 || (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
            if !valid {
                return err(
                    "bad command line format.  Usage: delete <key> [noreply]",
                    consumed,
                );
            }
            ok(McRequest::Delete {
                key: Bytes::copy_from_slice(toks[1]),
                noreply: n > 2 && noreply,
            })
        }
        b"flush_all" => {
            if n > 3 {
                return unknown(consumed);
            }
            let delay_s = if n > (if noreply { 2 } else { 1 }) {
                match parse_i32(toks[1]) {
                    Some(d) => d,
                    None => return err("invalid exptime argument", consumed),
                }
            } else {
                0
            };
            ok(McRequest::FlushAll { delay_s, noreply })
        }
        b"verbosity" => {
            if n != 2 && n != 3 {
                return unknown(consumed);
            }
            if n == 2 && noreply {
                // memcached reads "verbosity noreply" as level 0, silently
                return ok(McRequest::Verbosity {
                    level: 0,
                    noreply: true,
                });
            }
            let Some(level) = parse_u32(toks[1]) else {
                return err(BAD_FORMAT, consumed);
            };
            ok(McRequest::Verbosity {
                level,
                noreply: n == 3 && noreply,
            })
        }
        b"stats" => {
            let s = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
            ok(McRequest::Stats {
                group: toks.get(1).map(|t| s(t)),
                args: toks.iter().skip(2).map(|t| s(t)).collect(),
            })
        }
        b"version" => ok(McRequest::Version),
        b"quit" => ok(McRequest::Quit),
        _ => unknown(consumed),
    }
}

/// Simple fixed replies of the text protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextReply {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    End,
}

impl TextReply {
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            TextReply::Stored => b"STORED\r\n",
            TextReply::NotStored => b"NOT_STORED\r\n",
            TextReply::Exists => b"EXISTS\r\n",
            TextReply::NotFound => b"NOT_FOUND\r\n",
            TextReply::Deleted => b"DELETED\r\n",
            TextReply::Touched => b"TOUCHED\r\n",
            TextReply::Ok => b"OK\r\n",
            TextReply::End => b"END\r\n",
        }
    }

    pub fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

fn push_num<N: itoa::Integer>(out: &mut Vec<u8>, n: N) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` (follow with `END`).
pub fn encode_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_num(out, flags);
    out.push(b' ');
    push_num(out, data.len());
    if let Some(c) = cas {
        out.push(b' ');
        push_num(out, c);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `END\r\n`
pub fn encode_end(out: &mut Vec<u8>) {
    TextReply::End.encode(out);
}

/// incr/decr result: `<n>\r\n`
pub fn encode_number(out: &mut Vec<u8>, n: u64) {
    push_num(out, n);
    out.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n`
pub fn encode_stat(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `STAT <name> <n>\r\n`
pub fn encode_stat_u64(out: &mut Vec<u8>, name: &str, n: u64) {
    encode_stat(out, name, itoa::Buffer::new().format(n).as_bytes());
}

/// `VERSION <v>\r\n`
pub fn encode_version(out: &mut Vec<u8>, version: &str) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_key_tail(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

/// Encode a request as a client would send it (text, meta or binary).
/// Inverse of [`super::parse`] for well-formed requests.
pub fn encode_request(req: &McRequest, out: &mut Vec<u8>) {
    match req {
        McRequest::Get {
            keys,
            return_cas,
            touch_exptime,
        } => {
            out.extend_from_slice(match (touch_exptime.is_some(), *return_cas) {
                (false, false) => b"get",
                (false, true) => b"gets",
                (true, false) => b"gat",
                (true, true) => b"gats",
            });
            if let Some(e) = touch_exptime {
                out.push(b' ');
                push_num(out, *e);
            }
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        McRequest::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            cas_unique,
            noreply,
        } => {
            out.extend_from_slice(match mode {
                StoreMode::Set => &b"set "[..],
                StoreMode::Add => b"add ",
                StoreMode::Replace => b"replace ",
                StoreMode::Append => b"append ",
                StoreMode::Prepend => b"prepend ",
                StoreMode::Cas => b"cas ",
            });
            out.extend_from_slice(key);
            out.push(b' ');
            push_num(out, *flags);
            out.push(b' ');
            push_num(out, *exptime);
            out.push(b' ');
            push_num(out, value.len());
            if *mode == StoreMode::Cas {
                out.push(b' ');
                push_num(out, *cas_unique);
            }
            push_key_tail(out, *noreply);
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        McRequest::Delete { key, noreply } => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            push_key_tail(out, *noreply);
        }
        McRequest::Arith {
            key,
            delta,
            incr,
            noreply,
        } => {
            out.extend_from_slice(if *incr { b"incr " } else { b"decr " });
            out.extend_from_slice(key);
            out.push(b' ');
            push_num(out, *delta);
            push_key_tail(out, *noreply);
        }
        McRequest::Touch {
            key,
            exptime,
            noreply,
        } => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_num(out, *exptime);
            push_key_tail(out, *noreply);
        }
        McRequest::FlushAll { delay_s, noreply } => {
            out.extend_from_slice(b"flush_all");
            if *delay_s != 0 {
                out.push(b' ');
                push_num(out, *delay_s);
            }
            push_key_tail(out, *noreply);
        }
        McRequest::Stats { group, args } => {
            out.extend_from_slice(b"stats");
            for t in group.iter().chain(args.iter()) {
                out.push(b' ');
                out.extend_from_slice(t.as_bytes());
            }
            out.extend_from_slice(b"\r\n");
        }
        McRequest::Version => out.extend_from_slice(b"version\r\n"),
        McRequest::Verbosity { level, noreply } => {
            out.extend_from_slice(b"verbosity ");
            push_num(out, *level);
            push_key_tail(out, *noreply);
        }
        McRequest::Quit => out.extend_from_slice(b"quit\r\n"),
        McRequest::MetaGet { key, flags } => {
            meta::encode_meta_request(b"mg", key, None, flags, out)
        }
        McRequest::MetaSet { key, value, flags } => {
            meta::encode_meta_request(b"ms", key, Some(value), flags, out)
        }
        McRequest::MetaDelete { key, flags } => {
            meta::encode_meta_request(b"md", key, None, flags, out)
        }
        McRequest::MetaArith { key, flags } => {
            meta::encode_meta_request(b"ma", key, None, flags, out)
        }
        McRequest::MetaNoop => out.extend_from_slice(b"mn\r\n"),
        McRequest::MetaDebug { key, base64 } => {
            out.extend_from_slice(b"me ");
            if *base64 {
                super::base64_encode(key, out);
                out.extend_from_slice(b" b");
            } else {
                out.extend_from_slice(key);
            }
            out.extend_from_slice(b"\r\n");
        }
        McRequest::Binary(b) => b.encode(out),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    use super::super::test_support::{assert_too_large, client_err, p, req};

    fn unknown_cmd(s: &[u8]) {
        assert_eq!(
            p(s),
            Parsed::Error {
                error: McError::Error,
                consumed: Some(s.len())
            },
            "{:?}",
            String::from_utf8_lossy(s)
        );
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn get_forms() {
        assert_eq!(
            req(b"get a bb\r\n"),
            McRequest::Get {
                keys: vec![b("a"), b("bb")],
                return_cas: false,
                touch_exptime: None
            }
        );
        assert_eq!(
            req(b"gets  a   b \n"),
            McRequest::Get {
                keys: vec![b("a"), b("b")],
                return_cas: true,
                touch_exptime: None
            }
        );
        assert_eq!(
            req(b"gat 10 k\r\n"),
            McRequest::Get {
                keys: vec![b("k")],
                return_cas: false,
                touch_exptime: Some(10)
            }
        );
        assert_eq!(
            req(b"gats -1 k j\r\n"),
            McRequest::Get {
                keys: vec![b("k"), b("j")],
                return_cas: true,
                touch_exptime: Some(-1)
            }
        );
        // memcached answers END to a gat without keys
        assert_eq!(
            req(b"gat 10\r\n"),
            McRequest::Get {
                keys: vec![],
                return_cas: false,
                touch_exptime: Some(10)
            }
        );
        client_err(b"gat k\r\n", "invalid exptime argument", 7);
        unknown_cmd(b"get\r\n");
        unknown_cmd(b"get \r\n");
        unknown_cmd(b"gets\r\n");
        let long = format!("get {}\r\n", "a".repeat(251));
        client_err(long.as_bytes(), "bad command line format", long.len());
        let ok250 = format!("get {}\r\n", "a".repeat(250));
        req(ok250.as_bytes());
    }

    #[test]
    fn multiget_is_bounded_by_bytes_not_keys() {
        let mut line = b"get".to_vec();
        for index in 0..10_000 {
            line.extend_from_slice(format!(" key:{index}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        match p(&line) {
            Parsed::Request {
                request: McRequest::Get { keys, .. },
                ..
            } => assert_eq!(keys.len(), 10_000),
            other => panic!("{other:?}"),
        }
        let l = McLimits {
            multiget_line_bytes_max: 8,
            ..McLimits::default()
        };
        // Never below the ordinary line limit.
        assert!(matches!(
            parse(b"get a b c\r\n", &l),
            Parsed::Request { .. }
        ));
        let long = format!("get {}", "k ".repeat(1100));
        assert_eq!(
            parse(long.as_bytes(), &l),
            Parsed::Error {
                error: McError::client("line too long"),
                consumed: None
            }
        );
    }

    #[test]
    fn storage_forms() {
        for (cmd, mode) in [
            ("set", StoreMode::Set),
            ("add", StoreMode::Add),
            ("replace", StoreMode::Replace),
            ("append", StoreMode::Append),
            ("prepend", StoreMode::Prepend),
        ] {
            let s = format!("{cmd} k 5 -1 3\r\nabc\r\n");
            assert_eq!(
                req(s.as_bytes()),
                McRequest::Store {
                    mode,
                    key: b("k"),
                    flags: 5,
                    exptime: -1,
                    value: b("abc"),
                    cas_unique: 0,
                    noreply: false
                }
            );
            let s = format!("{cmd} k 0 0 0 noreply\r\n\r\n");
            assert!(matches!(
                req(s.as_bytes()),
                McRequest::Store { noreply: true, .. }
            ));
        }
        assert_eq!(
            req(b"cas k 1 2 2 99\r\nhi\r\n"),
            McRequest::Store {
                mode: StoreMode::Cas,
                key: b("k"),
                flags: 1,
                exptime: 2,
                value: b("hi"),
                cas_unique: 99,
                noreply: false
            }
        );
        assert!(matches!(
            req(b"cas k 1 2 2 99 noreply\r\nhi\r\n"),
            McRequest::Store {
                noreply: true,
                cas_unique: 99,
                ..
            }
        ));
        // a last token other than "noreply" is ignored, like memcached
        assert!(matches!(
            req(b"set k 0 0 1 garbage\r\nx\r\n"),
            McRequest::Store { noreply: false, .. }
        ));
        // value may contain CR/LF
        assert!(matches!(
            req(b"set k 0 0 4\r\n\r\n\r\n\r\n"),
            McRequest::Store { value, .. } if value == "\r\n\r\n"
        ));
    }

    #[test]
    fn storage_errors() {
        unknown_cmd(b"set k 0 0\r\n");
        unknown_cmd(b"set k 0 0 1 noreply extra\r\n");
        unknown_cmd(b"cas k 0 0 1\r\n");
        client_err(b"set k 0 0 -1\r\n", "bad command line format", 14);
        client_err(b"set k -1 0 1\r\n", "bad command line format", 14);
        client_err(b"set k x 0 1\r\n", "bad command line format", 13);
        client_err(b"set k 0 x 1\r\n", "bad command line format", 13);
        client_err(b"set k 4294967296 0 1\r\n", "bad command line format", 22);
        client_err(b"cas k 0 0 1 abc\r\n", "bad command line format", 17);
        let long = format!("set {} 0 0 1\r\n", "a".repeat(251));
        client_err(long.as_bytes(), "bad command line format", long.len());
        // bad data chunk: swallow line + len + 2 like memcached
        client_err(b"set k 0 0 1\r\nxyz\r\n", "bad data chunk", 16);
        client_err(b"set j 0 0 1\nx\nget j\n", "bad data chunk", 15);
        // data not yet there
        assert_eq!(p(b"set k 0 0 3\r\nab"), Parsed::Incomplete);
        assert_eq!(p(b"set k 0 0 3\r\nabc\r"), Parsed::Incomplete);
        // too large: SERVER_ERROR and swallow the announced value
        assert_too_large("set k 0 0 {}\r\n");
    }

    #[test]
    fn delete_forms() {
        let d = |noreply| McRequest::Delete {
            key: b("k"),
            noreply,
        };
        assert_eq!(req(b"delete k\r\n"), d(false));
        assert_eq!(req(b"delete k 0\r\n"), d(false));
        assert_eq!(req(b"delete k noreply\r\n"), d(true));
        assert_eq!(req(b"delete k 0 noreply\r\n"), d(true));
        assert_eq!(
            req(b"delete noreply\r\n"),
            McRequest::Delete {
                key: b("noreply"),
                noreply: false
            }
        );
        let usage = "bad command line format.  Usage: delete <key> [noreply]";
        client_err(b"delete k 1\r\n", usage, 12);
        client_err(b"delete k 0 0\r\n", usage, 14);
        unknown_cmd(b"delete\r\n");
        unknown_cmd(b"delete k 0 noreply x\r\n");
    }

    #[test]
    fn arith_touch_forms() {
        assert_eq!(
            req(b"incr k 5\r\n"),
            McRequest::Arith {
                key: b("k"),
                delta: 5,
                incr: true,
                noreply: false
            }
        );
        assert_eq!(
            req(b"decr k 18446744073709551615 noreply\r\n"),
            McRequest::Arith {
                key: b("k"),
                delta: u64::MAX,
                incr: false,
                noreply: true
            }
        );
        client_err(b"incr k abc\r\n", "invalid numeric delta argument", 12);
        client_err(b"incr k -1\r\n", "invalid numeric delta argument", 11);
        client_err(
            b"incr k 18446744073709551616\r\n",
            "invalid numeric delta argument",
            29,
        );
        unknown_cmd(b"incr\r\n");
        unknown_cmd(b"incr k\r\n");
        assert_eq!(
            req(b"touch k 10\r\n"),
            McRequest::Touch {
                key: b("k"),
                exptime: 10,
                noreply: false
            }
        );
        assert!(matches!(
            req(b"touch k 10 noreply\r\n"),
            McRequest::Touch { noreply: true, .. }
        ));
        client_err(b"touch k abc\r\n", "invalid exptime argument", 13);
        unknown_cmd(b"touch k\r\n");
    }

    #[test]
    fn misc_commands() {
        let f = |delay_s, noreply| McRequest::FlushAll { delay_s, noreply };
        assert_eq!(req(b"flush_all\r\n"), f(0, false));
        assert_eq!(req(b"flush_all 10\r\n"), f(10, false));
        assert_eq!(req(b"flush_all noreply\r\n"), f(0, true));
        assert_eq!(req(b"flush_all 10 noreply\r\n"), f(10, true));
        assert_eq!(req(b"flush_all 1 2\r\n"), f(1, false));
        client_err(b"flush_all abc\r\n", "invalid exptime argument", 15);
        assert_eq!(
            req(b"verbosity 1\r\n"),
            McRequest::Verbosity {
                level: 1,
                noreply: false
            }
        );
        assert_eq!(
            req(b"verbosity 1 noreply\r\n"),
            McRequest::Verbosity {
                level: 1,
                noreply: true
            }
        );
        assert_eq!(
            req(b"verbosity noreply\r\n"),
            McRequest::Verbosity {
                level: 0,
                noreply: true
            }
        );
        unknown_cmd(b"verbosity\r\n");
        unknown_cmd(b"verbosity 1 2 3\r\n");
        client_err(b"verbosity foo\r\n", "bad command line format", 15);
        assert_eq!(req(b"version\r\n"), McRequest::Version);
        assert_eq!(req(b"version foo\r\n"), McRequest::Version);
        assert_eq!(req(b"quit\r\n"), McRequest::Quit);
        assert_eq!(
            req(b"stats\r\n"),
            McRequest::Stats {
                group: None,
                args: vec![]
            }
        );
        assert_eq!(
            req(b"stats detail on\r\n"),
            McRequest::Stats {
                group: Some("detail".into()),
                args: vec!["on".into()]
            }
        );
        unknown_cmd(b"foo\r\n");
        unknown_cmd(b"\r\n");
        unknown_cmd(b"GET k\r\n");
    }

    #[test]
    fn line_too_long() {
        let l = McLimits::default();
        let s = vec![b'x'; l.line_len_max + 1];
        assert_eq!(
            p(&s),
            Parsed::Error {
                error: McError::client("line too long"),
                consumed: None
            }
        );
        assert_eq!(p(&s[..l.line_len_max]), Parsed::Incomplete);
        // multi-get lines may be longer
        let mut g = b"get".to_vec();
        for _ in 0..1000 {
            g.extend_from_slice(b" abc");
        }
        assert_eq!(p(&g), Parsed::Incomplete);
        g.extend_from_slice(b"\r\n");
        assert!(matches!(p(&g), Parsed::Request { .. }));
    }

    #[test]
    fn pipelined() {
        let buf = b"get a\r\nset k 0 0 1\r\nx\r\ndelete k\r\n";
        let mut off = 0;
        let mut n = 0;
        while off < buf.len() {
            match p(&buf[off..]) {
                Parsed::Request { consumed, .. } => off += consumed,
                o => panic!("{o:?}"),
            }
            n += 1;
        }
        assert_eq!(n, 3);
    }

    #[test]
    fn encoders() {
        let mut o = Vec::new();
        encode_value(&mut o, b"k", 5, b"hi", None);
        encode_value(&mut o, b"k", 0, b"", Some(7));
        encode_end(&mut o);
        assert_eq!(o, b"VALUE k 5 2\r\nhi\r\nVALUE k 0 0 7\r\n\r\nEND\r\n");
        o.clear();
        for r in [
            TextReply::Stored,
            TextReply::NotStored,
            TextReply::Exists,
            TextReply::NotFound,
            TextReply::Deleted,
            TextReply::Touched,
            TextReply::Ok,
        ] {
            r.encode(&mut o);
        }
        assert_eq!(
            o,
            b"STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\n"
        );
        o.clear();
        encode_number(&mut o, 42);
        encode_stat(&mut o, "pid", b"1");
        encode_stat_u64(&mut o, "uptime", 9);
        encode_version(&mut o, "1.6.18");
        assert_eq!(
            o,
            b"42\r\nSTAT pid 1\r\nSTAT uptime 9\r\nVERSION 1.6.18\r\n"
        );
    }
}
