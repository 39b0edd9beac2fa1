//! Interactive transactions over abstract data types: TXN.BEGIN, TXN.NOWAIT, TXN.LOCK, TXN.COMMIT,
//! TXN.ABORT (docs/transactions.md).
//! What happens to the commands in between lives in `crate::txn::session`.
use super::flags::*;
use super::{spec, CommandSpec, Ctx, Group, Keys};
use crate::txn::session::{self, Session};
use crate::txn::WaitPolicy;
use std::sync::atomic::Ordering;

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "txn.begin",
        -1,
        NO_MULTI | NOSCRIPT | FAST,
        Keys::None,
        Group::Transaction,
        "Begin an interactive transaction: reads see the state before it, writes apply at TXN.COMMIT; NOWAIT: a lock request that cannot be granted at once aborts it; BUSY: a lock request refused for a conflict fails only its command (-TXNBUSY), to be retried",
        begin,
    ),
    spec(
        "txn.nowait",
        1,
        NO_MULTI | NOSCRIPT | FAST,
        Keys::None,
        Group::Transaction,
        "From now on, a lock request of the open transaction that cannot be granted at once aborts it (as TXN.BEGIN NOWAIT)",
        nowait,
    ),
    spec(
        "txn.lock",
        -2,
        NO_MULTI | NOSCRIPT | FAST,
        Keys::Range {
            first: 1,
            last: -1,
            step: 1,
        },
        Group::Transaction,
        "Lock the keys exclusively now, for a transaction that will both read and write them (as SELECT ... FOR UPDATE): two such transactions then queue instead of deadlocking when each upgrades its read",
        lock,
    ),
    spec(
        "txn.commit",
        1,
        NO_MULTI | NOSCRIPT,
        Keys::None,
        Group::Transaction,
        "Apply the transaction's queued writes at once and release its locks",
        commit,
    ),
    spec(
        "txn.abort",
        1,
        NO_MULTI | NOSCRIPT | FAST,
        Keys::None,
        Group::Transaction,
        "Drop the transaction's queued writes and release its locks",
        abort,
    ),
];

fn begin(ctx: &mut Ctx, args: &[&[u8]]) {
    let (mut wait, mut busy) = (WaitPolicy::IfPhasing, false);
    for option in &args[1..] {
        if super::is(option, "nowait") && wait != WaitPolicy::Never {
            wait = WaitPolicy::Never;
        } else if super::is(option, "busy") && !busy {
            busy = true;
        } else {
            return ctx.out.error(super::SYNTAX);
        }
    }
    if ctx.conn.txn.is_some() {
        return ctx.out.error("ERR TXN.BEGIN calls can not be nested");
    }
    if ctx.conn.in_multi() {
        return ctx.out.error("ERR TXN.BEGIN inside MULTI is not allowed");
    }
    let spare = std::mem::take(&mut ctx.conn.txn_spare);
    ctx.conn.txn = Some(Session::new(ctx.server, wait, busy, spare));
    ctx.server.txns.stats.begun.fetch_add(1, Ordering::Relaxed);
    ctx.out.ok();
}

/// A combining client's member that gained company in its group: waiting from here on could close a
/// cycle through the group that the server cannot see.
fn nowait(ctx: &mut Ctx, _args: &[&[u8]]) {
    let Some(txn) = ctx.conn.txn.as_mut() else {
        return ctx.out.error("ERR TXN.NOWAIT without TXN.BEGIN");
    };
    txn.wait = WaitPolicy::Never;
    ctx.out.ok();
}

fn lock(ctx: &mut Ctx, args: &[&[u8]]) {
    if ctx.conn.txn.is_none() {
        return ctx.out.error("ERR TXN.LOCK without TXN.BEGIN");
    }
    session::lock(ctx.server, ctx.conn, ctx.out, &args[1..]);
}

fn commit(ctx: &mut Ctx, _args: &[&[u8]]) {
    let Some(txn) = ctx.conn.txn.take() else {
        return ctx.out.error("ERR TXN.COMMIT without TXN.BEGIN");
    };
    if let Some(cause) = txn.aborted {
        return ctx.out.error(&cause.error());
    }
    session::commit(ctx.server, ctx.conn, ctx.out, txn);
}

fn abort(ctx: &mut Ctx, _args: &[&[u8]]) {
    let Some(txn) = ctx.conn.txn.as_ref() else {
        return ctx.out.error("ERR TXN.ABORT without TXN.BEGIN");
    };
    if txn.aborted.is_none() {
        ctx.server
            .txns
            .stats
            .aborts_client
            .fetch_add(1, Ordering::Relaxed);
    }
    session::end(ctx.server, ctx.conn);
    ctx.out.ok();
}
