//! The check the `resp_reply` fuzz target runs on the reply parser, kept here so the replay of the kept
//! corpus (`cargo test --lib fuzz_replay`) runs the same code on stable. Panics when an invariant breaks.
use crate::reply::{parse_reply, ParsedReply, Reply, ReplyLimits};

/// What a connection does with one parse result.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Reply(Reply),
    Invalid(String),
}

fn small_limits() -> ReplyLimits {
    ReplyLimits {
        bulk_bytes_max: 64,
        array_len_max: 8,
        depth_max: 4,
    }
}

/// Parses the replies in `data` as a connection reads them: at once, or in pieces of `piece_len`.
fn events(data: &[u8], limits: &ReplyLimits, piece_len: usize) -> Vec<Event> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    for piece in data.chunks(piece_len.max(1)) {
        buffer.extend_from_slice(piece);
        let mut start = 0;
        while start < buffer.len() {
            match parse_reply(&buffer[start..], limits) {
                ParsedReply::Incomplete => break,
                ParsedReply::Invalid(message) => {
                    events.push(Event::Invalid(message));
                    return events;
                }
                ParsedReply::Complete(reply, consumed) => {
                    assert!(consumed > 0 && consumed <= buffer.len() - start);
                    assert_round_trip(&reply);
                    events.push(Event::Reply(reply));
                    start += consumed;
                }
            }
        }
        buffer.drain(..start);
    }
    events
}

/// RESP2 bytes that parse to `reply` (a test encoder: the server's `ReplyWriter` sanitizes line breaks).
fn encode(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Int(value) => out.extend_from_slice(format!(":{value}\r\n").as_bytes()),
        Reply::Bulk(bytes) => {
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Simple(text) => out.extend_from_slice(format!("+{text}\r\n").as_bytes()),
        Reply::Error(text) => out.extend_from_slice(format!("-{text}\r\n").as_bytes()),
        Reply::Queued => out.extend_from_slice(b"+QUEUED\r\n"),
        Reply::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
    }
}

fn assert_round_trip(reply: &Reply) {
    let mut encoded = Vec::new();
    encode(reply, &mut encoded);
    assert_eq!(
        parse_reply(&encoded, &ReplyLimits::default()),
        ParsedReply::Complete(reply.clone(), encoded.len())
    );
}

/// Fuzz target `resp_reply`: replies (pipelined) under the default and small limits, read at once and a
/// few bytes at a time, which must agree; every reply re-encoded parses back to itself.
pub fn check_resp_reply(data: &[u8]) {
    for limits in [ReplyLimits::default(), small_limits()] {
        let whole = events(data, &limits, data.len());
        let piece_len = usize::from(data.first().copied().unwrap_or(0) % 16) + 1;
        assert_eq!(whole, events(data, &limits, piece_len));
    }
}
