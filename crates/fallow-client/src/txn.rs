//! One transaction attempt: server transactions begun lazily per node, strict two-phase locking across
//! nodes (every node commits only after the body finished), and the I/O side of combining.
//!
//! Writes issued with `Txn::write` ride behind: inside a transaction a write only answers `QUEUED`, so
//! the client need not wait for it. It is sent, pipelined and in issue order, ahead of the next command
//! on its node, or with TXN.COMMIT. The server sees the same commands in the same order (so takes the
//! same locks in the same order) as with `call`, only in fewer round trips.
//!
//! Across nodes there is no two-phase commit: TXN.COMMIT goes to every node in one pipelined write, and a
//! client that crashes, or a connection that fails, between those commits leaves some nodes committed and
//! others not (`ClientError::PartialCommit`). fallow is a cache and keeps no commit log.
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::combine::{MemberId, ParkedOp, Plan};
use crate::commands::{combine_key, CombineKey};
use crate::connection::Connection;
use crate::error::{AbortCause, ClientError};
use crate::reply::Reply;
use crate::stats::Counters;

/// Where a queued write's commit reply goes.
enum Slot {
    Own(usize),
    Parked { issuer: MemberId, slot: usize },
}

/// A write not sent yet (`Txn::write`), and the reply slot it was given; or a TXN.LOCK (`Txn::lock`),
/// which has no slot and answers OK.
struct Pending {
    args: Vec<Vec<u8>>,
    slot: Option<usize>,
    /// A combining member's combinable write: once queued, others may combine with its lock.
    combine: Option<CombineKey>,
}

/// A combinable write behind that the server queued: its key and combine key (for `CombineTable::granted`).
type GrantedBehind = (Vec<u8>, CombineKey);

/// The server transaction on one node.
struct NodeTxn {
    connection: Connection,
    /// TXN.BEGIN was sent: TXN.ABORT is needed to give the connection back.
    begun: bool,
    /// The server transaction never waits for a lock (TXN.BEGIN NOWAIT, or TXN.NOWAIT since).
    nowait: bool,
    /// Begin with TXN.BEGIN BUSY: a conflicting command is refused alone (`retry_operations`).
    busy: bool,
    /// Writes waiting for the next round trip on this node.
    pending: Vec<Pending>,
    /// Every reply to what was sent has been read, so TXN.ABORT's reply would be the next.
    synced: bool,
    /// One entry per write the server queued, in order: TXN.COMMIT's array follows it.
    queued: Vec<Slot>,
    /// Combinable writes behind that the last prelude got queued, for the combiner to register.
    granted_behind: Vec<GrantedBehind>,
}

/// What `NodeTxn::push_prelude` put ahead of a command, whose replies come first.
struct Prelude {
    /// TXN.BEGIN or TXN.NOWAIT, each answering OK.
    settings: usize,
    /// The pending writes' slots (None: a TXN.LOCK), and the combine keys of combinable ones.
    writes: Vec<(Option<usize>, Option<GrantedBehind>)>,
}

impl NodeTxn {
    /// Pushes TXN.BEGIN (first time) and the pending writes onto the connection, unsent. `nowait`: the
    /// transaction must not wait for locks from now on (a combining member with company, whose group
    /// may be waiting for it: a cycle the server cannot see), so TXN.BEGIN NOWAIT or TXN.NOWAIT.
    fn push_prelude(&mut self, nowait: bool) -> Prelude {
        let mut settings = 0;
        if !self.begun {
            let mut begin: Vec<&[u8]> = vec![b"TXN.BEGIN"];
            if nowait {
                begin.push(b"NOWAIT");
            }
            if self.busy {
                begin.push(b"BUSY");
            }
            self.connection.push(&begin);
            (self.begun, self.nowait, settings) = (true, nowait, 1);
        } else if nowait && !self.nowait {
            self.connection.push(&[b"TXN.NOWAIT"]);
            (self.nowait, settings) = (true, 1);
        }
        self.synced = false;
        let mut writes = Vec::with_capacity(self.pending.len());
        for pending in self.pending.drain(..) {
            let args: Vec<&[u8]> = pending.args.iter().map(Vec::as_slice).collect();
            self.connection.push(&args);
            let granted = pending
                .combine
                .map(|combine| (pending.args[1].clone(), combine));
            writes.push((pending.slot, granted));
        }
        Prelude { settings, writes }
    }

    /// Reads the replies to a prelude: TXN.BEGIN's, then each pending write's (queued, or its reply
    /// kept in `early` for the commit's replies). Returns the abort a write met, if any.
    fn read_prelude(
        &mut self,
        prelude: Prelude,
        early: &mut Vec<(usize, Reply)>,
    ) -> Result<Option<AbortCause>, ClientError> {
        for _ in 0..prelude.settings {
            match self.connection.read_reply()? {
                Reply::Simple(ok) if ok == "OK" => {}
                other => {
                    return Err(ClientError::Protocol(format!(
                        "TXN.BEGIN or TXN.NOWAIT answered {other:?}"
                    )))
                }
            }
        }
        let mut abort = None;
        for (slot, granted) in prelude.writes {
            let reply = self.connection.read_reply()?;
            if let Reply::Error(text) = &reply {
                if let Some(cause) = AbortCause::from_error_reply(text) {
                    abort = abort.or(Some(cause));
                    continue;
                }
            }
            match (slot, reply) {
                (Some(slot), Reply::Queued) => {
                    self.queued.push(Slot::Own(slot));
                    self.granted_behind.extend(granted);
                }
                (Some(slot), other) => early.push((slot, other)),
                (None, Reply::Simple(ok)) if ok == "OK" => {}
                (None, other) => {
                    return Err(ClientError::Protocol(format!(
                        "TXN.LOCK answered {other:?}"
                    )))
                }
            }
        }
        Ok(abort)
    }
}

/// A transaction in progress, handed to the body of `Client::transaction`.
pub struct Txn<'client> {
    client: &'client Client,
    /// The combiner's member, while this attempt takes part in combining.
    member: Option<MemberId>,
    nodes: Vec<Option<NodeTxn>>,
    /// Reply slots handed out, one per write that answered `Queued` or was sent with `write`.
    slots: usize,
    /// Replies of written-behind writes that the server gave at once (errors), by slot.
    early: Vec<(usize, Reply)>,
    /// The writes' replies, once `call_and_commit` committed the transaction.
    committed: Option<Vec<Reply>>,
    aborted: Option<AbortCause>,
}

impl<'client> Txn<'client> {
    pub(crate) fn new(client: &'client Client, combining: bool) -> Txn<'client> {
        Txn {
            client,
            member: combining.then(|| client.table.join()),
            nodes: client.pools.iter().map(|_| None).collect(),
            slots: 0,
            early: Vec::new(),
            committed: None,
            aborted: None,
        }
    }

    /// Issues a write whose reply the body does not need before commit: it is sent with the next round
    /// trip on its node (or the commit), so it costs no round trip of its own. Its reply comes, as a
    /// queued write's does, in the commit's replies at its issue position; a write the server refused at
    /// once (an unknown command, a wrong argument count) gets that error there. A TXNABORT it causes
    /// surfaces from the next call or the commit. In a combining transaction the write first tries to
    /// combine with a lock another member holds; if it cannot, it goes behind as well (sent before the
    /// group commits at the latest), and others may combine with it once the server queued it.
    pub fn write(&mut self, args: &[&[u8]]) -> Result<(), ClientError> {
        self.check_open(args)?;
        if self.client.config.retry_operations || (self.member.is_some() && args.len() < 2) {
            return self.call(args).map(drop);
        }
        let node = self.client.node_for_args(args);
        let mut combine = None;
        if let Some(member) = self.member {
            combine = combine_key(args);
            match self
                .client
                .table
                .plan(member, node, combine.clone(), self.slots, args, true)
            {
                Plan::Send => {}
                Plan::Combined => {
                    self.slots += 1;
                    Counters::add(&self.client.counters.combined_ops, 1);
                    return Ok(());
                }
                Plan::Conflict => return Err(self.abort(AbortCause::Combine)),
                Plan::Aborted(cause) => return Err(self.abort(cause)),
            }
        }
        self.push_behind(node, args, Some(self.slots), combine)?;
        self.slots += 1;
        Counters::add(&self.client.counters.writes_behind, 1);
        Ok(())
    }

    /// Queues `args` unsent on `node`'s server transaction, to go ahead of its next command.
    fn push_behind(
        &mut self,
        node: usize,
        args: &[&[u8]],
        slot: Option<usize>,
        combine: Option<CombineKey>,
    ) -> Result<(), ClientError> {
        let node_txn = match self.node_txn(node) {
            Ok(node_txn) => node_txn,
            Err(error) => return Err(self.fail(error)),
        };
        node_txn.pending.push(Pending {
            args: args.iter().map(|arg| arg.to_vec()).collect(),
            slot,
            combine,
        });
        Ok(())
    }

    /// Declares that the transaction will both read and write `keys`: each is locked exclusively before
    /// anything else of the transaction touches it (TXN.LOCK, as SELECT ... FOR UPDATE). Without it, two
    /// transactions that each read a record and then write it deadlock, and one aborts. The lock rides
    /// behind, as a write does: it is sent ahead of the next command on its key's node. A combining member
    /// sends it at once, so the combiner knows the key is taken before another member touches it.
    pub fn lock(&mut self, keys: &[&[u8]]) -> Result<(), ClientError> {
        for &key in keys {
            let args: [&[u8]; 2] = [b"TXN.LOCK", key];
            self.check_open(&args)?;
            if self.member.is_some() || self.client.config.retry_operations {
                self.call(&args)?;
                continue;
            }
            self.push_behind(self.client.node_for(key), &args, None, None)?;
            Counters::add(&self.client.counters.locks_declared, 1);
        }
        Ok(())
    }

    /// The node's transaction state, taking a connection for it on first use (nothing is sent yet).
    fn node_txn(&mut self, node: usize) -> Result<&mut NodeTxn, ClientError> {
        if self.nodes[node].is_none() {
            let connection = self.client.pools[node].checkout()?;
            self.nodes[node] = Some(NodeTxn {
                connection,
                begun: false,
                nowait: false,
                busy: self.client.config.retry_operations,
                pending: Vec::new(),
                synced: true,
                queued: Vec::new(),
                granted_behind: Vec::new(),
            });
        }
        Ok(self.nodes[node].as_mut().expect("node transaction"))
    }

    /// Runs one command in the transaction on the node of `args[1]`. A read returns its value on the
    /// state before the transaction; a write returns `Reply::Queued` (its reply comes from the commit). An
    /// error reply is an `Err`; TXNABORT aborts the transaction (`ClientError::Aborted`, and every later
    /// call returns it too), any other error leaves the transaction going.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        self.check_open(args)?;
        let node = self.client.node_for_args(args);
        // Only a combining member needs the key; the rest skip its allocation.
        let combine = self.member.and_then(|_| combine_key(args));
        if let (Some(member), true) = (self.member, args.len() >= 2) {
            match self
                .client
                .table
                .plan(member, node, combine.clone(), self.slots, args, false)
            {
                Plan::Send => {
                    let nowait = self.client.table.sends_nowait(member);
                    let exchanged = self.exchange_retrying(node, args, nowait);
                    self.client.table.returned(member);
                    return self.answered(node, args, combine, exchanged);
                }
                Plan::Combined => {
                    self.slots += 1;
                    Counters::add(&self.client.counters.combined_ops, 1);
                    return Ok(Reply::Queued);
                }
                Plan::Conflict => return Err(self.abort(AbortCause::Combine)),
                Plan::Aborted(cause) => return Err(self.abort(cause)),
            }
        }
        let exchanged = self.exchange_retrying(node, args, false);
        self.answered(node, args, combine, exchanged)
    }

    /// `exchange`, sending `args` again after a backoff while the server refuses it with TXNBUSY
    /// (`retry_operations`), for at most `operation_retry_max_ms`: then the answer is an abort (timeout).
    fn exchange_retrying(
        &mut self,
        node: usize,
        args: &[&[u8]],
        nowait: bool,
    ) -> Result<Reply, ClientError> {
        let started = Instant::now();
        let limit = Duration::from_millis(self.client.config.operation_retry_max_ms);
        let mut retries = 0;
        loop {
            let (reply, _) = self.exchange(node, args, nowait, false)?;
            if !matches!(&reply, Reply::Error(text) if text.starts_with("TXNBUSY")) {
                return Ok(reply);
            }
            if started.elapsed() >= limit {
                return Ok(Reply::Error(format!(
                    "TXNABORT timeout (the command was busy for {} ms)",
                    limit.as_millis()
                )));
            }
            retries += 1;
            Counters::add(&self.client.counters.operation_retries, 1);
            std::thread::sleep(self.client.backoff(retries));
        }
    }

    /// What `call` returns for the server's answer to `args`.
    fn answered(
        &mut self,
        node: usize,
        args: &[&[u8]],
        combine: Option<CombineKey>,
        exchanged: Result<Reply, ClientError>,
    ) -> Result<Reply, ClientError> {
        let reply = match exchanged {
            Ok(reply) => reply,
            Err(error) => return Err(self.fail(error)),
        };
        match reply {
            Reply::Queued => {
                self.queue_own(node);
                if let (Some(member), Some(combine)) = (self.member, combine) {
                    self.client.table.granted(member, args[1], &combine);
                }
                Ok(Reply::Queued)
            }
            Reply::Error(text) => match ClientError::from_error_reply(text) {
                ClientError::Aborted(cause) => Err(self.abort(cause)),
                error => Err(error),
            },
            reply => Ok(reply),
        }
    }

    /// A command may still be issued: `args` is not empty, and the attempt neither aborted nor committed.
    fn check_open(&self, args: &[&[u8]]) -> Result<(), ClientError> {
        if args.is_empty() {
            return Err(ClientError::Usage("empty command".into()));
        }
        if let Some(cause) = &self.aborted {
            return Err(ClientError::Aborted(cause.clone()));
        }
        if self.committed.is_some() {
            return Err(ClientError::Usage(
                "the transaction was committed by call_and_commit".into(),
            ));
        }
        Ok(())
    }

    /// Runs the body's last command and commits in the same round trip: TXN.COMMIT goes pipelined right
    /// behind it. The reply is `call`'s; a TXNABORT, of the command or of the commit, is
    /// `ClientError::Aborted` and the body is retried as usual. The body must issue nothing after it. Any
    /// other error reply comes back as `Err` with the transaction committed. When other nodes or a
    /// combined group take part, the commit cannot ride along: this is `call`, and the commit follows
    /// the body as usual.
    pub fn call_and_commit(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        self.check_open(args)?;
        let node = self.client.node_for_args(args);
        let elsewhere =
            (0..self.nodes.len()).any(|other| other != node && self.nodes[other].is_some());
        if elsewhere || self.client.config.retry_operations {
            return self.call(args);
        }
        self.leave_combining_if_alone();
        if self.member.is_some() {
            return self.call(args);
        }
        Counters::add(&self.client.counters.commits_behind, 1);
        let (reply, commit) = match self.exchange(node, args, false, true) {
            Ok((reply, commit)) => (reply, commit.expect("TXN.COMMIT was sent")),
            Err(error) => return Err(self.fail(error)),
        };
        let abort = [&reply, &commit]
            .into_iter()
            .find_map(|answer| match answer {
                Reply::Error(text) => AbortCause::from_error_reply(text),
                _ => None,
            });
        if let Some(cause) = abort {
            // The server ended the transaction at its refused TXN.COMMIT: no TXN.ABORT is needed.
            if let Some(node_txn) = self.nodes[node].as_mut() {
                node_txn.begun = false;
            }
            return Err(self.abort(cause));
        }
        if reply == Reply::Queued {
            self.queue_own(node);
        }
        let Reply::Array(items) = commit else {
            let error = ClientError::Protocol(format!("TXN.COMMIT answered {commit:?}"));
            return Err(self.fail(error));
        };
        let node_txn = self.nodes[node].take().expect("node transaction");
        let mut replies: Vec<Option<Reply>> = vec![None; self.slots];
        self.route_commit_replies(&node_txn.queued, items, &mut replies);
        self.client.pools[node].checkin(node_txn.connection);
        for (slot, early) in self.early.drain(..) {
            replies[slot] = Some(early);
        }
        self.committed = Some(fill(replies));
        match reply {
            Reply::Error(text) => Err(ClientError::Server(text)),
            reply => Ok(reply),
        }
    }

    /// A combining member alone in its group, with nothing parked on it, goes on as a plain transaction
    /// (combining rule 11).
    fn leave_combining_if_alone(&mut self) {
        if let Some(member) = self.member {
            if self.client.table.leave_if_alone(member) {
                self.member = None;
            }
        }
    }

    fn queue_own(&mut self, node: usize) {
        let node_txn = self.nodes[node].as_mut().expect("node transaction");
        node_txn.queued.push(Slot::Own(self.slots));
        self.slots += 1;
    }

    /// One round trip on the node's server transaction: TXN.BEGIN (first time) and the node's pending
    /// writes, then `args`, then TXN.COMMIT when `commit`, all in one pipelined write. Returns `args`'
    /// reply, which is the abort a pending write met if one did (the server fails every command after an
    /// abort), and the commit's reply when it was sent.
    fn exchange(
        &mut self,
        node: usize,
        args: &[&[u8]],
        nowait: bool,
        commit: bool,
    ) -> Result<(Reply, Option<Reply>), ClientError> {
        Counters::add(&self.client.counters.round_trips, 1);
        self.node_txn(node)?;
        let node_txn = self.nodes[node].as_mut().expect("node transaction");
        let prelude = node_txn.push_prelude(nowait);
        node_txn.connection.push(args);
        if commit {
            node_txn.connection.push(&[b"TXN.COMMIT"]);
        }
        node_txn.connection.flush()?;
        let abort = node_txn.read_prelude(prelude, &mut self.early)?;
        let reply = node_txn.connection.read_reply()?;
        let committed = match commit {
            true => Some(node_txn.connection.read_reply()?),
            false => None,
        };
        node_txn.synced = true;
        let granted = std::mem::take(&mut node_txn.granted_behind);
        // Writes behind that are now held may be combined with, as a write sent at once would be once
        // answered (combining rule 10); not when the batch aborted, which ends the member.
        if let (Some(member), None) = (self.member, &abort) {
            for (key, combine) in granted {
                self.client.table.granted(member, &key, &combine);
            }
        }
        let reply = match abort {
            Some(cause) => Reply::Error(format!("TXNABORT {cause}")),
            None => reply,
        };
        Ok((reply, committed))
    }

    /// Aborts the attempt: the combiner lets the member go (or aborts its group), every server transaction
    /// is aborted and its connection returned. Returns the error to hand up.
    fn abort(&mut self, cause: AbortCause) -> ClientError {
        self.client.counters.abort(&cause);
        self.aborted = Some(cause.clone());
        if let Some(member) = self.member.take() {
            self.client.table.fail(member, cause.clone());
        }
        for (node, slot) in self.nodes.iter_mut().enumerate() {
            let Some(mut node_txn) = slot.take() else {
                continue;
            };
            if !node_txn.begun {
                // Nothing was sent on it: it is clean.
                self.client.pools[node].checkin(node_txn.connection);
                continue;
            }
            if !node_txn.synced {
                // Replies are still unread; dropping the connection aborts its transaction.
                continue;
            }
            Counters::add(&self.client.counters.round_trips, 1);
            let ended = node_txn.connection.call(&[b"TXN.ABORT"]);
            if matches!(ended, Ok(Reply::Simple(ref ok)) if ok == "OK") {
                self.client.pools[node].checkin(node_txn.connection);
            }
        }
        ClientError::Aborted(cause)
    }

    /// An error that ends the attempt without a retry (I/O, protocol): abort what can be aborted.
    fn fail(&mut self, error: ClientError) -> ClientError {
        self.abort(AbortCause::Other("client".into()));
        error
    }

    /// The body returned `error`: end the attempt and hand the error up.
    pub(crate) fn abandon(mut self, error: ClientError) -> ClientError {
        // Committed already (by `call_and_commit`): nothing is left to abort.
        if self.aborted.is_some() || self.committed.is_some() {
            return error;
        }
        match error {
            ClientError::Aborted(cause) => self.abort(cause),
            error => self.fail(error),
        }
    }

    /// Commits: in a combined group, waits for the group and sends the operations parked on this
    /// member first; then TXN.COMMIT on every node. Returns the writes' replies in issue order.
    pub(crate) fn commit(mut self) -> Result<Vec<Reply>, ClientError> {
        if let Some(cause) = &self.aborted {
            return Err(ClientError::Aborted(cause.clone()));
        }
        if let Some(replies) = self.committed.take() {
            return Ok(replies);
        }
        let mut replies: Vec<Option<Reply>> = vec![None; self.slots];
        self.leave_combining_if_alone();
        let Some(member) = self.member else {
            self.send_pending_across_nodes()?;
            self.commit_nodes(&mut replies, None)?;
            return Ok(fill(replies));
        };
        let parked = match self.client.table.finish(member) {
            Ok(parked) => parked,
            Err(cause) => return Err(self.abort(cause)),
        };
        self.flush_parked(parked)?;
        if let Err(cause) = self.client.table.flushed(member) {
            return Err(self.abort(cause));
        }
        if self.slots > 0 && self.nodes.iter().all(Option::is_none) {
            Counters::add(&self.client.counters.commits_avoided, 1);
        }
        let failure = self.commit_nodes(&mut replies, Some(member)).err();
        self.member = None;
        let delivered = self
            .client
            .table
            .committed(member, failure.map(|error| error.to_string()))
            .map_err(ClientError::PartialCommit)?;
        for (slot, reply) in delivered {
            replies[slot] = Some(reply);
        }
        Ok(fill(replies))
    }

    /// With more than one node, sends every node's pending writes (one pipelined round trip, all nodes at
    /// once) and checks they were queued before any node commits: a write aborted on one node after
    /// another had committed would be a partial commit. On one node, its writes go with TXN.COMMIT.
    fn send_pending_across_nodes(&mut self) -> Result<(), ClientError> {
        let used: Vec<usize> = (0..self.nodes.len())
            .filter(|&node| self.nodes[node].is_some())
            .collect();
        let pending = |node: &NodeTxn| !node.pending.is_empty() || !node.begun;
        if used.len() < 2 || !self.nodes.iter().flatten().any(pending) {
            return Ok(());
        }
        let mut sent = Vec::with_capacity(used.len());
        for node in used {
            let node_txn = self.nodes[node].as_mut().expect("used");
            if !pending(node_txn) {
                continue;
            }
            Counters::add(&self.client.counters.round_trips, 1);
            let prelude = node_txn.push_prelude(false);
            if let Err(error) = node_txn.connection.flush() {
                return Err(self.fail(error));
            }
            sent.push((node, prelude));
        }
        let mut abort = None;
        for (node, prelude) in sent {
            let node_txn = self.nodes[node].as_mut().expect("used");
            match node_txn.read_prelude(prelude, &mut self.early) {
                Ok(found) => abort = abort.or(found),
                Err(error) => return Err(self.fail(error)),
            }
            node_txn.synced = true;
        }
        match abort {
            Some(cause) => Err(self.abort(cause)),
            None => Ok(()),
        }
    }

    /// Sends the operations parked on this member and its own writes still behind, pipelined per node,
    /// and checks each was queued, before the group's barrier: a write refused after another member
    /// committed would break the group's atomicity. A non-abort error reply is that operation's reply (as
    /// a failed write in EXEC); TXNABORT aborts.
    fn flush_parked(&mut self, parked: Vec<ParkedOp>) -> Result<(), ClientError> {
        for node in 0..self.nodes.len() {
            let ops: Vec<&ParkedOp> = parked.iter().filter(|op| op.node == node).collect();
            let behind = self.nodes[node]
                .as_ref()
                .is_some_and(|node_txn| !node_txn.pending.is_empty());
            if ops.is_empty() && !behind {
                continue;
            }
            let result = self.flush_node(node, &ops);
            match result {
                Ok(None) => {}
                Ok(Some(cause)) => return Err(self.abort(cause)),
                Err(error) => return Err(self.fail(error)),
            }
        }
        Ok(())
    }

    fn flush_node(
        &mut self,
        node: usize,
        ops: &[&ParkedOp],
    ) -> Result<Option<AbortCause>, ClientError> {
        let counters = &self.client.counters;
        Counters::add(&counters.round_trips, 1);
        if !ops.is_empty() {
            Counters::add(&counters.combine_flushes, 1);
        }
        let member = self.member.expect("a combining member flushes");
        let nowait = self.client.table.sends_nowait(member);
        let node_txn = self.nodes[node].as_mut().ok_or_else(|| {
            ClientError::Protocol("an operation was parked on a node this member never used".into())
        })?;
        // With company, its group waits for these at the barrier: they must not wait on the server
        // (rule 8).
        let prelude = node_txn.push_prelude(nowait);
        for op in ops {
            let args: Vec<&[u8]> = op.args.iter().map(Vec::as_slice).collect();
            node_txn.connection.push(&args);
        }
        node_txn.connection.flush()?;
        let mut abort = node_txn.read_prelude(prelude, &mut self.early)?;
        for op in ops {
            match node_txn.connection.read_reply()? {
                Reply::Queued => node_txn.queued.push(Slot::Parked {
                    issuer: op.issuer,
                    slot: op.slot,
                }),
                Reply::Error(text) => match AbortCause::from_error_reply(&text) {
                    Some(cause) => abort = abort.or(Some(cause)),
                    None => self
                        .client
                        .table
                        .deliver(op.issuer, op.slot, Reply::Error(text)),
                },
                other => self.client.table.deliver(op.issuer, op.slot, other),
            }
        }
        node_txn.synced = true;
        Ok(abort)
    }

    /// TXN.COMMIT on every node this attempt began, in one pipelined write. When every node refused with
    /// TXNABORT and nothing else of a group can have committed, the attempt is an ordinary (retryable)
    /// abort; a mix of commits and failures is a partial commit.
    fn commit_nodes(
        &mut self,
        replies: &mut [Option<Reply>],
        member: Option<MemberId>,
    ) -> Result<(), ClientError> {
        let begun: Vec<usize> = (0..self.nodes.len())
            .filter(|&node| self.nodes[node].is_some())
            .collect();
        let mut sent = Vec::with_capacity(begun.len());
        for &node in &begun {
            let mut node_txn = self.nodes[node].take().expect("begun");
            // TXN.COMMIT never waits for a lock, so no NOWAIT is needed here.
            let prelude = node_txn.push_prelude(false);
            node_txn.connection.push(&[b"TXN.COMMIT"]);
            Counters::add(&self.client.counters.round_trips, 1);
            let flushed = node_txn.connection.flush();
            sent.push((node, node_txn, prelude, flushed));
        }
        let (mut committed, mut abort, mut failure) = (0, None, None);
        for (node, mut node_txn, prelude, flushed) in sent {
            // A write that aborted in the prelude makes the server refuse the commit as well.
            let reply = flushed
                .and_then(|()| node_txn.read_prelude(prelude, &mut self.early))
                .and_then(|_| node_txn.connection.read_reply());
            match reply {
                Ok(Reply::Array(items)) => {
                    committed += 1;
                    self.route_commit_replies(&node_txn.queued, items, replies);
                    self.client.pools[node].checkin(node_txn.connection);
                }
                Ok(Reply::Error(text)) => match AbortCause::from_error_reply(&text) {
                    Some(cause) => {
                        // A refused TXN.COMMIT ends the server transaction: the connection is clean.
                        abort = abort.or(Some(cause));
                        self.client.pools[node].checkin(node_txn.connection);
                    }
                    None => failure = failure.or(Some(ClientError::Server(text))),
                },
                Ok(other) => {
                    failure = failure.or(Some(ClientError::Protocol(format!(
                        "TXN.COMMIT answered {other:?}"
                    ))))
                }
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        for (slot, reply) in self.early.drain(..) {
            replies[slot] = Some(reply);
        }
        self.settle_commit(committed, abort, failure, member)
    }

    fn settle_commit(
        &mut self,
        committed: usize,
        abort: Option<AbortCause>,
        failure: Option<ClientError>,
        member: Option<MemberId>,
    ) -> Result<(), ClientError> {
        match (abort, failure) {
            (None, None) => Ok(()),
            (Some(cause), None) if committed == 0 && member.is_none() => Err(self.abort(cause)),
            (abort, failure) => {
                let what = failure.map_or_else(
                    || format!("TXNABORT {}", abort.expect("an abort")),
                    |error| error.to_string(),
                );
                Err(ClientError::PartialCommit(format!(
                    "{committed} node(s) committed, then {what}"
                )))
            }
        }
    }

    fn route_commit_replies(
        &self,
        queued: &[Slot],
        items: Vec<Reply>,
        replies: &mut [Option<Reply>],
    ) {
        for (slot, item) in queued.iter().zip(items) {
            match *slot {
                Slot::Own(index) => replies[index] = Some(item),
                Slot::Parked { issuer, slot } => self.client.table.deliver(issuer, slot, item),
            }
        }
    }
}

impl Drop for Txn<'_> {
    /// A body that panicked leaves the attempt here: let the combiner know, so no member waits for it.
    /// Dropped connections end their server transactions (a disconnect aborts).
    fn drop(&mut self) {
        if let Some(member) = self.member.take() {
            self.client
                .table
                .fail(member, AbortCause::Other("dropped".into()));
        }
    }
}

fn fill(replies: Vec<Option<Reply>>) -> Vec<Reply> {
    replies
        .into_iter()
        .map(|reply| reply.unwrap_or(Reply::Nil))
        .collect()
}
