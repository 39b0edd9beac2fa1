//! `cjson`: lua-cjson 2.1.0 (Mark Pulford) as patched in Redis 7.0.15's
//! deps/lua/src/lua_cjson.c, ported to Rust on the Lua C API (no serde).
//!
//! Mirrored exactly: module fields and per-instance configuration (`cjson.new()`),
//! numbers printed with "%.14g" (configurable 1..14), NaN/Inf policy ("must not be
//! NaN or Inf", or "nan"/"inf"/"-inf", or null), escaping (`/` as `\/`, control
//! bytes and DEL as \u00XX, other bytes verbatim), array detection and the
//! "excessively sparse array" rule (including C's int overflow quirks), encode depth
//! 1000 ("Cannot serialise, excessive nesting (N)"), decode depth 1000 ("Found too
//! many nested data structures (N) at character P"), the `lua_checkstack` limits
//! that cap nesting when those settings are raised, `cjson.null` (a NULL light
//! userdata), strtod number parsing (hex, inf, nan(payload) when
//! decode_invalid_numbers is on), \uXXXX and surrogate pair decoding, token
//! positions and every error text.
//!
//! Documented differences: `encode_keep_buffer` only records the flag (buffers are
//! per call, which has no visible effect), and encode/decode run their body under a
//! protected call, so they use one more C call level (LUAI_MAXCCALLS is 200) and a
//! memory error inside them is re-raised as a runtime error with the same message.
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use super::cnumber::{format_g, strtod};
use super::luaffi::{
    self, c_double_to_i32, error, ffi, msg, or_raise, raise_arg_error, raise_error, type_name, Msg,
    Outcome, State,
};

/// Per-instance settings (the C `json_config_t` without its buffers). Lives in a
/// full userdata shared as upvalue 1 by the functions of one cjson table.
#[derive(Clone, Copy)]
#[repr(C)]
struct Config {
    sparse_convert: c_int,
    sparse_ratio: c_int,
    sparse_safe: c_int,
    encode_max_depth: c_int,
    encode_invalid_numbers: c_int,
    encode_number_precision: c_int,
    encode_keep_buffer: c_int,
    decode_invalid_numbers: c_int,
    decode_max_depth: c_int,
}

const DEFAULT_CONFIG: Config = Config {
    sparse_convert: 0,
    sparse_ratio: 2,
    sparse_safe: 10,
    encode_max_depth: 1000,
    encode_invalid_numbers: 0,
    encode_number_precision: 14,
    encode_keep_buffer: 1,
    decode_invalid_numbers: 1,
    decode_max_depth: 1000,
};

/// `json_fetch_config`. Scripts cannot replace the upvalue: Lua 5.1's
/// `debug.setupvalue` refuses C functions.
///
/// # Safety
/// Called from a cjson C closure.
unsafe fn fetch_config(l: State) -> *mut Config {
    let cfg = ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *mut Config;
    if cfg.is_null() {
        raise_error(l, b"BUG: Unable to fetch CJSON configuration");
    }
    cfg
}

// ===== Configuration functions =====

/// `json_arg_init`: at most `args` arguments, padded with nils.
///
/// # Safety
/// Called from a cjson C closure; raises.
unsafe fn arg_init(l: State, args: c_int) -> *mut Config {
    if ffi::lua_gettop(l) > args {
        raise_arg_error(l, args + 1, b"found too many arguments");
    }
    while ffi::lua_gettop(l) < args {
        ffi::lua_pushnil(l);
    }
    fetch_config(l)
}

/// `json_integer_option`: sets `*setting` from argument `idx` unless nil (range
/// errors always blame argument #1, as in C), then pushes the current value.
///
/// # Safety
/// Called from a cjson C closure; raises. `setting` points into the config.
unsafe fn integer_option(l: State, idx: c_int, setting: *mut c_int, min: c_int, max: c_int) {
    if ffi::lua_isnil(l, idx) == 0 {
        let value = ffi::luaL_checkinteger(l, idx) as c_int;
        if !(min <= value && value <= max) {
            let text = msg(format_args!("expected integer between {min} and {max}"));
            raise_arg_error(l, 1, text.as_bytes());
        }
        *setting = value;
    }
    ffi::lua_pushinteger(l, ffi::lua_Integer::from(*setting));
}

const BOOL_OPTIONS: [*const c_char; 3] = [c"off".as_ptr(), c"on".as_ptr(), ptr::null()];
const INVALID_NUMBER_OPTIONS: [*const c_char; 4] = [
    c"off".as_ptr(),
    c"on".as_ptr(),
    c"null".as_ptr(),
    ptr::null(),
];

/// `json_enum_option` with `bool_true == 1`: a boolean or one of `options`; pushes
/// the setting as a boolean when it is 0 or 1, else as its option name.
///
/// # Safety
/// Called from a cjson C closure; raises. `options` is NULL-terminated.
unsafe fn enum_option(l: State, idx: c_int, setting: *mut c_int, options: &[*const c_char]) {
    if ffi::lua_isnil(l, idx) == 0 {
        *setting = if ffi::lua_isboolean(l, idx) != 0 {
            ffi::lua_toboolean(l, idx)
        } else {
            ffi::luaL_checkoption(l, idx, ptr::null(), options.as_ptr())
        };
    }
    match *setting {
        0 | 1 => ffi::lua_pushboolean(l, *setting),
        n => {
            let name = options.get(n as usize).copied().unwrap_or(ptr::null());
            ffi::lua_pushstring_(l, name);
        }
    }
}

unsafe extern "C-unwind" fn cfg_encode_sparse_array(l: State) -> c_int {
    let cfg = arg_init(l, 3);
    enum_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).sparse_convert),
        &BOOL_OPTIONS,
    );
    integer_option(
        l,
        2,
        std::ptr::addr_of_mut!((*cfg).sparse_ratio),
        0,
        c_int::MAX,
    );
    integer_option(
        l,
        3,
        std::ptr::addr_of_mut!((*cfg).sparse_safe),
        0,
        c_int::MAX,
    );
    3
}

unsafe extern "C-unwind" fn cfg_encode_max_depth(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).encode_max_depth),
        1,
        c_int::MAX,
    );
    1
}

unsafe extern "C-unwind" fn cfg_decode_max_depth(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).decode_max_depth),
        1,
        c_int::MAX,
    );
    1
}

unsafe extern "C-unwind" fn cfg_encode_number_precision(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).encode_number_precision),
        1,
        14,
    );
    1
}

unsafe extern "C-unwind" fn cfg_encode_keep_buffer(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).encode_keep_buffer),
        &BOOL_OPTIONS,
    );
    1
}

unsafe extern "C-unwind" fn cfg_encode_invalid_numbers(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).encode_invalid_numbers),
        &INVALID_NUMBER_OPTIONS,
    );
    1
}

unsafe extern "C-unwind" fn cfg_decode_invalid_numbers(l: State) -> c_int {
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        std::ptr::addr_of_mut!((*cfg).decode_invalid_numbers),
        &BOOL_OPTIONS,
    );
    1
}

// ===== Encoding =====

/// `json_encode_exception`: "Cannot serialise <type of value at idx>: <reason>".
///
/// # Safety
/// `l` must be valid.
unsafe fn cannot_serialise<T>(l: State, idx: c_int, reason: &str) -> Outcome<T> {
    let mut text = Msg::from_bytes(b"Cannot serialise ");
    text.push_bytes(type_name(l, idx));
    text.push_bytes(b": ");
    text.push_bytes(reason.as_bytes());
    error(text)
}

/// The escape lua-cjson uses for a byte, if any.
fn escape_of(byte: u8) -> Option<&'static [u8]> {
    const CONTROL: [&[u8]; 32] = [
        b"\\u0000", b"\\u0001", b"\\u0002", b"\\u0003", b"\\u0004", b"\\u0005", b"\\u0006",
        b"\\u0007", b"\\b", b"\\t", b"\\n", b"\\u000b", b"\\f", b"\\r", b"\\u000e", b"\\u000f",
        b"\\u0010", b"\\u0011", b"\\u0012", b"\\u0013", b"\\u0014", b"\\u0015", b"\\u0016",
        b"\\u0017", b"\\u0018", b"\\u0019", b"\\u001a", b"\\u001b", b"\\u001c", b"\\u001d",
        b"\\u001e", b"\\u001f",
    ];
    match byte {
        0..=31 => CONTROL.get(usize::from(byte)).copied(),
        b'"' => Some(b"\\\""),
        b'/' => Some(b"\\/"),
        b'\\' => Some(b"\\\\"),
        127 => Some(b"\\u007f"),
        _ => None,
    }
}

/// `json_append_string` for the string at `idx`.
///
/// # Safety
/// `l` must be valid and `idx` a string.
unsafe fn append_string(l: State, out: &mut Vec<u8>, idx: c_int) {
    let text = luaffi::to_bytes(l, idx).unwrap_or(&[]);
    out.reserve(text.len() + 2);
    out.push(b'"');
    for &byte in text {
        match escape_of(byte) {
            Some(escaped) => out.extend_from_slice(escaped),
            None => out.push(byte),
        }
    }
    out.push(b'"');
}

/// `json_append_number` for the number at `idx`.
///
/// # Safety
/// `l` must be valid and `idx` a number.
unsafe fn append_number(l: State, cfg: &Config, out: &mut Vec<u8>, idx: c_int) -> Outcome<()> {
    let num = ffi::lua_tonumber(l, idx);
    let invalid = num.is_nan() || num.is_infinite();
    match cfg.encode_invalid_numbers {
        0 if invalid => return cannot_serialise(l, idx, "must not be NaN or Inf"),
        1 if num.is_nan() => {
            out.extend_from_slice(b"nan");
            return Ok(());
        }
        0 | 1 => {}
        _ if invalid => {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        _ => {}
    }
    format_g(out, num, cfg.encode_number_precision.max(1) as usize);
    Ok(())
}

/// `lua_array_length` for the table on top: its array length, or -1 for objects.
/// Raises "excessively sparse array" unless conversion is enabled.
///
/// # Safety
/// `l` must be valid with a table on top and 2 free slots.
unsafe fn array_length(l: State, cfg: &Config) -> Outcome<c_int> {
    let mut max: c_int = 0;
    let mut items: c_int = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        if ffi::lua_type(l, -2) == ffi::LUA_TNUMBER {
            let k = ffi::lua_tonumber(l, -2);
            if k != 0.0 && k.floor() == k && k >= 1.0 {
                if k > f64::from(max) {
                    max = c_double_to_i32(k);
                }
                items = items.wrapping_add(1);
                ffi::lua_settop(l, -2);
                continue;
            }
        }
        ffi::lua_settop(l, -3);
        return Ok(-1);
    }
    if cfg.sparse_ratio > 0 && max > items.wrapping_mul(cfg.sparse_ratio) && max > cfg.sparse_safe {
        if cfg.sparse_convert == 0 {
            return cannot_serialise(l, -1, "excessively sparse array");
        }
        return Ok(-1);
    }
    Ok(max)
}

/// Appends a non-table value on top of the stack.
///
/// # Safety
/// `l` must be valid.
unsafe fn append_scalar(l: State, cfg: &Config, out: &mut Vec<u8>) -> Outcome<()> {
    match ffi::lua_type(l, -1) {
        ffi::LUA_TSTRING => append_string(l, out, -1),
        ffi::LUA_TNUMBER => append_number(l, cfg, out, -1)?,
        ffi::LUA_TBOOLEAN => {
            let text: &[u8] = if ffi::lua_toboolean(l, -1) != 0 {
                b"true"
            } else {
                b"false"
            };
            out.extend_from_slice(text);
        }
        ffi::LUA_TNIL => out.extend_from_slice(b"null"),
        ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(l, -1).is_null() => {
            out.extend_from_slice(b"null")
        }
        _ => return cannot_serialise(l, -1, "type not supported"),
    }
    Ok(())
}

/// Appends the key of the pair on top (`key`, `value`) and its colon.
///
/// # Safety
/// `l` must be valid with a key/value pair on top.
unsafe fn append_key(l: State, cfg: &Config, out: &mut Vec<u8>) -> Outcome<()> {
    match ffi::lua_type(l, -2) {
        ffi::LUA_TNUMBER => {
            out.push(b'"');
            append_number(l, cfg, out, -2)?;
            out.extend_from_slice(b"\":");
        }
        ffi::LUA_TSTRING => {
            append_string(l, out, -2);
            out.push(b':');
        }
        _ => return cannot_serialise(l, -2, "table key must be a number or string"),
    }
    Ok(())
}

/// A table being encoded; its Lua stack slots mirror the C recursion (arrays:
/// table + current element; objects: table + key + value).
#[derive(Clone, Copy)]
enum EncodeFrame {
    Array {
        depth: c_int,
        len: c_int,
        next: c_int,
    },
    Object {
        depth: c_int,
        first: bool,
    },
}

#[derive(Default)]
struct EncodeState {
    out: Vec<u8>,
    frames: Vec<EncodeFrame>,
}

/// Opens the table on top at nesting `depth` (already incremented).
///
/// # Safety
/// `l` must be valid with a table on top.
unsafe fn open_table(l: State, cfg: &Config, st: &mut EncodeState, depth: c_int) -> Outcome<()> {
    if !(depth <= cfg.encode_max_depth && ffi::lua_checkstack(l, 3) != 0) {
        return error(msg(format_args!(
            "Cannot serialise, excessive nesting ({depth})"
        )));
    }
    let len = array_length(l, cfg)?;
    if len > 0 {
        st.out.push(b'[');
        st.frames.push(EncodeFrame::Array {
            depth,
            len,
            next: 1,
        });
    } else {
        st.out.push(b'{');
        ffi::lua_pushnil(l);
        st.frames.push(EncodeFrame::Object { depth, first: true });
    }
    Ok(())
}

/// What to do after a value was finished or a table opened.
enum Next {
    /// Encode the value now on top, nested at this depth.
    Value(c_int),
    /// The top-level value is complete.
    Done,
}

/// Advances the innermost table: pops the finished child (if any), then pushes the
/// next element or closes tables that are complete.
///
/// # Safety
/// `l` must be valid and the stack must match `st.frames`.
unsafe fn advance(
    l: State,
    cfg: &Config,
    st: &mut EncodeState,
    mut child_done: bool,
) -> Outcome<Next> {
    loop {
        let Some(frame) = st.frames.last_mut() else {
            return Ok(Next::Done);
        };
        if child_done {
            ffi::lua_settop(l, -2);
        }
        match frame {
            EncodeFrame::Array { depth, len, next } => {
                if *next > *len {
                    st.out.push(b']');
                } else {
                    if *next > 1 {
                        st.out.push(b',');
                    }
                    ffi::lua_rawgeti_(l, -1, *next);
                    *next += 1;
                    return Ok(Next::Value(*depth));
                }
            }
            EncodeFrame::Object { depth, first } => {
                if ffi::lua_next(l, -2) == 0 {
                    st.out.push(b'}');
                } else {
                    if !*first {
                        st.out.push(b',');
                    }
                    *first = false;
                    let depth = *depth;
                    append_key(l, cfg, &mut st.out)?;
                    return Ok(Next::Value(depth));
                }
            }
        }
        st.frames.pop();
        child_done = true;
    }
}

fn encode_body(l: State, cfg: Config, st: &mut EncodeState) -> Outcome<c_int> {
    // SAFETY: runs inside `run_protected` with the value to encode as argument 1.
    unsafe {
        let mut depth = 0;
        loop {
            let child_done = if ffi::lua_type(l, -1) == ffi::LUA_TTABLE {
                open_table(l, &cfg, st, depth + 1)?;
                false
            } else {
                append_scalar(l, &cfg, &mut st.out)?;
                true
            };
            match advance(l, &cfg, st, child_done)? {
                Next::Value(next_depth) => depth = next_depth,
                Next::Done => break,
            }
        }
        luaffi::push_bytes(l, &st.out);
        Ok(1)
    }
}

unsafe extern "C-unwind" fn json_encode(l: State) -> c_int {
    let cfg = *fetch_config(l);
    if ffi::lua_gettop(l) != 1 {
        raise_arg_error(l, 1, b"expected 1 argument");
    }
    luaffi::run_protected(l, cfg, encode_body)
}

// ===== Decoding =====

#[derive(Clone, Copy, PartialEq)]
enum TokenKind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    String,
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl TokenKind {
    /// The name used in "Expected ... but found <name>".
    fn name(self) -> &'static str {
        match self {
            TokenKind::ObjBegin => "T_OBJ_BEGIN",
            TokenKind::ObjEnd => "T_OBJ_END",
            TokenKind::ArrBegin => "T_ARR_BEGIN",
            TokenKind::ArrEnd => "T_ARR_END",
            TokenKind::String => "T_STRING",
            TokenKind::Number(_) => "T_NUMBER",
            TokenKind::Boolean(_) => "T_BOOLEAN",
            TokenKind::Null => "T_NULL",
            TokenKind::Colon => "T_COLON",
            TokenKind::Comma => "T_COMMA",
            TokenKind::End => "T_END",
            TokenKind::Error(what) => what,
        }
    }
}

#[derive(Clone, Copy)]
struct Token {
    kind: TokenKind,
    index: usize,
}

/// The JSON text with a read position; bytes past the end read as NUL, like the
/// NUL-terminated C string (an embedded NUL also ends the document).
struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
    depth: c_int,
    cfg: Config,
}

fn escape_char(code: u8) -> Option<u8> {
    match code {
        b'"' | b'\\' | b'/' | b'u' => Some(code),
        b'b' => Some(8),
        b't' => Some(b'\t'),
        b'n' => Some(b'\n'),
        b'f' => Some(12),
        b'r' => Some(b'\r'),
        _ => None,
    }
}

fn hex4(bytes: [u8; 4]) -> Option<u32> {
    bytes.iter().try_fold(0u32, |acc, &b| {
        (b as char).to_digit(16).map(|digit| (acc << 4) | digit)
    })
}

fn push_utf8(out: &mut Vec<u8>, codepoint: u32) {
    let mut buf = [0u8; 4];
    match char::from_u32(codepoint) {
        Some(ch) => out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes()),
        // Unpaired surrogates cannot reach here (rejected before), keep C's bytes.
        None => out.extend_from_slice(&[
            0xe0 | (codepoint >> 12) as u8,
            0x80 | ((codepoint >> 6) & 0x3f) as u8,
            0x80 | (codepoint & 0x3f) as u8,
        ]),
    }
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn quad(&self, i: usize) -> [u8; 4] {
        [self.at(i), self.at(i + 1), self.at(i + 2), self.at(i + 3)]
    }

    fn starts_with(&self, word: &[u8]) -> bool {
        word.iter()
            .enumerate()
            .all(|(k, &b)| self.at(self.pos + k) == b)
    }

    fn error_token(&self, what: &'static str) -> Token {
        Token {
            kind: TokenKind::Error(what),
            index: self.pos,
        }
    }

    /// `json_next_token`; string contents go to `tmp`.
    fn next_token(&mut self, tmp: &mut Vec<u8>) -> Token {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let single = |kind| Token { kind, index };
        let ch = self.at(self.pos);
        let kind = match ch {
            b'{' => TokenKind::ObjBegin,
            b'}' => TokenKind::ObjEnd,
            b'[' => TokenKind::ArrBegin,
            b']' => TokenKind::ArrEnd,
            b',' => TokenKind::Comma,
            b':' => TokenKind::Colon,
            0 => return single(TokenKind::End),
            b'"' => return self.string_token(tmp),
            b'-' | b'0'..=b'9' => {
                if self.cfg.decode_invalid_numbers == 0 && self.is_invalid_number() {
                    return self.error_token("invalid number");
                }
                return self.number_token();
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => return self.word_token(),
            _ => return self.error_token("invalid token"),
        };
        self.pos += 1;
        single(kind)
    }

    /// Tokens starting with t/f/n/i/I/N/+: literals, or numbers strtod accepts.
    fn word_token(&mut self) -> Token {
        let index = self.pos;
        let literals: [(&[u8], TokenKind); 3] = [
            (b"true", TokenKind::Boolean(true)),
            (b"false", TokenKind::Boolean(false)),
            (b"null", TokenKind::Null),
        ];
        for (word, kind) in literals {
            if self.starts_with(word) {
                self.pos += word.len();
                return Token { kind, index };
            }
        }
        if self.cfg.decode_invalid_numbers != 0 && self.is_invalid_number() {
            return self.number_token();
        }
        self.error_token("invalid token")
    }

    /// `json_is_invalid_number`: '+', hex or leading zeros, inf or nan.
    fn is_invalid_number(&self) -> bool {
        let mut p = self.pos;
        match self.at(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let first = self.at(p);
        if first == b'0' {
            let second = self.at(p + 1);
            return (second | 0x20) == b'x' || second.is_ascii_digit();
        }
        if (first as i8) <= b'9' as i8 {
            return false;
        }
        let lower = |k: usize| self.at(p + k).to_ascii_lowercase();
        let word = [lower(0), lower(1), lower(2)];
        &word == b"inf" || &word == b"nan"
    }

    fn number_token(&mut self) -> Token {
        let index = self.pos;
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let (value, used) = strtod(rest);
        if used == 0 {
            return self.error_token("invalid number");
        }
        self.pos += used;
        Token {
            kind: TokenKind::Number(value),
            index,
        }
    }

    /// `json_next_string_token`.
    fn string_token(&mut self, tmp: &mut Vec<u8>) -> Token {
        let index = self.pos;
        self.pos += 1;
        tmp.clear();
        loop {
            let mut ch = self.at(self.pos);
            if ch == b'"' {
                break;
            }
            if ch == 0 {
                return self.error_token("unexpected end of string");
            }
            if ch == b'\\' {
                match escape_char(self.at(self.pos + 1)) {
                    Some(b'u') => {
                        if self.unicode_escape(tmp) {
                            continue;
                        }
                        return self.error_token("invalid unicode escape code");
                    }
                    Some(translated) => {
                        ch = translated;
                        self.pos += 1;
                    }
                    None => return self.error_token("invalid escape code"),
                }
            }
            tmp.push(ch);
            self.pos += 1;
        }
        self.pos += 1;
        Token {
            kind: TokenKind::String,
            index,
        }
    }

    /// `json_append_unicode_escape` at "\uXXXX" (surrogate pairs as "\uD8XX\uDCXX").
    fn unicode_escape(&mut self, tmp: &mut Vec<u8>) -> bool {
        let Some(mut codepoint) = hex4(self.quad(self.pos + 2)) else {
            return false;
        };
        let mut escape_len = 6;
        if codepoint & 0xF800 == 0xD800 {
            if codepoint & 0x400 != 0 {
                return false;
            }
            if self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = hex4(self.quad(self.pos + 8)) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            codepoint = (((codepoint & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            escape_len = 12;
        }
        push_utf8(tmp, codepoint);
        self.pos += escape_len;
        true
    }

    /// `json_decode_descend`: one level deeper, with `slots` free stack slots.
    ///
    /// # Safety
    /// `l` must be valid.
    unsafe fn descend(&mut self, l: State, slots: c_int) -> Outcome<()> {
        self.depth += 1;
        if self.depth <= self.cfg.decode_max_depth && ffi::lua_checkstack(l, slots) != 0 {
            return Ok(());
        }
        error(msg(format_args!(
            "Found too many nested data structures ({}) at character {}",
            self.depth, self.pos
        )))
    }
}

/// `json_throw_parse_error`.
fn parse_error<T>(expected: &str, token: Token) -> Outcome<T> {
    error(msg(format_args!(
        "Expected {expected} but found {} at character {}",
        token.kind.name(),
        token.index + 1
    )))
}

/// A container being decoded: the table (and the pending key for objects) sit on
/// the Lua stack exactly as in the C recursion.
#[derive(Clone, Copy)]
enum DecodeFrame {
    Object,
    Array(c_int),
}

#[derive(Default)]
struct DecodeState {
    tmp: Vec<u8>,
    frames: Vec<DecodeFrame>,
}

/// Reads `"key" :` and leaves the token after the colon in `token`.
///
/// # Safety
/// `l` must be valid with a free slot (reserved by `descend`).
unsafe fn object_key(
    l: State,
    p: &mut Parser,
    st: &mut DecodeState,
    token: &mut Token,
) -> Outcome<()> {
    if token.kind != TokenKind::String {
        return parse_error("object key string", *token);
    }
    luaffi::push_bytes(l, &st.tmp);
    *token = p.next_token(&mut st.tmp);
    if token.kind != TokenKind::Colon {
        return parse_error("colon", *token);
    }
    *token = p.next_token(&mut st.tmp);
    Ok(())
}

/// Processes `token` as a value: pushes a scalar (returns true) or opens a
/// container (returns false when it still needs elements).
///
/// # Safety
/// `l` must be valid and the stack must match `st.frames`.
unsafe fn start_value(
    l: State,
    p: &mut Parser,
    st: &mut DecodeState,
    token: &mut Token,
) -> Outcome<bool> {
    match token.kind {
        TokenKind::String => luaffi::push_bytes(l, &st.tmp),
        TokenKind::Number(n) => ffi::lua_pushnumber(l, n),
        TokenKind::Boolean(b) => ffi::lua_pushboolean(l, c_int::from(b)),
        TokenKind::Null => ffi::lua_pushlightuserdata(l, ptr::null_mut::<c_void>()),
        TokenKind::ObjBegin => {
            p.descend(l, 3)?;
            ffi::lua_newtable(l);
            *token = p.next_token(&mut st.tmp);
            if token.kind == TokenKind::ObjEnd {
                p.depth -= 1;
                return Ok(true);
            }
            object_key(l, p, st, token)?;
            st.frames.push(DecodeFrame::Object);
            return Ok(false);
        }
        TokenKind::ArrBegin => {
            p.descend(l, 2)?;
            ffi::lua_newtable(l);
            *token = p.next_token(&mut st.tmp);
            if token.kind == TokenKind::ArrEnd {
                p.depth -= 1;
                return Ok(true);
            }
            st.frames.push(DecodeFrame::Array(1));
            return Ok(false);
        }
        _ => return parse_error("value", *token),
    }
    Ok(true)
}

/// Stores the finished value into its container and reads on; returns false when
/// the top-level value is complete, true when `token` holds the next value.
///
/// # Safety
/// `l` must be valid and the stack must match `st.frames`.
unsafe fn finish_value(
    l: State,
    p: &mut Parser,
    st: &mut DecodeState,
    token: &mut Token,
) -> Outcome<bool> {
    loop {
        let Some(frame) = st.frames.last_mut() else {
            return Ok(false);
        };
        match frame {
            DecodeFrame::Object => {
                ffi::lua_rawset(l, -3);
                *token = p.next_token(&mut st.tmp);
                if token.kind != TokenKind::ObjEnd {
                    if token.kind != TokenKind::Comma {
                        return parse_error("comma or object end", *token);
                    }
                    *token = p.next_token(&mut st.tmp);
                    object_key(l, p, st, token)?;
                    return Ok(true);
                }
            }
            DecodeFrame::Array(index) => {
                ffi::lua_rawseti_(l, -2, *index);
                *token = p.next_token(&mut st.tmp);
                if token.kind != TokenKind::ArrEnd {
                    if token.kind != TokenKind::Comma {
                        return parse_error("comma or array end", *token);
                    }
                    *index = index.wrapping_add(1);
                    *token = p.next_token(&mut st.tmp);
                    return Ok(true);
                }
            }
        }
        p.depth -= 1;
        st.frames.pop();
    }
}

fn decode_body(l: State, cfg: Config, st: &mut DecodeState) -> Outcome<c_int> {
    // SAFETY: runs inside `run_protected`; argument 1 is the JSON string, which
    // stays on the stack (so `data` stays valid).
    unsafe {
        let data = luaffi::to_bytes(l, 1).unwrap_or(&[]);
        let mut p = Parser {
            data,
            pos: 0,
            depth: 0,
            cfg,
        };
        let mut token = p.next_token(&mut st.tmp);
        loop {
            let complete = start_value(l, &mut p, st, &mut token)?;
            if complete && !finish_value(l, &mut p, st, &mut token)? {
                break;
            }
        }
        let token = p.next_token(&mut st.tmp);
        if token.kind != TokenKind::End {
            return parse_error("the end", token);
        }
        Ok(1)
    }
}

unsafe extern "C-unwind" fn json_decode(l: State) -> c_int {
    if ffi::lua_gettop(l) != 1 {
        raise_arg_error(l, 1, b"expected 1 argument");
    }
    let cfg = *fetch_config(l);
    let checked = luaffi::check_bytes(l, 1).map(|text| text.len() >= 2 && text[..2].contains(&0));
    if or_raise(l, checked) {
        raise_error(l, b"JSON parser does not support UTF-16 or UTF-32");
    }
    luaffi::run_protected(l, cfg, decode_body)
}

// ===== Module =====

/// `lua_cjson_new`: a new cjson table with its own configuration.
unsafe extern "C-unwind" fn cjson_new(l: State) -> c_int {
    let functions: [(&std::ffi::CStr, ffi::lua_CFunction); 10] = [
        (c"encode", json_encode),
        (c"decode", json_decode),
        (c"encode_sparse_array", cfg_encode_sparse_array),
        (c"encode_max_depth", cfg_encode_max_depth),
        (c"decode_max_depth", cfg_decode_max_depth),
        (c"encode_number_precision", cfg_encode_number_precision),
        (c"encode_keep_buffer", cfg_encode_keep_buffer),
        (c"encode_invalid_numbers", cfg_encode_invalid_numbers),
        (c"decode_invalid_numbers", cfg_decode_invalid_numbers),
        (c"new", cjson_new),
    ];
    ffi::lua_newtable(l);
    let cfg = ffi::lua_newuserdata(l, std::mem::size_of::<Config>()) as *mut Config;
    if !cfg.is_null() {
        cfg.write(DEFAULT_CONFIG);
    }
    for (name, func) in functions {
        luaffi::set_closure(l, name, func, 1);
    }
    ffi::lua_settop(l, -2);
    ffi::lua_pushlightuserdata(l, ptr::null_mut());
    ffi::lua_setfield(l, -2, c"null".as_ptr());
    luaffi::set_string_field(l, c"_NAME", b"cjson");
    luaffi::set_string_field(l, c"_VERSION", b"2.1.0");
    1
}

/// Creates the global `cjson` table (fields: _NAME _VERSION decode
/// decode_invalid_numbers decode_max_depth encode encode_invalid_numbers
/// encode_keep_buffer encode_max_depth encode_number_precision encode_sparse_array
/// new null).
pub fn register(lua: &mlua::Lua) -> mlua::Result<()> {
    super::register_global(lua, "cjson", cjson_new)
}
