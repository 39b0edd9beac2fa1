//! DUMP and RESTORE of the store's values: a value as Redis 7.0's payload (`rdb`) and back.
//!
//! | fallow value           | payload                                                              |
//! |------------------------|----------------------------------------------------------------------|
//! | string                 | string (integer and LZF encodings as Redis chooses them)             |
//! | list                   | quicklist of listpacks                                               |
//! | set                    | intset (all integers, ≤ 512) or set                                  |
//! | sorted set             | listpack (≤ 128 members of ≤ 64 bytes) or skiplist                   |
//! | hash                   | listpack (≤ 128 fields of ≤ 64 bytes) or hash                        |
//! | stream, top-k, bag     | none: DUMP refuses them (`NoPayload`)                                |
//!
//! Elements go in the store's order: insertion order for hashes and sets, score order for sorted sets.
//! A small hash built by HSET in one order therefore dumps byte for byte as Redis's does.
use crate::rdb::{decode_dump, encode_dump, DumpError, EncodingLimits, RdbValue};
use crate::types::{Collection, HashValue, ListValue, SetValue, ZSetValue};
use crate::OwnedData;

/// The value's type has no payload form here.
#[derive(Debug, PartialEq, Eq)]
pub struct NoPayload {
    pub type_name: &'static str,
}

/// The DUMP payload of `data`.
pub fn dump_payload(data: &OwnedData, limits: &EncodingLimits) -> Result<Vec<u8>, NoPayload> {
    let value = match data {
        OwnedData::String { bytes, .. } => RdbValue::String(bytes.clone()),
        OwnedData::Collection(collection) => rdb_value(collection)?,
    };
    Ok(encode_dump(&value, limits))
}

fn rdb_value(collection: &Collection) -> Result<RdbValue, NoPayload> {
    let owned = |bytes: &[u8]| bytes.to_vec();
    Ok(match collection {
        Collection::List(list) => RdbValue::List(list.iter().map(owned).collect()),
        Collection::Set(set) => RdbValue::Set(set.iter().map(owned).collect()),
        Collection::ZSet(zset) => RdbValue::SortedSet(
            zset.iter()
                .map(|(member, score)| (member.to_vec(), score))
                .collect(),
        ),
        Collection::Hash(hash) => RdbValue::Hash(
            hash.iter()
                .map(|(field, value)| (field.to_vec(), value.to_vec()))
                .collect(),
        ),
        other => {
            return Err(NoPayload {
                type_name: other.kind().name(),
            })
        }
    })
}

/// The value a RESTORE payload holds. Err is Redis's refusal (checksum or format).
pub fn restore_data(payload: &[u8]) -> Result<OwnedData, DumpError> {
    Ok(match decode_dump(payload)? {
        RdbValue::String(bytes) => OwnedData::String {
            bytes,
            client_flags: 0,
        },
        RdbValue::List(items) => {
            let mut list = ListValue::default();
            items.iter().for_each(|item| list.push_back(item));
            OwnedData::Collection(Collection::List(list))
        }
        RdbValue::Set(members) => {
            let mut set = SetValue::default();
            set.insert_all(members.iter().map(Vec::as_slice));
            OwnedData::Collection(Collection::Set(set))
        }
        RdbValue::SortedSet(members) => {
            let mut zset = ZSetValue::default();
            for (member, score) in &members {
                zset.insert(member, *score);
            }
            OwnedData::Collection(Collection::ZSet(zset))
        }
        RdbValue::Hash(pairs) => {
            let mut hash = HashValue::default();
            for (field, value) in &pairs {
                hash.insert(field, value);
            }
            OwnedData::Collection(Collection::Hash(hash))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(data: OwnedData) -> OwnedData {
        let payload = dump_payload(&data, &EncodingLimits::default()).expect("has a payload");
        restore_data(&payload).expect("our payload restores")
    }

    #[test]
    fn every_redis_type_round_trips() {
        let restored = round_trip(OwnedData::String {
            bytes: b"12345".to_vec(),
            client_flags: 0,
        });
        assert!(matches!(restored, OwnedData::String { ref bytes, .. } if bytes == b"12345"));
        let mut hash = HashValue::default();
        hash.insert(b"f", b"v");
        hash.insert(b"g", b"w");
        let restored = round_trip(OwnedData::Collection(Collection::Hash(hash)));
        let OwnedData::Collection(Collection::Hash(hash)) = restored else {
            panic!("a hash restores as a hash")
        };
        assert_eq!(
            hash.iter().collect::<Vec<_>>(),
            [(&b"f"[..], &b"v"[..]), (&b"g"[..], &b"w"[..])]
        );
        let mut zset = ZSetValue::default();
        zset.insert(b"a", 1.5);
        zset.insert(b"b", f64::NEG_INFINITY);
        let restored = round_trip(OwnedData::Collection(Collection::ZSet(zset)));
        let OwnedData::Collection(Collection::ZSet(zset)) = restored else {
            panic!("a sorted set restores as one")
        };
        assert_eq!(zset.score(b"b"), Some(f64::NEG_INFINITY));
        let mut list = ListValue::default();
        (0..1000).for_each(|n| list.push_back(format!("item{n}").as_bytes()));
        let restored = round_trip(OwnedData::Collection(Collection::List(list)));
        let OwnedData::Collection(Collection::List(list)) = restored else {
            panic!("a list restores as a list")
        };
        assert_eq!(list.len(), 1000);
        assert_eq!(list.get(999), Some(&b"item999"[..]));
    }

    #[test]
    fn a_small_hash_dumps_as_redis_does() {
        // DUMP of `HSET h f v` on Redis 7.0.15.
        let expected = b"\x10\r\r\x00\x00\x00\x02\x00\x81f\x02\x81v\x02\xff\n\x00 \xf1=D#T\x08\x9d";
        let mut hash = HashValue::default();
        hash.insert(b"f", b"v");
        let payload = dump_payload(
            &OwnedData::Collection(Collection::Hash(hash)),
            &EncodingLimits::default(),
        )
        .unwrap();
        assert_eq!(payload, expected);
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let payload = dump_payload(
            &OwnedData::String {
                bytes: b"value".to_vec(),
                client_flags: 0,
            },
            &EncodingLimits::default(),
        )
        .unwrap();
        let mut damaged = payload.clone();
        damaged[1] ^= 1;
        assert_eq!(
            restore_data(&damaged).unwrap_err().redis_message(),
            "ERR DUMP payload version or checksum are wrong"
        );
        assert!(restore_data(&payload[..3]).is_err());
    }
}
