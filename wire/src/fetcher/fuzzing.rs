//! The `fetch` fuzz target's harness: drives a [`Fetcher`] with a script of
//! requests, arbitrary responses, polls, seeks and failures read from the
//! input, and checks after every step what the consumer promises:
//!
//! - no panic (and no hang: every loop is bounded by the input);
//! - no allocation beyond the bounds: batches inflate under a 1 MiB cap,
//!   and a poll hands over at most its record count and byte bound (one
//!   record over the byte bound only when it comes alone);
//! - a position never moves backwards (except by `seek`), and no offset is
//!   delivered twice: per partition, delivered offsets strictly increase;
//! - nothing at or past the high watermark (the LSO under
//!   `read_committed`) of the answer the records came from is delivered,
//!   and no control record is;
//! - fetch sessions (KIP-227): without sessions every request is a
//!   sessionless full fetch; a full request lists exactly the partitions it
//!   is for; an incremental one, applied to what the broker holds from the
//!   previous request to it (minus `forgotten_topics_data`, plus the
//!   listed), gives exactly those partitions, with the next epoch; after a
//!   failed fetch the next request to that broker is full. Every listed
//!   partition is fetched from its position and is not awaiting a check;
//! - leader epochs and truncation (KIP-320): a leader change that starts a
//!   check stops the partition until the check is answered; a truncation
//!   moves the position back below where it was (to the divergence with a
//!   reset policy); an epoch the leader does not know unpositions it (with
//!   a reset policy). Checks answered by the wrong broker, failed, dropped
//!   or unsupported are driven too;
//! - preferred read replicas (KIP-392): the fetch target is the leader or
//!   the partition's preferred replica; a forgotten or failed replica is
//!   nobody's preferred replica afterwards.
//!
//! Input: one flags byte, then operations (see [`fetch`]). Responses carry
//! raw record bytes from the input, so the fuzzer writes batches itself;
//! CRC checking is a flag so it can get past the CRC.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{FetchRequest, FetchResponse, OffsetForLeaderEpochResponse, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{Fetcher, FetcherConfig, IsolationLevel};

const TOPICS: [&str; 3] = ["a", "b", "unasked"];
const CODES: [i16; 8] = [0, 0, 0, 1, 6, 3, 70, 87];

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn small(&mut self) -> Option<i64> {
        self.byte().map(|b| i64::from(b as i8))
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}

/// The harness. Returns normally for every input (with the number of
/// records delivered); a broken promise panics.
pub fn fetch(data: &[u8]) -> usize {
    let mut input = Input { data };
    let Some(flags) = input.byte() else { return 0 };
    let mut count = 0;
    let read_committed = flags & 1 != 0;
    let config = FetcherConfig {
        isolation: if read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        },
        check_crcs: flags & 2 != 0,
        partition_max_bytes: 1 << 20,
        // Tiny: compressed batches stream in windows of a few records,
        // and a record over 64 bytes is the per-record error.
        max_batch_inflate: if flags & 16 != 0 { 64 } else { 1 << 20 },
        auto_reset: flags & 4 != 0,
        sessions: flags & 8 != 0,
        preferred_replica_max_age_ms: 1_000,
    };
    let sessions = config.sessions;
    let mut f = Fetcher::new(config);
    if flags & 32 != 0 {
        f.set_client_rack(Some("rack-1"));
    }
    // Per broker: what its fetch session holds after our last request to
    // it (the partitions that request was for) and that request's epoch;
    // and the brokers whose last fetch failed (the next one must be full).
    let mut sent: BTreeMap<i32, (BTreeSet<(String, i32)>, i32)> = BTreeMap::new();
    let mut failed: BTreeSet<i32> = BTreeSet::new();
    let parts: Vec<(&str, i32)> = vec![("a", 0), ("a", 1), ("b", 0)];
    f.assign(&parts);
    for (t, p) in &parts {
        f.seek(t, *p, Some(0));
    }
    // Per partition: the last delivered offset since the last seek, and the
    // position floor.
    let mut delivered: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut ops = 0;
    while let Some(op) = input.byte() {
        ops += 1;
        if ops > 256 {
            return count;
        }
        let positions: Vec<Option<i64>> = parts.iter().map(|(t, p)| f.position(t, *p)).collect();
        f.set_now(ops as u64 * 100);
        match op % 8 {
            0 => {
                let sel = input.byte().unwrap_or(0);
                let wanted: Vec<(Arc<str>, i32)> = f.fetchable();
                // The broker as the routing picks it (the first partition's
                // preferred replica while one is set), or as the input says.
                let broker = match wanted.first() {
                    Some((t, p)) if sel & 0x80 != 0 => {
                        let leader = i32::from(sel % 2);
                        let target = f.fetch_target(t, *p, leader, |b| b < 3);
                        assert!(
                            target == leader || f.preferred_replica(t, *p) == Some(target),
                            "{t}[{p}]: fetched from {target}, neither leader {leader} nor its preferred replica"
                        );
                        target
                    }
                    _ => i32::from(sel % 3),
                };
                if let Some(request) = f.build_request(broker, &wanted, 0, 1, 1 << 20) {
                    let still: Vec<(Arc<str>, i32)> = f.fetchable();
                    let asked: BTreeSet<(String, i32)> = wanted
                        .iter()
                        .filter(|w| !still.contains(w))
                        .map(|(t, p)| (t.to_string(), *p))
                        .collect();
                    check_request(
                        &f,
                        &parts,
                        &positions,
                        &request,
                        &asked,
                        sessions,
                        sent.get(&broker),
                        failed.remove(&broker),
                    );
                    sent.insert(broker, (asked, request.session_epoch));
                }
            }
            1 => {
                let broker = i32::from(input.byte().unwrap_or(0) % 2);
                let response = response(&mut input, &f);
                let _ = f.handle_response(broker, response);
            }
            2 => {
                let max_records = usize::from(input.byte().unwrap_or(0) % 8) + 1;
                let max_bytes = usize::from(input.byte().unwrap_or(0)) * 16;
                let marks: Vec<Option<(i64, i64)>> = parts.iter().map(|(t, p)| f.watermarks(t, *p)).collect();
                if let Ok(records) = f.take_records(max_records, max_bytes) {
                    assert!(records.len() <= max_records, "more records than asked for");
                    let total: usize = records.iter().map(|r| super::record_size(&r.record)).sum();
                    assert!(
                        total <= max_bytes || records.len() == 1,
                        "{total} bytes over the bound {max_bytes} in {} records",
                        records.len()
                    );
                    for r in &records {
                        let i = parts
                            .iter()
                            .position(|(t, p)| *t == &*r.topic && *p == r.partition)
                            .expect("a record for an assigned partition");
                        let key = (r.topic.to_string(), r.partition);
                        let offset = r.record.offset;
                        if let Some(&last) = delivered.get(&key) {
                            assert!(offset > last, "{key:?}: offset {offset} after {last}");
                        }
                        let floor = positions[i].expect("records only for positioned partitions");
                        assert!(offset >= floor, "{key:?}: offset {offset} below position {floor}");
                        let (hwm, lso) = marks[i].expect("assigned");
                        let upper = if read_committed && lso >= 0 { lso } else { hwm };
                        assert!(offset < upper, "{key:?}: offset {offset} at or past {upper}");
                        assert!(!r.batch.is_control(), "control record delivered");
                        delivered.insert(key, offset);
                        count += 1;
                    }
                }
            }
            3 => {
                let i = usize::from(input.byte().unwrap_or(0)) % parts.len();
                let to = input.small().unwrap_or(0).max(0);
                let (t, p) = parts[i];
                f.seek(t, p, Some(to));
                delivered.remove(&(t.to_string(), p));
                continue;
            }
            4 => {
                let broker = i32::from(input.byte().unwrap_or(0) % 3);
                f.handle_failure(broker);
                failed.insert(broker);
                for (t, p) in &parts {
                    assert_ne!(
                        f.preferred_replica(t, *p),
                        Some(broker),
                        "{t}[{p}]: a failed replica still preferred"
                    );
                }
            }
            5 => {
                // The position checks' other outcomes, the rack, the
                // preferred replicas.
                let b = input.byte().unwrap_or(0);
                let broker = i32::from((b >> 3) % 3);
                match b % 6 {
                    0 => {
                        f.forget_preferred_replica(broker);
                        for (t, p) in &parts {
                            assert_ne!(
                                f.preferred_replica(t, *p),
                                Some(broker),
                                "{t}[{p}]: a forgotten replica"
                            );
                        }
                    }
                    1 => f.handle_epoch_failure(broker),
                    2 => f.handle_epoch_unsupported(broker),
                    3 => f.retry_epoch_requests(),
                    4 => f.set_client_rack((b & 0x80 != 0).then_some("rack-1")),
                    _ => {
                        let topics = f.topics_awaiting_validation();
                        for (t, p) in f.fetchable() {
                            assert!(
                                !f.awaiting_validation(&t, p),
                                "{t}[{p}] fetchable while awaiting a check"
                            );
                        }
                        for t in topics {
                            assert!(TOPICS.contains(&&*t), "a check for unassigned topic {t}");
                        }
                    }
                }
            }
            6 => {
                // Metadata: a leader and an epoch (a change may stop the
                // partition until its position is checked).
                let sel = input.byte().unwrap_or(0);
                let (t, p) = parts[usize::from(sel) % parts.len()];
                let epoch = i32::from(input.byte().unwrap_or(0) % 8) - 1;
                if f.update_leader(t, p, i32::from((sel >> 4) % 2), epoch) {
                    assert!(f.awaiting_validation(t, p), "{t}[{p}]: a check started but not awaited");
                    assert!(
                        !f.fetchable().iter().any(|(ft, fp)| &**ft == t && *fp == p),
                        "{t}[{p}]: fetchable before its position is checked"
                    );
                }
                let target = f.fetch_target(t, p, 0, |b| b < 2);
                assert!(
                    target == 0 || f.preferred_replica(t, p) == Some(target),
                    "{t}[{p}]: target {target}"
                );
            }
            7 => {
                // The position checks, answered from the input.
                let pick = input.byte().unwrap_or(0);
                let requests = f.epoch_requests();
                let n = requests.len();
                let Some((broker, request)) = requests.into_iter().nth(usize::from(pick) % n.max(1)) else {
                    continue;
                };
                for rt in &request.topics {
                    for rp in &rt.partitions {
                        let (t, p) = (rt.topic.0.as_str(), rp.partition);
                        assert!(f.awaiting_validation(t, p), "{t}[{p}] checked but not awaiting a check");
                    }
                }
                // Now and then the answer comes from another broker (a
                // stale connection): it must change nothing it is not for.
                let broker = if pick & 0x80 != 0 {
                    broker.wrapping_add(1)
                } else {
                    broker
                };
                let mut response = OffsetForLeaderEpochResponse::default();
                for rt in &request.topics {
                    let mut t = OffsetForLeaderTopicResult::default();
                    t.topic = rt.topic.clone();
                    for rp in &rt.partitions {
                        let mut e = EpochEndOffset::default();
                        e.partition = rp.partition;
                        e.error_code = CODES[usize::from(input.byte().unwrap_or(0) % 8)];
                        e.leader_epoch = i32::from(input.byte().unwrap_or(0) % 8) - 1;
                        e.end_offset = input.small().unwrap_or(0);
                        t.partitions.push(e);
                    }
                    response.topics.push(t);
                }
                let out = f.handle_epoch_response(broker, response);
                for (t, p) in &out.reset_offsets {
                    assert_eq!(f.position(t, *p), None, "{t}[{p}]: reset but still positioned");
                    delivered.remove(&(t.to_string(), *p));
                }
                for tr in &out.truncations {
                    assert!(tr.divergent_offset < tr.position, "{tr}");
                    let i = parts
                        .iter()
                        .position(|(t, p)| *t == &*tr.topic && *p == tr.partition)
                        .expect("a truncation of an assigned partition");
                    assert_eq!(positions[i], Some(tr.position), "{tr}: not the position it had");
                    if tr.reset {
                        assert_eq!(f.position(&tr.topic, tr.partition), Some(tr.divergent_offset));
                    }
                    // Moved back on purpose: a truncation, reported.
                    delivered.remove(&(tr.topic.to_string(), tr.partition));
                }
                continue;
            }
            _ => {
                let to = input.small().unwrap_or(0).max(0);
                for (t, p) in f.unpositioned() {
                    f.seek(&t, p, Some(to));
                    delivered.remove(&(t.to_string(), p));
                }
                continue;
            }
        }
        // Positions never move backwards (a reset unpositions; that is not
        // a move).
        for (i, (t, p)) in parts.iter().enumerate() {
            if let (Some(before), Some(after)) = (positions[i], f.position(t, *p)) {
                assert!(after >= before, "{t}[{p}] moved back from {before} to {after}");
            }
        }
    }
    count
}

/// Checks one Fetch request against the fetcher's promises (see the
/// module docs): `asked` is what the request is for (the partitions it took
/// out of the fetchable ones), `previous` what the broker's session holds
/// from our last request to it, `after_failure` whether the last fetch to
/// it failed.
#[allow(clippy::too_many_arguments)]
fn check_request(
    f: &Fetcher,
    parts: &[(&str, i32)],
    positions: &[Option<i64>],
    request: &FetchRequest,
    asked: &BTreeSet<(String, i32)>,
    sessions: bool,
    previous: Option<&(BTreeSet<(String, i32)>, i32)>,
    after_failure: bool,
) {
    let mut listed = BTreeSet::new();
    for t in &request.topics {
        for p in &t.partitions {
            let key = (t.topic.0.to_string(), p.partition);
            let i = parts
                .iter()
                .position(|(pt, pp)| *pt == key.0 && *pp == key.1)
                .unwrap_or_else(|| panic!("{key:?}: fetched but not assigned"));
            assert_eq!(
                Some(p.fetch_offset),
                positions[i],
                "{key:?}: fetched away from its position"
            );
            assert!(
                !f.awaiting_validation(&key.0, key.1),
                "{key:?}: fetched while awaiting a check"
            );
            assert!(listed.insert(key.clone()), "{key:?}: listed twice");
        }
    }
    let forgotten: BTreeSet<(String, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), *p)))
        .collect();
    if !sessions {
        assert_eq!(
            (request.session_id, request.session_epoch),
            (0, -1),
            "sessions off: a sessionless fetch"
        );
    }
    if request.session_epoch <= 0 {
        assert!(forgotten.is_empty(), "a full fetch forgets nothing");
        assert_eq!(&listed, asked, "a full fetch lists what it is for");
        return;
    }
    assert!(!after_failure, "an incremental fetch right after a failed one");
    assert_ne!(request.session_id, 0, "an incremental fetch without a session");
    let (held, epoch) = previous.expect("an incremental fetch to a broker never fetched from");
    let expected_epoch = if *epoch <= 0 { 1 } else { epoch.saturating_add(1) };
    assert_eq!(request.session_epoch, expected_epoch, "the session epoch");
    assert!(
        forgotten.is_subset(held),
        "forgets {forgotten:?}, not in the session {held:?}"
    );
    let mut session: BTreeSet<(String, i32)> = held.difference(&forgotten).cloned().collect();
    session.extend(listed);
    assert_eq!(&session, asked, "the session after the incremental fetch");
}

/// A response built from the input: entries for known and unknown
/// partitions, error codes, watermarks near the position, aborted
/// transactions, and raw record bytes.
fn response(input: &mut Input<'_>, f: &Fetcher) -> FetchResponse {
    let mut r = FetchResponse::default();
    let head = input.byte().unwrap_or(0);
    r.throttle_time_ms = i32::from(head & 3) * 100;
    r.error_code = if head & 0x1c == 0x1c {
        CODES[usize::from(head >> 5)]
    } else {
        0
    };
    r.session_id = i32::from(input.byte().unwrap_or(0) % 4);
    let entries = input.byte().unwrap_or(0) % 5;
    for _ in 0..entries {
        let sel = input.byte().unwrap_or(0);
        let topic = TOPICS[usize::from(sel % 3)];
        let partition = i32::from((sel >> 2) % 3);
        let base = f.position(topic, partition).unwrap_or(0);
        let mut d = PartitionData::default();
        d.partition_index = partition;
        d.preferred_read_replica = i32::from(sel >> 6).saturating_sub(1).into();
        d.error_code = CODES[usize::from(input.byte().unwrap_or(0) % 8)];
        d.high_watermark = base + input.small().unwrap_or(0);
        d.last_stable_offset = base + input.small().unwrap_or(0);
        d.log_start_offset = 0;
        let aborted = input.byte().unwrap_or(0) % 3;
        if aborted > 0 {
            let mut list = Vec::new();
            for _ in 0..aborted {
                let mut t = AbortedTransaction::default();
                t.first_offset = base + input.small().unwrap_or(0);
                t.producer_id = ProducerId(input.small().unwrap_or(0));
                list.push(t);
            }
            d.aborted_transactions = Some(list);
        }
        let len = usize::from(u16::from_be_bytes([
            input.byte().unwrap_or(0),
            input.byte().unwrap_or(0),
        ]));
        let bytes = input.bytes(len);
        d.records = Some(Bytes::copy_from_slice(bytes));
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str(topic));
        t.partitions = vec![d];
        r.responses.push(t);
    }
    r
}

/// Seeds for the corpus: scripts with real batches (every codec, a
/// transaction and its markers), written by the corpus replay test.
#[cfg(test)]
pub(crate) fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use crate::compression::Compression;
    use crate::record::{BatchMeta, RecordBatch, RecordBatchEncoder, RecordOut};
    use bytes::BytesMut;

    let batch = |base: i64, n: usize, compression: Compression| {
        let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
        let records: Vec<RecordOut<'_>> = values
            .iter()
            .map(|v| RecordOut {
                timestamp: 1,
                key: Some(b"k"),
                value: Some(v),
                headers: &[],
            })
            .collect();
        let meta = BatchMeta {
            base_offset: base,
            compression,
            ..BatchMeta::default()
        };
        let mut out = BytesMut::new();
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        assert!(RecordBatch::decode_exact(&out.clone().freeze(), &Default::default()).is_ok());
        out.to_vec()
    };
    let entry = |sel: u8, hwm: i8, records: &[u8]| {
        let mut e = vec![sel, 0, hwm as u8, hwm as u8, 0];
        e.extend_from_slice(&(records.len() as u16).to_be_bytes());
        e.extend_from_slice(records);
        e
    };
    let mut out = Vec::new();
    for (name, codec) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let mut records = batch(0, 5, codec);
        records.extend(batch(5, 5, codec));
        // flags: crc on, sessions; request to broker 0; response with a's
        // partition 0 (sel 0) and b's partition 0 (sel 1); poll; request;
        // poll again.
        let mut s = vec![2 | 8, 0, 0, 1, 0, 0, 0, 2];
        s.extend(entry(0, 10, &records));
        s.extend(entry(1, 3, &records[..records.len() / 2]));
        s.extend([2, 3, 200, 2, 7, 0, 0, 0, 2, 7, 255]);
        out.push((name, s));
    }
    out
}
