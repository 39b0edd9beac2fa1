//! Requests on the wire and replies off it. Requests are written straight into a connection's output
//! buffer (no allocation per request); replies are found by a stateless frame parser that reports how
//! many bytes a frame needs when it is incomplete, so a large reply arriving in pieces is scanned once
//! its last byte is in, not on every read.
use crate::options::Protocol;
use crate::workload::{Op, Request};

/// Largest reply accepted; a larger one is an error and drops the connection.
pub const REPLY_BYTES_MAX: usize = 64 << 20;
/// Longest reply header line (`$123`, `VALUE key flags bytes`, `-ERR ...`).
pub const LINE_BYTES_MAX: usize = 64 << 10;
/// Deepest nesting of RESP aggregates.
const DEPTH_MAX: usize = 32;
/// Most elements in one RESP aggregate (HELLO's map has 7 pairs; nothing we send gets more).
const AGGREGATE_LEN_MAX: i64 = 1 << 20;

/// The reply families: what separates one reply from the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Resp,
    Memcache,
}

impl From<Protocol> for Family {
    fn from(protocol: Protocol) -> Family {
        if protocol.is_resp() {
            Family::Resp
        } else {
            Family::Memcache
        }
    }
}

/// What one reply says about the request it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// Data came back (RESP bulk or verbatim string, memcached `VALUE`/`VA`): a hit for a GET.
    Value,
    /// The key was absent (RESP `$-1`, `*-1`, `_`; memcached `END` alone, `EN`): a miss for a GET.
    Nil,
    /// Any other reply (`+OK`, `STORED`, `HD`, an integer, an array).
    Other,
    /// An error reply (`-ERR`, `!`, `ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`).
    Error,
    /// A RESP3 push frame: out of band, it answers no request.
    Push,
}

/// The result of looking for one reply at the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyParse {
    Complete {
        consumed: usize,
        kind: ReplyKind,
    },
    /// The buffer holds part of a reply that needs at least `bytes_needed_min` bytes in all.
    Incomplete {
        bytes_needed_min: usize,
    },
    /// Not a valid reply, or one over the limits: the stream cannot be trusted any more.
    Invalid(String),
}

/// Finds one reply at the start of `buf`.
pub fn parse_reply(family: Family, buf: &[u8]) -> ReplyParse {
    let step = match family {
        Family::Resp => resp_frame(buf, 0, 0),
        Family::Memcache => memcache_reply(buf),
    };
    match step {
        Ok(Step::Done { end, kind }) => ReplyParse::Complete {
            consumed: end,
            kind,
        },
        Ok(Step::Need(bytes_needed_min)) => ReplyParse::Incomplete { bytes_needed_min },
        Err(message) => ReplyParse::Invalid(message),
    }
}

enum Step {
    Done { end: usize, kind: ReplyKind },
    Need(usize),
}

/// Finds the line starting at `pos`: returns the index of its `\r`, or how many bytes are needed.
fn line_end(buf: &[u8], pos: usize) -> Result<Result<usize, usize>, String> {
    let window = &buf[pos..buf.len().min(pos + LINE_BYTES_MAX + 2)];
    match memchr::memchr(b'\n', window) {
        Some(0) => Err("reply line starts with a bare newline".into()),
        Some(nl) if window[nl - 1] == b'\r' => Ok(Ok(pos + nl - 1)),
        Some(_) => Err("reply line ends in a bare newline".into()),
        None if window.len() > LINE_BYTES_MAX => {
            Err(format!("reply line longer than {LINE_BYTES_MAX} bytes"))
        }
        None => Ok(Err(buf.len() + 1)),
    }
}

/// Parses a decimal length or count (optional minus sign, at most 19 digits).
fn parse_len(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
    Some(if negative { -value } else { value })
}

/// Checks that a body of `len` bytes plus CRLF follows the header ending at `body_start`.
fn body(buf: &[u8], body_start: usize, len: i64) -> Result<Step, String> {
    if len < 0 || len as usize > REPLY_BYTES_MAX {
        return Err(format!(
            "reply of {len} bytes is outside 0..={REPLY_BYTES_MAX}"
        ));
    }
    let end = body_start + len as usize + 2;
    if buf.len() < end {
        return Ok(Step::Need(end));
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err("reply body is not followed by CRLF".into());
    }
    Ok(Step::Done {
        end,
        kind: ReplyKind::Value,
    })
}

fn resp_frame(buf: &[u8], pos: usize, depth: usize) -> Result<Step, String> {
    if depth > DEPTH_MAX {
        return Err(format!("reply nested deeper than {DEPTH_MAX}"));
    }
    let Some(&tag) = buf.get(pos) else {
        return Ok(Step::Need(pos + 1));
    };
    let cr = match line_end(buf, pos)? {
        Ok(cr) => cr,
        Err(need) => return Ok(Step::Need(need)),
    };
    let line = &buf[pos + 1..cr];
    let next = cr + 2;
    let done = |kind| Ok(Step::Done { end: next, kind });
    match tag {
        b'+' | b':' | b',' | b'#' | b'(' => done(ReplyKind::Other),
        b'-' => done(ReplyKind::Error),
        b'_' => done(ReplyKind::Nil),
        b'$' | b'=' | b'!' => {
            let len = parse_len(line).ok_or("bad bulk length in reply")?;
            if len == -1 && tag == b'$' {
                return done(ReplyKind::Nil);
            }
            match body(buf, next, len)? {
                Step::Done { end, .. } if tag == b'!' => Ok(Step::Done {
                    end,
                    kind: ReplyKind::Error,
                }),
                step => Ok(step),
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => aggregate(buf, tag, line, next, depth),
        other => Err(format!("unexpected reply type byte 0x{other:02x}")),
    }
}

fn aggregate(buf: &[u8], tag: u8, line: &[u8], next: usize, depth: usize) -> Result<Step, String> {
    let count = parse_len(line).ok_or("bad aggregate length in reply")?;
    if count == -1 && tag == b'*' {
        return Ok(Step::Done {
            end: next,
            kind: ReplyKind::Nil,
        });
    }
    if !(0..=AGGREGATE_LEN_MAX).contains(&count) {
        return Err(format!("aggregate of {count} elements in reply"));
    }
    let elements = if matches!(tag, b'%' | b'|') {
        count * 2
    } else {
        count
    };
    let mut pos = next;
    for _ in 0..elements {
        match resp_frame(buf, pos, depth + 1)? {
            Step::Done { end, .. } => pos = end,
            need => return Ok(need),
        }
    }
    match tag {
        // An attribute annotates the frame that follows it; that frame is the reply.
        b'|' => resp_frame(buf, pos, depth + 1),
        b'>' if depth == 0 => Ok(Step::Done {
            end: pos,
            kind: ReplyKind::Push,
        }),
        _ => Ok(Step::Done {
            end: pos,
            kind: ReplyKind::Other,
        }),
    }
}

/// The value length in a `VALUE key flags bytes [cas]` or `VA bytes flags...` line.
fn value_len(line: &[u8], token: usize) -> Result<i64, String> {
    line.split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .nth(token)
        .and_then(parse_len)
        .ok_or_else(|| {
            format!(
                "bad value header in reply: {:?}",
                String::from_utf8_lossy(line)
            )
        })
}

fn is_memcache_error(line: &[u8]) -> bool {
    line == b"ERROR"
        || line.starts_with(b"ERROR ")
        || line.starts_with(b"CLIENT_ERROR")
        || line.starts_with(b"SERVER_ERROR")
}

/// A memcached reply: `VALUE` blocks up to `END`, a `VA` line with its data, or one line.
fn memcache_reply(buf: &[u8]) -> Result<Step, String> {
    let mut pos = 0;
    let mut values = 0usize;
    loop {
        let cr = match line_end(buf, pos)? {
            Ok(cr) => cr,
            Err(need) => return Ok(Step::Need(need)),
        };
        let line = &buf[pos..cr];
        let next = cr + 2;
        if line.starts_with(b"VALUE ") {
            match body(buf, next, value_len(line, 3)?)? {
                Step::Done { end, .. } => pos = end,
                need => return Ok(need),
            }
            values += 1;
            if pos > REPLY_BYTES_MAX {
                return Err(format!("reply over {REPLY_BYTES_MAX} bytes"));
            }
            continue;
        }
        if line == b"END" {
            let kind = if values > 0 {
                ReplyKind::Value
            } else {
                ReplyKind::Nil
            };
            return Ok(Step::Done { end: next, kind });
        }
        if values > 0 {
            return Err("a VALUE block is followed by neither VALUE nor END".into());
        }
        if line.starts_with(b"VA ") {
            return body(buf, next, value_len(line, 1)?);
        }
        let kind = if line == b"EN" {
            ReplyKind::Nil
        } else if is_memcache_error(line) {
            ReplyKind::Error
        } else {
            ReplyKind::Other
        };
        return Ok(Step::Done { end: next, kind });
    }
}

/// Writes requests for one protocol, keys and values included, into an output buffer.
#[derive(Clone, Debug)]
pub struct Encoder {
    protocol: Protocol,
    prefix: Vec<u8>,
    /// Every key is padded with zeros to this length (0 = no padding).
    key_bytes: usize,
    /// The bytes every value is a prefix of.
    pattern: Vec<u8>,
}

impl Encoder {
    pub fn new(
        protocol: Protocol,
        prefix: &str,
        key_bytes: usize,
        value_bytes_max: usize,
    ) -> Encoder {
        let pattern = (0..value_bytes_max)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        Encoder {
            protocol,
            prefix: prefix.as_bytes().to_vec(),
            key_bytes,
            pattern,
        }
    }

    /// The request a RESP3 connection sends first.
    pub fn hello3() -> &'static [u8] {
        b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
    }

    fn key_len(&self, digits: usize) -> usize {
        (self.prefix.len() + digits).max(self.key_bytes)
    }

    fn put_key(&self, digits: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        let pad = self.key_len(digits.len()) - self.prefix.len() - digits.len();
        out.resize(out.len() + pad, b'0');
        out.extend_from_slice(digits.as_bytes());
    }

    /// Appends `request` to `out`.
    pub fn encode(&self, request: &Request, out: &mut Vec<u8>) {
        let mut number = itoa::Buffer::new();
        let digits = number.format(request.key);
        let key_len = self.key_len(digits.len());
        let value = &self.pattern[..request.value_bytes.min(self.pattern.len())];
        let mut len_text = itoa::Buffer::new();
        match (self.protocol.is_resp(), request.op) {
            (true, Op::Get) => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$");
                out.extend_from_slice(len_text.format(key_len).as_bytes());
                out.extend_from_slice(b"\r\n");
                self.put_key(digits, out);
                out.extend_from_slice(b"\r\n");
            }
            (true, Op::Set) => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$");
                out.extend_from_slice(len_text.format(key_len).as_bytes());
                out.extend_from_slice(b"\r\n");
                self.put_key(digits, out);
                out.extend_from_slice(b"\r\n$");
                out.extend_from_slice(len_text.format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            (false, Op::Get) => {
                out.extend_from_slice(self.get_verb());
                self.put_key(digits, out);
                out.extend_from_slice(self.get_suffix());
            }
            (false, Op::Set) => {
                out.extend_from_slice(self.set_verb());
                self.put_key(digits, out);
                out.extend_from_slice(self.set_flags());
                out.extend_from_slice(len_text.format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    fn get_verb(&self) -> &'static [u8] {
        match self.protocol {
            Protocol::MemcacheMeta => b"mg ",
            _ => b"get ",
        }
    }

    fn get_suffix(&self) -> &'static [u8] {
        match self.protocol {
            Protocol::MemcacheMeta => b" v\r\n",
            _ => b"\r\n",
        }
    }

    fn set_verb(&self) -> &'static [u8] {
        match self.protocol {
            Protocol::MemcacheMeta => b"ms ",
            _ => b"set ",
        }
    }

    fn set_flags(&self) -> &'static [u8] {
        match self.protocol {
            // memcached 1.6 meta set: `ms <key> <datalen> <flags>*`.
            Protocol::MemcacheMeta => b" ",
            _ => b" 0 0 ",
        }
    }
}

/// The smallest free space offered to a read.
const READ_CHUNK_BYTES: usize = 16 << 10;

/// A connection's input: bytes read but not yet parsed, with a limit on how large it may grow.
#[derive(Debug)]
pub struct ReadBuffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes (from `start`) the frame at `start` needs before it is worth parsing again.
    need: usize,
    limit: usize,
}

impl ReadBuffer {
    /// A buffer that holds at most one reply of [`REPLY_BYTES_MAX`] plus its header.
    pub fn new() -> ReadBuffer {
        ReadBuffer::with_limit(REPLY_BYTES_MAX + 2 * LINE_BYTES_MAX)
    }

    pub fn with_limit(limit: usize) -> ReadBuffer {
        ReadBuffer {
            data: vec![0; READ_CHUNK_BYTES.min(limit)],
            start: 0,
            end: 0,
            need: 0,
            limit,
        }
    }

    /// Bytes held but not yet parsed.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Free space to read into: compacts, then grows (up to the limit) when the free space is short.
    pub fn spare(&mut self) -> Result<&mut [u8], String> {
        let wanted = READ_CHUNK_BYTES.max(self.need.saturating_sub(self.pending()));
        if self.data.len() - self.end < wanted && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < wanted {
            let size = (self.end + wanted).max(self.data.len() * 2).min(self.limit);
            if size <= self.end {
                return Err(format!("reply larger than {} bytes", self.limit));
            }
            self.data.resize(size, 0);
        }
        Ok(&mut self.data[self.end..])
    }

    /// Records that `bytes` were read into the space [`spare`](Self::spare) gave.
    pub fn filled(&mut self, bytes: usize) {
        self.end = (self.end + bytes).min(self.data.len());
    }

    /// The next complete reply, if one is buffered.
    pub fn next_reply(&mut self, family: Family) -> Result<Option<ReplyKind>, String> {
        if self.pending() == 0 || self.pending() < self.need {
            return Ok(None);
        }
        match parse_reply(family, &self.data[self.start..self.end]) {
            ReplyParse::Complete { consumed, kind } => {
                self.start += consumed;
                self.need = 0;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                Ok(Some(kind))
            }
            ReplyParse::Incomplete { bytes_needed_min } => {
                if bytes_needed_min > self.limit {
                    return Err(format!("reply larger than {} bytes", self.limit));
                }
                self.need = bytes_needed_min;
                Ok(None)
            }
            ReplyParse::Invalid(message) => Err(message),
        }
    }
}

impl Default for ReadBuffer {
    fn default() -> Self {
        ReadBuffer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn resp_samples() -> Vec<(&'static [u8], ReplyKind)> {
        vec![
            (b"+OK\r\n", ReplyKind::Other),
            (b"-ERR wrong\r\n", ReplyKind::Error),
            (b":42\r\n", ReplyKind::Other),
            (b"$-1\r\n", ReplyKind::Nil),
            (b"_\r\n", ReplyKind::Nil),
            (b"$0\r\n\r\n", ReplyKind::Value),
            (b"$5\r\nhe\r\no\r\n", ReplyKind::Value),
            (b"=7\r\ntxt:abc\r\n", ReplyKind::Value),
            (b"!5\r\nERR x\r\n", ReplyKind::Error),
            (b"*-1\r\n", ReplyKind::Nil),
            (b"*2\r\n$1\r\na\r\n:1\r\n", ReplyKind::Other),
            (
                b"%2\r\n+server\r\n+redis\r\n+modules\r\n*0\r\n",
                ReplyKind::Other,
            ),
            (b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n", ReplyKind::Push),
            (b"|1\r\n+ttl\r\n:3\r\n$2\r\nhi\r\n", ReplyKind::Value),
            (b",3.14\r\n", ReplyKind::Other),
            (b"#t\r\n", ReplyKind::Other),
        ]
    }

    fn memcache_samples() -> Vec<(&'static [u8], ReplyKind)> {
        vec![
            (b"END\r\n", ReplyKind::Nil),
            (b"VALUE k 0 3\r\nabc\r\nEND\r\n", ReplyKind::Value),
            (b"VALUE k 5 2 99\r\n\r\n\r\nEND\r\n", ReplyKind::Value),
            (
                b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n",
                ReplyKind::Value,
            ),
            (b"STORED\r\n", ReplyKind::Other),
            (b"NOT_STORED\r\n", ReplyKind::Other),
            (b"ERROR\r\n", ReplyKind::Error),
            (b"CLIENT_ERROR bad data chunk\r\n", ReplyKind::Error),
            (b"SERVER_ERROR out of memory\r\n", ReplyKind::Error),
            (b"EN\r\n", ReplyKind::Nil),
            (b"HD\r\n", ReplyKind::Other),
            (b"VA 3 f5\r\nabc\r\n", ReplyKind::Value),
            (b"VA 0\r\n\r\n", ReplyKind::Value),
        ]
    }

    fn samples(family: Family) -> Vec<(&'static [u8], ReplyKind)> {
        match family {
            Family::Resp => resp_samples(),
            Family::Memcache => memcache_samples(),
        }
    }

    /// Every prefix of a reply is incomplete, and says it needs no more than the whole reply.
    #[test]
    fn every_split_point_is_incomplete_with_an_honest_hint() {
        for family in [Family::Resp, Family::Memcache] {
            for (reply, kind) in samples(family) {
                for cut in 0..reply.len() {
                    match parse_reply(family, &reply[..cut]) {
                        ReplyParse::Incomplete { bytes_needed_min } => assert!(
                            bytes_needed_min > cut && bytes_needed_min <= reply.len(),
                            "{reply:?} cut at {cut}: hint {bytes_needed_min}"
                        ),
                        other => panic!("{reply:?} cut at {cut}: {other:?}"),
                    }
                }
                assert_eq!(
                    parse_reply(family, reply),
                    ReplyParse::Complete {
                        consumed: reply.len(),
                        kind
                    },
                    "{reply:?}"
                );
            }
        }
    }

    #[test]
    fn malformed_replies_are_invalid() {
        let resp: [&[u8]; 7] = [
            b"?x\r\n",
            b"$abc\r\n",
            b"$3\r\nabcd\r\n",
            b"$-5\r\n",
            b"*-3\r\n",
            b"+OK\n",
            b"$99999999999\r\n",
        ];
        for bad in resp {
            assert!(
                matches!(parse_reply(Family::Resp, bad), ReplyParse::Invalid(_)),
                "{bad:?}"
            );
        }
        let memcache: [&[u8]; 4] = [
            b"VALUE k 0 x\r\n",
            b"VALUE k 0 1\r\nab\r\nEND\r\n",
            b"VALUE k 0 1\r\na\r\nSTORED\r\n",
            b"VA x\r\n",
        ];
        for bad in memcache {
            assert!(
                matches!(parse_reply(Family::Memcache, bad), ReplyParse::Invalid(_)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn replies_over_the_limit_are_invalid() {
        let header = format!("${}\r\n", REPLY_BYTES_MAX + 1);
        assert!(matches!(
            parse_reply(Family::Resp, header.as_bytes()),
            ReplyParse::Invalid(_)
        ));
        let long_line = vec![b'+'; LINE_BYTES_MAX + 10];
        assert!(matches!(
            parse_reply(Family::Resp, &long_line),
            ReplyParse::Invalid(_)
        ));
        let deep = "*1\r\n".repeat(DEPTH_MAX + 2);
        assert!(matches!(
            parse_reply(Family::Resp, deep.as_bytes()),
            ReplyParse::Invalid(_)
        ));
    }

    #[test]
    fn read_buffer_refuses_a_reply_over_its_limit() {
        let mut buffer = ReadBuffer::with_limit(64);
        let reply = b"$100\r\n";
        buffer.spare().unwrap()[..reply.len()].copy_from_slice(reply);
        buffer.filled(reply.len());
        assert!(buffer.next_reply(Family::Resp).is_err());
    }

    #[test]
    fn encoder_writes_each_protocol() {
        let get = Request {
            op: Op::Get,
            key: 7,
            value_bytes: 0,
        };
        let set = Request {
            op: Op::Set,
            key: 42,
            value_bytes: 3,
        };
        let cases: [(Protocol, &[u8], &[u8]); 3] = [
            (
                Protocol::Resp2,
                b"*2\r\n$3\r\nGET\r\n$6\r\nk:0007\r\n",
                b"*3\r\n$3\r\nSET\r\n$6\r\nk:0042\r\n$3\r\nabc\r\n",
            ),
            (
                Protocol::MemcacheText,
                b"get k:0007\r\n",
                b"set k:0042 0 0 3\r\nabc\r\n",
            ),
            (
                Protocol::MemcacheMeta,
                b"mg k:0007 v\r\n",
                b"ms k:0042 3\r\nabc\r\n",
            ),
        ];
        for (protocol, want_get, want_set) in cases {
            let encoder = Encoder::new(protocol, "k:", 6, 16);
            let mut out = Vec::new();
            encoder.encode(&get, &mut out);
            assert_eq!(out, want_get, "{protocol:?}");
            out.clear();
            encoder.encode(&set, &mut out);
            assert_eq!(out, want_set, "{protocol:?}");
        }
    }

    /// The requests the encoder writes are what fallow's own request parsers read back.
    #[test]
    fn encoded_requests_parse_with_fallow_proto() {
        let encoder = Encoder::new(Protocol::Resp2, "key:", 0, 100);
        let mut out = Vec::new();
        for key in [0, 9, 10, 123_456] {
            encoder.encode(
                &Request {
                    op: Op::Set,
                    key,
                    value_bytes: 50,
                },
                &mut out,
            );
        }
        let mut args = Vec::new();
        let limits = fallow_proto::resp::RespLimits::default();
        let mut at = 0;
        let mut seen = 0;
        while at < out.len() {
            match fallow_proto::resp::parse_request(&out[at..], &limits, &mut args) {
                fallow_proto::resp::Parsed::Multibulk { consumed } => {
                    assert_eq!(args.len(), 3);
                    at += consumed;
                    seen += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, 4);
    }

    fn replies(family: Family) -> impl Strategy<Value = Vec<usize>> {
        let count = samples(family).len();
        proptest::collection::vec(0..count, 1..40)
    }

    fn feed_in_chunks(family: Family, picks: &[usize], chunks: &[usize]) {
        let table = samples(family);
        let stream: Vec<u8> = picks.iter().flat_map(|&i| table[i].0.to_vec()).collect();
        let want: Vec<ReplyKind> = picks.iter().map(|&i| table[i].1).collect();
        let mut buffer = ReadBuffer::with_limit(1 << 16);
        let mut got = Vec::new();
        let (mut at, mut chunk) = (0, 0);
        while at < stream.len() {
            let size = chunks[chunk % chunks.len()].min(stream.len() - at);
            chunk += 1;
            let spare = buffer.spare().unwrap();
            let size = size.min(spare.len());
            spare[..size].copy_from_slice(&stream[at..at + size]);
            buffer.filled(size);
            at += size;
            while let Some(kind) = buffer.next_reply(family).unwrap() {
                got.push(kind);
            }
        }
        assert_eq!(got, want);
        assert_eq!(buffer.pending(), 0);
    }

    proptest! {
        #[test]
        fn resp_replies_survive_any_split(picks in replies(Family::Resp),
                                          chunks in proptest::collection::vec(1usize..50, 1..10)) {
            feed_in_chunks(Family::Resp, &picks, &chunks);
        }

        #[test]
        fn memcache_replies_survive_any_split(picks in replies(Family::Memcache),
                                              chunks in proptest::collection::vec(1usize..50, 1..10)) {
            feed_in_chunks(Family::Memcache, &picks, &chunks);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            for family in [Family::Resp, Family::Memcache] {
                if let ReplyParse::Complete { consumed, .. } = parse_reply(family, &bytes) {
                    prop_assert!(consumed > 0 && consumed <= bytes.len());
                }
            }
        }
    }
}
