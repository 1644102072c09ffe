//! Unit tests of the fetch state machine.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::compression::Compression;
use crate::record::{BatchMeta, RecordBatchEncoder, RecordOut};

fn batch(base: i64, values: &[&[u8]], compression: Compression) -> Vec<u8> {
    batch_meta(
        BatchMeta {
            base_offset: base,
            compression,
            ..BatchMeta::default()
        },
        values,
    )
}

fn batch_meta(meta: BatchMeta, values: &[&[u8]]) -> Vec<u8> {
    let records: Vec<RecordOut<'_>> = values
        .iter()
        .map(|v| RecordOut {
            timestamp: 1,
            key: None,
            value: Some(v),
            headers: &[],
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
    out.to_vec()
}

fn entry(topic: &str, partition: i32, hwm: i64, records: Vec<u8>) -> FetchableTopicResponse {
    let mut d = PartitionData::default();
    d.partition_index = partition;
    d.high_watermark = hwm;
    d.last_stable_offset = hwm;
    d.records = Some(Bytes::from(records));
    let mut t = FetchableTopicResponse::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_owned()));
    t.partitions = vec![d];
    t
}

fn response(session_id: i32, entries: Vec<FetchableTopicResponse>) -> FetchResponse {
    let mut r = FetchResponse::default();
    r.session_id = session_id;
    r.responses = entries;
    r
}

fn fetcher(parts: &[(&str, i32)]) -> Fetcher {
    let mut f = Fetcher::new(FetcherConfig::default());
    f.assign(parts);
    for (t, p) in parts {
        f.seek(t, *p, Some(0));
    }
    f
}

fn request(f: &mut Fetcher, broker: i32) -> FetchRequest {
    let wanted = f.fetchable();
    f.build_request(broker, &wanted, 100, 1, 1 << 20).expect("a request")
}

fn offsets(records: &[ConsumerRecord]) -> Vec<i64> {
    records.iter().map(|r| r.record.offset).collect()
}

#[test]
fn polls_are_bounded_by_count_and_bytes_and_resume_exactly() {
    let mut f = fetcher(&[("t", 0)]);
    request(&mut f, 1);
    let values: Vec<&[u8]> = vec![b"0123456789"; 10];
    let mut records = batch(0, &values, Compression::Lz4);
    records.extend(batch(10, &values, Compression::Zstd));
    f.handle_response(1, response(0, vec![entry("t", 0, 20, records)]));
    let first = f.take_records(3, usize::MAX).unwrap();
    assert_eq!(offsets(&first), vec![0, 1, 2]);
    assert_eq!(f.position("t", 0), Some(3));
    // 25 bytes: two 10-byte values fit, the third does not.
    let second = f.take_records(100, 25).unwrap();
    assert_eq!(offsets(&second), vec![3, 4]);
    let rest = f.take_records(100, usize::MAX).unwrap();
    assert_eq!(offsets(&rest), (5..20).collect::<Vec<_>>());
    assert_eq!(f.position("t", 0), Some(20));
    assert!(f.take_records(100, usize::MAX).unwrap().is_empty());
    // Nothing buffered: the partition is fetchable again, from 20.
    let req = request(&mut f, 1);
    assert_eq!(req.topics[0].partitions[0].fetch_offset, 20);
}

#[test]
fn a_record_larger_than_the_byte_bound_arrives_alone() {
    let mut f = fetcher(&[("t", 0)]);
    request(&mut f, 1);
    let big = vec![7u8; 1000];
    f.handle_response(
        1,
        response(
            0,
            vec![entry("t", 0, 3, batch(0, &[&big, &big, b"x"], Compression::None))],
        ),
    );
    assert_eq!(offsets(&f.take_records(10, 10).unwrap()), vec![0]);
    assert_eq!(offsets(&f.take_records(10, 10).unwrap()), vec![1]);
    assert_eq!(offsets(&f.take_records(10, 10).unwrap()), vec![2]);
}

#[test]
fn nothing_at_or_past_the_high_watermark_and_no_offset_twice() {
    let mut f = fetcher(&[("t", 0)]);
    request(&mut f, 1);
    let v: Vec<&[u8]> = vec![b"v"; 5];
    // The same batch twice (a repeat), then one that goes backwards.
    let mut records = batch(0, &v, Compression::None);
    records.extend(batch(0, &v, Compression::None));
    records.extend(batch(2, &v, Compression::None));
    f.handle_response(1, response(0, vec![entry("t", 0, 4, records)]));
    let got = f.take_records(100, usize::MAX).unwrap();
    assert_eq!(offsets(&got), vec![0, 1, 2, 3]);
    assert_eq!(f.position("t", 0), Some(4));
}

#[test]
fn unasked_duplicate_and_stale_entries_are_ignored() {
    let mut f = fetcher(&[("t", 0), ("t", 1)]);
    let req = request(&mut f, 1);
    assert_eq!(req.topics[0].partitions.len(), 2);
    let v: Vec<&[u8]> = vec![b"v"; 2];
    let out = f.handle_response(
        1,
        response(
            0,
            vec![
                entry("t", 0, 2, batch(0, &v, Compression::None)),
                entry("t", 0, 2, batch(0, &v, Compression::None)),
                entry("t", 7, 2, batch(0, &v, Compression::None)),
                entry("other", 0, 2, batch(0, &v, Compression::None)),
            ],
        ),
    );
    assert_eq!(out.buffered, 1);
    assert_eq!(out.ignored, 3);
    assert_eq!(offsets(&f.take_records(100, usize::MAX).unwrap()), vec![0, 1]);
    // An answer for a fetch that is no longer in flight is ignored.
    let out = f.handle_response(1, response(0, vec![entry("t", 1, 2, batch(0, &v, Compression::None))]));
    assert_eq!(out.buffered, 0);
    // A seek while a fetch is in flight makes its answer stale.
    request(&mut f, 1);
    f.seek("t", 1, Some(1));
    let out = f.handle_response(1, response(0, vec![entry("t", 1, 2, batch(0, &v, Compression::None))]));
    assert_eq!(out.buffered, 0);
    assert_eq!(out.ignored, 1);
}

#[test]
fn buffered_partitions_are_not_fetched_and_one_fetch_per_broker() {
    let mut f = fetcher(&[("t", 0), ("t", 1)]);
    request(&mut f, 1);
    let wanted = f.fetchable();
    assert!(wanted.is_empty(), "in flight: {wanted:?}");
    let v: Vec<&[u8]> = vec![b"v"; 2];
    f.handle_response(1, response(0, vec![entry("t", 0, 2, batch(0, &v, Compression::None))]));
    let wanted = f.fetchable();
    assert_eq!(wanted, vec![(Arc::from("t"), 1)]);
    request(&mut f, 1);
    assert!(f.build_request(1, &[(Arc::from("t"), 1)], 0, 1, 1).is_none());
}

#[test]
fn sessions_go_incremental_and_fall_back_to_full_on_errors() {
    let mut f = fetcher(&[("t", 0), ("t", 1)]);
    let req = request(&mut f, 1);
    assert_eq!((req.session_id, req.session_epoch), (0, INITIAL_EPOCH));
    f.handle_response(1, response(42, vec![]));
    assert_eq!(f.session(1).unwrap().id_and_epoch(), (42, 1));
    // Nothing changed: an incremental request listing nothing.
    let req = request(&mut f, 1);
    assert_eq!((req.session_id, req.session_epoch), (42, 1));
    assert!(req.topics.is_empty());
    assert!(req.forgotten_topics_data.is_empty());
    let v: Vec<&[u8]> = vec![b"v"; 2];
    f.handle_response(1, response(42, vec![entry("t", 0, 2, batch(0, &v, Compression::None))]));
    // t[0] is buffered: forgotten; then consumed: listed at its new offset.
    let req = request(&mut f, 1);
    assert_eq!(req.session_epoch, 2);
    assert_eq!(req.forgotten_topics_data[0].partitions, vec![0]);
    f.handle_response(1, response(42, vec![]));
    f.take_records(100, usize::MAX).unwrap();
    let req = request(&mut f, 1);
    assert_eq!(req.session_epoch, 3);
    assert_eq!(req.topics[0].partitions[0].partition, 0);
    assert_eq!(req.topics[0].partitions[0].fetch_offset, 2);
    // A session error: the next request is full again.
    let mut err = response(0, vec![]);
    err.error_code = 71;
    let out = f.handle_response(1, err);
    assert!(out.session_reset && out.errors.is_empty());
    let req = request(&mut f, 1);
    assert_eq!((req.session_id, req.session_epoch), (42, INITIAL_EPOCH));
    assert_eq!(req.topics[0].partitions.len(), 2);
    // A transport failure too.
    f.handle_failure(1);
    let req = request(&mut f, 1);
    assert_eq!(req.session_epoch, INITIAL_EPOCH);
}

#[test]
fn read_committed_drops_aborted_and_control_batches() {
    let mut f = Fetcher::new(FetcherConfig {
        isolation: IsolationLevel::ReadCommitted,
        ..FetcherConfig::default()
    });
    f.assign(&[("t", 0)]);
    f.seek("t", 0, Some(0));
    request(&mut f, 1);
    let txn = |base: i64, pid: i64| BatchMeta {
        base_offset: base,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
        ..BatchMeta::default()
    };
    let marker = |base: i64, pid: i64, commit: bool| {
        let mut out = BytesMut::new();
        let meta = BatchMeta {
            base_offset: base,
            producer_id: pid,
            producer_epoch: 0,
            transactional: true,
            control: true,
            ..BatchMeta::default()
        };
        let kind = if commit {
            ControlKind::Commit
        } else {
            ControlKind::Abort
        };
        RecordBatchEncoder::new()
            .encode_end_txn_marker(&mut out, &meta, kind, 0, 1)
            .unwrap();
        out.to_vec()
    };
    let mut records = batch_meta(txn(0, 5), &[b"aborted", b"aborted"]);
    records.extend(batch_meta(txn(2, 6), &[b"committed"]));
    records.extend(marker(3, 5, false));
    records.extend(marker(4, 6, true));
    records.extend(batch_meta(txn(5, 7), &[b"beyond the lso"]));
    let mut e = entry("t", 0, 6, records);
    e.partitions[0].last_stable_offset = 5;
    let mut a = AbortedTransaction::default();
    a.first_offset = 0;
    a.producer_id = ProducerId(5);
    e.partitions[0].aborted_transactions = Some(vec![a]);
    f.handle_response(1, response(0, vec![e]));
    let got = f.take_records(100, usize::MAX).unwrap();
    assert_eq!(offsets(&got), vec![2]);
    assert_eq!(f.position("t", 0), Some(5));
}

#[test]
fn corrupt_data_is_an_error_after_the_records_before_it() {
    let mut f = fetcher(&[("t", 0)]);
    request(&mut f, 1);
    let mut records = batch(0, &[b"a", b"b"], Compression::None);
    let mut bad = batch(2, &[b"c"], Compression::None);
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    records.extend(bad);
    f.handle_response(1, response(0, vec![entry("t", 0, 3, records)]));
    assert_eq!(offsets(&f.take_records(100, usize::MAX).unwrap()), vec![0, 1]);
    let err = f.take_records(100, usize::MAX).unwrap_err();
    assert!(matches!(err, FetchError::Corrupt { offset: 2, .. }), "{err:?}");
    assert_eq!(f.position("t", 0), Some(2));
}

#[test]
fn a_batch_inflating_past_the_cap_is_corrupt_not_allocated() {
    let mut f = Fetcher::new(FetcherConfig {
        max_batch_inflate: 4096,
        ..FetcherConfig::default()
    });
    f.assign(&[("t", 0)]);
    f.seek("t", 0, Some(0));
    request(&mut f, 1);
    let big = vec![0u8; 100_000];
    f.handle_response(
        1,
        response(0, vec![entry("t", 0, 1, batch(0, &[&big], Compression::Zstd))]),
    );
    let err = f.take_records(100, usize::MAX).unwrap_err();
    assert!(matches!(err, FetchError::Corrupt { .. }), "{err:?}");
}

#[test]
fn an_answer_that_yields_nothing_twice_is_stalled() {
    let mut f = fetcher(&[("t", 0)]);
    f.seek("t", 0, Some(5));
    for round in 0..2 {
        request(&mut f, 1);
        // Data entirely below the position.
        let out = f.handle_response(
            1,
            response(0, vec![entry("t", 0, 10, batch(0, &[b"x"], Compression::None))]),
        );
        assert_eq!(out.buffered, 1);
        assert_eq!(out.fruitless(), round == 1, "round {round}");
        assert!(f.take_records(10, usize::MAX).unwrap().is_empty());
        assert_eq!(f.position("t", 0), Some(5));
    }
}

#[test]
fn fuzz_seeds_run_clean() {
    for (name, seed) in fuzzing::seeds() {
        // Each seed reaches the records: 10 of a[0], and 3 of b[0] (its
        // high watermark).
        assert_eq!(fuzzing::fetch(&seed), 13, "{name}");
    }
}

#[test]
fn without_sessions_every_request_is_a_sessionless_full_fetch() {
    let mut f = Fetcher::new(FetcherConfig {
        sessions: false,
        ..FetcherConfig::default()
    });
    f.assign(&[("t", 0), ("t", 1)]);
    f.seek("t", 0, Some(0));
    f.seek("t", 1, Some(0));
    for _ in 0..3 {
        let req = request(&mut f, 1);
        assert_eq!((req.session_id, req.session_epoch), (0, session::FINAL_EPOCH));
        assert_eq!(req.topics[0].partitions.len(), 2, "a full fetch lists every partition");
        assert!(req.forgotten_topics_data.is_empty());
        // The broker opening a session anyway changes nothing.
        f.handle_response(1, response(42, vec![]));
    }
}
