//! The checks the fuzz targets in `fuzz/` run (parse + invariants), kept here so that the targets are
//! one-line calls and the replay of the kept corpus (`cargo test --lib fuzz_replay`) runs the very same
//! code on stable. Each `check_*` panics when an invariant breaks; libFuzzer reports the panic as a crash.
//!
//! The invariants go beyond "never panics": every parse consumes within the buffer or waits, feeding the
//! bytes in pieces (as reads deliver them) gives the same requests as feeding them at once, and every
//! request re-encoded parses back to itself.
use crate::memcache::{self, McError, McLimits, McRequest, MetaFlags, MetaItemInfo, MetaStatus};
use crate::resp::{self, Parsed, RespLimits};
use std::ops::Range;
use std::path::PathBuf;

/// Where the kept corpus of a fuzz target lives (`fuzz/corpus/<target>` at the repository root).
pub fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus")).join(target)
}

/// Runs `check` on every file of a target's kept corpus; returns how many there were. Panics when the
/// corpus is missing or empty, so that a moved corpus fails the replay test instead of passing it.
pub fn replay_corpus(target: &str, check: fn(&[u8])) -> usize {
    let dir = corpus_dir(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("fuzz corpus {} unreadable: {error}", dir.display()));
    let mut replayed = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        if !path.is_file() {
            continue;
        }
        let data = std::fs::read(&path).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "corpus input {} fails", path.display());
        replayed += 1;
    }
    assert!(replayed > 0, "fuzz corpus {} is empty", dir.display());
    replayed
}

/// Deterministic piece sizes (1..=32 bytes) derived from the input, so a crash reproduces.
struct Pieces {
    state: u64,
}

impl Pieces {
    fn new(data: &[u8]) -> Pieces {
        // FNV-1a of the input seeds a xorshift.
        let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        Pieces { state: hash | 1 }
    }

    fn next_len(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % 32) as usize + 1
    }
}

/// Splits `data` into the chunks a connection would read: all at once, or in small pieces.
fn chunks(data: &[u8], in_pieces: bool) -> Vec<&[u8]> {
    if !in_pieces {
        return vec![data];
    }
    let mut pieces = Pieces::new(data);
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (head, tail) = rest.split_at(pieces.next_len().min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

// ---------------------------------------------------------------------------------------------------
// RESP requests

/// What the server does with one parse result; errors compare equal whatever their text, because a
/// header line found too long before its CRLF arrives and one found invalid after are both fatal.
#[derive(Debug, PartialEq, Eq)]
enum RespEvent {
    Request(Vec<Vec<u8>>),
    Empty,
    Error,
}

fn small_resp_limits() -> RespLimits {
    RespLimits {
        multibulk_len_max: 8,
        bulk_len_max: 64,
        inline_len_max: 64,
    }
}

/// `parse_request` as the server's `process_input` drives it, over `data` delivered all at once or in
/// pieces: the events in order, and how many bytes were left unparsed at the end.
fn resp_events(data: &[u8], limits: &RespLimits, in_pieces: bool) -> (Vec<RespEvent>, usize) {
    let mut input: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    let mut ranges: Vec<Range<usize>> = Vec::new();
    // The most bytes any Incomplete asked for the request now at the front of the input.
    let mut needed = 0;
    for chunk in chunks(data, in_pieces) {
        input.extend_from_slice(chunk);
        let mut start = 0;
        while start < input.len() {
            let pending = &input[start..];
            let parsed = resp::parse_request(pending, limits, &mut ranges);
            let consumed = match parsed {
                Parsed::Incomplete { bytes_needed_min } => {
                    assert!(
                        bytes_needed_min == 0 || bytes_needed_min > pending.len(),
                        "Incomplete asks for {bytes_needed_min} bytes but {} are there",
                        pending.len()
                    );
                    needed = needed.max(bytes_needed_min);
                    break;
                }
                Parsed::Error(message) => {
                    assert!(message.starts_with("Protocol error: "), "{message}");
                    events.push(RespEvent::Error);
                    return (events, 0);
                }
                Parsed::Empty { consumed } => {
                    assert!(ranges.is_empty());
                    events.push(RespEvent::Empty);
                    consumed
                }
                Parsed::Inline { consumed, args } => {
                    assert!(ranges.is_empty() && !args.is_empty());
                    assert_round_trip(&args);
                    events.push(RespEvent::Request(args));
                    consumed
                }
                Parsed::Multibulk { consumed } => {
                    let args = checked_args(pending, &ranges, consumed, limits);
                    assert_round_trip(&args);
                    events.push(RespEvent::Request(args));
                    consumed
                }
            };
            assert!(
                consumed > 0 && consumed <= pending.len(),
                "consumed {consumed} of {}",
                pending.len()
            );
            assert!(
                needed <= consumed,
                "asked for {needed} bytes of a {consumed}-byte request"
            );
            needed = 0;
            start += consumed;
        }
        input.drain(..start);
    }
    (events, input.len())
}

/// The arguments of a multibulk request, checking their ranges lie in order inside the request.
fn checked_args(
    pending: &[u8],
    ranges: &[Range<usize>],
    consumed: usize,
    limits: &RespLimits,
) -> Vec<Vec<u8>> {
    assert!(!ranges.is_empty() && ranges.len() <= limits.multibulk_len_max);
    let mut previous_end = 0;
    for range in ranges {
        assert!(previous_end <= range.start && range.start <= range.end && range.end <= consumed);
        assert!(range.len() <= limits.bulk_len_max);
        previous_end = range.end;
    }
    ranges
        .iter()
        .map(|range| pending[range.clone()].to_vec())
        .collect()
}

/// A request's arguments encoded as a client would send them parse back to the same arguments.
fn assert_round_trip(args: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let mut frame = Vec::new();
    resp::encode_request(&refs, &mut frame);
    let mut ranges = Vec::new();
    let parsed = resp::parse_request(&frame, &RespLimits::default(), &mut ranges);
    assert_eq!(
        parsed,
        Parsed::Multibulk {
            consumed: frame.len()
        }
    );
    let decoded: Vec<&[u8]> = ranges.iter().map(|range| &frame[range.clone()]).collect();
    assert_eq!(decoded, refs);
}

/// Fuzz target `resp_request`: RESP requests (multibulk, inline, pipelines) under the default and small
/// limits, read at once and in pieces.
pub fn check_resp_request(data: &[u8]) {
    for limits in [RespLimits::default(), small_resp_limits()] {
        let whole = resp_events(data, &limits, false);
        let pieces = resp_events(data, &limits, true);
        assert_eq!(whole, pieces, "reading in pieces changed the requests");
    }
}

// ---------------------------------------------------------------------------------------------------
// memcached requests

/// What the server does with one parse result.
#[derive(Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a test-only record, like `memcache::Parsed`
enum McEvent {
    Request(McRequest),
    Error(McError, Option<usize>),
}

fn small_mc_limits() -> McLimits {
    McLimits {
        key_len_max: 16,
        value_len_max: 64,
        line_len_max: 64,
        multiget_line_bytes_max: 132,
    }
}

/// The most bytes a request that is still incomplete can legitimately take under `limits` (a multi-get
/// line and a value, or a binary header, the largest key and extras, and a value). The server closes a
/// connection whose incomplete request is over its own bound, which must not be below this.
pub fn mc_partial_request_bytes_max(limits: &McLimits) -> usize {
    let multiget_line = limits.line_len_max.max(limits.multiget_line_bytes_max);
    let text = multiget_line + 1 + limits.value_len_max + 2;
    let binary = memcache::binary::HEADER_LEN + usize::from(u16::MAX) + 255 + limits.value_len_max;
    text.max(binary)
}

fn is_too_large(error: &McError) -> bool {
    match error {
        McError::ServerError(message) => message == "object too large for cache",
        McError::Binary { status, .. } => *status == memcache::BinaryStatus::ValueTooLarge,
        _ => false,
    }
}

/// `memcache::parse` as the server's `process_input` drives it (an oversized value is swallowed as it
/// arrives, an unrecoverable error closes), over `data` delivered at once or in pieces.
fn mc_events(data: &[u8], limits: &McLimits, in_pieces: bool) -> Vec<McEvent> {
    let mut input: Vec<u8> = Vec::new();
    let mut skip_bytes = 0usize;
    let mut events = Vec::new();
    for chunk in chunks(data, in_pieces) {
        input.extend_from_slice(chunk);
        let discard = skip_bytes.min(input.len());
        input.drain(..discard);
        skip_bytes -= discard;
        let mut start = 0;
        while skip_bytes == 0 && start < input.len() {
            let pending = &input[start..];
            match memcache::parse(pending, limits) {
                memcache::Parsed::Incomplete => {
                    assert!(
                        pending.len() <= mc_partial_request_bytes_max(limits),
                        "an incomplete request of {} bytes",
                        pending.len()
                    );
                    break;
                }
                memcache::Parsed::Request { request, consumed } => {
                    assert!(consumed > 0 && consumed <= pending.len());
                    assert_mc_round_trip(&request, limits);
                    events.push(McEvent::Request(request));
                    start += consumed;
                }
                memcache::Parsed::Error { error, consumed } => {
                    let mut reply = Vec::new();
                    error.encode(&mut reply);
                    assert!(reply.ends_with(b"\r\n") || matches!(error, McError::Binary { .. }));
                    events.push(McEvent::Error(error.clone(), consumed));
                    let Some(consumed) = consumed else {
                        return events;
                    };
                    assert!(consumed > 0);
                    assert!(
                        consumed <= pending.len() || is_too_large(&error),
                        "{error:?} swallows past the input"
                    );
                    skip_bytes = consumed.saturating_sub(pending.len());
                    start += consumed.min(pending.len());
                }
            }
        }
        input.drain(..start);
    }
    events
}

/// A request re-encoded as a client would send it parses back to itself. `stats` is left out: its
/// arguments are read as lossy UTF-8, so an invalid byte comes back as three. The encoder ends lines with
/// CRLF where the request may have ended with LF alone, so the line may take one byte more.
fn assert_mc_round_trip(request: &McRequest, limits: &McLimits) {
    if matches!(request, McRequest::Stats { .. }) {
        return;
    }
    let mut encoded = Vec::new();
    memcache::encode_request(request, &mut encoded);
    let limits = McLimits {
        line_len_max: limits.line_len_max + 1,
        ..limits.clone()
    };
    assert_eq!(
        memcache::parse(&encoded, &limits),
        memcache::Parsed::Request {
            request: request.clone(),
            consumed: encoded.len()
        },
        "re-encoded as {:?}",
        String::from_utf8_lossy(&encoded)
    );
}

/// The events of `data` under both limits, at once and in pieces (which must agree).
fn check_mc_stream(data: &[u8]) -> Vec<McEvent> {
    let mut all = Vec::new();
    for limits in [McLimits::default(), small_mc_limits()] {
        let whole = mc_events(data, &limits, false);
        let pieces = mc_events(data, &limits, true);
        assert_eq!(whole, pieces, "reading in pieces changed the requests");
        all.extend(whole);
    }
    all
}

/// Fuzz target `memcache_text`: classic text commands (storage with values, multi-get, arithmetic...).
pub fn check_memcache_text(data: &[u8]) {
    check_mc_stream(data);
}

/// Fuzz target `memcache_meta`: meta commands; each parsed one is also answered with every status, and
/// the reply, which echoes the client's opaque and key, must stay one header line (+ the value).
pub fn check_memcache_meta(data: &[u8]) {
    for event in check_mc_stream(data) {
        let (key, flags) = match &event {
            McEvent::Request(McRequest::MetaGet { key, flags })
            | McEvent::Request(McRequest::MetaSet { key, flags, .. })
            | McEvent::Request(McRequest::MetaDelete { key, flags })
            | McEvent::Request(McRequest::MetaArith { key, flags }) => (key, flags),
            _ => continue,
        };
        assert_meta_replies(key, flags);
    }
}

fn assert_meta_replies(key: &[u8], flags: &MetaFlags) {
    let info = MetaItemInfo {
        cas: Some(u64::MAX),
        client_flags: Some(u32::MAX),
        ttl: Some(-1),
        size: Some(3),
        hit: Some(true),
        last_access: Some(7),
    };
    for status in [
        MetaStatus::Hd,
        MetaStatus::Va,
        MetaStatus::En,
        MetaStatus::Nf,
        MetaStatus::Ns,
        MetaStatus::Ex,
    ] {
        let mut reply = Vec::new();
        memcache::encode_meta_response(&mut reply, status, key, flags, &info, Some(b"abc"));
        let header_end = memchr::memchr(b'\n', &reply).expect("a reply line");
        assert_eq!(&reply[header_end - 1..=header_end], b"\r\n");
        let rest = &reply[header_end + 1..];
        let expected: &[u8] = if status == MetaStatus::Va {
            b"abc\r\n"
        } else {
            b""
        };
        assert_eq!(rest, expected, "the reply runs past its header line");
    }
}

/// Fuzz target `memcache_binary`: binary frames (the input's first byte is made the request magic, so
/// the fuzzer starts inside the binary protocol); each request's echo reply must frame what it echoes.
pub fn check_memcache_binary(data: &[u8]) {
    let mut framed = data.to_vec();
    if let Some(first) = framed.first_mut() {
        *first = memcache::BINARY_REQUEST_MAGIC;
    }
    for event in check_mc_stream(&framed) {
        let McEvent::Request(McRequest::Binary(request)) = event else {
            continue;
        };
        let mut reply = Vec::new();
        memcache::encode_binary_response(
            &mut reply,
            request.opcode,
            0,
            request.opaque,
            request.cas,
            &request.extras,
            &request.key,
            &request.value,
        );
        let body = u32::from_be_bytes([reply[8], reply[9], reply[10], reply[11]]) as usize;
        assert_eq!(reply[0], memcache::BINARY_RESPONSE_MAGIC);
        assert_eq!(reply.len(), memcache::binary::HEADER_LEN + body);
    }
}
