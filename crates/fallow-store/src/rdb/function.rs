//! Mirrors Redis 7.0.15 FUNCTION DUMP (`functionDumpCommand` +
//! `rdbSaveFunctions`) and the parsing half of FUNCTION RESTORE
//! (`functionRestoreCommand` + `rdbFunctionLoad`), in `src/functions.c` and
//! `src/rdb.c`.
//!
//! Layout:
//!   ( 0xF5 (RDB_OPCODE_FUNCTION2) <library source: RDB string> )*
//!   <RDB version: u16 LE> <CRC64: u64 LE>
//! The source is written with rdbSaveRawString, so with rdbcompression on a
//! library longer than 20 bytes is usually LZF-compressed. Also read: opcode
//! 0xF6 (RDB_OPCODE_FUNCTION, 7.0-rc1/rc2) = <name> <engine> <has-description
//! len> [<description>] <code>, turned into "#!<engine> name=<name>\n<code>"
//! as Redis does.
//!
//! Differences: Redis's loop reads library strings from the whole buffer
//! while more than 10 bytes remain, so a string may run into the footer; we
//! parse only the bytes before the footer. Library order in a multi-library
//! FUNCTION DUMP follows Redis's seeded dict and is not reproducible; we
//! write the order given. Compiling the libraries (and Redis's library-level
//! errors) is the caller's job.

use super::encoding::{self, Reader};
use super::{append_footer, verify_footer, DumpError, DEFAULT_MAX_DECOMPRESSED_BYTES};

const OPCODE_FUNCTION2: u8 = 245;
const OPCODE_FUNCTION_RC: u8 = 246;

const ERR_NOT_FUNCTION: &str = "ERR given type is not a function";
const ERR_LOAD_PAYLOAD: &str = "ERR Failed loading library payload";
const ERR_LOAD_NAME: &str = "ERR Failed loading library name";
const ERR_LOAD_ENGINE: &str = "ERR Failed loading engine name";
const ERR_LOAD_DESC_FLAG: &str = "ERR Failed loading library description indicator";
const ERR_LOAD_DESC: &str = "ERR Failed loading library description";
const ERR_LOAD_BLOB: &str = "ERR Failed loading library blob";

/// FUNCTION DUMP with rdbcompression on (Redis's default).
pub fn encode_function_dump(libraries: &[&[u8]]) -> Vec<u8> {
    encode_function_dump_with(libraries, true)
}

/// FUNCTION DUMP for the given library sources, in the given order.
pub fn encode_function_dump_with(libraries: &[&[u8]], rdb_compression: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for code in libraries {
        out.push(OPCODE_FUNCTION2);
        encoding::write_string(&mut out, code, rdb_compression);
    }
    append_footer(&mut out);
    out
}

/// FUNCTION RESTORE's parsing: the library sources in payload order.
pub fn decode_function_dump(payload: &[u8]) -> Result<Vec<Vec<u8>>, DumpError> {
    let body = verify_footer(payload)?;
    let mut reader = Reader::new(body, DEFAULT_MAX_DECOMPRESSED_BYTES);
    let mut libraries = Vec::new();
    while !reader.is_empty() {
        let code = match reader.byte()? {
            OPCODE_FUNCTION2 => load(&mut reader, ERR_LOAD_PAYLOAD)?,
            OPCODE_FUNCTION_RC => read_rc_library(&mut reader)?,
            _ => return Err(DumpError::Function(ERR_NOT_FUNCTION)),
        };
        libraries.push(code);
    }
    Ok(libraries)
}

fn load(reader: &mut Reader<'_>, error: &'static str) -> Result<Vec<u8>, DumpError> {
    reader.string().map_err(|_| DumpError::Function(error))
}

fn read_rc_library(reader: &mut Reader<'_>) -> Result<Vec<u8>, DumpError> {
    let name = load(reader, ERR_LOAD_NAME)?;
    let engine = load(reader, ERR_LOAD_ENGINE)?;
    let has_description = reader
        .len()
        .map_err(|_| DumpError::Function(ERR_LOAD_DESC_FLAG))?;
    if has_description != 0 {
        load(reader, ERR_LOAD_DESC)?;
    }
    let code = load(reader, ERR_LOAD_BLOB)?;
    let mut source = Vec::with_capacity(engine.len() + name.len() + code.len() + 9);
    source.extend_from_slice(b"#!");
    source.extend_from_slice(&engine);
    source.extend_from_slice(b" name=");
    source.extend_from_slice(&name);
    source.push(b'\n');
    source.extend_from_slice(&code);
    Ok(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &[u8] = b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)";

    #[test]
    fn round_trips_libraries() {
        let payload = encode_function_dump(&[LIB, b"#!lua name=x\n"]);
        assert_eq!(payload[0], OPCODE_FUNCTION2);
        assert_eq!(
            decode_function_dump(&payload).unwrap(),
            vec![LIB.to_vec(), b"#!lua name=x\n".to_vec()]
        );
    }

    #[test]
    fn empty_dump_is_footer_only() {
        let payload = encode_function_dump(&[]);
        assert_eq!(payload.len(), 10);
        assert!(decode_function_dump(&payload).unwrap().is_empty());
    }

    #[test]
    fn rc_format_is_translated() {
        let mut body = vec![OPCODE_FUNCTION_RC];
        for part in [&b"lib"[..], b"LUA"] {
            encoding::write_string(&mut body, part, false);
        }
        encoding::write_len(&mut body, 1);
        encoding::write_string(&mut body, b"desc", false);
        encoding::write_string(&mut body, b"return 1", false);
        append_footer(&mut body);
        assert_eq!(
            decode_function_dump(&body).unwrap(),
            vec![b"#!LUA name=lib\nreturn 1".to_vec()]
        );
    }

    #[test]
    fn errors_use_redis_texts() {
        let mut wrong_type = vec![0u8, 1, b'x'];
        append_footer(&mut wrong_type);
        assert_eq!(
            decode_function_dump(&wrong_type)
                .unwrap_err()
                .redis_message(),
            "ERR given type is not a function"
        );
        let mut truncated = vec![OPCODE_FUNCTION2, 5, b'x'];
        append_footer(&mut truncated);
        assert_eq!(
            decode_function_dump(&truncated)
                .unwrap_err()
                .redis_message(),
            "ERR Failed loading library payload"
        );
    }
}
