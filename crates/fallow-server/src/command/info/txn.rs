//! Metadata of the txn commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("txn.begin", -1, NO_MULTI | NOSCRIPT | FAST, Keys::None, Group::TRANSACTION, "Begin an interactive transaction: reads see the state before it, writes apply at TXN.COMMIT; NOWAIT: a lock request that cannot be granted at once aborts it; BUSY: a lock request refused for a conflict fails only its command (-TXNBUSY), to be retried"),
    info("txn.nowait", 1, NO_MULTI | NOSCRIPT | FAST, Keys::None, Group::TRANSACTION, "From now on, a lock request of the open transaction that cannot be granted at once aborts it (as TXN.BEGIN NOWAIT)"),
    info("txn.lock", -2, NO_MULTI | NOSCRIPT | FAST, Keys::Range {
            first: 1,
            last: -1,
            step: 1,
        }, Group::TRANSACTION, "Lock the keys exclusively now, for a transaction that will both read and write them (as SELECT ... FOR UPDATE): two such transactions then queue instead of deadlocking when each upgrades its read"),
    info("txn.commit", 1, NO_MULTI | NOSCRIPT, Keys::None, Group::TRANSACTION, "Apply the transaction's queued writes at once and release its locks"),
    info("txn.abort", 1, NO_MULTI | NOSCRIPT | FAST, Keys::None, Group::TRANSACTION, "Drop the transaction's queued writes and release its locks"),
];
