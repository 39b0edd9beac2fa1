//! Meta commands (mg/ms/md/ma/mn/me): flag parsing, request parsing and the
//! meta response builder (HD/VA/EN/NF/NS/EX/MN/ME with echoed return flags).

use bytes::Bytes;

use super::text::{data_block, parse_i32, parse_u32, parse_u64, Block};
use super::{base64_decode, base64_encode, McError, McLimits, McRequest, Parsed, StoreMode};

const BAD_FORMAT: &str = "bad command line format";
/// Longest `O` (opaque) token memcached accepts.
pub const META_OPAQUE_MAX: usize = 32;

/// One raw flag as sent: a letter plus an optional token (`Oabc` -> `O`, `abc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlag {
    pub letter: u8,
    pub token: Bytes,
}

/// `ma` mode (`M` flag: `I`/`+` increment, `D`/`-` decrement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaArithMode {
    Incr,
    Decr,
}

/// Parsed meta flags. `raw` keeps every flag in request order (used to echo
/// return flags in order); the typed fields are decoded from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags {
    pub raw: Vec<MetaFlag>,
    /// `b`: key is base64 (the request's key is already decoded).
    pub base64: bool,
    /// `c`: return CAS.
    pub return_cas: bool,
    /// `f`: return client flags.
    pub return_flags: bool,
    /// `h`: return whether the item was hit before (0/1).
    pub return_hit: bool,
    /// `k`: return the key.
    pub return_key: bool,
    /// `l`: return seconds since last access.
    pub return_last_access: bool,
    /// `q`: noreply semantics (see [`meta_quiet_suppresses`]).
    pub quiet: bool,
    /// `s`: return item size.
    pub return_size: bool,
    /// `t`: return remaining TTL (-1 for unlimited).
    pub return_ttl: bool,
    /// `u`: don't bump the item in the LRU.
    pub no_lru_bump: bool,
    /// `v`: return the value (mg) / the new number (ma).
    pub return_value: bool,
    /// `I`: invalidate (ms: set-to-invalid if CAS older; md: mark stale).
    pub invalidate: bool,
    /// `O<token>`: opaque, echoed back.
    pub opaque: Option<Bytes>,
    /// `N<ttl>`: vivify on miss (mg) / auto-create on miss (ma).
    pub vivify_ttl: Option<i64>,
    /// `R<ttl>`: win recache if remaining TTL is below this.
    pub recache_ttl: Option<i64>,
    /// `T<ttl>`: update TTL (mg/ma/md) or the TTL to store (ms).
    pub ttl: Option<i64>,
    /// `C<cas>`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: use this CAS value for the new item.
    pub new_cas: Option<u64>,
    /// `F<flags>`: client flags to store (ms).
    pub client_flags: Option<u32>,
    /// `M<mode>` on ms: E add, A append, P prepend, R replace, S set.
    pub set_mode: Option<StoreMode>,
    /// `M<mode>` on ma.
    pub arith_mode: Option<MetaArithMode>,
    /// `J<n>`: initial value for ma auto-create (default 0).
    pub initial: Option<u64>,
    /// `D<n>`: ma delta (default 1).
    pub delta: Option<u64>,
}

impl MetaFlags {
    /// Parse the flag tokens of meta command `cmd` (`b"mg"`, `b"ms"`, ...).
    pub fn parse(cmd: &[u8], toks: &[&[u8]]) -> Result<MetaFlags, McError> {
        let is_ma = cmd == b"ma";
        let bad_token = || {
            McError::client(if is_ma {
                "invalid or duplicate flag"
            } else {
                "bad token in command line format"
            })
        };
        let mut f = MetaFlags::default();
        let mut seen = [false; 128];
        for t in toks {
            let letter = t[0];
            let tok = &t[1..];
            if !b"bcfhklqstuvxCDEFIJLMNOPRST".contains(&letter) {
                return Err(McError::client("invalid flag"));
            }
            if letter != b'P' && letter != b'L' {
                if seen[letter as usize] {
                    return Err(McError::client(if is_ma {
                        "invalid or duplicate flag"
                    } else {
                        "duplicate flag"
                    }));
                }
                seen[letter as usize] = true;
            }
            let num_i = || parse_i32(tok).ok_or_else(bad_token);
            let num_u = || parse_u64(tok).ok_or_else(bad_token);
            match letter {
                b'b' => f.base64 = true,
                b'c' => f.return_cas = true,
                b'f' => f.return_flags = true,
                b'h' => f.return_hit = true,
                b'k' => f.return_key = true,
                b'l' => f.return_last_access = true,
                b'q' => f.quiet = true,
                b's' => f.return_size = true,
                b't' => f.return_ttl = true,
                b'u' => f.no_lru_bump = true,
                b'v' => f.return_value = true,
                b'I' => f.invalidate = true,
                b'O' => {
                    if tok.len() > META_OPAQUE_MAX {
                        return Err(McError::client("opaque token too long"));
                    }
                    f.opaque = Some(Bytes::copy_from_slice(tok));
                }
                b'N' => f.vivify_ttl = Some(num_i()?),
                b'R' => f.recache_ttl = Some(num_i()?),
                b'T' => f.ttl = Some(num_i()?),
                b'C' => f.compare_cas = Some(num_u()?),
                b'E' => f.new_cas = Some(num_u()?),
                b'F' => f.client_flags = Some(parse_u32(tok).ok_or_else(bad_token)?),
                b'J' => f.initial = Some(num_u()?),
                b'D' => f.delta = Some(num_u()?),
                b'M' => match cmd {
                    b"ms" => {
                        f.set_mode = Some(match tok {
                            b"E" => StoreMode::Add,
                            b"A" => StoreMode::Append,
                            b"P" => StoreMode::Prepend,
                            b"R" => StoreMode::Replace,
                            b"S" => StoreMode::Set,
                            _ => return Err(McError::client("invalid mode for ms M token")),
                        })
                    }
                    b"ma" => {
                        f.arith_mode = Some(match tok {
                            b"I" | b"+" => MetaArithMode::Incr,
                            b"D" | b"-" => MetaArithMode::Decr,
                            _ => return Err(McError::client("invalid mode for ma M token")),
                        })
                    }
                    _ => {}
                },
                _ => {} // P, L (proxy hints), S, x: accepted and ignored
            }
            f.raw.push(MetaFlag {
                letter,
                token: Bytes::copy_from_slice(tok),
            });
        }
        Ok(f)
    }
}

fn err(msg: &str, consumed: usize) -> Parsed {
    Parsed::Error {
        error: McError::client(msg),
        consumed: Some(consumed),
    }
}

fn decode_key(raw: &[u8], base64: bool) -> Result<Bytes, McError> {
    if !base64 {
        return Ok(Bytes::copy_from_slice(raw));
    }
    base64_decode(raw)
        .map(Bytes::from)
        .ok_or_else(|| McError::client("error decoding key"))
}

/// Parse a meta command whose line (tokens `toks`) ends at `consumed`.
pub(crate) fn parse_meta(buf: &[u8], toks: &[&[u8]], consumed: usize, limits: &McLimits) -> Parsed {
    let cmd = toks[0];
    let ok = |request| Parsed::Request { request, consumed };
    match cmd {
        b"mn" => return ok(McRequest::MetaNoop),
        b"me" => {
            let Some(&raw) = toks.get(1) else {
                return err(BAD_FORMAT, consumed);
            };
            if raw.len() > limits.key_len_max {
                return err(BAD_FORMAT, consumed);
            }
            let base64 = toks.get(2) == Some(&&b"b"[..]);
            return match decode_key(raw, base64) {
                Ok(key) => ok(McRequest::MetaDebug { key, base64 }),
                Err(_) => err(BAD_FORMAT, consumed),
            };
        }
        b"mg" | b"md" | b"ma" | b"ms" => {}
        _ => {
            return Parsed::Error {
                error: McError::Error,
                consumed: Some(consumed),
            }
        }
    }
    let Some(&raw_key) = toks.get(1) else {
        return Parsed::Error {
            error: McError::Error,
            consumed: Some(consumed),
        };
    };
    if raw_key.len() > limits.key_len_max {
        return err(BAD_FORMAT, consumed);
    }
    if cmd == b"ms" {
        let Some(len) = toks.get(2).and_then(|t| parse_i32(t)).filter(|&l| l >= 0) else {
            return err(BAD_FORMAT, consumed);
        };
        let len = len as usize;
        let flags = MetaFlags::parse(cmd, &toks[3..])
            .and_then(|f| decode_key(raw_key, f.base64).map(|k| (k, f)));
        return match data_block(buf, consumed, len, limits) {
            Block::Done(Parsed::Error {
                error: McError::ClientError(_),
                consumed: c,
            }) if flags.is_err() => Parsed::Error {
                error: flags.unwrap_err(),
                consumed: c,
            },
            Block::Done(p) => p,
            Block::Ready(value, end) => match flags {
                Err(error) => Parsed::Error {
                    error,
                    consumed: Some(end),
                },
                Ok((key, flags)) => Parsed::Request {
                    request: McRequest::MetaSet { key, value, flags },
                    consumed: end,
                },
            },
        };
    }
    let flags = match MetaFlags::parse(cmd, &toks[2..]) {
        Ok(f) => f,
        Err(error) => {
            return Parsed::Error {
                error,
                consumed: Some(consumed),
            }
        }
    };
    let key = match decode_key(raw_key, flags.base64) {
        Ok(k) => k,
        Err(error) => {
            return Parsed::Error {
                error,
                consumed: Some(consumed),
            }
        }
    };
    ok(match cmd {
        b"mg" => McRequest::MetaGet { key, flags },
        b"md" => McRequest::MetaDelete { key, flags },
        _ => McRequest::MetaArith { key, flags },
    })
}

/// Encode a meta request (`cmd` = mg/ms/md/ma); `value` only for ms.
pub(crate) fn encode_meta_request(
    cmd: &[u8],
    key: &[u8],
    value: Option<&Bytes>,
    flags: &MetaFlags,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(cmd);
    out.push(b' ');
    if flags.base64 {
        base64_encode(key, out);
    } else {
        out.extend_from_slice(key);
    }
    if let Some(v) = value {
        out.push(b' ');
        out.extend_from_slice(itoa::Buffer::new().format(v.len()).as_bytes());
    }
    for f in &flags.raw {
        out.push(b' ');
        out.push(f.letter);
        out.extend_from_slice(&f.token);
    }
    out.extend_from_slice(b"\r\n");
    if let Some(v) = value {
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
}

/// Meta response codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaStatus {
    /// `HD` success without value (STORED / DELETED / hit without `v`).
    Hd,
    /// `VA <size>` success with a data block.
    Va,
    /// `EN` miss (mg).
    En,
    /// `NF` not found (md/ma/ms with CAS).
    Nf,
    /// `NS` not stored.
    Ns,
    /// `EX` CAS mismatch.
    Ex,
    /// `MN` (reply to mn).
    Mn,
}

impl MetaStatus {
    pub fn code(self) -> &'static [u8] {
        match self {
            MetaStatus::Hd => b"HD",
            MetaStatus::Va => b"VA",
            MetaStatus::En => b"EN",
            MetaStatus::Nf => b"NF",
            MetaStatus::Ns => b"NS",
            MetaStatus::Ex => b"EX",
            MetaStatus::Mn => b"MN",
        }
    }
}

/// What the server knows about the item, for return flags. Leave a field
/// `None` to omit that flag. `ttl`: pass `Some(-1)` for no expiry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaItemInfo {
    pub cas: Option<u64>,
    pub client_flags: Option<u32>,
    pub ttl: Option<i64>,
    pub size: Option<usize>,
    pub hit: Option<bool>,
    pub last_access: Option<u64>,
}

/// With `q`, memcached suppresses `HD` (and `EN` for mg); every other code
/// (VA, NF, NS, EX) and all errors are still sent.
pub fn meta_quiet_suppresses(flags: &MetaFlags, status: MetaStatus) -> bool {
    flags.quiet && matches!(status, MetaStatus::Hd | MetaStatus::En)
}

fn push_num<N: itoa::Integer>(out: &mut Vec<u8>, n: N) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends a numeric return flag (` c123`) when the value is known.
fn push_flag<N: itoa::Integer>(out: &mut Vec<u8>, flag: &[u8], value: Option<N>) {
    if let Some(value) = value {
        out.extend_from_slice(flag);
        push_num(out, value);
    }
}

/// Build a meta response: `<CD>[ <size>] <flags>*\r\n[<data>\r\n]`.
///
/// Return flags are echoed in request order. `O` (opaque) and `k` (key,
/// base64-encoded and followed by ` b` when the request used `b`) are always
/// echoed; `c f t s h l` only on `HD`/`VA`, and only when `info` has them.
/// `value` is written (as `VA <len>`) only when `status` is `Va`. `key` is
/// the decoded key. Check [`meta_quiet_suppresses`] before calling.
pub fn encode_meta_response(
    out: &mut Vec<u8>,
    status: MetaStatus,
    key: &[u8],
    flags: &MetaFlags,
    info: &MetaItemInfo,
    value: Option<&[u8]>,
) {
    out.extend_from_slice(status.code());
    if status == MetaStatus::Mn {
        out.extend_from_slice(b"\r\n");
        return;
    }
    let value = if status == MetaStatus::Va {
        let v = value.unwrap_or(&[]);
        out.push(b' ');
        push_num(out, v.len());
        Some(v)
    } else {
        None
    };
    let full = matches!(status, MetaStatus::Hd | MetaStatus::Va);
    for f in &flags.raw {
        match f.letter {
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(&f.token);
            }
            b'k' => {
                out.extend_from_slice(b" k");
                if flags.base64 {
                    base64_encode(key, out);
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
            }
            _ if !full => {}
            b'c' => push_flag(out, b" c", info.cas),
            b'f' => push_flag(out, b" f", info.client_flags),
            b't' => push_flag(out, b" t", info.ttl),
            b's' => push_flag(out, b" s", info.size),
            b'h' => {
                if let Some(c) = info.hit {
                    out.extend_from_slice(if c { b" h1" } else { b" h0" });
                }
            }
            b'l' => push_flag(out, b" l", info.last_access),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if let Some(v) = value {
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
}

/// `ME <key> <k>=<v>*\r\n` (key base64-encoded when the request used `b`).
pub fn encode_meta_debug(out: &mut Vec<u8>, key: &[u8], base64: bool, fields: &[(&str, &[u8])]) {
    out.extend_from_slice(b"ME ");
    if base64 {
        base64_encode(key, out);
    } else {
        out.extend_from_slice(key);
    }
    for (k, v) in fields {
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::test_support::{assert_too_large, client_err, p, req};

    #[test]
    fn mg_flags() {
        let McRequest::MetaGet { key, flags } =
            req(b"mg foo v k O123 t f c s h l q u N30 R5 T60\r\n")
        else {
            panic!()
        };
        assert_eq!(key, "foo");
        assert!(flags.return_value && flags.return_key && flags.return_ttl);
        assert!(flags.return_flags && flags.return_cas && flags.return_size);
        assert!(flags.return_hit && flags.return_last_access && flags.quiet && flags.no_lru_bump);
        assert_eq!(flags.opaque.as_deref(), Some(&b"123"[..]));
        assert_eq!(
            (flags.vivify_ttl, flags.recache_ttl, flags.ttl),
            (Some(30), Some(5), Some(60))
        );
        assert_eq!(flags.raw.len(), 14);
        assert_eq!(flags.raw[2].letter, b'O');
        let McRequest::MetaGet { flags, .. } = req(b"mg k\r\n") else {
            panic!()
        };
        assert_eq!(flags, MetaFlags::default());
        // P and L are proxy hints: ignored, may repeat
        assert!(matches!(
            req(b"mg k Pfoo Lbar Lbaz v\r\n"),
            McRequest::MetaGet { .. }
        ));
    }

    #[test]
    fn base64_keys() {
        let McRequest::MetaGet { key, flags } = req(b"mg Zm9v b v k\r\n") else {
            panic!()
        };
        assert_eq!(key, "foo");
        assert!(flags.base64);
        client_err(b"mg !!! b v\r\n", "error decoding key", 12);
        assert_eq!(
            req(b"me Zm9v b\r\n"),
            McRequest::MetaDebug {
                key: Bytes::from_static(b"foo"),
                base64: true
            }
        );
        client_err(b"me k b\r\n", "bad command line format", 8);
        // echo: key re-encoded, followed by b
        let mut o = Vec::new();
        encode_meta_response(
            &mut o,
            MetaStatus::En,
            &key,
            &flags,
            &MetaItemInfo::default(),
            None,
        );
        assert_eq!(o, b"EN kZm9v b\r\n");
    }

    #[test]
    fn flag_errors() {
        client_err(b"mg k zz\r\n", "invalid flag", 9);
        client_err(b"mg k v v\r\n", "duplicate flag", 10);
        client_err(b"mg k Tabc v\r\n", "bad token in command line format", 13);
        let long = format!("mg k O{}\r\n", "x".repeat(33));
        client_err(long.as_bytes(), "opaque token too long", long.len());
        client_err(b"ma n Dabc\r\n", "invalid or duplicate flag", 11);
        client_err(b"ma n Mx\r\n", "invalid mode for ma M token", 9);
        client_err(b"mg k C\r\n", "bad token in command line format", 8);
        let key = format!("mg {} v\r\n", "a".repeat(251));
        client_err(key.as_bytes(), "bad command line format", key.len());
        assert_eq!(
            p(b"mg\r\n"),
            Parsed::Error {
                error: McError::Error,
                consumed: Some(4)
            }
        );
        assert_eq!(
            p(b"mx k\r\n"),
            Parsed::Error {
                error: McError::Error,
                consumed: Some(6)
            }
        );
        client_err(b"me\r\n", "bad command line format", 4);
    }

    #[test]
    fn ms_forms() {
        let McRequest::MetaSet { key, value, flags } = req(b"ms k 2 T0 F5 c k O9 q I\r\nhi\r\n")
        else {
            panic!()
        };
        assert_eq!((&key[..], &value[..]), (&b"k"[..], &b"hi"[..]));
        assert_eq!((flags.ttl, flags.client_flags), (Some(0), Some(5)));
        assert!(flags.quiet && flags.invalidate && flags.return_cas && flags.return_key);
        for (m, mode) in [
            ("E", StoreMode::Add),
            ("A", StoreMode::Append),
            ("P", StoreMode::Prepend),
            ("R", StoreMode::Replace),
            ("S", StoreMode::Set),
        ] {
            let s = format!("ms k 1 M{m} C77\r\nx\r\n");
            let McRequest::MetaSet { flags, .. } = req(s.as_bytes()) else {
                panic!()
            };
            assert_eq!((flags.set_mode, flags.compare_cas), (Some(mode), Some(77)));
        }
        // errors before the length is known: no swallow
        client_err(b"ms k\r\n", "bad command line format", 6);
        client_err(b"ms k abc\r\n", "bad command line format", 10);
        client_err(b"ms k S2\r\n", "bad command line format", 9);
        // flag errors after the length is known swallow the data block
        client_err(b"ms k 1 Ma\r\ny\r\n", "invalid mode for ms M token", 14);
        client_err(
            b"ms k 2 Tabc\r\nhi\r\n",
            "bad token in command line format",
            17,
        );
        client_err(
            b"ms k 2 F-1\r\nhi\r\n",
            "bad token in command line format",
            16,
        );
        client_err(b"ms k 2 b\r\nhi\r\n", "error decoding key", 14);
        assert_eq!(p(b"ms k 2 Ma\r\nh"), Parsed::Incomplete);
        client_err(b"ms k 2 T0\r\nhiX\r\n", "bad data chunk", 15);
        assert_too_large("ms k {} T0\r\n");
    }

    #[test]
    fn md_ma_mn() {
        let McRequest::MetaDelete { key, flags } = req(b"md k q I T30 C5 O1 k\r\n") else {
            panic!()
        };
        assert_eq!(key, "k");
        assert!(flags.quiet && flags.invalidate);
        assert_eq!((flags.ttl, flags.compare_cas), (Some(30), Some(5)));
        let McRequest::MetaArith { flags, .. } = req(b"ma n N0 J5 D3 v MD t c\r\n") else {
            panic!()
        };
        assert_eq!(
            (
                flags.vivify_ttl,
                flags.initial,
                flags.delta,
                flags.arith_mode
            ),
            (Some(0), Some(5), Some(3), Some(MetaArithMode::Decr))
        );
        for (m, mode) in [
            ("I", MetaArithMode::Incr),
            ("+", MetaArithMode::Incr),
            ("-", MetaArithMode::Decr),
        ] {
            let s = format!("ma n M{m}\r\n");
            let McRequest::MetaArith { flags, .. } = req(s.as_bytes()) else {
                panic!()
            };
            assert_eq!(flags.arith_mode, Some(mode));
        }
        assert_eq!(req(b"mn\r\n"), McRequest::MetaNoop);
        assert_eq!(req(b"mn foo\r\n"), McRequest::MetaNoop);
        assert_eq!(
            req(b"me k\r\n"),
            McRequest::MetaDebug {
                key: Bytes::from_static(b"k"),
                base64: false
            }
        );
    }

    #[test]
    fn responses() {
        let McRequest::MetaGet { key, flags } = req(b"mg k v k O123 t f c s h l\r\n") else {
            panic!()
        };
        let info = MetaItemInfo {
            cas: Some(7),
            client_flags: Some(0),
            ttl: Some(-1),
            size: Some(1),
            hit: Some(false),
            last_access: Some(3),
        };
        let mut o = Vec::new();
        encode_meta_response(&mut o, MetaStatus::Va, &key, &flags, &info, Some(b"x"));
        assert_eq!(o, b"VA 1 kk O123 t-1 f0 c7 s1 h0 l3\r\nx\r\n");
        o.clear();
        encode_meta_response(&mut o, MetaStatus::En, &key, &flags, &info, None);
        assert_eq!(o, b"EN kk O123\r\n");
        o.clear();
        encode_meta_response(
            &mut o,
            MetaStatus::Hd,
            &key,
            &MetaFlags::default(),
            &info,
            None,
        );
        encode_meta_response(
            &mut o,
            MetaStatus::Nf,
            &key,
            &MetaFlags::default(),
            &info,
            None,
        );
        encode_meta_response(
            &mut o,
            MetaStatus::Ns,
            &key,
            &MetaFlags::default(),
            &info,
            None,
        );
        encode_meta_response(
            &mut o,
            MetaStatus::Ex,
            &key,
            &MetaFlags::default(),
            &info,
            None,
        );
        encode_meta_response(
            &mut o,
            MetaStatus::Mn,
            b"",
            &MetaFlags::default(),
            &info,
            None,
        );
        assert_eq!(o, b"HD\r\nNF\r\nNS\r\nEX\r\nMN\r\n");
        o.clear();
        encode_meta_debug(&mut o, b"k", false, &[("exp", b"-1"), ("la", b"1")]);
        assert_eq!(o, b"ME k exp=-1 la=1\r\n");
    }

    #[test]
    fn quiet_rule() {
        let q = MetaFlags {
            quiet: true,
            ..MetaFlags::default()
        };
        assert!(meta_quiet_suppresses(&q, MetaStatus::Hd));
        assert!(meta_quiet_suppresses(&q, MetaStatus::En));
        for s in [
            MetaStatus::Va,
            MetaStatus::Nf,
            MetaStatus::Ns,
            MetaStatus::Ex,
        ] {
            assert!(!meta_quiet_suppresses(&q, s));
        }
        assert!(!meta_quiet_suppresses(
            &MetaFlags::default(),
            MetaStatus::Hd
        ));
    }
}
