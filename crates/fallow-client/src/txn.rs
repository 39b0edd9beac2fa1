//! One transaction attempt: server transactions begun lazily per node, strict two-phase locking across
//! nodes (every node commits only after the body finished), and the I/O side of combining.
//!
//! Across nodes there is no two-phase commit: TXN.COMMIT goes to every node in one pipelined write, and a
//! client that crashes, or a connection that fails, between those commits leaves some nodes committed and
//! others not (`ClientError::PartialCommit`). fallow is a cache and keeps no commit log.
use crate::client::Client;
use crate::combine::{MemberId, ParkedOp, Plan};
use crate::commands::combine_key;
use crate::connection::Connection;
use crate::error::{AbortCause, ClientError};
use crate::reply::Reply;
use crate::stats::Counters;

/// Where a queued write's commit reply goes.
enum Slot {
    Own(usize),
    Parked { issuer: MemberId, slot: usize },
}

/// The server transaction on one node.
struct NodeTxn {
    connection: Connection,
    /// One entry per write the server queued, in order: TXN.COMMIT's array follows it.
    queued: Vec<Slot>,
}

/// A transaction in progress, handed to the body of `Client::transaction`.
pub struct Txn<'client> {
    client: &'client Client,
    /// The combiner's member, while this attempt takes part in combining.
    member: Option<MemberId>,
    nodes: Vec<Option<NodeTxn>>,
    /// Reply slots handed out, one per write that answered `Queued`.
    slots: usize,
    aborted: Option<AbortCause>,
}

impl<'client> Txn<'client> {
    pub(crate) fn new(client: &'client Client, combining: bool) -> Txn<'client> {
        Txn {
            client,
            member: combining.then(|| client.table.join()),
            nodes: client.pools.iter().map(|_| None).collect(),
            slots: 0,
            aborted: None,
        }
    }

    /// Runs one command in the transaction on the node of `args[1]`. A read returns its value on the
    /// state before the transaction; a write returns `Reply::Queued` (its reply comes from the commit). An
    /// error reply is an `Err`; TXNABORT aborts the transaction (`ClientError::Aborted`, and every later
    /// call returns it too), any other error leaves the transaction going.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        if args.is_empty() {
            return Err(ClientError::Usage("empty command".into()));
        }
        if let Some(cause) = &self.aborted {
            return Err(ClientError::Aborted(cause.clone()));
        }
        let node = self.client.node_for_args(args);
        // Only a combining member needs the key; the rest skip its allocation.
        let combine = self.member.and_then(|_| combine_key(args));
        if let (Some(member), true) = (self.member, args.len() >= 2) {
            match self
                .client
                .table
                .plan(member, node, combine.clone(), self.slots, args)
            {
                Plan::Send => {}
                Plan::Combined => {
                    self.slots += 1;
                    Counters::add(&self.client.counters.combined_ops, 1);
                    return Ok(Reply::Queued);
                }
                Plan::Conflict => return Err(self.abort(AbortCause::Combine)),
                Plan::Aborted(cause) => return Err(self.abort(cause)),
            }
        }
        let reply = match self.exchange(node, args) {
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

    fn queue_own(&mut self, node: usize) {
        let node_txn = self.nodes[node].as_mut().expect("node transaction");
        node_txn.queued.push(Slot::Own(self.slots));
        self.slots += 1;
    }

    /// Sends `args` on the node's server transaction, beginning it first (pipelined: no extra round trip).
    fn exchange(&mut self, node: usize, args: &[&[u8]]) -> Result<Reply, ClientError> {
        Counters::add(&self.client.counters.round_trips, 1);
        if let Some(node_txn) = self.nodes[node].as_mut() {
            return node_txn.connection.call(args);
        }
        let mut connection = self.client.pools[node].checkout()?;
        // A combining member never waits on the server: its group may be waiting for it, a cycle the
        // server cannot see. A lock it cannot get at once aborts it (and it retries).
        if self.member.is_some() {
            connection.push(&[b"TXN.BEGIN", b"NOWAIT"]);
        } else {
            connection.push(&[b"TXN.BEGIN"]);
        }
        connection.push(args);
        connection.flush()?;
        match connection.read_reply()? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "TXN.BEGIN answered {other:?}"
                )))
            }
        }
        let reply = connection.read_reply()?;
        self.nodes[node] = Some(NodeTxn {
            connection,
            queued: Vec::new(),
        });
        Ok(reply)
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
        if self.aborted.is_some() {
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
        let mut replies: Vec<Option<Reply>> = vec![None; self.slots];
        let Some(member) = self.member else {
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

    /// Sends the operations parked on this member, pipelined per node, and checks each was queued. A
    /// non-abort error reply is that operation's reply (as a failed write in EXEC); TXNABORT aborts.
    fn flush_parked(&mut self, parked: Vec<ParkedOp>) -> Result<(), ClientError> {
        for node in 0..self.nodes.len() {
            let ops: Vec<&ParkedOp> = parked.iter().filter(|op| op.node == node).collect();
            if ops.is_empty() {
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
        Counters::add(&counters.combine_flushes, 1);
        let node_txn = self.nodes[node].as_mut().ok_or_else(|| {
            ClientError::Protocol("an operation was parked on a node this member never used".into())
        })?;
        for op in ops {
            let args: Vec<&[u8]> = op.args.iter().map(Vec::as_slice).collect();
            node_txn.connection.push(&args);
        }
        node_txn.connection.flush()?;
        let mut abort = None;
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
            node_txn.connection.push(&[b"TXN.COMMIT"]);
            Counters::add(&self.client.counters.round_trips, 1);
            let flushed = node_txn.connection.flush();
            sent.push((node, node_txn, flushed));
        }
        let (mut committed, mut abort, mut failure) = (0, None, None);
        for (node, mut node_txn, flushed) in sent {
            let reply = flushed.and_then(|()| node_txn.connection.read_reply());
            match reply {
                Ok(Reply::Array(items)) => {
                    committed += 1;
                    self.route_commit_replies(&node_txn.queued, items, replies);
                    self.client.pools[node].checkin(node_txn.connection);
                }
                Ok(Reply::Error(text)) => match AbortCause::from_error_reply(&text) {
                    Some(cause) => abort = abort.or(Some(cause)),
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
