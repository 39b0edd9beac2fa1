//! How the benchmark runs a transaction. A workload writes each transaction as a body over [`Calls`]; a
//! [`Backend`] runs bodies as transactions or, in `nontxn` mode, as the same commands without TXN.*. The
//! backend is fallow-client: it retries aborts with backoff and, in `combining` mode, combines.
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::bail;
pub use fallow_client::Reply;
use fallow_client::{AbortCause, Client, ClientConfig, ClientError, ClientStats, Txn};

use crate::options::ServerAddr;

/// Why a call did not give a reply the body can use.
#[derive(Debug)]
pub enum CallError {
    /// The server aborted the transaction (`-TXNABORT <cause>`): retry it.
    Abort(String),
    /// Anything else: the run stops.
    Failed(anyhow::Error),
    /// The cell is over: give the transaction up without counting it.
    Stopped,
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

/// Retry after an abort: fallow-client's exponential backoff with jitter.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub retries_max: u32,
    pub backoff_initial_us: u64,
    pub backoff_max_us: u64,
}

/// One fallow-client shared by every client thread of a cell, so combining sees all their transactions.
pub struct ClientBackend {
    client: Client,
    transactional: bool,
    /// Aborts of plain commands (nontxn), which are not retried.
    plain_aborts: AtomicU64,
}

impl ClientBackend {
    /// A client of `server` for `threads` threads; `transactional` false is the `nontxn` mode.
    pub fn connect(
        server: &ServerAddr,
        transactional: bool,
        combining: bool,
        retry: RetryPolicy,
        threads: usize,
    ) -> anyhow::Result<ClientBackend> {
        let ServerAddr::Tcp(node) = server else {
            bail!("fallow-client connects over TCP only, not {server}");
        };
        let config = ClientConfig {
            nodes: vec![node.clone()],
            combining,
            retries_max: retry.retries_max,
            backoff_initial_us: retry.backoff_initial_us,
            backoff_max_us: retry.backoff_max_us,
            // One idle connection per thread: each has at most one transaction in flight.
            connections_per_node: threads,
        };
        let client =
            Client::connect(config).map_err(|e| anyhow::anyhow!("connecting to {server}: {e}"))?;
        Ok(ClientBackend {
            client,
            transactional,
            plain_aborts: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> ClientStats {
        self.client.stats()
    }
}

impl Backend for ClientBackend {
    fn session(&self, _index: usize) -> anyhow::Result<Box<dyn Session + '_>> {
        Ok(Box::new(ClientSession { backend: self }))
    }

    fn combined_ops(&self) -> u64 {
        self.client.stats().combined_ops
    }
}

struct ClientSession<'a> {
    backend: &'a ClientBackend,
}

/// The calls of one transaction attempt. Keeps the abort as fallow-client gave it, so the client sees
/// its own cause again (a combining conflict retries alone).
struct TxnCalls<'t, 'c> {
    txn: &'t mut Txn<'c>,
    abort: Option<AbortCause>,
}

impl Calls for TxnCalls<'_, '_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        match self.txn.call(args) {
            Ok(reply) => Ok(reply),
            Err(ClientError::Aborted(cause)) => {
                let name = cause.name().to_string();
                self.abort = Some(cause);
                Err(CallError::Abort(name))
            }
            Err(e) => Err(command_error(args, e)),
        }
    }
}

/// `nontxn`: each call a plain command.
struct PlainCalls<'c>(&'c Client);

impl Calls for PlainCalls<'_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        match self.0.command(args) {
            Ok(reply) => Ok(reply),
            Err(ClientError::Aborted(cause)) => Err(CallError::Abort(cause.name().to_string())),
            Err(e) => Err(command_error(args, e)),
        }
    }
}

fn command_error(args: &[&[u8]], error: ClientError) -> CallError {
    let name = String::from_utf8_lossy(args.first().copied().unwrap_or_default());
    CallError::Failed(anyhow::anyhow!("{name}: {error}"))
}

impl ClientSession<'_> {
    fn run_plain(&mut self, body: &mut Body<'_>) -> anyhow::Result<Outcome> {
        match body(&mut PlainCalls(&self.backend.client)) {
            Ok(()) => Ok(Outcome {
                committed: true,
                ..Outcome::default()
            }),
            // A plain command aborts only when its lock wait fails; it is not retried.
            Err(CallError::Abort(cause)) => {
                self.backend.plain_aborts.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome {
                    committed: false,
                    retries: 0,
                    abort_causes: vec![cause],
                })
            }
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Stopped) => Ok(Outcome::default()),
        }
    }
}

/// How a stopped body ends its transaction in fallow-client (an error it does not retry).
const STOPPED: &str = "the benchmark cell is over";

impl Session for ClientSession<'_> {
    fn run(&mut self, body: &mut Body<'_>) -> anyhow::Result<Outcome> {
        if !self.backend.transactional {
            return self.run_plain(body);
        }
        let (mut attempts, mut causes) = (0u32, Vec::new());
        let result = self.backend.client.transaction(|txn| {
            attempts += 1;
            let mut calls = TxnCalls { txn, abort: None };
            match body(&mut calls) {
                Ok(()) => Ok(()),
                Err(CallError::Abort(name)) => {
                    causes.push(name);
                    Err(ClientError::Aborted(
                        calls.abort.take().unwrap_or(AbortCause::Conflict),
                    ))
                }
                Err(CallError::Failed(e)) => Err(ClientError::Usage(format!("{e:#}"))),
                Err(CallError::Stopped) => Err(ClientError::Usage(STOPPED.into())),
            }
        });
        let retries = attempts.saturating_sub(1);
        // Aborts at TXN.COMMIT happen outside the body, so their causes are not seen here.
        while causes.len() < retries as usize {
            causes.push("commit".to_string());
        }
        match result {
            Ok(()) => Ok(Outcome {
                committed: true,
                retries,
                abort_causes: causes,
            }),
            Err(ClientError::Aborted(_)) => Ok(Outcome {
                committed: false,
                retries,
                abort_causes: causes,
            }),
            Err(ClientError::Usage(text)) if text == STOPPED => Ok(Outcome::default()),
            Err(e) => bail!("transaction: {e}"),
        }
    }
}

/// The bulk strings of an array reply (ZRANGE, SMEMBERS, HGETALL).
pub fn reply_items(reply: &Reply) -> Vec<Vec<u8>> {
    match reply {
        Reply::Array(items) => items
            .iter()
            .filter_map(|item| item.as_bytes().map(<[u8]>::to_vec))
            .collect(),
        _ => Vec::new(),
    }
}
