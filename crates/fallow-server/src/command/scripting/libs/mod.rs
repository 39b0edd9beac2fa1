//! The four C libraries Redis 7.0.15 preloads into its Lua 5.1 VM, reimplemented in
//! Rust on mlua's Lua C API: `bit` (LuaBitOp), `cjson` (lua-cjson 2.1.0 as patched
//! by Redis), `cmsgpack` (lua-cmsgpack 0.4.0) and `struct` (struct.c 1.4). Each
//! module's header comment lists what it mirrors and any known difference.
//!
//! `luaffi` holds the shared C-API plumbing (error raising with C-identical texts,
//! protected execution for functions that need heap buffers).
pub mod bit;
pub mod cjson;
pub mod cmsgpack;
mod cnumber;
mod luaffi;
pub mod structlib;

use mlua::{Lua, Table};

/// Creates the globals `bit`, `cjson`, `cmsgpack` and `struct`.
pub fn register_all(lua: &Lua) -> mlua::Result<()> {
    bit::register(lua)?;
    cjson::register(lua)?;
    cmsgpack::register(lua)?;
    structlib::register(lua)
}

/// Runs a library's `luaopen`-style C function and stores its table as a global.
fn register_global(lua: &Lua, name: &str, open: mlua::ffi::lua_CFunction) -> mlua::Result<()> {
    // SAFETY: `open` is one of this crate's C functions; it only builds a table.
    let open = unsafe { lua.create_c_function(open)? };
    let table: Table = open.call(())?;
    lua.globals().set(name, table)
}

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
mod known_differences_tests;
#[cfg(test)]
mod property_tests;
