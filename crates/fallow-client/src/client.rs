//! The client: configuration, per-node pools, routing, plain commands and the transaction retry loop.
use std::time::Duration;

use rand::Rng;

use crate::combine::CombineTable;
use crate::connection::{ConnectionSettings, Pool};
use crate::error::{AbortCause, ClientError};
use crate::reply::{Reply, ReplyLimits};
use crate::ring::HashRing;
use crate::stats::{ClientStats, Counters};
use crate::txn::Txn;

/// Most transactions in one combined group (rule 3 of `combine`): bounds how long a finished member
/// waits for the others and how much one abort takes down.
pub const COMBINE_GROUP_MEMBERS_MAX: usize = 32;

/// Longest wait of a combined member for the rest of its group before the group aborts. Above the
/// connection's I/O timeout, so a member blocked in a server call is not given up on too early.
pub const COMBINE_GROUP_WAIT_MAX: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The nodes, "host:port" or "unix:/path" ("unix:" alone: the local server's socket, see
    /// `connection::unix_socket_of`); keys are spread over them by consistent hashing.
    pub nodes: Vec<String>,
    /// Merge combinable operations of concurrent transactions (see `combine`).
    pub combining: bool,
    /// Retries of an aborted transaction before `transaction` returns `ClientError::Aborted`.
    pub retries_max: u32,
    /// First backoff before a retry; it doubles per retry up to `backoff_max_us`, with jitter.
    pub backoff_initial_us: u64,
    pub backoff_max_us: u64,
    /// Idle connections kept per node (more are opened while needed, see `connection::Pool`).
    pub connections_per_node: usize,
    /// Claret's baseline: transactions begin with `TXN.BEGIN BUSY`, and a command refused with TXNBUSY
    /// (its lock held in a conflicting mode, phasing off) is sent again after a backoff while the
    /// transaction keeps its locks, instead of the whole transaction aborting. Commands then go one per
    /// round trip (`write` and `call_and_commit` are `call`), so a retried command keeps its place.
    pub retry_operations: bool,
    /// How long one command is retried before its transaction aborts (cause timeout) and is retried
    /// whole: two transactions retrying commands on each other's locks would otherwise never end.
    pub operation_retry_max_ms: u64,
    /// For experiments only: every request waits this long before it is written, as if the network between
    /// client and server added that much to each round trip (0 = off). Lets a loopback benchmark model a
    /// cluster's round trips (Claret's were 150 µs), where the kernel has no netem.
    pub emulated_link_delay_us: u64,
    /// Reach `unix:` nodes over a shared-memory channel when the server grants one (docs/shm.md, "Rust
    /// client"); a refusal or a failed open falls back to the plain Unix socket. Off: the socket always.
    pub shm_channels: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            nodes: vec!["127.0.0.1:6379".into()],
            combining: false,
            retries_max: 16,
            backoff_initial_us: 100,
            backoff_max_us: 50_000,
            connections_per_node: 8,
            retry_operations: false,
            operation_retry_max_ms: 500,
            emulated_link_delay_us: 0,
            shm_channels: true,
        }
    }
}

/// A client of one or more fallow nodes. Send + Sync: share it with `Arc` across threads. Combining works
/// between the transactions of one `Client`.
pub struct Client {
    pub(crate) config: ClientConfig,
    pub(crate) pools: Vec<Pool>,
    ring: HashRing,
    pub(crate) table: CombineTable,
    pub(crate) counters: Counters,
}

impl Client {
    /// Connects to every node once, so a wrong address fails here.
    pub fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        if config.nodes.is_empty() {
            return Err(ClientError::Usage("no nodes".into()));
        }
        let settings = ConnectionSettings {
            limits: ReplyLimits::default(),
            link_delay: Duration::from_micros(config.emulated_link_delay_us),
            shm_channels: config.shm_channels,
        };
        let idle_max = config.connections_per_node.max(1);
        let pools: Vec<Pool> = config
            .nodes
            .iter()
            .map(|node| Pool::new(node.clone(), idle_max, settings))
            .collect();
        for pool in &pools {
            pool.warm()?;
        }
        Ok(Client {
            ring: HashRing::new(&config.nodes),
            pools,
            table: CombineTable::new(COMBINE_GROUP_MEMBERS_MAX, COMBINE_GROUP_WAIT_MAX),
            counters: Counters::default(),
            config,
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The node (index into `config.nodes`) that owns `key`.
    pub fn node_for(&self, key: &[u8]) -> usize {
        self.ring.node_for(key)
    }

    /// The node of a command: its first argument after the name is the key; keyless commands go to node 0.
    pub(crate) fn node_for_args<A: AsRef<[u8]>>(&self, args: &[A]) -> usize {
        args.get(1).map_or(0, |key| self.node_for(key.as_ref()))
    }

    /// Runs one command outside any transaction on the node of `args[1]`. An error reply is an `Err`
    /// (`Aborted` for TXNABORT, which a plain command gets when its lock wait fails).
    pub fn command(&self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        if args.is_empty() {
            return Err(ClientError::Usage("empty command".into()));
        }
        let pool = &self.pools[self.node_for_args(args)];
        let mut connection = pool.checkout()?;
        Counters::add(&self.counters.round_trips, 1);
        let reply = connection.call(args)?;
        pool.checkin(connection);
        match reply {
            Reply::Error(text) => Err(ClientError::from_error_reply(text)),
            reply => Ok(reply),
        }
    }

    /// Runs `commands` outside any transaction, pipelined: one write and one read per node involved, so
    /// the whole batch costs one round trip. Replies come in the order of `commands`; an error reply is a
    /// `Reply::Error` in its place (a TXNABORT there means that command's lock wait failed).
    pub fn pipeline(&self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<Reply>, ClientError> {
        if commands.iter().any(Vec::is_empty) {
            return Err(ClientError::Usage("empty command".into()));
        }
        let nodes: Vec<usize> = commands
            .iter()
            .map(|command| self.node_for_args(command))
            .collect();
        let mut sent = Vec::new();
        for node in 0..self.pools.len() {
            let mine: Vec<usize> = (0..commands.len()).filter(|&i| nodes[i] == node).collect();
            if mine.is_empty() {
                continue;
            }
            let mut connection = self.pools[node].checkout()?;
            for &i in &mine {
                let args: Vec<&[u8]> = commands[i].iter().map(Vec::as_slice).collect();
                connection.push(&args);
            }
            Counters::add(&self.counters.round_trips, 1);
            Counters::add(&self.counters.writes_behind, mine.len() as u64 - 1);
            connection.flush()?;
            sent.push((node, mine, connection));
        }
        let mut replies: Vec<Option<Reply>> = vec![None; commands.len()];
        for (node, mine, mut connection) in sent {
            for i in mine {
                replies[i] = Some(connection.read_reply()?);
            }
            self.pools[node].checkin(connection);
        }
        Ok(replies
            .into_iter()
            .map(|r| r.expect("every command answered"))
            .collect())
    }

    /// Runs `body` in a transaction and commits it. On an abort (TXNABORT from the server, or the
    /// combiner's) it runs `body` again after a backoff, up to `retries_max` times, then returns
    /// `ClientError::Aborted`. Any other error of `body` aborts the transaction and is returned as is.
    pub fn transaction<T>(
        &self,
        body: impl FnMut(&mut Txn) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        self.transaction_with_replies(body).map(|(value, _)| value)
    }

    /// As `transaction`, also returning the replies of the transaction's writes from TXN.COMMIT, in the
    /// order `body` issued them (Reply::Nil where the server sent none).
    pub fn transaction_with_replies<T>(
        &self,
        body: impl FnMut(&mut Txn) -> Result<T, ClientError>,
    ) -> Result<(T, Vec<Reply>), ClientError> {
        self.transaction_noting_aborts(body, |_| {})
    }

    /// As `transaction_with_replies`, telling `on_abort` the cause of every abort, those it retried and the
    /// last one it gave up on, whether the body or TXN.COMMIT met it.
    pub fn transaction_noting_aborts<T>(
        &self,
        mut body: impl FnMut(&mut Txn) -> Result<T, ClientError>,
        mut on_abort: impl FnMut(&AbortCause),
    ) -> Result<(T, Vec<Reply>), ClientError> {
        let mut retries = 0;
        let mut alone = false;
        loop {
            let mut txn = Txn::new(self, self.config.combining && !alone);
            let result = match body(&mut txn) {
                Ok(value) => txn.commit().map(|replies| (value, replies)),
                Err(error) => Err(txn.abandon(error)),
            };
            if let Err(ClientError::Aborted(cause)) = &result {
                on_abort(cause);
            }
            match result {
                Err(ClientError::Aborted(cause)) if retries < self.config.retries_max => {
                    retries += 1;
                    Counters::add(&self.counters.retries, 1);
                    // A member that conflicted inside a combined group retries alone (Claret §4.3).
                    alone = cause == AbortCause::Combine;
                    std::thread::sleep(self.backoff(retries));
                }
                Ok(done) => {
                    Counters::add(&self.counters.commits, 1);
                    return Ok(done);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Exponential backoff with "equal jitter": half the step fixed, half random, so retries that collided
    /// spread out while none comes back too soon.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let doubled = self
            .config
            .backoff_initial_us
            .saturating_mul(1u64 << retry.saturating_sub(1).min(32));
        let step_us = doubled.min(self.config.backoff_max_us);
        let jitter_us = rand::thread_rng().gen_range(0..=step_us / 2);
        Duration::from_micros(step_us - step_us / 2 + jitter_us)
    }

    pub fn stats(&self) -> ClientStats {
        self.counters.snapshot()
    }
}
