//! Consumer group membership (the classic protocol) as a sans-IO state
//! machine, the consumer protocol's embedded bytes, and the client-side
//! assignors.
//!
//! ```text
//!  set_subscription / handle_app_poll / leave ──┐
//!  handle_join_response / handle_sync_response  │            ┌─► Action::Send(GroupRequest)  (driver sends it)
//!  handle_heartbeat_response / handle_leave_..  ├─► ClassicMember ─► poll(now)
//!  handle_coordinator_found / handle_metadata   │            └─► Action::Event(GroupEvent)   (rebalance listener)
//!  handle_request_failed / handle_timeout(now) ─┘   poll_timeout(now) ─► when to call again
//! ```
//!
//! - [`consumer_protocol`]: `ConsumerProtocolSubscription` and
//!   `ConsumerProtocolAssignment` v0..=v3, byte-compatible with the Java
//!   client, decoded as hostile input (they come from other members).
//! - [`assignor`]: `range`, `roundrobin` (the Java client's exact results)
//!   and `cooperative-sticky` (balanced, sticky, incremental: KIP-429), as
//!   pure functions.
//! - [`member`]: [`ClassicMember`], the member side of JoinGroup,
//!   SyncGroup, Heartbeat and LeaveGroup.
//! - [`consumer`]: [`ConsumerMember`], the member side of the KIP-848
//!   consumer protocol (ConsumerGroupHeartbeat: member epochs,
//!   reconciliation, fencing), with the same driver contract; its module
//!   docs say what it does.
//!
//! Nothing here touches a socket or a clock: time is a `u64` of
//! milliseconds from the driver's monotonic clock, passed to every input
//! that needs it. That is what lets the `group` fuzz target drive it with
//! arbitrary answers, times and subscription/assignment bytes
//! (`fuzzing`, built under `cfg(fuzzing)`).
//!
//! # What the member does
//!
//! States: [`MemberState`] (`Unjoined` → `Joining` → [`AwaitingMetadata`
//! (leader)] → `AwaitingSync` → `Stable`, with `Revoking` while the
//! application commits before a rebalance, `Leaving` → `Left` on close, and
//! `Fatal`).
//!
//! - **Join.** With a coordinator and a non-empty subscription, it sends
//!   JoinGroup with one protocol per configured assignor, in order, each
//!   carrying a v3 subscription: the topics, the partitions it owns and
//!   their generation, the rack, and for `cooperative-sticky` the Java
//!   assignor's user data (the generation as 4 bytes). Before it rejoins
//!   it runs Java's `onJoinPrepare`: under the eager protocol it revokes
//!   everything; under the cooperative one only the partitions of topics no
//!   longer subscribed; outside a generation what it holds is *lost*.
//! - **Leader.** It decodes every member's subscription (one that does not
//!   decode subscribes to nothing and gets an empty assignment; the others
//!   go on), asks for the partition counts of all their topics
//!   ([`GroupRequest::Metadata`]), runs the chosen assignor and sends
//!   SyncGroup with every member's v3 assignment. It rejoins when a later
//!   [`ClassicMember::handle_metadata`] shows other counts for the group's
//!   topics. A `skip_assignment` answer (KIP-814, a static leader
//!   rejoining) makes it act as a follower.
//! - **Sync.** The assignment is decoded as hostile input; one that does
//!   not decode, or names a topic not subscribed, is not taken: the member
//!   rejoins after a backoff (Java's rule). Otherwise partitions no longer
//!   assigned are revoked ([`GroupEvent::PartitionsRevoked`]) — under the
//!   cooperative protocol the member then rejoins so they can move — and
//!   [`GroupEvent::PartitionsAssigned`] names the added ones (always
//!   emitted, possibly empty).
//! - **Heartbeat** every `heartbeat.interval.ms` while `Stable` (also
//!   while the application commits a revocation); an answer for an older
//!   generation is ignored.
//! - **Error codes**, with the Java client's meanings:
//!
//!   | code | JoinGroup | SyncGroup | Heartbeat |
//!   |---|---|---|---|
//!   | MEMBER_ID_REQUIRED | take the id, rejoin at once | — | — |
//!   | UNKNOWN_MEMBER_ID | forget id and generation (lost), rejoin | same | same |
//!   | ILLEGAL_GENERATION | forget generation (lost), rejoin | same | same |
//!   | FENCED_INSTANCE_ID | lost, fatal | lost, fatal | lost, fatal |
//!   | REBALANCE_IN_PROGRESS | rejoin after backoff | rejoin (generation kept) | rejoin (revoke per protocol) |
//!   | COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR | rediscover, rejoin | rediscover, rejoin | rediscover |
//!   | COORDINATOR_LOAD_IN_PROGRESS | rejoin after backoff | same | next heartbeat after backoff |
//!   | anything else | fatal | fatal | fatal |
//!
//! - **Timers.** No heartbeat answer within `session.timeout.ms`: find the
//!   coordinator again (the member is probably out; the next answer says
//!   so). No [`ClassicMember::handle_app_poll`] within
//!   `max.poll.interval.ms`: the partitions are lost at once, a dynamic
//!   member sends LeaveGroup, and the member rejoins at the next
//!   application poll. `max.poll.interval.ms` is also the JoinGroup
//!   rebalance timeout.
//! - **Static membership** (`group.instance.id`, KIP-345): sent in every
//!   request; no LeaveGroup on close or on a poll timeout, so a restart
//!   within the session timeout gets its assignment back without a
//!   rebalance; FENCED_INSTANCE_ID is fatal.
//! - **Close** ([`ClassicMember::leave`]): revoke everything (commit), then
//!   LeaveGroup (dynamic members), then `Left`.
//!
//! # What the async driver must do
//!
//! 1. Call [`ClassicMember::poll`] after every input until it returns
//!    `None`, and again at [`ClassicMember::poll_timeout`].
//! 2. Send each [`GroupRequest`]: FindCoordinator (key type group), then
//!    JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the coordinator,
//!    Metadata to any broker. Encode at the negotiated version (the member
//!    fills `group_instance_id` only when configured, and leaves `reason`
//!    empty; JoinGroup v4+ for MEMBER_ID_REQUIRED, v5+ for static
//!    membership). Give JoinGroup a request timeout above the rebalance
//!    timeout (Java: `max.poll.interval.ms` + 5 s). Heartbeats go out
//!    while a revocation is being committed: do not hold them behind it.
//! 3. Answer every request with its `handle_*_response`,
//!    [`ClassicMember::handle_coordinator_found`],
//!    [`ClassicMember::handle_metadata`] (partition counts; a topic that
//!    does not exist left out), or [`ClassicMember::handle_request_failed`]
//!    on a transport failure or timeout. A request without its answer
//!    stalls that part of the protocol.
//! 4. Deliver events in order. On [`GroupEvent::PartitionsRevoked`]:
//!    stop handing over those partitions' records, commit their offsets
//!    with the event's generation and member id (auto-commit: what `poll`
//!    handed over), then call [`ClassicMember::handle_revoke_done`]. On
//!    [`GroupEvent::PartitionsLost`]: drop them without committing. On
//!    [`GroupEvent::PartitionsAssigned`]: fetch the committed offsets
//!    (OffsetFetch), else apply `auto.offset.reset`. On
//!    [`GroupEvent::Fatal`]: surface the error from every later call.
//! 5. Call [`ClassicMember::handle_app_poll`] on each application poll,
//!    and commit with [`ClassicMember::group_metadata`] (OffsetCommit's
//!    generation and member id; TxnOffsetCommit's group metadata, KIP-447).
//!
//! # Not here (yet)
//!
//! Rack-aware range
//! assignment; KIP-848 sparse heartbeats; the byte-exact Java
//! `AbstractStickyAssignor` under unequal subscriptions. The async driver,
//! offsets and the classic protocol's client-side pattern matching are in
//! the client's `group_consumer.rs`. The answers
//! are decoded from the network by `messages/group_membership.rs`
//! (JoinGroup v2..=v9, SyncGroup v0..=v5, Heartbeat v0..=v4, LeaveGroup
//! v0..=v5, ConsumerGroupHeartbeat v0..=v1), bounded like every decoder.

pub mod assignor;
pub mod consumer;
pub mod consumer_protocol;
pub mod member;

#[cfg(any(fuzzing, test))]
pub mod fuzzing;
#[cfg(test)]
mod tests;

pub use assignor::{Assignor, MemberSubscription, PartitionSet, RebalanceProtocol, TopicPartition};
pub use consumer::{Action848, ConsumerGroupConfig, ConsumerMember, ConsumerMemberState, GroupEvent848, IdPartition};
pub use member::{
    Action, ClassicMember, ConsumerGroupMetadata, GroupConfig, GroupError, GroupEvent, GroupRequest, MemberState,
    RequestKind,
};
/// Topic ids (KIP-516), as [`IdPartition`] names them.
pub use uuid::Uuid;
