//! The check the `resp_reply` fuzz target runs on the bulk load/dump client's reply reader, kept here so
//! the replay of the kept corpus (`cargo test --lib fuzz_replay`) runs the same code on stable.
use crate::bulk::client::Conn;

/// Reads the replies in `data` with each of the connection's readers in turn until one fails (the
/// replies run out, or they are malformed or too large): it must fail cleanly, never panic or recurse
/// without bound.
pub fn check_bulk_reply(data: &[u8]) {
    for reply_bytes_max in [64, 1 << 20] {
        let mut conn = Conn::from_replies(data.to_vec(), reply_bytes_max);
        for turn in 0.. {
            let read = match turn % 3 {
                0 => conn.read_reply().map(drop),
                1 => conn.read_bulk().map(drop),
                _ => conn.read_array_len().map(drop),
            };
            if read.is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod fuzz_replay {
    #[test]
    fn fuzz_replay_resp_reply_bulk_client() {
        fallow_proto::fuzzing::replay_corpus("resp_reply", super::check_bulk_reply);
    }
}
