//! How the benchmark runs a transaction. A workload writes each transaction as a body over [`Calls`]; a
//! [`Backend`] runs bodies as transactions (retrying aborts with backoff) or, in `nontxn` mode, as the same
//! commands without TXN.*. The backend is the one seam where the transaction client plugs in.
use std::time::Duration;

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::bulk::client::Conn;
pub use crate::bulk::client::Reply;
use crate::options::ServerAddr;

/// Largest reply a benchmark connection accepts (a big follower set is the largest).
const REPLY_BYTES_MAX: usize = 64 << 20;

/// Why a call did not give a reply the body can use.
#[derive(Debug)]
pub enum CallError {
    /// The server aborted the transaction (`-TXNABORT <cause>`): retry it.
    Abort(String),
    /// Anything else: the run stops.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for CallError {
    fn from(error: anyhow::Error) -> CallError {
        CallError::Failed(error)
    }
}

/// What a transaction body issues commands through.
pub trait Calls {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError>;
}

/// A transaction: it may run several times (after aborts), so it must not consume what it captures.
pub type Body<'a> = dyn FnMut(&mut dyn Calls) -> Result<(), CallError> + 'a;

/// How one transaction ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub committed: bool,
    /// Attempts beyond the first.
    pub retries: u32,
    /// The cause of each abort, in order (`conflict`, `deadlock`, `timeout`, `full`).
    pub abort_causes: Vec<String>,
}

/// One client thread's handle: runs transactions one at a time.
pub trait Session {
    fn run(&mut self, body: &mut Body<'_>) -> anyhow::Result<Outcome>;
}

/// Opens sessions; shared by every client thread of a run.
pub trait Backend: Sync {
    fn session(&self, index: usize) -> anyhow::Result<Box<dyn Session + '_>>;
    /// Operations the client merged into another transaction's (combining); 0 without combining.
    fn combined_ops(&self) -> u64 {
        0
    }
}

/// Retry after an abort: exponential backoff with full jitter, as Claret's baseline clients.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub retries_max: u32,
    pub backoff_initial_us: u64,
    pub backoff_max_us: u64,
}

impl RetryPolicy {
    /// The pause before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32, rng: &mut SmallRng) -> Duration {
        let ceiling_us = self
            .backoff_initial_us
            .saturating_mul(1u64 << retry.min(20).saturating_sub(1))
            .min(self.backoff_max_us)
            .max(1);
        Duration::from_micros(rng.gen_range(0..=ceiling_us))
    }
}

/// The cause word of a `TXNABORT <cause> ...` error, or None for any other error.
pub fn abort_cause(error: &str) -> Option<String> {
    let rest = error.strip_prefix("TXNABORT")?;
    Some(
        rest.split_whitespace()
            .next()
            .unwrap_or("unknown")
            .to_string(),
    )
}

/// A stopgap transaction client over one blocking RESP connection per thread; it goes when
/// `fallow-client` lands. With `transactional` false it is the `nontxn` mode: the same commands, no TXN.*.
pub struct RespBackend {
    pub server: ServerAddr,
    pub transactional: bool,
    pub retry: RetryPolicy,
    pub seed: u64,
}

impl Backend for RespBackend {
    fn session(&self, index: usize) -> anyhow::Result<Box<dyn Session + '_>> {
        Ok(Box::new(RespSession {
            conn: Conn::connect(&self.server, REPLY_BYTES_MAX)?,
            backend: self,
            rng: SmallRng::seed_from_u64(self.seed ^ index as u64),
        }))
    }
}

struct RespSession<'a> {
    conn: Conn,
    backend: &'a RespBackend,
    rng: SmallRng,
}

/// The calls of one attempt; inside a transaction a write's reply is `+QUEUED`.
struct ConnCalls<'a>(&'a mut Conn);

impl Calls for ConnCalls<'_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        match self.0.call(args)? {
            Reply::Error(text) => match abort_cause(&text) {
                Some(cause) => Err(CallError::Abort(cause)),
                None => Err(CallError::Failed(anyhow::anyhow!(
                    "{}: {text}",
                    String::from_utf8_lossy(args[0])
                ))),
            },
            reply => Ok(reply),
        }
    }
}

impl RespSession<'_> {
    /// One attempt: Ok(None) when it committed, Ok(Some(cause)) when it aborted.
    fn attempt(&mut self, body: &mut Body<'_>) -> anyhow::Result<Option<String>> {
        let transactional = self.backend.transactional;
        if transactional {
            expect_ok(self.conn.call(&[b"TXN.BEGIN"])?, "TXN.BEGIN")?;
        }
        let result = body(&mut ConnCalls(&mut self.conn));
        if !transactional {
            return match result {
                Ok(()) => Ok(None),
                Err(CallError::Abort(cause)) => Ok(Some(cause)),
                Err(CallError::Failed(e)) => Err(e),
            };
        }
        match result {
            Ok(()) => match self.conn.call(&[b"TXN.COMMIT"])? {
                Reply::Error(text) => match abort_cause(&text) {
                    Some(cause) => Ok(Some(cause)),
                    None => bail!("TXN.COMMIT: {text}"),
                },
                _ => Ok(None),
            },
            Err(CallError::Abort(cause)) => {
                // The connection stays in the aborted transaction until TXN.ABORT ends it.
                expect_ok(self.conn.call(&[b"TXN.ABORT"])?, "TXN.ABORT")?;
                Ok(Some(cause))
            }
            Err(CallError::Failed(e)) => Err(e),
        }
    }
}

impl Session for RespSession<'_> {
    fn run(&mut self, body: &mut Body<'_>) -> anyhow::Result<Outcome> {
        let mut outcome = Outcome::default();
        loop {
            match self.attempt(body).context("transaction")? {
                None => {
                    outcome.committed = true;
                    return Ok(outcome);
                }
                Some(cause) => outcome.abort_causes.push(cause),
            }
            if outcome.retries >= self.backend.retry.retries_max {
                return Ok(outcome);
            }
            outcome.retries += 1;
            std::thread::sleep(self.backend.retry.backoff(outcome.retries, &mut self.rng));
        }
    }
}

fn expect_ok(reply: Reply, what: &str) -> anyhow::Result<()> {
    match reply {
        Reply::Status(_) => Ok(()),
        other => bail!("{what}: unexpected reply {other:?}"),
    }
}

/// Reply helpers for bodies.
pub fn reply_items(reply: &Reply) -> Vec<Vec<u8>> {
    match reply {
        Reply::Array(items) => items
            .iter()
            .filter_map(|item| match item {
                Reply::Bulk(Some(bytes)) => Some(bytes.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An integer reply, or an integer in a bulk string (UID.NEXT may answer either).
pub fn reply_int(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Int(n) => Some(*n),
        Reply::Bulk(Some(bytes)) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_causes_are_the_word_after_txnabort() {
        assert_eq!(
            abort_cause("TXNABORT conflict on key x").as_deref(),
            Some("conflict")
        );
        assert_eq!(abort_cause("TXNABORT").as_deref(), Some("unknown"));
        assert_eq!(abort_cause("ERR wrong type"), None);
    }

    #[test]
    fn backoff_grows_and_stays_under_the_cap() {
        let policy = RetryPolicy {
            retries_max: 10,
            backoff_initial_us: 100,
            backoff_max_us: 1000,
        };
        let mut rng = SmallRng::seed_from_u64(1);
        for retry in 1..40 {
            let pause = policy.backoff(retry, &mut rng);
            let cap = (100u64 << (retry - 1).min(20)).min(1000);
            assert!(
                pause <= Duration::from_micros(cap),
                "retry {retry}: {pause:?}"
            );
        }
    }
}
