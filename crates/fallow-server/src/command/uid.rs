//! UID.NEXT (`fallow_txn::types::uid`): hands out an id no earlier UID.NEXT on the key returned. The
//! generator is a plain string counter, so GET shows the last id handed out and SET can seed it. The
//! transaction layer promises only uniqueness (ids need not be sequential), which is what lets two
//! UID.NEXTs share the key's lock.
use super::{Ctx, Handler};

pub const HANDLERS: &[(&str, Handler)] = &[("uid.next", uid_next)];

/// The counter after adding one, with INCR's errors (not an integer, overflow).
fn uid_next(ctx: &mut Ctx, args: &[&[u8]]) {
    super::string::increment(ctx, args[1], 1);
}
