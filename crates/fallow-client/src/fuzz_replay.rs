//! Replays the kept fuzz corpus of the reply parser (`fuzz/corpus/resp_reply`) through its check.
use fallow_proto::fuzzing::replay_corpus;

#[test]
fn fuzz_replay_resp_reply() {
    replay_corpus("resp_reply", crate::fuzzing::check_resp_reply);
}
