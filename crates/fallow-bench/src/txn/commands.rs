//! Building commands, and the commands of fallow's new data types (TopN, SummaryBag, UIdGenerator) with
//! the stand-ins used where they are missing (Redis, or a fallow without them).
use super::backend::{CallError, Calls, Reply};

/// Whether fallow has TOPN.* / BAG.* / UID.NEXT. The one switch between the new types and their stand-ins.
pub const ADT_COMMANDS_LANDED: bool = true;

/// Which commands a target understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// TOPN.*, BAG.* and UID.NEXT; otherwise sorted sets, hash counters and client-made ids stand in.
    pub adt_commands: bool,
}

impl Dialect {
    pub fn fallow() -> Dialect {
        Dialect {
            adt_commands: ADT_COMMANDS_LANDED,
        }
    }

    pub fn redis() -> Dialect {
        Dialect {
            adt_commands: false,
        }
    }
}

/// One argument of a command.
pub trait Arg {
    fn bytes(&self) -> Vec<u8>;
}

impl Arg for &str {
    fn bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

impl Arg for String {
    fn bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

impl Arg for Vec<u8> {
    fn bytes(&self) -> Vec<u8> {
        self.clone()
    }
}

macro_rules! integer_args {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            fn bytes(&self) -> Vec<u8> {
                itoa::Buffer::new().format(*self).as_bytes().to_vec()
            }
        }
    )*};
}
integer_args!(u32, u64, i64, usize);

/// The command as owned arguments.
pub fn command(args: &[&dyn Arg]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.bytes()).collect()
}

/// Hands `args` as byte slices to `send`.
fn with_args<T>(args: &[&dyn Arg], send: impl FnOnce(&[&[u8]]) -> T) -> T {
    let owned = command(args);
    let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    send(&refs)
}

/// Sends one command through `calls`.
pub fn call(calls: &mut dyn Calls, args: &[&dyn Arg]) -> Result<Reply, CallError> {
    with_args(args, |refs| calls.call(refs))
}

/// Sends the body's last command; the backend may commit in the same round trip.
pub fn call_last(calls: &mut dyn Calls, args: &[&dyn Arg]) -> Result<Reply, CallError> {
    with_args(args, |refs| calls.call_last(refs))
}

/// Sends one write whose reply the body does not use: the backend may pipeline it behind a later command.
pub fn write(calls: &mut dyn Calls, args: &[&dyn Arg]) -> Result<(), CallError> {
    with_args(args, |refs| calls.write(refs))
}

/// TopN add (a bid): keeps the k best scores. Stand-in: ZADD, which keeps every member.
pub fn topn_add(
    c: &mut dyn Calls,
    d: Dialect,
    key: &str,
    score: u64,
    member: &str,
) -> Result<(), CallError> {
    let name = if d.adt_commands { "TOPN.ADD" } else { "ZADD" };
    write(c, &[&name, &key, &score, &member])
}

/// The k best members with their scores, best first.
pub fn topn_list(c: &mut dyn Calls, d: Dialect, key: &str, k: u64) -> Result<Reply, CallError> {
    if d.adt_commands {
        call(c, &[&"TOPN.LIST", &key, &"WITHSCORES"])
    } else {
        call(c, &[&"ZREVRANGE", &key, &0u64, &(k - 1), &"WITHSCORES"])
    }
}

/// The best member and its score. Stand-in: the first of ZREVRANGE.
pub fn topn_max(c: &mut dyn Calls, d: Dialect, key: &str) -> Result<Reply, CallError> {
    if d.adt_commands {
        call(c, &[&"TOPN.MAX", &key])
    } else {
        call(c, &[&"ZREVRANGE", &key, &0u64, &0u64, &"WITHSCORES"])
    }
}

/// The commands that (re)create an empty TopN keeping `k` (nothing for the stand-in, which keeps all).
pub fn topn_reserve(d: Dialect, key: &str, k: u64) -> Vec<Vec<Vec<u8>>> {
    match d.adt_commands {
        true => vec![
            command(&[&"DEL", &key]),
            command(&[&"TOPN.RESERVE", &key, &k]),
        ],
        false => Vec::new(),
    }
}

/// Adds an amount to a summary bag. Stand-in: INCRBY of a sum counter, which commutes as the bag's add.
pub fn bag_add(c: &mut dyn Calls, d: Dialect, key: &str, amount: u64) -> Result<(), CallError> {
    if d.adt_commands {
        write(c, &[&"BAG.ADD", &key, &amount])
    } else {
        write(c, &[&"INCRBY", &format!("{key}:sum"), &amount])
    }
}

/// The bag's mean. Stand-in: the sum counter.
pub fn bag_mean(c: &mut dyn Calls, d: Dialect, key: &str) -> Result<Reply, CallError> {
    if d.adt_commands {
        call(c, &[&"BAG.MEAN", &key])
    } else {
        call(c, &[&"GET", &format!("{key}:sum")])
    }
}

/// Unique ids: UID.NEXT, or made by the client from its own counter (a stand-in without the round trip).
pub struct Uids {
    prefix: u64,
    next: u64,
}

impl Uids {
    /// The ids of client `index` of the run `run_nonce` (which differs between runs on the same data).
    pub fn new(run_nonce: u64, index: usize) -> Uids {
        // 24 bits of a well-mixed prefix, 40 of counter: a collision only overwrites a record.
        let prefix = crate::workload::connection_seed(run_nonce, index, true) & 0xFF_FFFF;
        Uids { prefix, next: 0 }
    }

    pub fn next(&mut self, c: &mut dyn Calls, d: Dialect, key: &str) -> Result<u64, CallError> {
        if d.adt_commands {
            let reply = call(c, &[&"UID.NEXT", &key])?;
            return reply
                .as_int()
                .map(|id| id as u64)
                .ok_or_else(|| CallError::Failed(anyhow::anyhow!("UID.NEXT: {reply:?}")));
        }
        self.next += 1;
        Ok((self.prefix << 40) | self.next)
    }
}
