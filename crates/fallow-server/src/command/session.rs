//! Connection state that one family sets up and another resets: RESET (a connection command) leaves the
//! pub/sub subscriptions without replying. A leaf beside the families: any of them may use it without
//! depending on another family.
use super::Ctx;

/// Leaves every channel and pattern without replying (RESET).
pub fn unsubscribe_all_quietly(ctx: &mut Ctx) {
    ctx.server.pubsub.unsubscribe_all(ctx.conn.id());
    ctx.conn.subscriptions.clear();
    ctx.conn.patterns.clear();
    ctx.conn.shard_channels.clear();
}
