//! memcached codec: shared types, limits, errors and protocol detection
//! (binary when the first byte is 0x80, otherwise text/meta). Pure: no I/O.

use bytes::Bytes;

pub mod binary;
pub mod meta;
pub mod text;

pub use binary::{
    binary_is_quiet, binary_should_send, encode_binary_response, BinaryOpcode, BinaryRequest,
    BinaryStatus,
};
pub use meta::{
    encode_meta_response, MetaArithMode, MetaFlag, MetaFlags, MetaItemInfo, MetaStatus,
};
pub use text::{encode_request, TextReply};

/// First byte of a binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;
/// First byte of a binary-protocol response.
pub const BINARY_RESPONSE_MAGIC: u8 = 0x81;

/// Size limits enforced by the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McLimits {
    /// Longest key in bytes (memcached: 250).
    pub key_len_max: usize,
    /// Largest value in bytes (memcached default item size: 1 MiB).
    pub value_len_max: usize,
    /// Longest command line (memcached: 2048), excluding multi-key retrievals.
    pub line_len_max: usize,
    /// Longest get/gets/gat/gats line: memcached takes any number of keys in one line, so the line is
    /// bounded by bytes only (see [`MULTIGET_LINE_BYTES_MAX`]).
    pub multiget_line_bytes_max: usize,
}

/// Default bound on one get/gets/gat/gats line: 2 MiB holds 8,000 keys of the longest length (250 bytes)
/// or 100,000+ typical short keys, and bounds what one incomplete line can hold in memory.
pub const MULTIGET_LINE_BYTES_MAX: usize = 2 << 20;

impl Default for McLimits {
    fn default() -> Self {
        McLimits {
            key_len_max: 250,
            value_len_max: 1024 * 1024,
            line_len_max: 2048,
            multiget_line_bytes_max: MULTIGET_LINE_BYTES_MAX,
        }
    }
}

/// Result of one [`parse`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // returned by value once per request; boxing buys nothing
pub enum Parsed {
    /// More bytes are needed; nothing was consumed.
    Incomplete,
    /// A complete request occupying `buf[..consumed]` (`consumed > 0`).
    Request { request: McRequest, consumed: usize },
    /// A malformed request. Reply with [`McError::encode`], then drop
    /// `consumed` bytes. `consumed` may exceed `buf.len()` when memcached
    /// "swallows" an oversized value: the server must then also discard the
    /// remaining `consumed - buf.len()` bytes as they arrive.
    /// `None` means the stream cannot be resynchronised: reply and close.
    Error {
        error: McError,
        consumed: Option<usize>,
    },
}

/// Classic storage command flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// One decoded request (text, meta or binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McRequest {
    /// get/gets (`touch_exptime` None) and gat/gats (`Some(exptime)`).
    /// gat/gats may carry zero keys (memcached answers `END`).
    Get {
        keys: Vec<Bytes>,
        return_cas: bool,
        touch_exptime: Option<i64>,
    },
    /// set/add/replace/append/prepend/cas (`cas_unique` is 0 unless `Cas`).
    Store {
        mode: StoreMode,
        key: Bytes,
        flags: u32,
        exptime: i64,
        value: Bytes,
        cas_unique: u64,
        noreply: bool,
    },
    Delete {
        key: Bytes,
        noreply: bool,
    },
    /// incr (`incr == true`) / decr.
    Arith {
        key: Bytes,
        delta: u64,
        incr: bool,
        noreply: bool,
    },
    Touch {
        key: Bytes,
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay_s: i64,
        noreply: bool,
    },
    /// `stats [group [args...]]`; unknown groups are the server's call
    /// (memcached answers `ERROR`).
    Stats {
        group: Option<String>,
        args: Vec<String>,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `mg`; `key` is already base64-decoded when flag `b` was given.
    MetaGet {
        key: Bytes,
        flags: MetaFlags,
    },
    /// `ms`; `value` excludes the trailing CRLF.
    MetaSet {
        key: Bytes,
        value: Bytes,
        flags: MetaFlags,
    },
    MetaDelete {
        key: Bytes,
        flags: MetaFlags,
    },
    MetaArith {
        key: Bytes,
        flags: MetaFlags,
    },
    MetaNoop,
    /// `me <key> [b]`; `key` is decoded when `base64`.
    MetaDebug {
        key: Bytes,
        base64: bool,
    },
    Binary(BinaryRequest),
}

/// A protocol error and the reply memcached sends for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McError {
    /// `CLIENT_ERROR <msg>\r\n`
    ClientError(String),
    /// `ERROR\r\n` (unknown command / wrong token count)
    Error,
    /// `SERVER_ERROR <msg>\r\n`
    ServerError(String),
    /// Binary protocol error response for the request's opcode/opaque.
    Binary {
        status: BinaryStatus,
        opcode: u8,
        opaque: u32,
    },
}

impl McError {
    pub(crate) fn client(msg: &str) -> McError {
        McError::ClientError(msg.to_string())
    }

    /// Write the reply for this error.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            McError::ClientError(m) => {
                out.extend_from_slice(b"CLIENT_ERROR ");
                out.extend_from_slice(m.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            McError::Error => out.extend_from_slice(b"ERROR\r\n"),
            McError::ServerError(m) => {
                out.extend_from_slice(b"SERVER_ERROR ");
                out.extend_from_slice(m.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            McError::Binary {
                status,
                opcode,
                opaque,
            } => {
                let msg = status.message().as_bytes();
                encode_binary_response(out, *opcode, *status as u16, *opaque, 0, &[], &[], msg);
            }
        }
    }
}

/// Parse one request from the front of `buf`: binary when `buf[0] == 0x80`,
/// otherwise the text protocol (classic and meta commands).
pub fn parse(buf: &[u8], limits: &McLimits) -> Parsed {
    match buf.first() {
        None => Parsed::Incomplete,
        Some(&BINARY_REQUEST_MAGIC) => binary::parse_binary(buf, limits),
        Some(_) => text::parse_text(buf, limits),
    }
}

/// Standard base64 (RFC 4648, padded), as used by the meta `b` flag.
pub fn base64_encode(input: &[u8], out: &mut Vec<u8>) {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for c in input.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63]);
        out.push(T[(n >> 12) as usize & 63]);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63]
        } else {
            b'='
        });
    }
}

/// Decode padded standard base64; `None` when malformed.
pub fn base64_decode(input: &[u8]) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if input.is_empty() || !input.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let chunks = input.len() / 4;
    for (i, c) in input.chunks(4).enumerate() {
        let last = i + 1 == chunks;
        let pad = c.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &b in &c[..4 - pad] {
            n = (n << 6) | val(b)?;
        }
        n <<= 6 * pad as u32;
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for s in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            b"\x00\xff",
        ] {
            let mut e = Vec::new();
            base64_encode(s, &mut e);
            if s.is_empty() {
                assert!(base64_decode(&e).is_none());
            } else {
                assert_eq!(base64_decode(&e).unwrap(), s);
            }
        }
        assert_eq!(base64_decode(b"Zm9v").unwrap(), b"foo");
        assert!(base64_decode(b"!!!").is_none());
        assert!(base64_decode(b"Zg==Zg==").is_none());
        assert!(base64_decode(b"k").is_none());
    }

    #[test]
    fn dispatch_by_first_byte() {
        let l = McLimits::default();
        assert_eq!(parse(b"", &l), Parsed::Incomplete);
        assert_eq!(parse(&[0x80, 0, 0], &l), Parsed::Incomplete);
        assert!(matches!(
            parse(b"version\r\n", &l),
            Parsed::Request {
                request: McRequest::Version,
                consumed: 9
            }
        ));
    }

    #[test]
    fn error_encoding() {
        let mut o = Vec::new();
        McError::client("bad data chunk").encode(&mut o);
        McError::Error.encode(&mut o);
        McError::ServerError("object too large for cache".into()).encode(&mut o);
        assert_eq!(
            o,
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\nSERVER_ERROR object too large for cache\r\n"
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        use proptest::sample::subsequence;

        fn key() -> impl Strategy<Value = Bytes> {
            "[a-zA-Z0-9_:.-]{1,40}".prop_map(|s| Bytes::from(s.into_bytes()))
        }

        fn value() -> impl Strategy<Value = Bytes> {
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
        }

        fn exptime() -> impl Strategy<Value = i64> {
            prop_oneof![Just(0i64), -100i64..100, Just(i64::from(i32::MAX))]
        }

        fn classic() -> impl Strategy<Value = McRequest> {
            let mode = prop_oneof![
                Just(StoreMode::Set),
                Just(StoreMode::Add),
                Just(StoreMode::Replace),
                Just(StoreMode::Append),
                Just(StoreMode::Prepend),
                Just(StoreMode::Cas),
            ];
            prop_oneof![
                (
                    proptest::collection::vec(key(), 1..5),
                    any::<bool>(),
                    proptest::option::of(exptime())
                )
                    .prop_map(|(keys, return_cas, touch_exptime)| McRequest::Get {
                        keys,
                        return_cas,
                        touch_exptime
                    }),
                (
                    mode,
                    key(),
                    any::<u32>(),
                    exptime(),
                    value(),
                    any::<u64>(),
                    any::<bool>()
                )
                    .prop_map(
                        |(mode, key, flags, exptime, value, cas, noreply)| {
                            McRequest::Store {
                                mode,
                                key,
                                flags,
                                exptime,
                                value,
                                cas_unique: if mode == StoreMode::Cas { cas } else { 0 },
                                noreply,
                            }
                        }
                    ),
                (key(), any::<bool>())
                    .prop_map(|(key, noreply)| McRequest::Delete { key, noreply }),
                (key(), any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
                    |(key, delta, incr, noreply)| McRequest::Arith {
                        key,
                        delta,
                        incr,
                        noreply
                    }
                ),
                (key(), exptime(), any::<bool>()).prop_map(|(key, exptime, noreply)| {
                    McRequest::Touch {
                        key,
                        exptime,
                        noreply,
                    }
                }),
                (exptime(), any::<bool>())
                    .prop_map(|(delay_s, noreply)| McRequest::FlushAll { delay_s, noreply }),
                (
                    proptest::option::of("[a-z]{1,8}"),
                    proptest::collection::vec("[a-z0-9]{1,5}", 0..3)
                )
                    .prop_map(|(group, args)| McRequest::Stats {
                        args: if group.is_some() { args } else { vec![] },
                        group,
                    }),
                Just(McRequest::Version),
                Just(McRequest::Quit),
                Just(McRequest::MetaNoop),
                (any::<u32>(), any::<bool>())
                    .prop_map(|(level, noreply)| McRequest::Verbosity { level, noreply }),
            ]
        }

        const COMMON: &[&str] = &[
            "b", "c", "f", "h", "k", "l", "q", "s", "t", "u", "v", "I", "O12ab", "N30", "R5",
            "T-1", "C99", "E7", "F5", "J3", "D2", "Pproxy",
        ];

        fn meta() -> impl Strategy<Value = McRequest> {
            let cmd = prop_oneof![Just("mg"), Just("ms"), Just("md"), Just("ma"), Just("me")];
            (
                cmd,
                subsequence(COMMON, 0..COMMON.len()),
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 1..40),
                key(),
                value(),
            )
                .prop_map(|(cmd, mut toks, with_mode, bin_key, txt_key, value)| {
                    if with_mode && cmd == "ms" {
                        toks.push("MA");
                    }
                    if with_mode && cmd == "ma" {
                        toks.push("M-");
                    }
                    let raw: Vec<&[u8]> = toks.iter().map(|t| t.as_bytes()).collect();
                    let flags = MetaFlags::parse(cmd.as_bytes(), &raw).unwrap();
                    let key = if flags.base64 {
                        Bytes::from(bin_key)
                    } else {
                        txt_key
                    };
                    match cmd {
                        "mg" => McRequest::MetaGet { key, flags },
                        "ms" => McRequest::MetaSet { key, value, flags },
                        "md" => McRequest::MetaDelete { key, flags },
                        "ma" => McRequest::MetaArith { key, flags },
                        _ => McRequest::MetaDebug {
                            key,
                            base64: flags.base64,
                        },
                    }
                })
        }

        fn binary() -> impl Strategy<Value = McRequest> {
            let ops: Vec<u8> = (0u8..=0x30)
                .filter(|&o| BinaryOpcode::from_u8(o).is_some())
                .collect();
            (
                proptest::sample::select(ops),
                key(),
                value(),
                any::<u32>(),
                any::<u64>(),
                proptest::collection::vec(any::<u8>(), 20),
            )
                .prop_map(|(opcode, key, value, opaque, cas, ext)| {
                    use BinaryOpcode::*;
                    let none = Bytes::new();
                    let ext = Bytes::from(ext);
                    let (extras, key, value) = match BinaryOpcode::from_u8(opcode).unwrap().base() {
                        Get | GetK | Delete => (none.clone(), key, none),
                        Set | Add | Replace => (ext.slice(..8), key, value),
                        Append | Prepend => (none.clone(), key, value),
                        Increment | Decrement => (ext, key, none),
                        Quit | Noop | Version => (none.clone(), none.clone(), none),
                        Flush | Verbosity => (ext.slice(..4), none.clone(), none),
                        Stat => (none.clone(), key, none),
                        SaslListMechs => (none.clone(), none.clone(), none),
                        SaslAuth | SaslStep => (none.clone(), key, value),
                        _ => (ext.slice(..4), key, none),
                    };
                    McRequest::Binary(BinaryRequest {
                        opcode,
                        datatype: 0,
                        vbucket: 0,
                        opaque,
                        cas,
                        extras,
                        key,
                        value,
                    })
                })
        }

        fn request() -> impl Strategy<Value = McRequest> {
            prop_oneof![classic(), meta(), binary()]
        }

        /// Drive `parse` over a whole buffer; checks progress invariants.
        fn drain(buf: &[u8]) {
            let l = McLimits::default();
            let mut off = 0;
            while off < buf.len() {
                match parse(&buf[off..], &l) {
                    Parsed::Incomplete => break,
                    Parsed::Request { consumed, .. } => {
                        assert!(consumed > 0 && consumed <= buf.len() - off);
                        off += consumed;
                    }
                    Parsed::Error {
                        consumed: Some(c), ..
                    } => {
                        assert!(c > 0);
                        off += c;
                    }
                    Parsed::Error { consumed: None, .. } => break,
                }
            }
        }

        proptest! {
            #[test]
            fn round_trip_and_split(req in request()) {
                let l = McLimits::default();
                let mut buf = Vec::new();
                encode_request(&req, &mut buf);
                for i in 0..buf.len() {
                    prop_assert_eq!(parse(&buf[..i], &l), Parsed::Incomplete, "prefix {}", i);
                }
                prop_assert_eq!(
                    parse(&buf, &l),
                    Parsed::Request { request: req, consumed: buf.len() }
                );
            }

            #[test]
            fn pipelined_pair(a in request(), b in request()) {
                let l = McLimits::default();
                let mut buf = Vec::new();
                encode_request(&a, &mut buf);
                let n = buf.len();
                encode_request(&b, &mut buf);
                prop_assert_eq!(parse(&buf, &l), Parsed::Request { request: a, consumed: n });
                prop_assert_eq!(
                    parse(&buf[n..], &l),
                    Parsed::Request { request: b, consumed: buf.len() - n }
                );
            }

            #[test]
            fn garbage_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..512)) {
                drain(&buf);
            }

            #[test]
            fn mutated_frames_never_panic(
                req in request(),
                muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
                cut in any::<usize>(),
            ) {
                let mut buf = Vec::new();
                encode_request(&req, &mut buf);
                for (i, b) in muts {
                    let i = i % buf.len();
                    buf[i] = b;
                }
                buf.truncate(cut % (buf.len() + 1));
                drain(&buf);
            }
        }
    }
}

/// Parsing helpers shared by the codec tests of the text and meta protocols.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{parse, McError, McLimits, McRequest, Parsed};

    pub fn p(s: &[u8]) -> Parsed {
        parse(s, &McLimits::default())
    }

    /// Parses one complete request that must take the whole input.
    pub fn req(s: &[u8]) -> McRequest {
        match p(s) {
            Parsed::Request { request, consumed } => {
                assert_eq!(consumed, s.len(), "{:?}", String::from_utf8_lossy(s));
                request
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
        }
    }

    /// Asserts that a storage line announcing one byte more than the value limit is refused with
    /// SERVER_ERROR and the announced value is swallowed. `line` has a `{}` where the length goes.
    pub fn assert_too_large(line: &str) {
        let limits = McLimits::default();
        let request = line.replace("{}", &(limits.value_len_max + 1).to_string());
        assert_eq!(
            p(request.as_bytes()),
            Parsed::Error {
                error: McError::ServerError("object too large for cache".into()),
                consumed: Some(request.len() + limits.value_len_max + 3)
            }
        );
    }

    /// Asserts a CLIENT_ERROR with this message that consumes `consumed` bytes.
    pub fn client_err(s: &[u8], msg: &str, consumed: usize) {
        assert_eq!(
            p(s),
            Parsed::Error {
                error: McError::client(msg),
                consumed: Some(consumed)
            },
            "{:?}",
            String::from_utf8_lossy(s)
        );
    }
}
