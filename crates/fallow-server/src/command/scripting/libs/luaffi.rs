//! Shared plumbing for the Rust ports of the C libraries Redis 7.0.15 preloads into
//! its Lua 5.1 VM (bit, cjson, cmsgpack, struct).
//!
//! Why the raw C API instead of mlua's safe `create_function`: the originals are C
//! functions and scripts observe that. Their errors are plain strings carrying
//! `luaL_where(L, 1)` ("user_script:1: ...") or `luaL_argerror` text ("bad argument
//! #2 to 'pack' (...)"), and their depth limits come from `lua_checkstack` on their
//! own stack frame. mlua callbacks raise userdata errors and keep values in an
//! auxiliary stack, so both would differ. Every library function here is therefore an
//! `extern "C-unwind"` function that talks to the Lua stack exactly like the C code.
//!
//! Soundness rules followed by every function in this crate:
//! * A Lua error is a `longjmp`. A frame that a Lua error can cross must own nothing
//!   with a destructor ("plain old frame"). Functions that need heap buffers run
//!   their body through `run_protected`: the buffers live in `run_protected`'s frame,
//!   the body runs under `lua_pcall`, and any error is re-raised only after the
//!   buffers are dropped. Error texts travel in `Msg`, a fixed-size `Copy` buffer.
//! * No Rust panic may unwind into Lua: `run_protected` catches panics, and the
//!   direct (unprotected) functions avoid operations that can panic.
use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use mlua::ffi;
pub(crate) use mlua::ffi::lua_State;

/// The Lua state handle every function receives.
pub(crate) type State = *mut lua_State;

/// Longest error text any of the libraries produces is under 100 bytes.
const MSG_CAPACITY: usize = 110;

/// A short error message kept inline (no heap), so it may live in a frame that a
/// Lua error longjmps over. Longer texts are truncated (none of ours are).
#[derive(Clone, Copy)]
pub(crate) struct Msg {
    len: u8,
    bytes: [u8; MSG_CAPACITY],
}

impl Msg {
    pub(crate) fn new() -> Self {
        Msg {
            len: 0,
            bytes: [0; MSG_CAPACITY],
        }
    }

    pub(crate) fn from_bytes(text: &[u8]) -> Self {
        let mut msg = Msg::new();
        msg.push_bytes(text);
        msg
    }

    pub(crate) fn push_bytes(&mut self, text: &[u8]) {
        for &byte in text {
            if let Some(slot) = self.bytes.get_mut(usize::from(self.len)) {
                *slot = byte;
                self.len += 1;
            }
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl fmt::Write for Msg {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.push_bytes(text.as_bytes());
        Ok(())
    }
}

/// Formats a `Msg` (use with `format_args!`), like `format!` without allocating.
pub(crate) fn msg(args: fmt::Arguments) -> Msg {
    let mut text = Msg::new();
    let _ = fmt::Write::write_fmt(&mut text, args);
    text
}

/// An error a library function reports; raised by the function Lua called, so that
/// positions and names in the message match the C library.
#[derive(Clone, Copy)]
pub(crate) enum Failure {
    /// `luaL_error(L, "%s", msg)`: prefixed with the caller's position.
    Error(Msg),
    /// `luaL_argerror(L, narg, msg)`: "bad argument #narg to 'name' (msg)".
    Arg(c_int, Msg),
}

pub(crate) type Outcome<T> = Result<T, Failure>;

pub(crate) fn error<T>(text: Msg) -> Outcome<T> {
    Err(Failure::Error(text))
}

/// Raises `luaL_error`-style: message prefixed by `luaL_where(L, 1)`.
///
/// # Safety
/// `l` must be a valid state inside a C function call; the calling frames must not
/// own values with destructors (this longjmps).
pub(crate) unsafe fn raise_error(l: State, text: &[u8]) -> ! {
    // The error discards this frame's stack anyway; emptying it first guarantees
    // slots for the message even when the failure was "stack overflow".
    ffi::lua_settop(l, 0);
    ffi::luaL_where(l, 1);
    push_bytes(l, text);
    ffi::lua_concat(l, 2);
    ffi::lua_error(l)
}

/// Raises `luaL_argerror(L, narg, text)`.
///
/// # Safety
/// Same as [`raise_error`].
pub(crate) unsafe fn raise_arg_error(l: State, narg: c_int, text: &[u8]) -> ! {
    ffi::lua_settop(l, 0);
    push_bytes(l, text);
    ffi::luaL_argerror(l, narg, ffi::lua_tostring(l, -1));
    ffi::lua_error(l) // not reached: luaL_argerror raises
}

/// Raises a reported failure.
///
/// # Safety
/// Same as [`raise_error`].
pub(crate) unsafe fn raise(l: State, failure: Failure) -> ! {
    match failure {
        Failure::Error(text) => raise_error(l, text.as_bytes()),
        Failure::Arg(narg, text) => raise_arg_error(l, narg, text.as_bytes()),
    }
}

/// Raises the failure or returns the value.
///
/// # Safety
/// Same as [`raise_error`].
pub(crate) unsafe fn or_raise<T>(l: State, outcome: Outcome<T>) -> T {
    match outcome {
        Ok(value) => value,
        Err(failure) => raise(l, failure),
    }
}

/// Pushes a byte string.
///
/// # Safety
/// `l` must be valid with a free stack slot.
pub(crate) unsafe fn push_bytes(l: State, bytes: &[u8]) {
    ffi::lua_pushlstring_(l, bytes.as_ptr() as *const c_char, bytes.len());
}

/// The type name `luaL_typename` reports for a stack slot ("no value" past the top).
///
/// # Safety
/// `l` must be valid.
pub(crate) unsafe fn type_name(l: State, idx: c_int) -> &'static [u8] {
    match ffi::lua_type(l, idx) {
        ffi::LUA_TNONE => b"no value",
        ffi::LUA_TNIL => b"nil",
        ffi::LUA_TBOOLEAN => b"boolean",
        ffi::LUA_TLIGHTUSERDATA | ffi::LUA_TUSERDATA => b"userdata",
        ffi::LUA_TNUMBER => b"number",
        ffi::LUA_TSTRING => b"string",
        ffi::LUA_TTABLE => b"table",
        ffi::LUA_TFUNCTION => b"function",
        ffi::LUA_TTHREAD => b"thread",
        _ => b"?",
    }
}

/// The failure of `luaL_typerror(L, narg, expected)`.
///
/// # Safety
/// `l` must be valid.
pub(crate) unsafe fn type_failure(l: State, narg: c_int, expected: &str) -> Failure {
    let mut text = Msg::new();
    text.push_bytes(expected.as_bytes());
    text.push_bytes(b" expected, got ");
    text.push_bytes(type_name(l, narg));
    Failure::Arg(narg, text)
}

/// `luaL_checknumber` that reports instead of raising.
///
/// # Safety
/// `l` must be valid.
pub(crate) unsafe fn check_number(l: State, narg: c_int) -> Outcome<f64> {
    let n = ffi::lua_tonumber(l, narg);
    if n == 0.0 && ffi::lua_isnumber(l, narg) == 0 {
        return Err(type_failure(l, narg, "number"));
    }
    Ok(n)
}

/// `luaL_checklstring` that reports instead of raising (numbers are converted in
/// place, as in C). The slice borrows the Lua string, which stays on the stack.
///
/// # Safety
/// `l` must be valid; the returned slice is valid while the slot is untouched.
pub(crate) unsafe fn check_bytes<'a>(l: State, narg: c_int) -> Outcome<&'a [u8]> {
    match to_bytes(l, narg) {
        Some(bytes) => Ok(bytes),
        None => Err(type_failure(l, narg, "string")),
    }
}

/// `lua_tolstring` as a slice (`None` when the value is not a string or number).
///
/// # Safety
/// Same as [`check_bytes`].
pub(crate) unsafe fn to_bytes<'a>(l: State, idx: c_int) -> Option<&'a [u8]> {
    let mut len = 0usize;
    let ptr = ffi::lua_tolstring(l, idx, &mut len);
    if ptr.is_null() {
        return None;
    }
    Some(std::slice::from_raw_parts(ptr as *const u8, len))
}

/// The real Lua 5.1 `luaL_checkstack` as a report ("stack overflow (msg)").
///
/// # Safety
/// `l` must be valid.
pub(crate) unsafe fn check_stack(l: State, slots: c_int, what: &str) -> Outcome<()> {
    if ffi::lua_checkstack(l, slots) == 0 {
        return error(msg(format_args!("stack overflow ({what})")));
    }
    Ok(())
}

/// C's `(int64_t)x` on x86-64 (`cvttsd2si`): truncation, and the "integer
/// indefinite" value `i64::MIN` for NaN and out-of-range inputs.
pub(crate) fn c_double_to_i64(x: f64) -> i64 {
    if (-TWO_POW_63..TWO_POW_63).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

/// 2^63 as a double.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// C's `(int)x` on x86-64: truncation, `i32::MIN` for NaN and out-of-range inputs.
pub(crate) fn c_double_to_i32(x: f64) -> i32 {
    if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
        x as i32
    } else {
        i32::MIN
    }
}

/// C's `(uint64_t)x` as gcc compiles it on x86-64: values >= 2^63 are converted
/// after subtracting 2^63; everything else (negatives, NaN) goes through the
/// signed conversion.
pub(crate) fn c_double_to_u64(x: f64) -> u64 {
    if x >= TWO_POW_63 {
        (c_double_to_i64(x - TWO_POW_63) as u64) ^ (1u64 << 63)
    } else {
        c_double_to_i64(x) as u64
    }
}

/// C's `(float)d` on x86-64 (`cvtsd2ss`), with NaN payloads handled the way the
/// instruction does (quiet bit set, top payload bits kept, sign kept).
pub(crate) fn c_double_to_float(d: f64) -> f32 {
    if d.is_nan() {
        let bits = d.to_bits();
        let sign = ((bits >> 63) as u32) << 31;
        let payload = ((bits >> 29) as u32) & 0x003f_ffff;
        return f32::from_bits(sign | 0x7fc0_0000 | payload);
    }
    d as f32
}

/// C's `(double)f` on x86-64 (`cvtss2sd`), NaN payloads included.
pub(crate) fn c_float_to_double(f: f32) -> f64 {
    if f.is_nan() {
        let bits = f.to_bits();
        let sign = ((bits >> 31) as u64) << 63;
        let payload = ((bits & 0x003f_ffff) as u64) << 29;
        return f64::from_bits(sign | 0x7ff8_0000_0000_0000 | payload);
    }
    f as f64
}

/// Pushes a C function closure over the `upvalues` values on top of the stack and
/// stores it in the table below them under `name`.
///
/// # Safety
/// `l` must be valid; the table must sit just below the upvalues.
pub(crate) unsafe fn set_closure(
    l: State,
    name: &std::ffi::CStr,
    func: ffi::lua_CFunction,
    upvalues: c_int,
) {
    for _ in 0..upvalues {
        ffi::lua_pushvalue(l, -upvalues);
    }
    ffi::lua_pushcclosure(l, func, upvalues);
    ffi::lua_setfield(l, -(upvalues + 2), name.as_ptr());
}

/// Sets `table[name] = value` for a string value; the table is on top.
///
/// # Safety
/// `l` must be valid with the table on top.
pub(crate) unsafe fn set_string_field(l: State, name: &std::ffi::CStr, value: &[u8]) {
    push_bytes(l, value);
    ffi::lua_setfield(l, -2, name.as_ptr());
}

/// How a protected body ended.
#[derive(Clone, Copy)]
enum Ending {
    Returned(c_int),
    Failed(Failure),
    Panicked,
    LuaError,
}

struct Job<'a> {
    body: &'a mut dyn FnMut(State) -> Outcome<c_int>,
    ending: Ending,
}

unsafe extern "C-unwind" fn protected_entry(l: State) -> c_int {
    let job = ffi::lua_touserdata(l, -1) as *mut Job;
    ffi::lua_settop(l, -2);
    if job.is_null() {
        return 0;
    }
    let job = &mut *job;
    let result = catch_unwind(AssertUnwindSafe(|| (job.body)(l)));
    match result {
        Ok(Ok(results)) => {
            job.ending = Ending::Returned(results);
            results
        }
        Ok(Err(failure)) => {
            job.ending = Ending::Failed(failure);
            0
        }
        Err(_) => {
            job.ending = Ending::Panicked;
            0
        }
    }
}

/// Runs `body(l, ctx, &mut state)` under `lua_pcall`, with a fresh `S::default()`
/// as scratch state and the caller's arguments laid out exactly as in the caller's
/// own frame (so `lua_checkstack` limits and argument indices are unchanged).
/// Returns the body's result count, or raises its failure (from the caller's frame,
/// after dropping `state`), or re-raises a Lua error it hit.
///
/// # Safety
/// Must be called from a C function invoked by Lua, before it pushed anything,
/// and its frame must own nothing with a destructor.
pub(crate) unsafe fn run_protected<S: Default, C: Copy>(
    l: State,
    ctx: C,
    body: fn(State, C, &mut S) -> Outcome<c_int>,
) -> c_int {
    ffi::lua_pushcfunction(l, protected_entry);
    ffi::lua_insert(l, 1);
    let ending = {
        let mut state = S::default();
        let mut run = |l: State| body(l, ctx, &mut state);
        let mut job = Job {
            body: &mut run,
            ending: Ending::Panicked,
        };
        ffi::lua_pushlightuserdata(l, &mut job as *mut Job as *mut c_void);
        let nargs = ffi::lua_gettop(l) - 1;
        if ffi::lua_pcall(l, nargs, ffi::LUA_MULTRET, 0) == 0 {
            job.ending
        } else {
            Ending::LuaError
        }
    };
    match ending {
        Ending::Returned(results) => results,
        Ending::Failed(failure) => raise(l, failure),
        Ending::Panicked => raise_error(l, b"internal error in Lua library"),
        Ending::LuaError => ffi::lua_error(l),
    }
}
