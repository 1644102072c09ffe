//! Which replica a partition is fetched from, and whether its position is
//! still on the leader's log: leader epochs ([KIP-320]) and the preferred
//! read replica ([KIP-392]).
//!
//! **Leader epochs.** The async layer tells the fetcher each partition's
//! leader and leader epoch from the metadata ([`Fetcher::update_leader`]);
//! every Fetch carries that epoch as `current_leader_epoch`, so a broker
//! that knows a newer (or older) epoch answers `FENCED_LEADER_EPOCH` /
//! `UNKNOWN_LEADER_EPOCH` instead of serving a stale view. The position
//! remembers the `partition_leader_epoch` of the batch it follows. When the
//! leader changes under a position that has an epoch, the partition stops
//! being fetched (data buffered from the old leader is dropped; the
//! position stays) until the new leader confirms it: an OffsetForLeaderEpoch
//! request ([`Fetcher::epoch_requests`]) asks for the end offset of the
//! position's epoch on the new leader's log. An end offset below the
//! position means the records we handed over past it were truncated (an
//! unclean election): with a reset policy the position moves back to that
//! end offset — the first offset where the logs diverge — and a
//! [`LogTruncation`] is reported so the caller can log it; without one the
//! partition stays stopped and the error names topic, partition and both
//! offsets, until the caller seeks. The same flow as Java's
//! `SubscriptionState` (`AWAIT_VALIDATION`) and `OffsetsForLeaderEpochUtils`.
//!
//! **Preferred read replica.** A broker with a rack-aware replica selector
//! answers a fetch that names the client's rack with
//! `preferred_read_replica` (and no records). The partition is then fetched
//! from that broker ([`Fetcher::fetch_target`]) until an error from it, a
//! transport failure, a leader change, or
//! [`FetcherConfig::preferred_replica_max_age_ms`] elapses; then the leader
//! is asked again (and may name the same replica). An out-of-range offset
//! from a follower is not reset: the follower may lag, the leader is asked.
//!
//! [KIP-320]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-320%3A+Allow+fetchers+to+detect+and+handle+log+truncation
//! [KIP-392]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-392%3A+Allow+consumers+to+fetch+from+closest+replica

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{partition_error, FetchError, Fetcher, FetcherConfig};
use crate::error_code::KafkaCode;
use crate::record::BatchHeader;

/// Where a partition's position check stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Validation {
    /// Nothing to check: fetch.
    #[default]
    Valid,
    /// The leader changed under a position with an epoch: ask it.
    Pending,
    /// Asked `broker` about `offset` under `current_leader_epoch`.
    InFlight {
        broker: i32,
        offset: i64,
        current_leader_epoch: i32,
    },
    /// Truncated below the position with no reset policy: stopped until a
    /// seek.
    Failed,
}

/// A partition's leader, epochs, validation and preferred replica.
#[derive(Clone, Debug, Default)]
pub(super) struct ReplicaState {
    /// (leader id, leader epoch) from the metadata.
    leader: Option<(i32, i32)>,
    /// The partition leader epoch of the batch the position follows; `None`
    /// after a seek (nothing to validate).
    position_epoch: Option<i32>,
    validation: Validation,
    /// (broker, until ms) from `preferred_read_replica`.
    preferred: Option<(i32, u64)>,
}

impl ReplicaState {
    pub(super) fn fetchable(&self) -> bool {
        self.validation == Validation::Valid
    }

    /// The epoch a Fetch names (`-1`: unknown, not checked by the broker).
    pub(super) fn current_leader_epoch(&self) -> i32 {
        self.leader.map_or(-1, |(_, e)| e.max(-1))
    }

    /// Whether `broker` is not the partition's leader (as last known).
    pub(super) fn is_follower(&self, broker: i32) -> bool {
        self.leader.is_some_and(|(l, _)| l != broker)
    }

    pub(super) fn seeked(&mut self) {
        self.position_epoch = None;
        self.validation = Validation::Valid;
    }

    /// The position moved past (part of) the batch `h`.
    pub(super) fn moved_past(&mut self, h: &BatchHeader) {
        if h.partition_leader_epoch >= 0 {
            self.position_epoch = Some(h.partition_leader_epoch);
        }
    }

    pub(super) fn set_preferred(&mut self, broker: i32, until_ms: u64) {
        self.preferred = Some((broker, until_ms));
    }

    pub(super) fn clear_preferred(&mut self) {
        self.preferred = None;
    }
}

/// A log truncated below a consumer's position after a leader change: the
/// records it had handed over from `divergent_offset` up to `position` are
/// gone from the new leader's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogTruncation {
    /// The partition's topic.
    pub topic: Arc<str>,
    /// The partition index.
    pub partition: i32,
    /// The position (next offset to hand over) before the check.
    pub position: i64,
    /// Its leader epoch.
    pub position_epoch: i32,
    /// The new leader's end offset of that epoch: the first offset where
    /// the logs diverge.
    pub divergent_offset: i64,
    /// Whether the position was moved back to `divergent_offset` (a reset
    /// policy is set) or the partition is stopped until a seek.
    pub reset: bool,
}

impl std::fmt::Display for LogTruncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log truncation detected on {}[{}]: the position {} (leader epoch {}) is past the new leader's end offset {} of that epoch; records {}..{} were truncated",
            self.topic,
            self.partition,
            self.position,
            self.position_epoch,
            self.divergent_offset,
            self.divergent_offset,
            self.position
        )?;
        if self.reset {
            write!(f, "; the position moved back to {}", self.divergent_offset)
        } else {
            write!(f, " and no offset reset policy is set: seek to continue")
        }
    }
}

/// What one OffsetForLeaderEpoch answer did.
#[derive(Clone, Debug, Default)]
pub struct EpochValidationOutcome {
    /// Positions confirmed.
    pub validated: usize,
    /// Truncations found (with a reset policy: the position moved back).
    pub truncations: Vec<LogTruncation>,
    /// Topics whose metadata is stale; their checks are asked again.
    pub refresh_metadata: Vec<Arc<str>>,
    /// Partitions unpositioned because the leader does not know the
    /// position's epoch at all; reset them (`auto.offset.reset`).
    pub reset_offsets: Vec<(Arc<str>, i32)>,
    /// Errors to report (a truncation without a reset policy, an epoch
    /// unknown without one, a fatal code).
    pub errors: Vec<FetchError>,
    /// A retriable error arrived: the check is asked again.
    pub retriable_error: bool,
}

impl Fetcher {
    /// The client's rack (`client.rack`), sent in every Fetch (v11+) so a
    /// rack-aware broker can name a replica in it; `None` sends none.
    pub fn set_client_rack(&mut self, rack: Option<&str>) {
        self.rack_id = StrBytes::from_string(rack.unwrap_or_default().to_owned());
    }

    /// The caller's clock, in ms from any fixed origin: the preferred read
    /// replica's age is measured on it.
    pub fn set_now(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// The leader and leader epoch of `topic[partition]` from the metadata.
    /// A newer leader (a higher epoch, or another leader id) under a
    /// position that follows a batch with a known epoch stops the partition
    /// until [`epoch_requests`](Self::epoch_requests) has checked the
    /// position; its buffered data is dropped (the position stays). An older
    /// epoch than the one known is stale metadata and ignored. Returns
    /// whether a check was started.
    pub fn update_leader(&mut self, topic: &str, partition: i32, leader: i32, epoch: i32) -> bool {
        let Some(i) = self.index(topic, partition) else {
            return false;
        };
        let Some(a) = self.assigned.get_mut(i) else {
            return false;
        };
        let r = &mut a.replica;
        let old = r.leader;
        if old == Some((leader, epoch)) {
            return false;
        }
        if let Some((_, old_epoch)) = old {
            if epoch >= 0 && old_epoch >= 0 && epoch < old_epoch {
                return false;
            }
        }
        r.leader = Some((leader, epoch));
        if old.is_some_and(|(l, _)| l != leader) {
            r.preferred = None;
        }
        let check = old.is_some()
            && epoch >= 0
            && a.position.is_some()
            && r.position_epoch.is_some()
            && r.validation != Validation::Failed;
        if check {
            r.validation = Validation::Pending;
            a.buffered = None;
            a.fruitless_at = None;
            self.ready.retain(|&x| x != i);
        }
        check
    }

    /// The broker to fetch `topic[partition]` from: its preferred read
    /// replica while one is set, younger than the configured age and
    /// `known` (in the metadata), else `leader`. An expired or unknown
    /// preferred replica is forgotten.
    pub fn fetch_target(&mut self, topic: &str, partition: i32, leader: i32, known: impl Fn(i32) -> bool) -> i32 {
        let now = self.now_ms;
        let Some(a) = self.find_mut(topic, partition) else {
            return leader;
        };
        let r = &mut a.replica;
        match r.preferred {
            Some((b, until)) if now < until && known(b) => b,
            Some(_) => {
                r.preferred = None;
                leader
            }
            None => leader,
        }
    }

    /// The preferred read replica of `topic[partition]`, if one is set.
    pub fn preferred_replica(&self, topic: &str, partition: i32) -> Option<i32> {
        self.index(topic, partition)
            .and_then(|i| self.assigned.get(i))
            .and_then(|a| a.replica.preferred.map(|(b, _)| b))
    }

    /// The leader epoch of the batch the position follows, if known.
    pub fn position_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.index(topic, partition)
            .and_then(|i| self.assigned.get(i))
            .and_then(|a| a.replica.position_epoch)
    }

    /// Whether `topic[partition]` waits for its position to be checked
    /// against a new leader (or was found truncated with no reset policy).
    pub fn awaiting_validation(&self, topic: &str, partition: i32) -> bool {
        self.index(topic, partition)
            .and_then(|i| self.assigned.get(i))
            .is_some_and(|a| !a.replica.fetchable())
    }

    /// Forgets `broker` as the preferred replica of every partition (it
    /// failed or went away): they are fetched from their leaders.
    pub fn forget_preferred_replica(&mut self, broker: i32) {
        for a in &mut self.assigned {
            if a.replica.preferred.is_some_and(|(b, _)| b == broker) {
                a.replica.preferred = None;
            }
        }
    }

    /// The OffsetForLeaderEpoch requests to send, one per leader, for every
    /// partition whose check is due; they are recorded as in flight until
    /// [`handle_epoch_response`](Self::handle_epoch_response) or
    /// [`handle_epoch_failure`](Self::handle_epoch_failure).
    pub fn epoch_requests(&mut self) -> Vec<(i32, OffsetForLeaderEpochRequest)> {
        let mut by_leader: BTreeMap<i32, OffsetForLeaderEpochRequest> = BTreeMap::new();
        for a in &mut self.assigned {
            let r = &mut a.replica;
            let (Validation::Pending, Some(position), Some(epoch), Some((leader, current))) =
                (r.validation, a.position, r.position_epoch, r.leader)
            else {
                continue;
            };
            if leader < 0 {
                continue;
            }
            r.validation = Validation::InFlight {
                broker: leader,
                offset: position,
                current_leader_epoch: current,
            };
            let request = by_leader.entry(leader).or_insert_with(|| {
                let mut q = OffsetForLeaderEpochRequest::default();
                q.replica_id = (-1).into();
                q
            });
            let mut p = OffsetForLeaderPartition::default();
            p.partition = a.partition;
            p.current_leader_epoch = current;
            p.leader_epoch = epoch;
            match request.topics.iter_mut().find(|t| t.topic.0.as_str() == &*a.topic) {
                Some(t) => t.partitions.push(p),
                None => {
                    let mut t = OffsetForLeaderTopic::default();
                    t.topic = TopicName(StrBytes::from_string(a.topic.to_string()));
                    t.partitions = vec![p];
                    request.topics.push(t);
                }
            }
        }
        by_leader.into_iter().collect()
    }

    /// `broker` does not speak OffsetForLeaderEpoch (v2+): its checks are
    /// skipped and the positions kept, as Java's consumer does.
    pub fn handle_epoch_unsupported(&mut self, broker: i32) {
        for a in &mut self.assigned {
            if matches!(a.replica.validation, Validation::InFlight { broker: b, .. } if b == broker) {
                a.replica.validation = Validation::Valid;
            }
        }
    }

    /// Every check in flight is due again (its request was dropped
    /// unanswered: a cancelled caller).
    pub fn retry_epoch_requests(&mut self) {
        for a in &mut self.assigned {
            if matches!(a.replica.validation, Validation::InFlight { .. }) {
                a.replica.validation = Validation::Pending;
            }
        }
    }

    /// Topics with a partition whose position waits for a check.
    pub fn topics_awaiting_validation(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for a in &self.assigned {
            if matches!(a.replica.validation, Validation::Pending | Validation::InFlight { .. })
                && !out.contains(&a.topic)
            {
                out.push(a.topic.clone());
            }
        }
        out
    }

    /// The OffsetForLeaderEpoch request to `broker` failed without an
    /// answer: its checks are due again.
    pub fn handle_epoch_failure(&mut self, broker: i32) {
        for a in &mut self.assigned {
            if matches!(a.replica.validation, Validation::InFlight { broker: b, .. } if b == broker) {
                a.replica.validation = Validation::Pending;
            }
        }
    }

    /// Applies `broker`'s OffsetForLeaderEpoch answer. Entries for checks
    /// not in flight to it (or overtaken by a seek or a newer leader) are
    /// ignored; checks it does not answer are due again.
    pub fn handle_epoch_response(
        &mut self,
        broker: i32,
        response: OffsetForLeaderEpochResponse,
    ) -> EpochValidationOutcome {
        let FetcherConfig { auto_reset, .. } = self.config;
        let mut out = EpochValidationOutcome::default();
        let mut answered: Vec<usize> = Vec::new();
        for t in &response.topics {
            for e in &t.partitions {
                let Some(i) = self.index(t.topic.0.as_str(), e.partition) else {
                    continue;
                };
                if answered.contains(&i) {
                    continue;
                }
                let Some(a) = self.assigned.get_mut(i) else {
                    continue;
                };
                let Validation::InFlight {
                    broker: b,
                    offset,
                    current_leader_epoch,
                } = a.replica.validation
                else {
                    continue;
                };
                let current = a.replica.current_leader_epoch();
                if b != broker || a.position != Some(offset) || current != current_leader_epoch {
                    continue;
                }
                answered.push(i);
                let code = KafkaCode(e.error_code);
                if !code.is_ok() {
                    let last = partition_error(
                        code,
                        &a.topic,
                        a.partition,
                        &mut out.refresh_metadata,
                        &mut out.retriable_error,
                        &mut out.errors,
                    );
                    a.replica.validation = if last { Validation::Failed } else { Validation::Pending };
                    continue;
                }
                let position_epoch = a.replica.position_epoch.unwrap_or(-1);
                if e.end_offset < 0 || e.leader_epoch < 0 {
                    // The leader knows nothing of the position's epoch (or
                    // older): as an out-of-range position.
                    a.replica.validation = Validation::Valid;
                    a.replica.position_epoch = None;
                    if auto_reset {
                        a.position = None;
                        out.reset_offsets.push((a.topic.clone(), a.partition));
                    } else {
                        a.replica.validation = Validation::Failed;
                        out.errors.push(FetchError::OffsetOutOfRange {
                            topic: a.topic.clone(),
                            partition: a.partition,
                            offset,
                        });
                    }
                    continue;
                }
                if e.end_offset < offset {
                    let truncation = LogTruncation {
                        topic: a.topic.clone(),
                        partition: a.partition,
                        position: offset,
                        position_epoch,
                        divergent_offset: e.end_offset,
                        reset: auto_reset,
                    };
                    if auto_reset {
                        a.position = Some(e.end_offset);
                        a.replica.position_epoch = Some(e.leader_epoch);
                        a.replica.validation = Validation::Valid;
                        out.truncations.push(truncation);
                    } else {
                        a.replica.validation = Validation::Failed;
                        out.truncations.push(truncation.clone());
                        out.errors.push(FetchError::LogTruncation(truncation));
                    }
                    continue;
                }
                a.replica.validation = Validation::Valid;
                out.validated = out.validated.saturating_add(1);
            }
        }
        for (i, a) in self.assigned.iter_mut().enumerate() {
            if !answered.contains(&i)
                && matches!(a.replica.validation, Validation::InFlight { broker: b, .. } if b == broker)
            {
                a.replica.validation = Validation::Pending;
                out.retriable_error = true;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
    use kafka_protocol::messages::{BrokerId, FetchResponse};

    use super::*;
    use crate::fetcher::{FetchOutcome, FetcherConfig};
    use crate::record::{BatchMeta, RecordBatchEncoder, RecordOut};

    /// One batch of `n` records from `base`, written under leader `epoch`.
    fn batch(base: i64, n: usize, epoch: i32) -> Bytes {
        let records: Vec<RecordOut<'_>> = (0..n)
            .map(|_| RecordOut {
                timestamp: 1,
                key: None,
                value: Some(b"v"),
                headers: &[],
            })
            .collect();
        let meta = BatchMeta {
            base_offset: base,
            partition_leader_epoch: epoch,
            ..BatchMeta::default()
        };
        let mut out = BytesMut::new();
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        out.freeze()
    }

    fn answer(partition: i32, hwm: i64, records: Option<Bytes>, error: i16, preferred: i32) -> FetchResponse {
        let mut d = PartitionData::default();
        d.partition_index = partition;
        d.high_watermark = hwm;
        d.last_stable_offset = hwm;
        d.error_code = error;
        d.records = records;
        d.preferred_read_replica = BrokerId(preferred);
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![d];
        let mut r = FetchResponse::default();
        r.responses = vec![t];
        r
    }

    fn epoch_answer(partition: i32, error: i16, epoch: i32, end: i64) -> OffsetForLeaderEpochResponse {
        let mut e = EpochEndOffset::default();
        e.partition = partition;
        e.error_code = error;
        e.leader_epoch = epoch;
        e.end_offset = end;
        let mut t = OffsetForLeaderTopicResult::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![e];
        let mut r = OffsetForLeaderEpochResponse::default();
        r.topics = vec![t];
        r
    }

    fn fetcher(auto_reset: bool) -> Fetcher {
        let mut f = Fetcher::new(FetcherConfig {
            auto_reset,
            preferred_replica_max_age_ms: 1_000,
            ..FetcherConfig::default()
        });
        f.assign(&[("t", 0)]);
        f.seek("t", 0, Some(0));
        f
    }

    /// Sends a fetch to `broker` and feeds it `response`.
    fn fetch(f: &mut Fetcher, broker: i32, response: FetchResponse) -> (FetchRequest, FetchOutcome) {
        let wanted = f.fetchable();
        let request = f.build_request(broker, &wanted, 0, 1, 1 << 20).expect("a request");
        let outcome = f.handle_response(broker, response);
        (request, outcome)
    }

    use kafka_protocol::messages::FetchRequest;

    /// Leader 1 at epoch 3; 10 records of epoch 3 consumed.
    fn consumed_ten(auto_reset: bool) -> Fetcher {
        let mut f = fetcher(auto_reset);
        assert!(!f.update_leader("t", 0, 1, 3), "the first leader needs no check");
        let (request, _) = fetch(&mut f, 1, answer(0, 10, Some(batch(0, 10, 3)), 0, -1));
        assert_eq!(request.topics[0].partitions[0].current_leader_epoch, 3);
        assert_eq!(f.take_records(100, 1 << 20).unwrap().len(), 10);
        assert_eq!((f.position("t", 0), f.position_epoch("t", 0)), (Some(10), Some(3)));
        f
    }

    #[test]
    fn a_fetch_names_the_leader_epoch_and_a_changed_epoch_is_sent_again_in_the_session() {
        let mut f = consumed_ten(true);
        let session = |id: i32| {
            let mut r = FetchResponse::default();
            r.session_id = id;
            r
        };
        // The broker opens session 7; an incremental fetch with nothing
        // changed lists nothing.
        fetch(&mut f, 1, session(7));
        let (request, _) = fetch(&mut f, 1, session(7));
        assert!(request.topics.is_empty(), "{request:?}");
        // A new epoch (no position epoch after a seek: nothing to check) is
        // listed again, as a changed offset would be.
        f.seek("t", 0, Some(10));
        assert!(
            !f.update_leader("t", 0, 1, 4),
            "no position epoch after a seek: nothing to check"
        );
        let (request, _) = fetch(&mut f, 1, session(7));
        assert_eq!(request.session_id, 7);
        assert_eq!(request.topics[0].partitions[0].current_leader_epoch, 4);
    }

    #[test]
    fn a_leader_change_stops_the_partition_until_its_position_is_confirmed() {
        let mut f = consumed_ten(true);
        // Data fetched but not handed over is dropped at the change.
        fetch(&mut f, 1, answer(0, 12, Some(batch(10, 2, 3)), 0, -1));
        assert!(f.has_buffered());
        assert!(f.update_leader("t", 0, 2, 4));
        assert!(!f.has_buffered());
        assert!(f.awaiting_validation("t", 0));
        assert!(f.fetchable().is_empty());
        assert!(f.build_request(2, &[(Arc::from("t"), 0)], 0, 1, 1 << 20).is_none());
        // Stale metadata (an older epoch) changes nothing.
        assert!(!f.update_leader("t", 0, 1, 3));
        let reqs = f.epoch_requests();
        assert_eq!(reqs.len(), 1);
        let (broker, q) = &reqs[0];
        assert_eq!(*broker, 2);
        let p = &q.topics[0].partitions[0];
        assert_eq!((p.partition, p.current_leader_epoch, p.leader_epoch), (0, 4, 3));
        assert!(f.epoch_requests().is_empty(), "one check in flight at a time");
        // The new leader has epoch 3 up to offset 12: nothing truncated.
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, 3, 12));
        assert_eq!(out.validated, 1);
        assert!(out.truncations.is_empty() && out.errors.is_empty());
        assert_eq!(f.position("t", 0), Some(10));
        assert_eq!(f.fetchable().len(), 1);
    }

    #[test]
    fn a_truncation_below_the_position_with_a_reset_policy_moves_back_to_the_divergence() {
        let mut f = consumed_ten(true);
        f.update_leader("t", 0, 2, 4);
        let _ = f.epoch_requests();
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, 3, 7));
        assert_eq!(out.truncations.len(), 1);
        let t = &out.truncations[0];
        assert_eq!(
            (t.position, t.divergent_offset, t.position_epoch, t.reset),
            (10, 7, 3, true)
        );
        let text = t.to_string();
        assert!(
            text.contains("t[0]") && text.contains("10") && text.contains('7'),
            "{text}"
        );
        assert!(out.errors.is_empty());
        assert_eq!((f.position("t", 0), f.position_epoch("t", 0)), (Some(7), Some(3)));
        // Fetching resumes at the divergence: the new leader's records 7..
        let (request, _) = fetch(&mut f, 2, answer(0, 9, Some(batch(7, 2, 4)), 0, -1));
        assert_eq!(request.topics[0].partitions[0].fetch_offset, 7);
        let got: Vec<i64> = f
            .take_records(100, 1 << 20)
            .unwrap()
            .iter()
            .map(|r| r.record.offset)
            .collect();
        assert_eq!(got, vec![7, 8]);
        assert_eq!(f.position_epoch("t", 0), Some(4));
    }

    #[test]
    fn a_truncation_without_a_reset_policy_is_an_error_naming_topic_partition_and_offsets() {
        let mut f = consumed_ten(false);
        f.update_leader("t", 0, 2, 4);
        let _ = f.epoch_requests();
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, 3, 7));
        let [FetchError::LogTruncation(t)] = &out.errors[..] else {
            panic!("{:?}", out.errors)
        };
        assert_eq!((t.position, t.divergent_offset, t.reset), (10, 7, false));
        let text = FetchError::LogTruncation(t.clone()).to_string();
        assert!(
            text.contains("t[0]") && text.contains("position 10") && text.contains("end offset 7"),
            "{text}"
        );
        // Neither re-read nor skipped: stopped where it was until a seek.
        assert_eq!(f.position("t", 0), Some(10));
        assert!(f.fetchable().is_empty());
        assert!(f.epoch_requests().is_empty());
        f.seek("t", 0, Some(7));
        assert_eq!(f.fetchable().len(), 1);
    }

    #[test]
    fn an_epoch_the_leader_does_not_know_resets_or_fails() {
        let mut f = consumed_ten(true);
        f.update_leader("t", 0, 2, 4);
        let _ = f.epoch_requests();
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, -1, -1));
        assert_eq!(out.reset_offsets.len(), 1);
        assert_eq!(f.position("t", 0), None);

        let mut f = consumed_ten(false);
        f.update_leader("t", 0, 2, 4);
        let _ = f.epoch_requests();
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, -1, -1));
        assert!(matches!(
            out.errors[..],
            [FetchError::OffsetOutOfRange { offset: 10, .. }]
        ));
        assert!(f.fetchable().is_empty());
    }

    #[test]
    fn epoch_check_errors_and_failures_ask_again() {
        let mut f = consumed_ten(true);
        f.update_leader("t", 0, 2, 4);
        let _ = f.epoch_requests();
        // FENCED_LEADER_EPOCH (74): refresh the metadata, ask again.
        let out = f.handle_epoch_response(2, epoch_answer(0, 74, -1, -1));
        assert_eq!(out.refresh_metadata.len(), 1);
        assert!(out.retriable_error);
        assert_eq!(f.epoch_requests().len(), 1);
        // A transport failure: due again.
        f.handle_epoch_failure(2);
        assert_eq!(f.epoch_requests().len(), 1);
        // An answer from another broker, or one without our partition.
        assert_eq!(
            f.handle_epoch_response(3, epoch_answer(0, 0, 3, 5)).truncations.len(),
            0
        );
        let out = f.handle_epoch_response(2, epoch_answer(5, 0, 3, 5));
        assert!(out.retriable_error);
        assert!(f.awaiting_validation("t", 0));
        // A newer leader meanwhile: the old check's answer is ignored.
        let _ = f.epoch_requests();
        f.update_leader("t", 0, 3, 5);
        let out = f.handle_epoch_response(2, epoch_answer(0, 0, 3, 5));
        assert!(out.truncations.is_empty() && out.validated == 0);
        let reqs = f.epoch_requests();
        assert_eq!(reqs[0].0, 3);
    }

    #[test]
    fn the_preferred_read_replica_is_followed_until_it_fails_or_expires() {
        let mut f = fetcher(true);
        f.set_client_rack(Some("rack-2"));
        f.update_leader("t", 0, 1, 3);
        f.set_now(100);
        // The leader names replica 2 and sends no records.
        let (request, out) = fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        assert_eq!(request.rack_id.as_str(), "rack-2");
        assert_eq!(out.buffered, 0);
        assert_eq!(f.preferred_replica("t", 0), Some(2));
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 2);
        // Unknown to the metadata: the leader.
        assert_eq!(f.fetch_target("t", 0, 1, |b| b != 2), 1);
        assert_eq!(f.preferred_replica("t", 0), None);
        // Again; the follower serves records.
        fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        let (_, out) = fetch(&mut f, 2, answer(0, 10, Some(batch(0, 10, 3)), 0, -1));
        assert_eq!(out.buffered, 1);
        assert_eq!(f.take_records(100, 1 << 20).unwrap().len(), 10);
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 2);
        // An out-of-range offset from the follower: no reset, the leader next.
        let (_, out) = fetch(&mut f, 2, answer(0, 5, None, 1, -1));
        assert!(out.reset_offsets.is_empty() && out.errors.is_empty() && out.retriable_error);
        assert_eq!(f.position("t", 0), Some(10));
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 1);
        // OFFSET_NOT_AVAILABLE (78) from the follower: metadata, leader.
        fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        let (_, out) = fetch(&mut f, 2, answer(0, 10, None, 78, -1));
        assert_eq!(out.refresh_metadata.len(), 1);
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 1);
        // A transport failure to the follower: the leader.
        fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        let wanted = f.fetchable();
        f.build_request(2, &wanted, 0, 1, 1 << 20).unwrap();
        f.handle_failure(2);
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 1);
        // It expires after the configured age (1 s here).
        fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        f.set_now(1_099);
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 2);
        f.set_now(1_100);
        assert_eq!(f.fetch_target("t", 0, 1, |_| true), 1);
        // A leader change forgets it too.
        f.set_now(2_000);
        fetch(&mut f, 1, answer(0, 10, None, 0, 2));
        f.update_leader("t", 0, 3, 4);
        assert_eq!(f.fetch_target("t", 0, 3, |_| true), 3);
        // An out-of-range offset from the leader is still reset.
        f.seek("t", 0, Some(50));
        let (_, out) = fetch(&mut f, 3, answer(0, 10, None, 1, -1));
        assert_eq!(out.reset_offsets.len(), 1);
    }
}
