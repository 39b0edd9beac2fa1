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

    /// A write whose reply the body does not use: the backend may send it behind a later command
    /// (pipelined) instead of waiting for its reply. Its errors surface by the end of the body.
    fn write(&mut self, args: &[&[u8]]) -> Result<(), CallError> {
        self.call(args).map(drop)
    }

    /// The body's last command: the backend may commit in the same round trip. Nothing may follow it.
    fn call_last(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        self.call(args)
    }

    /// Declares keys the body will both read and write, before it touches them (TXN.LOCK); plain
    /// commands take no locks, so by default nothing is sent.
    fn lock(&mut self, _keys: &[&[u8]]) -> Result<(), CallError> {
        Ok(())
    }
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

/// How a cell's client runs its transactions.
#[derive(Clone, Copy, Debug)]
pub struct ClientKind {
    /// false: the `nontxn` mode (plain commands).
    pub transactional: bool,
    pub combining: bool,
    /// A conflicting command is retried alone (`ClientConfig::retry_operations`, Claret's baseline).
    pub retry_operations: bool,
    /// Writes go behind the next command (`Calls::write`) and the commit behind the last
    /// (`Calls::call_last`); false sends each command in its own round trip.
    pub pipelining: bool,
    /// `ClientConfig::emulated_link_delay_us`.
    pub link_delay_us: u64,
}

/// One fallow-client shared by every client thread of a cell, so combining sees all their transactions.
pub struct ClientBackend {
    client: Client,
    transactional: bool,
    /// Aborts of plain commands (nontxn), which are not retried.
    plain_aborts: AtomicU64,
    /// `ClientKind::pipelining`.
    pipelining: bool,
}

impl ClientBackend {
    /// A client of `server` for `threads` threads.
    pub fn connect(
        server: &ServerAddr,
        kind: ClientKind,
        retry: RetryPolicy,
        threads: usize,
    ) -> anyhow::Result<ClientBackend> {
        let ClientKind {
            transactional,
            combining,
            retry_operations,
            pipelining,
            link_delay_us,
        } = kind;
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
            retry_operations,
            operation_retry_max_ms: 500,
            emulated_link_delay_us: link_delay_us,
            shm_channels: true,
        };
        let client =
            Client::connect(config).map_err(|e| anyhow::anyhow!("connecting to {server}: {e}"))?;
        Ok(ClientBackend {
            client,
            transactional,
            plain_aborts: AtomicU64::new(0),
            pipelining,
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
    pipelining: bool,
}

impl TxnCalls<'_, '_> {
    /// fallow-client's result as the body sees it; an abort is kept to hand back to the client.
    fn seen<T>(&mut self, args: &[&[u8]], result: Result<T, ClientError>) -> Result<T, CallError> {
        match result {
            Ok(value) => Ok(value),
            Err(ClientError::Aborted(cause)) => {
                let name = cause.name().to_string();
                self.abort = Some(cause);
                Err(CallError::Abort(name))
            }
            Err(e) => Err(command_error(args, e)),
        }
    }
}

impl Calls for TxnCalls<'_, '_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        let result = self.txn.call(args);
        self.seen(args, result)
    }

    fn write(&mut self, args: &[&[u8]]) -> Result<(), CallError> {
        if !self.pipelining {
            return self.call(args).map(drop);
        }
        let result = self.txn.write(args);
        self.seen(args, result)
    }

    fn call_last(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        if !self.pipelining {
            return self.call(args);
        }
        let result = self.txn.call_and_commit(args);
        self.seen(args, result)
    }

    fn lock(&mut self, keys: &[&[u8]]) -> Result<(), CallError> {
        let result = self.txn.lock(keys);
        self.seen(&[b"TXN.LOCK"], result)
    }
}

/// `nontxn`: each call a plain command; writes wait, unsent, for the next call or the body's end and go
/// pipelined with it, as the transactional modes send them.
struct PlainCalls<'c> {
    client: &'c Client,
    writes: Vec<Vec<Vec<u8>>>,
    pipelining: bool,
}

impl PlainCalls<'_> {
    /// Sends the waiting writes and `last` (if any) in one pipeline; returns `last`'s reply.
    fn send(&mut self, last: Option<&[&[u8]]>) -> Result<Option<Reply>, CallError> {
        if let Some(args) = last {
            self.writes
                .push(args.iter().map(|arg| arg.to_vec()).collect());
        }
        if self.writes.is_empty() {
            return Ok(None);
        }
        let commands = std::mem::take(&mut self.writes);
        let replies = self
            .client
            .pipeline(&commands)
            .map_err(|e| command_error(&[&commands[0][0]], e))?;
        let mut last_reply = None;
        for (command, reply) in commands.iter().zip(replies) {
            last_reply = Some(match reply {
                Reply::Error(text) => match ClientError::from_error_reply(text) {
                    ClientError::Aborted(cause) => {
                        return Err(CallError::Abort(cause.name().to_string()))
                    }
                    error => return Err(command_error(&[&command[0]], error)),
                },
                reply => reply,
            });
        }
        Ok(last.and(last_reply))
    }
}

impl Calls for PlainCalls<'_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        Ok(self.send(Some(args))?.expect("a reply to the last command"))
    }

    fn write(&mut self, args: &[&[u8]]) -> Result<(), CallError> {
        if !self.pipelining {
            return self.call(args).map(drop);
        }
        self.writes
            .push(args.iter().map(|arg| arg.to_vec()).collect());
        Ok(())
    }
}

/// The median round trip of a PING through fallow-client to `server`, in µs, with the emulated link
/// delay: what one round trip of the run costs before any server work.
pub fn ping_round_trip_us(server: &ServerAddr, link_delay_us: u64) -> anyhow::Result<f64> {
    const SAMPLES: usize = 201;
    let ServerAddr::Tcp(node) = server else {
        bail!("fallow-client connects over TCP only, not {server}");
    };
    let client = Client::connect(ClientConfig {
        nodes: vec![node.clone()],
        emulated_link_delay_us: link_delay_us,
        ..ClientConfig::default()
    })
    .map_err(|e| anyhow::anyhow!("connecting to {server}: {e}"))?;
    let mut samples_us = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = std::time::Instant::now();
        client
            .command(&[b"PING"])
            .map_err(|e| anyhow::anyhow!("PING {server}: {e}"))?;
        samples_us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    samples_us.sort_by(f64::total_cmp);
    Ok(samples_us[SAMPLES / 2])
}

fn command_error(args: &[&[u8]], error: ClientError) -> CallError {
    let name = String::from_utf8_lossy(args.first().copied().unwrap_or_default());
    CallError::Failed(anyhow::anyhow!("{name}: {error}"))
}

impl ClientSession<'_> {
    fn run_plain(&mut self, body: &mut Body<'_>) -> anyhow::Result<Outcome> {
        let mut calls = PlainCalls {
            client: &self.backend.client,
            writes: Vec::new(),
            pipelining: self.backend.pipelining,
        };
        let result = body(&mut calls).and_then(|()| calls.send(None).map(drop));
        match result {
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
        let body = |txn: &mut Txn| {
            attempts += 1;
            let mut calls = TxnCalls {
                txn,
                abort: None,
                pipelining: self.backend.pipelining,
            };
            match body(&mut calls) {
                Ok(()) => Ok(()),
                Err(CallError::Abort(_)) => Err(ClientError::Aborted(
                    calls.abort.take().unwrap_or(AbortCause::Conflict),
                )),
                Err(CallError::Failed(e)) => Err(ClientError::Usage(format!("{e:#}"))),
                Err(CallError::Stopped) => Err(ClientError::Usage(STOPPED.into())),
            }
        };
        let note = |cause: &AbortCause| causes.push(cause.name().to_string());
        let result = self
            .backend
            .client
            .transaction_noting_aborts(body, note)
            .map(|_| ());
        let retries = attempts.saturating_sub(1);
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
