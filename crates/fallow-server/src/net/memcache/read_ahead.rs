//! Reading a request's tier-2 values ahead (docs/tier2.md), as RESP commands do: before a request that
//! reads values runs (text get/gets/gat/gats, mg, binary get/getk/gat/gatk and their quiet forms, and the
//! writes that build on the old value: append/prepend (text, `ms` modes A and P, binary), incr/decr
//! (text, `ma`, binary) and their quiet forms), the
//! stubs among its keys are found; the connection then stops its batch there, reads their records off the
//! worker (`command::dispatch::tier2::read_ahead`: io_uring or the I/O pool) and runs the request once
//! they are in the store, so its worker does not read the device under the shard lock.
use super::{auth, Exec};
use crate::command::dispatch::tier2;
use crate::connection::Tier2Fault;
use fallow_proto::memcache::{BinaryOpcode, McRequest, StoreMode};

/// The stubs among the keys `request` reads (none while the store has no stubs, at the cost of one
/// atomic load). Nothing is read for a connection that may not run the request (unauthenticated, or
/// denied by its ACL user), nor for a request whose lock wait already failed (it is only answered).
pub(super) fn faults(exec: &Exec, request: &McRequest) -> Vec<Tier2Fault> {
    if !tier2::any_stubs(exec.server) || exec.locks.refused.is_some() {
        return Vec::new();
    }
    let keys = read_keys(request);
    if keys.is_empty() || !auth::may_run(exec, request) {
        return Vec::new();
    }
    let now = fallow_store::now_ms();
    let mut faults = tier2::stub_faults(exec.server, exec.db, keys, now);
    // A multi-get naming a key twice reads its record once.
    if faults.len() > 1 {
        faults.sort_unstable_by_key(|fault| fault.slot.0);
        faults.dedup_by_key(|fault| fault.slot.0);
    }
    faults
}

/// The keys whose values `request` reads; empty for requests that read none (writes that replace a
/// value whole, deletes, touches).
fn read_keys(request: &McRequest) -> Vec<&[u8]> {
    let builds_on_old =
        |mode: Option<StoreMode>| matches!(mode, Some(StoreMode::Append | StoreMode::Prepend));
    match request {
        McRequest::Get { keys, .. } => keys.iter().map(|key| &key[..]).collect(),
        McRequest::MetaGet { key, .. }
        | McRequest::Arith { key, .. }
        | McRequest::MetaArith { key, .. } => vec![&key[..]],
        McRequest::Store { key, mode, .. } if builds_on_old(Some(*mode)) => vec![&key[..]],
        McRequest::MetaSet { key, flags, .. } if builds_on_old(flags.set_mode) => vec![&key[..]],
        McRequest::Binary(binary) => match binary.op().base() {
            BinaryOpcode::Get
            | BinaryOpcode::GetK
            | BinaryOpcode::Gat
            | BinaryOpcode::GatK
            | BinaryOpcode::Append
            | BinaryOpcode::Prepend
            | BinaryOpcode::Increment
            | BinaryOpcode::Decrement => vec![&binary.key[..]],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_proto::memcache::{parse, McLimits, Parsed};

    fn keys_of(input: &[u8]) -> Vec<Vec<u8>> {
        match parse(input, &McLimits::default()) {
            Parsed::Request { request, .. } => read_keys(&request)
                .into_iter()
                .map(|key| key.to_vec())
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn binary(opcode: u8, key: &[u8]) -> Vec<u8> {
        let extras: &[u8] = match opcode {
            0x1d | 0x1e | 0x23 | 0x24 => &[0, 0, 0, 10],
            // incr, decr and their quiet forms: delta, initial value, expiry
            0x05 | 0x06 | 0x15 | 0x16 => &[0; 20],
            _ => &[],
        };
        let body = extras.len() + key.len();
        let mut packet = vec![0x80, opcode];
        packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
        packet.push(extras.len() as u8);
        packet.extend_from_slice(&[0, 0, 0]);
        packet.extend_from_slice(&(body as u32).to_be_bytes());
        packet.extend_from_slice(&[0; 12]);
        packet.extend_from_slice(extras);
        packet.extend_from_slice(key);
        packet
    }

    #[test]
    fn requests_that_read_values_name_their_keys() {
        let k = |key: &[u8]| key.to_vec();
        assert_eq!(keys_of(b"get a b a\r\n"), [k(b"a"), k(b"b"), k(b"a")]);
        assert_eq!(keys_of(b"gets a\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"gat 10 a b\r\n"), [k(b"a"), k(b"b")]);
        assert_eq!(keys_of(b"gats 10 a\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"mg a v\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"mg a\r\n"), [k(b"a")]);
        // get, getq, getk, getkq, gat, gatq, gatk, gatkq
        for opcode in [0x00, 0x09, 0x0c, 0x0d, 0x1d, 0x1e, 0x23, 0x24] {
            assert_eq!(keys_of(&binary(opcode, b"k")), [k(b"k")], "{opcode:#x}");
        }
        // append, prepend, incr, decr and their quiet forms
        for opcode in [0x0e, 0x0f, 0x19, 0x1a, 0x05, 0x06, 0x15, 0x16] {
            assert_eq!(keys_of(&binary(opcode, b"k")), [k(b"k")], "{opcode:#x}");
        }
        // Writes that build on the old value.
        assert_eq!(keys_of(b"append a 0 0 1\r\nx\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"prepend a 0 0 1\r\nx\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"incr a 1\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"decr a 1\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"ma a\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"ms a 1 MA\r\nx\r\n"), [k(b"a")]);
        assert_eq!(keys_of(b"ms a 1 MP\r\nx\r\n"), [k(b"a")]);
        assert!(keys_of(b"ms a 1\r\nx\r\n").is_empty());
        assert!(keys_of(b"ms a 1 MS\r\nx\r\n").is_empty());
        assert!(keys_of(b"set a 0 0 1\r\nx\r\n").is_empty());
        assert!(keys_of(b"cas a 0 0 1 5\r\nx\r\n").is_empty());
        assert!(keys_of(b"delete a\r\n").is_empty());
        assert!(keys_of(b"touch a 10\r\n").is_empty());
        assert!(keys_of(b"me a\r\n").is_empty());
        assert!(keys_of(b"version\r\n").is_empty());
        assert!(keys_of(&binary(0x04, b"k")).is_empty(), "binary delete");
        assert!(keys_of(&binary(0x0a, b"")).is_empty(), "binary noop");
    }
}
