//! Interactive transactions over abstract data types: TXN.BEGIN, TXN.NOWAIT, TXN.LOCK, TXN.COMMIT,
//! TXN.ABORT (docs/transactions.md).
//! What happens to the commands in between lives in `crate::txn::session`.
use super::dispatch;
use super::{Ctx, Handler};
use crate::txn::WaitPolicy;
use std::sync::atomic::Ordering;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("txn.begin", begin),
    ("txn.nowait", nowait),
    ("txn.lock", lock),
    ("txn.commit", commit),
    ("txn.abort", abort),
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
    dispatch::txn::begin(ctx.server, ctx.conn, wait, busy);
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
    dispatch::txn::lock(ctx.server, ctx.conn, ctx.out, &args[1..]);
}

fn commit(ctx: &mut Ctx, _args: &[&[u8]]) {
    let Some(txn) = ctx.conn.txn.take() else {
        return ctx.out.error("ERR TXN.COMMIT without TXN.BEGIN");
    };
    if let Some(cause) = txn.aborted {
        return ctx.out.error(&cause.error());
    }
    dispatch::txn::commit(ctx.server, ctx.conn, ctx.out, txn);
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
    dispatch::txn::end(ctx.server, ctx.conn);
    ctx.out.ok();
}
