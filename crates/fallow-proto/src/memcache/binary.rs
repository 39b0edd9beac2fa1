//! memcached binary protocol: 24-byte header framing, per-opcode validation,
//! typed extras accessors, response packet encoder and the quiet-opcode rule.

use bytes::Bytes;

use super::{McError, McLimits, McRequest, Parsed, BINARY_REQUEST_MAGIC, BINARY_RESPONSE_MAGIC};

/// Binary header length.
pub const HEADER_LEN: usize = 24;

/// Binary opcodes (memcached binary protocol spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BinaryOpcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Verbosity = 0x1b,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    /// SASL: list the mechanisms the server offers.
    SaslListMechs = 0x20,
    /// SASL: authenticate (key: mechanism, value: the mechanism's first message).
    SaslAuth = 0x21,
    /// SASL: a further step of a multi-step mechanism.
    SaslStep = 0x22,
    GatK = 0x23,
    GatKQ = 0x24,
}

impl BinaryOpcode {
    pub fn from_u8(b: u8) -> Option<BinaryOpcode> {
        use BinaryOpcode::*;
        Some(match b {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1b => Verbosity,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x20 => SaslListMechs,
            0x21 => SaslAuth,
            0x22 => SaslStep,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }

    /// The non-quiet opcode of the same command (`GetQ` -> `Get`).
    pub fn base(self) -> BinaryOpcode {
        use BinaryOpcode::*;
        match self {
            GetQ => Get,
            GetKQ => GetK,
            SetQ => Set,
            AddQ => Add,
            ReplaceQ => Replace,
            DeleteQ => Delete,
            IncrementQ => Increment,
            DecrementQ => Decrement,
            QuitQ => Quit,
            FlushQ => Flush,
            AppendQ => Append,
            PrependQ => Prepend,
            GatQ => Gat,
            GatKQ => GatK,
            o => o,
        }
    }
}

/// Binary response status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum BinaryStatus {
    NoError = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    ValueTooLarge = 0x03,
    InvalidArguments = 0x04,
    ItemNotStored = 0x05,
    NonNumeric = 0x06,
    /// SASL authentication failed, or the request needs an authenticated connection.
    AuthError = 0x20,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
    /// The request could not run now; the client may retry it.
    TemporaryFailure = 0x86,
}

impl BinaryStatus {
    /// The error text memcached puts in the body of an error response.
    pub fn message(self) -> &'static str {
        match self {
            BinaryStatus::NoError => "",
            BinaryStatus::KeyNotFound => "Not found",
            BinaryStatus::KeyExists => "Data exists for key.",
            BinaryStatus::ValueTooLarge => "Too large.",
            BinaryStatus::InvalidArguments => "Invalid arguments",
            BinaryStatus::ItemNotStored => "Not stored.",
            BinaryStatus::NonNumeric => "Non-numeric server-side value for incr or decr",
            BinaryStatus::AuthError => "Auth failure.",
            BinaryStatus::UnknownCommand => "Unknown command",
            BinaryStatus::OutOfMemory => "Out of memory",
            BinaryStatus::TemporaryFailure => "Temporary failure",
        }
    }
}

/// Quiet opcodes: GetQ, GetKQ, SetQ, AddQ, ReplaceQ, DeleteQ, IncrementQ,
/// DecrementQ, QuitQ, FlushQ, AppendQ, PrependQ, GatQ, GatKQ.
///
/// Rule: a quiet *get* (GetQ/GetKQ/GatQ/GatKQ) suppresses only the
/// "key not found" response (hits are sent); every other quiet opcode
/// suppresses only the success response. Errors are always sent. QuitQ
/// closes without replying. See [`binary_should_send`].
pub fn binary_is_quiet(opcode: u8) -> bool {
    matches!(opcode, 0x09 | 0x0d | 0x11..=0x1a | 0x1e | 0x24)
}

/// Whether a response with `status` must be sent for `opcode`, applying the
/// quiet rule of [`binary_is_quiet`].
pub fn binary_should_send(opcode: u8, status: BinaryStatus) -> bool {
    if !binary_is_quiet(opcode) {
        return true;
    }
    let quiet_get = matches!(opcode, 0x09 | 0x0d | 0x1e | 0x24);
    if quiet_get {
        status != BinaryStatus::KeyNotFound
    } else {
        status != BinaryStatus::NoError
    }
}

/// A framed binary request (header fields + extras + key + value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryRequest {
    /// Raw opcode; validated to be a known [`BinaryOpcode`].
    pub opcode: u8,
    pub datatype: u8,
    pub vbucket: u16,
    pub opaque: u32,
    pub cas: u64,
    pub extras: Bytes,
    pub key: Bytes,
    pub value: Bytes,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl BinaryRequest {
    pub fn op(&self) -> BinaryOpcode {
        BinaryOpcode::from_u8(self.opcode).expect("validated by the parser")
    }

    pub fn is_quiet(&self) -> bool {
        binary_is_quiet(self.opcode)
    }

    /// set/add/replace extras: (flags, exptime).
    pub fn store_extras(&self) -> Option<(u32, u32)> {
        (self.extras.len() == 8).then(|| (be32(&self.extras[..4]), be32(&self.extras[4..])))
    }

    /// incr/decr extras: (delta, initial, exptime). exptime 0xffffffff
    /// means "do not create on miss".
    pub fn arith_extras(&self) -> Option<(u64, u64, u32)> {
        (self.extras.len() == 20).then(|| {
            (
                be64(&self.extras[..8]),
                be64(&self.extras[8..16]),
                be32(&self.extras[16..]),
            )
        })
    }

    /// 4-byte extras: exptime for touch/gat(k)(q) and flush (0 when flush
    /// has no extras), level for verbosity.
    pub fn u32_extra(&self) -> u32 {
        if self.extras.len() >= 4 {
            be32(&self.extras[..4])
        } else {
            0
        }
    }

    /// Encode as a request packet (magic 0x80).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(BINARY_REQUEST_MAGIC);
        out.push(self.opcode);
        out.extend_from_slice(&(self.key.len() as u16).to_be_bytes());
        out.push(self.extras.len() as u8);
        out.push(self.datatype);
        out.extend_from_slice(&self.vbucket.to_be_bytes());
        let body = self.extras.len() + self.key.len() + self.value.len();
        out.extend_from_slice(&(body as u32).to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
        out.extend_from_slice(&self.extras);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
    }
}

/// Per-opcode shape check: (extras lengths allowed, key required/forbidden/optional, value allowed).
fn shape_ok(op: BinaryOpcode, ext: usize, key: usize, val: usize) -> bool {
    use BinaryOpcode::*;
    match op.base() {
        Get | GetK | Delete => ext == 0 && key > 0 && val == 0,
        Set | Add | Replace => ext == 8 && key > 0,
        Append | Prepend => ext == 0 && key > 0,
        Increment | Decrement => ext == 20 && key > 0 && val == 0,
        Quit | Noop | Version => ext == 0 && key == 0 && val == 0,
        Flush => (ext == 0 || ext == 4) && key == 0 && val == 0,
        Stat => ext == 0 && val == 0,
        Verbosity => ext == 4 && key == 0 && val == 0,
        Touch | Gat | GatK => ext == 4 && key > 0 && val == 0,
        SaslListMechs => ext == 0 && key == 0 && val == 0,
        SaslAuth | SaslStep => ext == 0 && key > 0,
        _ => false,
    }
}

/// Parse one binary request (`buf[0] == 0x80`).
pub fn parse_binary(buf: &[u8], limits: &McLimits) -> Parsed {
    if buf.len() < HEADER_LEN {
        return Parsed::Incomplete;
    }
    let opcode = buf[1];
    let keylen = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let extlen = buf[4] as usize;
    let datatype = buf[5];
    let vbucket = u16::from_be_bytes([buf[6], buf[7]]);
    let bodylen = be32(&buf[8..12]) as usize;
    let opaque = be32(&buf[12..16]);
    let cas = be64(&buf[16..24]);
    let total = HEADER_LEN.saturating_add(bodylen);
    let fail = |status| Parsed::Error {
        error: McError::Binary {
            status,
            opcode,
            opaque,
        },
        consumed: Some(total),
    };
    if keylen + extlen > bodylen {
        // Inconsistent lengths: cannot trust the framing.
        return Parsed::Error {
            error: McError::Binary {
                status: BinaryStatus::InvalidArguments,
                opcode,
                opaque,
            },
            consumed: None,
        };
    }
    let vallen = bodylen - keylen - extlen;
    if vallen > limits.value_len_max {
        // Swallow the oversized body (consumed may exceed buf.len()).
        return fail(BinaryStatus::ValueTooLarge);
    }
    if buf.len() < total {
        return Parsed::Incomplete;
    }
    let Some(op) = BinaryOpcode::from_u8(opcode) else {
        return fail(BinaryStatus::UnknownCommand);
    };
    if keylen > limits.key_len_max || !shape_ok(op, extlen, keylen, vallen) {
        return fail(BinaryStatus::InvalidArguments);
    }
    let e = HEADER_LEN + extlen;
    let k = e + keylen;
    Parsed::Request {
        request: McRequest::Binary(BinaryRequest {
            opcode,
            datatype,
            vbucket,
            opaque,
            cas,
            extras: Bytes::copy_from_slice(&buf[HEADER_LEN..e]),
            key: Bytes::copy_from_slice(&buf[e..k]),
            value: Bytes::copy_from_slice(&buf[k..total]),
        }),
        consumed: total,
    }
}

/// Write a response packet (magic 0x81). `status` is a [`BinaryStatus`]
/// value; for errors pass the status message as `value`.
#[allow(clippy::too_many_arguments)]
pub fn encode_binary_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    out.push(BINARY_RESPONSE_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&status.to_be_bytes());
    let body = extras.len() + key.len() + value.len();
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Get/GetK/Gat hit: extras = 4-byte flags; key only for the K variants.
pub fn encode_binary_get_hit(
    out: &mut Vec<u8>,
    req: &BinaryRequest,
    flags: u32,
    cas: u64,
    value: &[u8],
) {
    let with_key = matches!(req.op().base(), BinaryOpcode::GetK | BinaryOpcode::GatK);
    let key: &[u8] = if with_key { &req.key } else { &[] };
    encode_binary_response(
        out,
        req.opcode,
        0,
        req.opaque,
        cas,
        &flags.to_be_bytes(),
        key,
        value,
    );
}

/// incr/decr success: body = 8-byte new value.
pub fn encode_binary_arith(out: &mut Vec<u8>, req: &BinaryRequest, cas: u64, value: u64) {
    encode_binary_response(
        out,
        req.opcode,
        0,
        req.opaque,
        cas,
        &[],
        &[],
        &value.to_be_bytes(),
    );
}

/// Error/status-only reply for `req` (body = status message for errors).
pub fn encode_binary_status(
    out: &mut Vec<u8>,
    req: &BinaryRequest,
    status: BinaryStatus,
    cas: u64,
) {
    let msg = status.message().as_bytes();
    encode_binary_response(
        out,
        req.opcode,
        status as u16,
        req.opaque,
        cas,
        &[],
        &[],
        msg,
    );
}

/// One `STAT` packet; finish the stat stream with an empty key and value.
pub fn encode_binary_stat(out: &mut Vec<u8>, req: &BinaryRequest, name: &[u8], value: &[u8]) {
    encode_binary_response(out, req.opcode, 0, req.opaque, 0, &[], name, value);
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn breq(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> BinaryRequest {
        BinaryRequest {
            opcode,
            datatype: 0,
            vbucket: 0,
            opaque: 0xdeadbeef,
            cas: 42,
            extras: Bytes::copy_from_slice(extras),
            key: Bytes::copy_from_slice(key),
            value: Bytes::copy_from_slice(value),
        }
    }

    fn round_trip(r: BinaryRequest) {
        let mut buf = Vec::new();
        r.encode(&mut buf);
        let l = McLimits::default();
        for i in 0..buf.len() {
            assert_eq!(parse(&buf[..i], &l), Parsed::Incomplete);
        }
        assert_eq!(
            parse(&buf, &l),
            Parsed::Request {
                request: McRequest::Binary(r),
                consumed: buf.len()
            }
        );
    }

    #[test]
    fn all_opcodes_parse() {
        let store_ext = [0, 0, 0, 5, 0, 0, 0, 10];
        let arith_ext = [0u8; 20];
        for op in 0u8..=0x30 {
            let Some(o) = BinaryOpcode::from_u8(op) else {
                continue;
            };
            use BinaryOpcode::*;
            let r = match o.base() {
                Get | GetK | Delete => breq(op, &[], b"k", &[]),
                Set | Add | Replace => breq(op, &store_ext, b"k", b"val"),
                Append | Prepend => breq(op, &[], b"k", b"val"),
                Increment | Decrement => breq(op, &arith_ext, b"k", &[]),
                Quit | Noop | Version => breq(op, &[], &[], &[]),
                Flush => breq(op, &[0, 0, 0, 9], &[], &[]),
                Stat => breq(op, &[], b"items", &[]),
                Verbosity => breq(op, &[0, 0, 0, 1], &[], &[]),
                Touch | Gat | GatK => breq(op, &[0, 0, 0, 9], b"k", &[]),
                SaslListMechs => breq(op, &[], &[], &[]),
                SaslAuth | SaslStep => breq(op, &[], b"PLAIN", b"\0user\0pass"),
                _ => unreachable!(),
            };
            assert_eq!(r.op(), o);
            round_trip(r);
        }
        let r = breq(0x01, &store_ext, b"k", b"v");
        assert_eq!(r.store_extras(), Some((5, 10)));
        let mut ext = Vec::new();
        ext.extend_from_slice(&3u64.to_be_bytes());
        ext.extend_from_slice(&7u64.to_be_bytes());
        ext.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            breq(0x05, &ext, b"k", &[]).arith_extras(),
            Some((3, 7, u32::MAX))
        );
        assert_eq!(breq(0x1c, &[0, 0, 1, 0], b"k", &[]).u32_extra(), 256);
        assert_eq!(breq(0x08, &[], &[], &[]).u32_extra(), 0);
        round_trip(breq(0x08, &[], &[], &[]));
        round_trip(breq(0x10, &[], &[], &[]));
    }

    #[test]
    fn errors() {
        let l = McLimits::default();
        let mut buf = Vec::new();
        breq(0x50, &[], b"k", &[]).encode(&mut buf);
        assert_eq!(
            parse(&buf, &l),
            Parsed::Error {
                error: McError::Binary {
                    status: BinaryStatus::UnknownCommand,
                    opcode: 0x50,
                    opaque: 0xdeadbeef
                },
                consumed: Some(buf.len())
            }
        );
        // get without key / set without extras: invalid arguments
        for r in [breq(0x00, &[], &[], &[]), breq(0x01, &[], b"k", b"v")] {
            buf.clear();
            r.encode(&mut buf);
            assert!(matches!(
                parse(&buf, &l),
                Parsed::Error {
                    error: McError::Binary {
                        status: BinaryStatus::InvalidArguments,
                        ..
                    },
                    consumed: Some(c)
                } if c == buf.len()
            ));
        }
        // key + extras longer than body: unrecoverable
        buf.clear();
        breq(0x00, &[], b"k", &[]).encode(&mut buf);
        buf[11] = 0;
        assert!(matches!(
            parse(&buf, &l),
            Parsed::Error { consumed: None, .. }
        ));
        // oversized value: swallowed
        buf.clear();
        breq(0x01, &[0; 8], b"k", &[]).encode(&mut buf);
        let body = (9 + l.value_len_max + 1) as u32;
        buf[8..12].copy_from_slice(&body.to_be_bytes());
        assert_eq!(
            parse(&buf, &l),
            Parsed::Error {
                error: McError::Binary {
                    status: BinaryStatus::ValueTooLarge,
                    opcode: 1,
                    opaque: 0xdeadbeef
                },
                consumed: Some(24 + body as usize)
            }
        );
    }

    #[test]
    fn quiet_rule() {
        for op in [
            0x09, 0x0d, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1e, 0x24,
        ] {
            assert!(binary_is_quiet(op), "{op:#x}");
        }
        for op in [0x00, 0x01, 0x0a, 0x0b, 0x0c, 0x10, 0x1b, 0x1c, 0x1d, 0x23] {
            assert!(!binary_is_quiet(op), "{op:#x}");
        }
        assert!(!binary_should_send(0x09, BinaryStatus::KeyNotFound));
        assert!(binary_should_send(0x09, BinaryStatus::NoError));
        assert!(!binary_should_send(0x11, BinaryStatus::NoError));
        assert!(binary_should_send(0x11, BinaryStatus::KeyExists));
        assert!(binary_should_send(0x00, BinaryStatus::KeyNotFound));
    }

    #[test]
    fn responses() {
        let r = breq(0x0c, &[], b"k", &[]);
        let mut o = Vec::new();
        encode_binary_get_hit(&mut o, &r, 5, 9, b"v");
        assert_eq!(o[0], 0x81);
        assert_eq!(o[1], 0x0c);
        assert_eq!(&o[2..4], &[0, 1]); // key len
        assert_eq!(o[4], 4); // extras len
        assert_eq!(&o[6..8], &[0, 0]); // status
        assert_eq!(&o[8..12], &6u32.to_be_bytes());
        assert_eq!(&o[12..16], &0xdeadbeefu32.to_be_bytes());
        assert_eq!(&o[16..24], &9u64.to_be_bytes());
        assert_eq!(&o[24..], b"\0\0\0\x05kv");
        o.clear();
        encode_binary_status(&mut o, &r, BinaryStatus::KeyNotFound, 0);
        assert_eq!(&o[6..8], &[0, 1]);
        assert_eq!(&o[24..], b"Not found");
        o.clear();
        encode_binary_arith(&mut o, &breq(0x05, &[0; 20], b"k", &[]), 1, 10);
        assert_eq!(&o[24..], &10u64.to_be_bytes());
        o.clear();
        encode_binary_stat(&mut o, &breq(0x10, &[], &[], &[]), b"pid", b"1");
        assert_eq!(&o[24..], b"pid1");
        o.clear();
        McError::Binary {
            status: BinaryStatus::UnknownCommand,
            opcode: 0x50,
            opaque: 1,
        }
        .encode(&mut o);
        assert_eq!(&o[6..8], &[0, 0x81]);
    }
}
