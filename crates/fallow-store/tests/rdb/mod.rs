//! The DUMP/RESTORE payload codec (`fallow_store::rdb`) against payloads recorded from Redis 7.0.15, Redis's
//! verdicts on ours, LZF vectors from C liblzf, round trips and fuzzing. `README.md` here tells how the
//! fixtures were recorded and how to record them again.
mod common;
mod fuzz;
mod lzf_vectors;
mod redis_fixtures;
mod roundtrip;
