//! Metadata of the pubsub commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

const SUBSCRIBING: u32 = PUBSUB | NOSCRIPT | LOADING | STALE | SUBSCRIBE_CONTEXT;

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("subscribe", -2, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Listen for messages published to channels"),
    info("psubscribe", -2, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Listen for messages published to channels matching patterns"),
    info("unsubscribe", -1, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Stop listening for messages posted to channels"),
    info("punsubscribe", -1, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Stop listening for messages posted to channels matching patterns"),
    info("publish", 3, PUBSUB | LOADING | STALE | FAST, Keys::None, Group::PUB_SUB, "Post a message to a channel"),
    info("pubsub", -2, PUBSUB | LOADING | STALE, Keys::None, Group::PUB_SUB, "Inspect the state of the pub/sub subsystem"),
    info("ssubscribe", -2, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Listen for messages published to shard channels"),
    info("sunsubscribe", -1, SUBSCRIBING, Keys::None, Group::PUB_SUB, "Stop listening for messages posted to shard channels"),
    info("spublish", 3, PUBSUB | LOADING | STALE | FAST, Keys::None, Group::PUB_SUB, "Post a message to a shard channel"),
];
