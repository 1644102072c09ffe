//! One broker's fetch session ([KIP-227]): which partitions the broker keeps
//! for us, at which fetch offsets, and the epoch the next request carries.
//!
//! A full fetch lists every wanted partition; an incremental one lists only
//! the partitions that are new or whose fetch offset changed, and names the
//! ones to drop in `forgotten_topics_data`. The broker answers an
//! incremental fetch with only the partitions that have something to say.
//! Any session error (or a transport error, or an answer that does not fit
//! the session) sends the next request back to a full fetch.
//!
//! Epochs: `-1` is a sessionless full fetch, `0` asks for a new session
//! (closing the one named by `session_id`, if any), `1..` are incremental
//! fetches; after `i32::MAX` the epoch wraps to 1.
//!
//! [KIP-227]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-227%3A+Introduce+Incremental+FetchRequests+to+Increase+Partition+Scalability

use std::collections::BTreeMap;
use std::sync::Arc;

/// The session epoch of a full fetch that opens no session.
pub const FINAL_EPOCH: i32 = -1;
/// The session epoch that asks the broker for a new session.
pub const INITIAL_EPOCH: i32 = 0;

/// A partition as the session knows it: the offset, size and leader epoch
/// last sent (a changed epoch is listed again, as a changed offset is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionPartition {
    /// The next offset to fetch.
    pub fetch_offset: i64,
    /// `partition_max_bytes` as sent.
    pub max_bytes: i32,
    /// The leader epoch sent as `current_leader_epoch` (-1: none).
    pub current_leader_epoch: i32,
}

/// One broker's session state.
#[derive(Clone, Debug, Default)]
pub struct FetchSession {
    /// 0 when there is none.
    pub(crate) id: i32,
    /// The epoch the next request carries.
    pub(crate) epoch: i32,
    /// What the broker holds for us (after the last request sent).
    pub(crate) partitions: BTreeMap<(Arc<str>, i32), SessionPartition>,
    /// The next request must be a full one.
    pub(crate) needs_full: bool,
}

/// What one request says about the session.
#[derive(Clone, Debug)]
pub(crate) struct SessionPlan {
    /// The session id the broker gave (0: none yet).
    pub id: i32,
    /// The next request's session epoch.
    pub epoch: i32,
    /// Partitions to list in the request.
    pub listed: Vec<(Arc<str>, i32, SessionPartition)>,
    /// Partitions to drop from the session (incremental only).
    pub forgotten: Vec<(Arc<str>, i32)>,
    /// Whether the next request is a full fetch (names every partition).
    pub full: bool,
}

impl FetchSession {
    /// The session id (0 when none) and the epoch the next request carries.
    pub fn id_and_epoch(&self) -> (i32, i32) {
        (self.id, self.epoch)
    }

    /// Plans the next request for `wanted` and records it as sent.
    pub(crate) fn plan(&mut self, wanted: &[(Arc<str>, i32, SessionPartition)], sessions: bool) -> SessionPlan {
        let full = !sessions || self.id == 0 || self.needs_full || self.epoch <= INITIAL_EPOCH;
        let plan = if full {
            let epoch = if sessions { INITIAL_EPOCH } else { FINAL_EPOCH };
            SessionPlan {
                id: if sessions { self.id } else { 0 },
                epoch,
                listed: wanted.to_vec(),
                forgotten: Vec::new(),
                full: true,
            }
        } else {
            let mut listed = Vec::new();
            for (t, p, sp) in wanted {
                if self.partitions.get(&(t.clone(), *p)) != Some(sp) {
                    listed.push((t.clone(), *p, *sp));
                }
            }
            let forgotten = self
                .partitions
                .keys()
                .filter(|(t, p)| !wanted.iter().any(|(wt, wp, _)| wt == t && wp == p))
                .cloned()
                .collect();
            SessionPlan {
                id: self.id,
                epoch: self.epoch,
                listed,
                forgotten,
                full: false,
            }
        };
        self.partitions = wanted.iter().map(|(t, p, sp)| ((t.clone(), *p), *sp)).collect();
        plan
    }

    /// The broker accepted the request `plan` described; `response_id` is
    /// the session id it answered with.
    pub(crate) fn accepted(&mut self, plan: &SessionPlan, response_id: i32, sessions: bool) {
        if !sessions {
            *self = FetchSession::default();
            return;
        }
        if plan.full {
            // 0: the broker declined to open a session (cache full); keep
            // sending full fetches.
            self.id = response_id;
            self.epoch = if response_id == 0 { INITIAL_EPOCH } else { 1 };
            self.needs_full = false;
        } else if response_id != self.id {
            // Not the session we asked about: start over.
            self.reset();
        } else {
            // After i32::MAX the epoch wraps to 1 (KIP-227), never to 0 or
            // below, which would mean a new or closed session.
            self.epoch = self.epoch.checked_add(1).unwrap_or(1);
        }
    }

    /// The next request is a full fetch that replaces the session (a session
    /// error, a transport error, an answer that did not fit).
    pub(crate) fn reset(&mut self) {
        self.needs_full = true;
        self.epoch = INITIAL_EPOCH;
        self.partitions.clear();
    }
}
