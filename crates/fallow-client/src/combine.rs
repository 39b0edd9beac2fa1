//! Combining (Claret §4.3, §5.2): concurrent transactions of one `Client` that perform the same combinable
//! operation on the same key share one server transaction's lock, and one round trip, for it.
//!
//! Vocabulary: every running transaction is a *member*; members that combined form a *group*, which is one
//! logical transaction. Each member keeps its own server transactions (one per node, begun lazily); a
//! combined operation is *parked* on the server transaction of the member that acquired the lock (its
//! *owner*) and sent there, pipelined, after every member finished its body.
//!
//! Rules:
//! 1. Only declared combinable operations combine (`commands::combine_key`): pure commuting writes whose
//!    reply comes at commit, so sharing the lock shows no member anything it would not see alone.
//! 2. An operation combines with a lock that a group holds in exactly its mode and that the server has
//!    granted (registered after the reply, as in Claret). Within a member's own group it combines with any
//!    member's lock; otherwise it joins the earliest open group registered for that (key, mode), and the
//!    two groups merge: their members, lock sets and parked operations become one group.
//! 3. A group is open to new members until its first member finishes its body (so a finished member waits
//!    only for bodies that were already running) and while it has fewer than `members_max` members.
//! 4. A member's operation on a key that another member's server transaction holds (or is acquiring),
//!    other than a combinable one in the same mode, *conflicts*: sent to the server it could wait for a
//!    lock that is released only when the group commits, which waits for this member: a deadlock the
//!    server cannot see. Read beside read is treated as a conflict too, because phasing may queue the
//!    second read behind a waiting writer. A conflicting member is aborted (cause `combine`).
//! 5. A member that aborts (a conflict, a server TXNABORT, an error in its body) leaves alone when no
//!    other member's operation is parked on its server transactions: its own parked operations are taken
//!    back and the group goes on. Otherwise the whole group aborts and every member retries.
//! 6. The group commits when every member has finished its body: each owner first sends the operations
//!    parked on it (one pipelined round trip per node) and checks they were queued; only when every member
//!    did so does any member send TXN.COMMIT. So a group either commits whole or aborts whole, except for
//!    an I/O failure between the commits, which is reported as `PartialCommit` (as between nodes).
//! 7. A member returns only after every member committed, so its caller sees all its writes applied.
//!
//! The group is strictly serializable as one transaction: its server transactions hold all their locks
//! until the group commits (two-phase locking over their union), and rule 4 keeps them from waiting on
//! each other. The cost: a member that waits on the server for a transaction outside the group, which in
//! turn waits for the group's lock, would form a cycle the server cannot see. So:
//! 8. A member alone in its group waits on the server as any transaction does (phasing); once its group
//!    has several members, its commands go with NOWAIT (`txn`: `TXN.BEGIN NOWAIT`, or `TXN.NOWAIT` on a
//!    transaction already begun), so a lock it cannot get at once aborts it.
//! 9. Two groups do not merge while a member of either is inside a server call that may wait: that
//!    member's wait began alone and cannot be turned into NOWAIT half-way.
//! 10. A write may go *behind* (`Txn::write`, `plan(.., behind: true)`): it is sent with the member's
//!     next round trip, or its flush before the group commits. Until that round trip answers, nothing
//!     combines with it and the same mode beside it is no conflict (it goes NOWAIT with company); once
//!     queued it is `granted` like any other lock.
//! 11. A member alone in its group with nothing parked on it leaves the table when it commits (or at
//!     `call_and_commit`) and commits as a plain transaction: with no one to wait for, the group's
//!     barriers and flush would only cost round trips.
//!
//! This module is the bookkeeping alone (no I/O, so it is tested without a server); `txn` does the I/O.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::commands::CombineKey;
use crate::error::AbortCause;
use crate::reply::Reply;

pub type MemberId = u64;
type GroupId = u64;

/// An operation parked on its owner's server transaction on `node`; its reply goes to `issuer`'s `slot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedOp {
    pub issuer: MemberId,
    pub slot: usize,
    pub node: usize,
    pub args: Vec<Vec<u8>>,
}

/// What a member does with an operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Send it on the member's own server transaction.
    Send,
    /// Parked on another member's lock: no round trip; the reply is `Queued`.
    Combined,
    /// It conflicts with a lock of the member's group (rule 4): abort the member.
    Conflict,
    /// The group was aborted meanwhile.
    Aborted(AbortCause),
}

/// How far a member got; each barrier waits for every member to reach a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Running,
    Finished,
    Flushed,
    Committed,
}

struct Member {
    group: GroupId,
    stage: Stage,
    /// Operations of any member parked on this member's server transactions.
    parked: Vec<ParkedOp>,
    /// Commit replies of this member's parked operations, delivered by their owners.
    delivered: Vec<(usize, Reply)>,
    /// Inside a server call sent while alone, which may wait for a lock (rule 9).
    waiting_call: bool,
}

/// A lock a member's server transaction holds or is acquiring.
struct Hold {
    owner: MemberId,
    combine: Option<CombineKey>,
    granted: bool,
    /// A write sent behind (`Txn::write`): requested with the member's next round trip at the latest before
    /// the group commits. Nothing combines with it; the same mode beside it is no conflict.
    behind: bool,
}

struct Group {
    members: Vec<MemberId>,
    open: bool,
    aborted: Option<AbortCause>,
    commit_failure: Option<String>,
    holds: HashMap<Vec<u8>, Vec<Hold>>,
    /// Index entries that may point at this group, removed with it.
    index_keys: Vec<CombineKey>,
}

#[derive(Default)]
struct State {
    id_next: u64,
    members: HashMap<MemberId, Member>,
    groups: HashMap<GroupId, Group>,
    /// Combinable lock -> the group and member that hold it (Claret's map of combiners by key).
    index: HashMap<CombineKey, (GroupId, MemberId)>,
}

pub struct CombineTable {
    state: Mutex<State>,
    changed: Condvar,
    members_max: usize,
    /// How long a member waits at a barrier for the others before the group gives up.
    wait_max: Duration,
}

impl CombineTable {
    pub fn new(members_max: usize, wait_max: Duration) -> CombineTable {
        assert!(members_max >= 1);
        CombineTable {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            members_max,
            wait_max,
        }
    }

    /// A new member in a group of its own.
    pub fn join(&self) -> MemberId {
        let mut state = self.state.lock();
        state.id_next += 1;
        let id = state.id_next;
        state.groups.insert(
            id,
            Group {
                members: vec![id],
                open: true,
                aborted: None,
                commit_failure: None,
                holds: HashMap::new(),
                index_keys: Vec::new(),
            },
        );
        let member = Member {
            group: id,
            stage: Stage::Running,
            parked: Vec::new(),
            delivered: Vec::new(),
            waiting_call: false,
        };
        state.members.insert(id, member);
        id
    }

    /// Decides what `member` does with `args` on `key` (at `node`); a combined operation is parked with
    /// reply slot `slot`, and anything sent is registered as held before it is sent (rule 4 sees it).
    /// `behind`: a write that, planned `Send`, waits for the member's next round trip instead of going now.
    pub fn plan(
        &self,
        member: MemberId,
        node: usize,
        combine: Option<CombineKey>,
        slot: usize,
        args: &[&[u8]],
        behind: bool,
    ) -> Plan {
        let key = args[1];
        let mut state = self.state.lock();
        let group_id = state.members[&member].group;
        let group = &state.groups[&group_id];
        if let Some(cause) = &group.aborted {
            return Plan::Aborted(cause.clone());
        }
        let parked = || ParkedOp {
            issuer: member,
            slot,
            node,
            args: args.iter().map(|arg| arg.to_vec()).collect(),
        };
        match verdict(group, member, key, combine.as_ref()) {
            Verdict::Conflict => return Plan::Conflict,
            Verdict::CombineWith(owner) => {
                state.park(owner, parked());
                return Plan::Combined;
            }
            Verdict::Free => {}
        }
        if let Some(owner) = combine
            .as_ref()
            .and_then(|combine| self.joinable(&state, group_id, combine))
        {
            let target = state.members[&owner].group;
            state.merge(group_id, target);
            state.park(owner, parked());
            return Plan::Combined;
        }
        let hold = Hold {
            owner: member,
            combine,
            granted: false,
            behind,
        };
        let group = state.groups.get_mut(&group_id).expect("member's group");
        group.holds.entry(key.to_vec()).or_default().push(hold);
        let alone = group.members.len() == 1;
        if !behind {
            state.members.get_mut(&member).expect("member").waiting_call = alone;
        }
        Plan::Send
    }

    /// Whether `member`'s command just planned as `Send` goes with NOWAIT (rule 8): it has company.
    pub fn sends_nowait(&self, member: MemberId) -> bool {
        let state = self.state.lock();
        let group = state.members[&member].group;
        state.groups[&group].members.len() > 1
    }

    /// The server answered `member`'s command: it no longer waits there (rule 9).
    pub fn returned(&self, member: MemberId) {
        if let Some(entry) = self.state.lock().members.get_mut(&member) {
            entry.waiting_call = false;
        }
    }

    /// The owner of an open group's granted lock that `group_id` may join for `combine` (rules 2, 3).
    fn joinable(&self, state: &State, group_id: GroupId, combine: &CombineKey) -> Option<MemberId> {
        let &(target, owner) = state.index.get(combine)?;
        let (mine, theirs) = (&state.groups[&group_id], state.groups.get(&target)?);
        let open = |group: &Group| group.open && group.aborted.is_none();
        let fits = mine.members.len() + theirs.members.len() <= self.members_max;
        let waiting = |group: &Group| {
            group
                .members
                .iter()
                .any(|member| state.members[member].waiting_call)
        };
        let quiet = !waiting(mine) && !waiting(theirs);
        (target != group_id && open(mine) && open(theirs) && fits && quiet).then_some(owner)
    }

    /// The server granted `member`'s combinable lock: others may now combine with it.
    pub fn granted(&self, member: MemberId, key: &[u8], combine: &CombineKey) {
        let mut state = self.state.lock();
        let group_id = state.members[&member].group;
        let group = state.groups.get_mut(&group_id).expect("member's group");
        let mut holds = group.holds.get_mut(key).into_iter().flatten();
        let mine =
            |hold: &&mut Hold| hold.owner == member && hold.combine.as_ref() == Some(combine);
        if let Some(hold) = holds.find(mine) {
            hold.granted = true;
        }
        group.index_keys.push(combine.clone());
        let stale = match state.index.get(combine) {
            Some((holder, _)) => !matches!(state.groups.get(holder), Some(g) if g.open),
            None => true,
        };
        if stale {
            state.index.insert(combine.clone(), (group_id, member));
        }
    }

    /// `member` aborted: it leaves alone when nothing of another member is parked on it, else its whole
    /// group aborts (rule 5). Either way it is gone from the table afterwards.
    pub fn fail(&self, member: MemberId, cause: AbortCause) {
        let mut state = self.state.lock();
        let Some(entry) = state.members.get(&member) else {
            return;
        };
        let group_id = entry.group;
        let carries_others = entry.parked.iter().any(|op| op.issuer != member);
        let running = entry.stage == Stage::Running;
        let group = state.groups.get_mut(&group_id).expect("member's group");
        if group.aborted.is_none() && (carries_others || !running) {
            group.aborted = Some(cause);
        }
        state.remove_member(member);
        self.changed.notify_all();
    }

    /// `member` leaves the table if it is alone in its group with nothing parked on it, so it can commit as
    /// a plain transaction (commit behind its last command, writes behind with the commit): no one shares
    /// its locks, and from now on no one can. Returns whether it left.
    pub fn leave_if_alone(&self, member: MemberId) -> bool {
        let mut state = self.state.lock();
        let Some(entry) = state.members.get(&member) else {
            return false;
        };
        let group = &state.groups[&entry.group];
        let alone = group.members.len() == 1 && group.aborted.is_none() && entry.parked.is_empty();
        if alone {
            state.remove_member(member);
            self.changed.notify_all();
        }
        alone
    }

    /// `member` finished its body: waits for every member to finish (rule 6), then returns the operations
    /// parked on it, which it must send before committing.
    pub fn finish(&self, member: MemberId) -> Result<Vec<ParkedOp>, AbortCause> {
        let mut state = self.advance(member, Stage::Finished);
        self.wait_for(&mut state, member, Stage::Finished)?;
        let entry = state.members.get_mut(&member).expect("member");
        Ok(std::mem::take(&mut entry.parked))
    }

    /// `member` sent its parked operations: waits until every member did.
    pub fn flushed(&self, member: MemberId) -> Result<(), AbortCause> {
        let mut state = self.advance(member, Stage::Flushed);
        self.wait_for(&mut state, member, Stage::Flushed)
    }

    /// Hands the commit reply of a parked operation to its issuer.
    pub fn deliver(&self, issuer: MemberId, slot: usize, reply: Reply) {
        if let Some(entry) = self.state.lock().members.get_mut(&issuer) {
            entry.delivered.push((slot, reply));
        }
    }

    /// `member` committed (or failed to: `failure`); waits until every member did, then leaves and returns
    /// its delivered replies, or the group's commit failure.
    pub fn committed(
        &self,
        member: MemberId,
        failure: Option<String>,
    ) -> Result<Vec<(usize, Reply)>, String> {
        let mut state = self.advance(member, Stage::Committed);
        let group_id = state.members[&member].group;
        if let Some(failure) = failure {
            let group = state.groups.get_mut(&group_id).expect("member's group");
            group.commit_failure.get_or_insert(failure);
        }
        let waited = self.wait_for(&mut state, member, Stage::Committed);
        let group = &state.groups[&group_id];
        let failure = group.commit_failure.clone().or_else(|| {
            waited
                .err()
                .map(|_| "a member of the combined group did not report its commit".to_string())
        });
        let delivered =
            std::mem::take(&mut state.members.get_mut(&member).expect("member").delivered);
        state.remove_member(member);
        self.changed.notify_all();
        match failure {
            Some(failure) => Err(failure),
            None => Ok(delivered),
        }
    }

    fn advance(&self, member: MemberId, stage: Stage) -> parking_lot::MutexGuard<'_, State> {
        let mut state = self.state.lock();
        let entry = state.members.get_mut(&member).expect("member");
        debug_assert!(entry.stage < stage);
        entry.stage = stage;
        let group_id = entry.group;
        // Rule 3: the first finished member closes the group to newcomers.
        state
            .groups
            .get_mut(&group_id)
            .expect("member's group")
            .open = false;
        self.changed.notify_all();
        state
    }

    /// Waits until every member of `member`'s group reached `stage`, or the group aborted, or `wait_max`
    /// passed (then the group aborts: a member may be stuck in a body that waits for one of our locks).
    fn wait_for(
        &self,
        state: &mut parking_lot::MutexGuard<'_, State>,
        member: MemberId,
        stage: Stage,
    ) -> Result<(), AbortCause> {
        let deadline = Instant::now() + self.wait_max;
        loop {
            let group_id = state.members[&member].group;
            let group = &state.groups[&group_id];
            if let Some(cause) = &group.aborted {
                return Err(cause.clone());
            }
            if group
                .members
                .iter()
                .all(|m| state.members[m].stage >= stage)
            {
                return Ok(());
            }
            if self.changed.wait_until(state, deadline).timed_out() {
                let group = state.groups.get_mut(&group_id).expect("member's group");
                group.aborted.get_or_insert(AbortCause::Combine);
                self.changed.notify_all();
                return Err(AbortCause::Combine);
            }
        }
    }

    #[cfg(test)]
    fn group_size(&self, member: MemberId) -> usize {
        let state = self.state.lock();
        state.groups[&state.members[&member].group].members.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        let state = self.state.lock();
        state.members.is_empty() && state.groups.is_empty() && state.index.is_empty()
    }
}

enum Verdict {
    Free,
    CombineWith(MemberId),
    Conflict,
}

/// Rule 4 over the locks `group` holds on `key`.
fn verdict(group: &Group, member: MemberId, key: &[u8], combine: Option<&CombineKey>) -> Verdict {
    let Some(holds) = group.holds.get(key) else {
        return Verdict::Free;
    };
    let mut others = holds.iter().filter(|hold| hold.owner != member).peekable();
    if others.peek().is_none() {
        return Verdict::Free;
    }
    let (mut owner, mut in_flight) = (None, false);
    for hold in others {
        if combine.is_none() || hold.combine.as_ref() != combine {
            return Verdict::Conflict;
        }
        if hold.granted {
            owner.get_or_insert(hold.owner);
        } else if !hold.behind {
            in_flight = true;
        }
    }
    match (owner, in_flight) {
        (Some(owner), _) => Verdict::CombineWith(owner),
        // Same mode but not granted yet: the owner's request is in flight and ours could queue behind it.
        (None, true) => Verdict::Conflict,
        // Only writes behind in this mode: sent NOWAIT with company, ours shares the mode beside them.
        (None, false) => Verdict::Free,
    }
}

impl State {
    fn park(&mut self, owner: MemberId, op: ParkedOp) {
        self.members.get_mut(&owner).expect("owner").parked.push(op);
    }

    /// Moves every member, lock and index entry of group `from` into group `into`.
    fn merge(&mut self, from: GroupId, into: GroupId) {
        let source = self.groups.remove(&from).expect("group");
        for member in &source.members {
            self.members.get_mut(member).expect("member").group = into;
        }
        for key in &source.index_keys {
            if let Some(entry) = self.index.get_mut(key) {
                if entry.0 == from {
                    entry.0 = into;
                }
            }
        }
        let target = self.groups.get_mut(&into).expect("group");
        target.members.extend(source.members);
        target.index_keys.extend(source.index_keys);
        for (key, holds) in source.holds {
            target.holds.entry(key).or_default().extend(holds);
        }
    }

    /// Takes `member` out: its locks, its parked operations on others, its index entries; the group goes
    /// when its last member does.
    fn remove_member(&mut self, member: MemberId) {
        let entry = self.members.remove(&member).expect("member");
        let group_id = entry.group;
        let group = self.groups.get_mut(&group_id).expect("group");
        group.members.retain(|&m| m != member);
        for holds in group.holds.values_mut() {
            holds.retain(|hold| hold.owner != member);
        }
        for other in &group.members {
            let other = self.members.get_mut(other).expect("member");
            other.parked.retain(|op| op.issuer != member);
        }
        let group = &self.groups[&group_id];
        let index = &mut self.index;
        for key in &group.index_keys {
            let gone = group.members.is_empty() || index.get(key).is_some_and(|e| e.1 == member);
            if gone && index.get(key).is_some_and(|e| e.0 == group_id) {
                index.remove(key);
            }
        }
        if group.members.is_empty() {
            self.groups.remove(&group_id);
        }
    }
}

#[cfg(test)]
mod tests;
