//! `commit_group`: the transactional sinks of one commit group share their
//! aborts.
//!
//! The reference: "Declares commit-group membership. Does NOT add
//! cross-sink atomicity: a job's transactional sinks already commit on one
//! per-checkpoint broadcast and abort together on any failed ack.
//! Membership only advances when an abort is issued." What we make of it
//! (DESIGN.md, "Commit groups"):
//!
//! - Sinks built with the same `commit_group` in one process are members
//!   of one [`CommitGroup`] (a process-wide registry keyed by the name).
//!   A sink joins at `open` and leaves at `close`.
//! - An abort issued to any member (`on_abort(n)`), or a member's failed
//!   pre-commit (`on_barrier(n)` returning an error), records checkpoint
//!   `n` as aborted for the whole group. That is the only thing that moves
//!   the group: its **epoch** advances by one per distinct aborted
//!   checkpoint (an abort broadcast to every member moves it once), and
//!   the epoch's membership is the members at that moment.
//! - A member asked to commit a checkpoint its group aborted aborts its own
//!   transaction for it instead and returns
//!   [`ConnectorError::GroupAborted`](super::ConnectorError::GroupAborted). Under a driver that broadcasts every
//!   abort (the reference's engine, `clink-kafka copy`) this never happens
//!   and the group changes nothing but its epoch: it adds no atomicity the
//!   broadcast does not give. It matters to a driver that delivers an abort
//!   to only some sinks: without a group the others would commit.
//!
//! The group is process-local; sinks in other processes are not members.
//! The epoch a sink saw last is in [`super::TwoPhaseCommitStats`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

/// Aborted checkpoints remembered per group (oldest dropped first).
const ABORTS_KEPT: usize = 1024;

#[derive(Debug, Default)]
struct GroupState {
    epoch: u64,
    /// Members now: transactional id → how many sinks hold it.
    members: BTreeMap<String, usize>,
    /// Aborted checkpoint → the epoch its abort started.
    aborted: BTreeMap<u64, u64>,
    /// The membership at the current epoch.
    epoch_members: BTreeSet<String>,
}

/// One commit group's shared state (see the module docs).
#[derive(Clone, Debug)]
pub struct CommitGroup {
    name: String,
    state: Arc<Mutex<GroupState>>,
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Mutex<GroupState>>>> {
    static GROUPS: OnceLock<Mutex<HashMap<String, Arc<Mutex<GroupState>>>>> = OnceLock::new();
    GROUPS.get_or_init(Default::default)
}

impl CommitGroup {
    /// The process's group called `name` (made on first use).
    pub fn named(name: &str) -> CommitGroup {
        let mut groups = registry().lock().unwrap_or_else(|e| e.into_inner());
        let state = groups.entry(name.to_owned()).or_default().clone();
        CommitGroup {
            name: name.to_owned(),
            state,
        }
    }

    /// The group's name (the `commit_group` option).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `member` joins (at `open`); returns the group's epoch.
    pub fn join(&self, member: &str) -> u64 {
        let mut s = self.lock();
        *s.members.entry(member.to_owned()).or_default() += 1;
        s.epoch
    }

    /// `member` leaves (at `close`).
    pub fn leave(&self, member: &str) {
        let mut s = self.lock();
        if let Some(n) = s.members.get_mut(member) {
            *n -= 1;
            if *n == 0 {
                s.members.remove(member);
            }
        }
    }

    /// Records that an abort of `checkpoint` was issued to a member.
    /// Advances the epoch the first time `checkpoint` is aborted; returns
    /// the epoch after.
    pub fn record_abort(&self, checkpoint: u64) -> u64 {
        let mut s = self.lock();
        if !s.aborted.contains_key(&checkpoint) {
            s.epoch += 1;
            let epoch = s.epoch;
            s.aborted.insert(checkpoint, epoch);
            s.epoch_members = s.members.keys().cloned().collect();
            while s.aborted.len() > ABORTS_KEPT {
                s.aborted.pop_first();
            }
        }
        s.epoch
    }

    /// The epoch whose abort covers `checkpoint`, if the group aborted it.
    pub fn aborted(&self, checkpoint: u64) -> Option<u64> {
        self.lock().aborted.get(&checkpoint).copied()
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The members at the current epoch (taken when its abort was issued).
    pub fn epoch_members(&self) -> Vec<String> {
        self.lock().epoch_members.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_moves_only_on_an_abort_once_per_checkpoint() {
        let g = CommitGroup::named("unit-epoch");
        assert_eq!(g.join("a"), 0);
        assert_eq!(CommitGroup::named("unit-epoch").join("b"), 0, "one state per name");
        assert_eq!(g.epoch(), 0, "joining does not move it");
        assert_eq!(g.record_abort(3), 1);
        assert_eq!(g.record_abort(3), 1, "a broadcast abort moves it once");
        assert_eq!(g.epoch_members(), vec!["a", "b"]);
        g.leave("b");
        assert_eq!(
            g.epoch_members(),
            vec!["a", "b"],
            "membership moves only at the next abort"
        );
        assert_eq!(g.record_abort(4), 2);
        assert_eq!(g.epoch_members(), vec!["a"]);
        assert_eq!((g.aborted(3), g.aborted(4), g.aborted(5)), (Some(1), Some(2), None));
        assert_eq!(CommitGroup::named("unit-other").epoch(), 0);
    }
}
