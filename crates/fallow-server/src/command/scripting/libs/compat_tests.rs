//! Replays Lua expressions whose expected results were captured from a real Redis
//! 7.0.15 (`compat/gen_expected.py`): each case runs the shared preamble
//! (`compat/preamble.lua`) and `return try(function() return <expr> end)` in a fresh
//! Lua state, under the chunk name Redis uses, so even error positions must match.
use mlua::{Lua, Value};

mod expected {
    pub mod bit {
        include!("compat/expected/bit.rs");
    }
    pub mod cjson {
        include!("compat/expected/cjson.rs");
    }
    pub mod cmsgpack {
        include!("compat/expected/cmsgpack.rs");
    }
    pub mod structlib {
        include!("compat/expected/struct.rs");
    }
}

const PREAMBLE: &str = include_str!("compat/preamble.lua");

fn run_case(expr: &str) -> Vec<u8> {
    if std::env::var_os("LUALIBS_TRACE").is_some() {
        eprintln!("case: {expr}");
    }
    let lua = Lua::new();
    super::register_all(&lua).expect("register libraries");
    let script = format!("{PREAMBLE}\nreturn try(function() return {expr} end)");
    match lua.load(&script).set_name("@user_script").eval::<Value>() {
        Ok(Value::String(s)) => s.as_bytes().to_vec(),
        Ok(other) => format!("NONSTRING {other:?}").into_bytes(),
        Err(err) => format!("SCRIPTERR {err}").into_bytes(),
    }
}

fn check_all(library: &str, cases: &[(&str, &[u8])]) {
    let mut failures = Vec::new();
    for (expr, want) in cases {
        let got = run_case(expr);
        if got != *want {
            failures.push(format!(
                "  {expr}\n    want: {}\n    got:  {}",
                String::from_utf8_lossy(want).escape_debug(),
                String::from_utf8_lossy(&got).escape_debug()
            ));
        }
    }
    println!(
        "{library}: {} of {} cases match Redis 7.0.15",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{library}: {} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bit_matches_redis() {
    check_all("bit", expected::bit::CASES);
}

#[test]
fn struct_matches_redis() {
    check_all("struct", expected::structlib::CASES);
}

#[test]
fn cjson_matches_redis() {
    check_all("cjson", expected::cjson::CASES);
}

#[test]
fn cmsgpack_matches_redis() {
    check_all("cmsgpack", expected::cmsgpack::CASES);
}
