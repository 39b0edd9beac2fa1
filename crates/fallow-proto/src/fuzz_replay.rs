//! Replays the kept fuzz corpus (`fuzz/corpus/`) through the fuzz targets' checks, so CI runs every input
//! the fuzzers found interesting, and every crash they found, on stable without an instrumented build.
use crate::fuzzing::{self, replay_corpus};

#[test]
fn fuzz_replay_resp_request() {
    replay_corpus("resp_request", fuzzing::check_resp_request);
}

#[test]
fn fuzz_replay_memcache_text() {
    replay_corpus("memcache_text", fuzzing::check_memcache_text);
}

#[test]
fn fuzz_replay_memcache_meta() {
    replay_corpus("memcache_meta", fuzzing::check_memcache_meta);
}

#[test]
fn fuzz_replay_memcache_binary() {
    replay_corpus("memcache_binary", fuzzing::check_memcache_binary);
}
