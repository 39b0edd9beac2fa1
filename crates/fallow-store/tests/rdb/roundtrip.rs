//! encode_dump -> decode_dump round trips on random values, under the
//! default and some non-default encoding limits, plus the encoding choice
//! (type byte) at each threshold.

use super::common::normalized;
use fallow_store::rdb::{decode_dump, encode_dump, EncodingLimits, RdbValue};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    fn element(&mut self) -> Vec<u8> {
        match self.below(4) {
            0 => {
                let shift = self.below(64);
                (self.next() as i64 >> shift).to_string().into_bytes()
            }
            1 => {
                let byte = b'a' + self.below(3) as u8;
                vec![byte; self.below(100)]
            }
            _ => {
                let len = self.below(40);
                (0..len).map(|_| self.next() as u8).collect()
            }
        }
    }

    fn distinct(&mut self, count: usize) -> Vec<Vec<u8>> {
        let mut seen = std::collections::HashSet::new();
        (0..count)
            .map(|_| self.element())
            .filter(|e| seen.insert(e.clone()))
            .collect()
    }

    fn score(&mut self) -> f64 {
        match self.below(4) {
            0 => (self.below(200) as f64) - 100.0,
            1 => f64::from_bits(self.next()),
            2 => {
                let pick = self.below(4);
                [f64::INFINITY, f64::NEG_INFINITY, 0.0, 1e300][pick]
            }
            _ => (self.next() as f64) / 7.0,
        }
    }

    fn value(&mut self) -> RdbValue {
        let size_class = [5, 200, 700][self.below(3)];
        let count = 1 + self.below(size_class);
        match self.below(5) {
            0 => RdbValue::String(self.element()),
            1 => RdbValue::List((0..count).map(|_| self.element()).collect()),
            2 => RdbValue::Set(self.distinct(count)),
            3 => {
                let members = self.distinct(count);
                RdbValue::SortedSet(
                    members
                        .into_iter()
                        .map(|m| (m, self.score()))
                        .filter(|(_, s)| !s.is_nan())
                        .collect(),
                )
            }
            _ => {
                let fields = self.distinct(count);
                RdbValue::Hash(fields.into_iter().map(|f| (f, self.element())).collect())
            }
        }
    }
}

fn limit_variants() -> Vec<EncodingLimits> {
    let default = EncodingLimits::default();
    vec![
        default.clone(),
        EncodingLimits {
            hash_max_listpack_entries: 3,
            zset_max_listpack_entries: 3,
            set_max_intset_entries: 3,
            list_max_listpack_size: 4,
            list_compress_depth_nodes: 1,
            ..default.clone()
        },
        EncodingLimits {
            list_max_listpack_size: -5,
            list_compress_depth_nodes: 3,
            rdb_compression: false,
            ..default
        },
    ]
}

#[test]
fn random_values_round_trip() {
    let mut rng = Rng(0x1234_5678);
    for limits in limit_variants() {
        for _ in 0..400 {
            let value = rng.value();
            if matches!(&value, RdbValue::SortedSet(p) if p.is_empty()) {
                continue;
            }
            let payload = encode_dump(&value, &limits);
            let decoded = decode_dump(&payload).unwrap_or_else(|e| panic!("{e} for {value:?}"));
            assert_eq!(normalized(&decoded), normalized(&value));
        }
    }
}

fn type_byte(value: &RdbValue) -> u8 {
    encode_dump(value, &EncodingLimits::default())[0]
}

fn strings(count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("{i:0len$}x").into_bytes())
        .collect()
}

#[test]
fn encoding_thresholds_match_redis_defaults() {
    let ints = |n: usize| {
        (0..n)
            .map(|i| i.to_string().into_bytes())
            .collect::<Vec<_>>()
    };
    assert_eq!(type_byte(&RdbValue::Set(ints(512))), 11);
    assert_eq!(type_byte(&RdbValue::Set(ints(513))), 2);
    assert_eq!(type_byte(&RdbValue::Set(vec![b"007".to_vec()])), 2);
    let pairs = |n: usize, len: usize| {
        strings(n, len)
            .into_iter()
            .map(|s| (s.clone(), s))
            .collect::<Vec<_>>()
    };
    assert_eq!(type_byte(&RdbValue::Hash(pairs(128, 5))), 16);
    assert_eq!(type_byte(&RdbValue::Hash(pairs(129, 5))), 4);
    assert_eq!(
        type_byte(&RdbValue::Hash(pairs(2, 63))),
        16,
        "64-byte values"
    );
    assert_eq!(
        type_byte(&RdbValue::Hash(pairs(2, 64))),
        4,
        "65-byte values"
    );
    let scored = |n: usize, len: usize| {
        strings(n, len)
            .into_iter()
            .map(|s| (s, 1.5))
            .collect::<Vec<_>>()
    };
    assert_eq!(type_byte(&RdbValue::SortedSet(scored(128, 5))), 17);
    assert_eq!(type_byte(&RdbValue::SortedSet(scored(129, 5))), 5);
    assert_eq!(type_byte(&RdbValue::SortedSet(scored(2, 64))), 5);
    assert_eq!(type_byte(&RdbValue::List(vec![b"x".to_vec()])), 18);
    assert_eq!(type_byte(&RdbValue::String(Vec::new())), 0);
}

#[test]
fn empty_collections_are_refused_like_redis() {
    for value in [
        RdbValue::List(vec![]),
        RdbValue::Set(vec![]),
        RdbValue::Hash(vec![]),
        RdbValue::SortedSet(vec![]),
    ] {
        assert!(decode_dump(&encode_dump(&value, &EncodingLimits::default())).is_err());
    }
}
