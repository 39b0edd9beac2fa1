//! Pins down the documented differences from Redis 7.0.15 so that they stay
//! deliberate. Everything else is covered by `compat_tests.rs`.
use mlua::{Lua, Value};

fn new_lua() -> Lua {
    let lua = Lua::new();
    super::register_all(&lua).expect("register libraries");
    lua
}

/// Runs `call` under `depth` nested pcalls and reports its result or error.
fn nested(lua: &Lua, depth: u32, call: &str) -> String {
    let script = format!(
        r#"
        local function nest(n, f)
          if n == 0 then return f() end
          local ok, r = pcall(nest, n - 1, f)
          return ok and r or ('E:' .. tostring(r))
        end
        return nest({depth}, function() return {call} end)
        "#
    );
    lua.load(script).eval().unwrap()
}

/// The deepest pcall nesting under which `call` still runs.
fn max_depth(lua: &Lua, call: &str) -> u32 {
    (150..260)
        .take_while(|&depth| !nested(lua, depth, call).starts_with("E:"))
        .last()
        .unwrap()
}

/// The protected call used by functions that build Rust buffers costs one C call
/// level (LUAI_MAXCCALLS is 200): where Redis runs every library function under
/// the same pcall nesting (197 inside EVAL), these ones stop one level earlier
/// with "C stack overflow".
#[test]
fn protected_functions_use_one_more_c_call_level() {
    let lua = new_lua();
    let plain = max_depth(&lua, "bit.tohex(1)");
    for call in [
        "struct.size('i')",
        "struct.unpack('b', 'x')",
        "cjson.encode_max_depth()",
    ] {
        assert_eq!(max_depth(&lua, call), plain, "{call}");
    }
    for call in [
        "cjson.encode({1})",
        "cjson.decode('[1]')[1]",
        "cmsgpack.pack(1)",
        "cmsgpack.unpack('\\1')",
        "struct.pack('b', 1)",
    ] {
        assert_eq!(max_depth(&lua, call), plain - 1, "{call}");
        assert_eq!(nested(&lua, plain, call), "E:C stack overflow", "{call}");
    }
}

/// A Lua memory error inside a protected function reaches the caller with the
/// same message ("not enough memory"), but as a runtime error rather than
/// LUA_ERRMEM, so mlua reports it as `RuntimeError` instead of `MemoryError`.
#[test]
fn memory_errors_inside_protected_functions_are_runtime_errors() {
    let lua = new_lua();
    lua.load("big = {} for i = 1, 20000 do big[i] = string.rep('x', 100) .. i end")
        .exec()
        .unwrap();
    let used = lua.used_memory();
    lua.set_memory_limit(used + 256 * 1024).unwrap();
    let caught: Value = lua
        .load("local ok, err = pcall(cjson.encode, big) return err")
        .eval()
        .unwrap();
    assert_eq!(caught.to_string().unwrap(), "not enough memory");
    match lua.load("return cmsgpack.pack(big)").exec() {
        Err(mlua::Error::RuntimeError(message)) => {
            assert!(message.starts_with("not enough memory"), "{message}")
        }
        other => panic!("unexpected: {other:?}"),
    }
    lua.set_memory_limit(0).unwrap();
    let json: String = lua.load("return cjson.encode({big[1]})").eval().unwrap();
    assert!(json.starts_with("[\"xxx"));
}
