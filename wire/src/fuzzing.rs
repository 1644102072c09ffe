//! Harnesses for the fuzz targets in `fuzz/`. Each target is a few lines that
//! call one of these; the logic lives here so it is type-checked with the
//! crate and replayed over the committed corpus by an ordinary test
//! (`tests/fuzz_corpus.rs`, built with `--cfg fuzzing`).
//!
//! Every harness must return normally for every input: a panic, a hang or
//! an oversized allocation is a bug in the decoder it drives.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{self as m, ApiKey};

mod produce;
pub use produce::produce;

use crate::codec::{DecodeResponse, Reader};
use crate::compression::Compression;
use crate::frame::{FrameDecoder, ResponseFrame};
use crate::protocol::SPOKEN_APIS;
use crate::record::{BatchIter, BatchStream, DecodeOptions, RecordBatch};

fn decode_as<T: DecodeResponse>(body: &Bytes, version: i16) {
    let mut r = Reader::new(body);
    if T::decode_response(&mut r, version).is_ok() {
        let _ = r.finish("fuzz");
    }
}

/// The response types the client decodes, indexed by the fuzzer's selector.
const RESPONSES: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::OffsetFetch,
    ApiKey::OffsetCommit,
    ApiKey::FindCoordinator,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::EndTxn,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::CreateTopics,
    ApiKey::AddOffsetsToTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::DescribeProducers,
    ApiKey::DescribeCluster,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ListGroups,
    ApiKey::DescribeGroups,
    ApiKey::DeleteGroups,
    ApiKey::ConsumerGroupDescribe,
];

/// Decodes `body` as the response of `key` at `version`.
pub fn decode_response_body(key: ApiKey, version: i16, body: &Bytes) {
    match key {
        ApiKey::ApiVersions => decode_as::<m::ApiVersionsResponse>(body, version),
        ApiKey::Metadata => decode_as::<m::MetadataResponse>(body, version),
        ApiKey::Produce => decode_as::<m::ProduceResponse>(body, version),
        ApiKey::Fetch => {
            let mut r = Reader::new(body);
            if let Ok(resp) = m::FetchResponse::decode_response(&mut r, version) {
                // Go on into the record batches the fetch carried.
                for t in &resp.responses {
                    for p in &t.partitions {
                        if let Some(records) = &p.records {
                            record_batches(records.clone(), false);
                        }
                    }
                }
            }
        }
        ApiKey::ListOffsets => decode_as::<m::ListOffsetsResponse>(body, version),
        ApiKey::OffsetFetch => decode_as::<m::OffsetFetchResponse>(body, version),
        ApiKey::OffsetCommit => decode_as::<m::OffsetCommitResponse>(body, version),
        ApiKey::FindCoordinator => decode_as::<m::FindCoordinatorResponse>(body, version),
        ApiKey::InitProducerId => decode_as::<m::InitProducerIdResponse>(body, version),
        ApiKey::AddPartitionsToTxn => decode_as::<m::AddPartitionsToTxnResponse>(body, version),
        ApiKey::EndTxn => decode_as::<m::EndTxnResponse>(body, version),
        ApiKey::DescribeTransactions => decode_as::<m::DescribeTransactionsResponse>(body, version),
        ApiKey::ListTransactions => decode_as::<m::ListTransactionsResponse>(body, version),
        ApiKey::SaslHandshake => decode_as::<m::SaslHandshakeResponse>(body, version),
        ApiKey::SaslAuthenticate => decode_as::<m::SaslAuthenticateResponse>(body, version),
        ApiKey::CreateTopics => decode_as::<m::CreateTopicsResponse>(body, version),
        ApiKey::AddOffsetsToTxn => decode_as::<m::AddOffsetsToTxnResponse>(body, version),
        ApiKey::TxnOffsetCommit => decode_as::<m::TxnOffsetCommitResponse>(body, version),
        ApiKey::DeleteTopics => decode_as::<m::DeleteTopicsResponse>(body, version),
        ApiKey::CreatePartitions => decode_as::<m::CreatePartitionsResponse>(body, version),
        ApiKey::DescribeProducers => decode_as::<m::DescribeProducersResponse>(body, version),
        ApiKey::DescribeCluster => decode_as::<m::DescribeClusterResponse>(body, version),
        ApiKey::OffsetForLeaderEpoch => decode_as::<m::OffsetForLeaderEpochResponse>(body, version),
        ApiKey::JoinGroup => {
            let mut r = Reader::new(body);
            if let Ok(resp) = m::JoinGroupResponse::decode_response(&mut r, version) {
                // Go on into the members' subscriptions.
                for member in &resp.members {
                    let _ = crate::group::consumer_protocol::decode_subscription(&member.metadata);
                }
            }
        }
        ApiKey::SyncGroup => {
            let mut r = Reader::new(body);
            if let Ok(resp) = m::SyncGroupResponse::decode_response(&mut r, version) {
                let _ = crate::group::consumer_protocol::decode_assignment(&resp.assignment);
            }
        }
        ApiKey::Heartbeat => decode_as::<m::HeartbeatResponse>(body, version),
        ApiKey::LeaveGroup => decode_as::<m::LeaveGroupResponse>(body, version),
        ApiKey::ConsumerGroupHeartbeat => decode_as::<m::ConsumerGroupHeartbeatResponse>(body, version),
        ApiKey::ListGroups => decode_as::<m::ListGroupsResponse>(body, version),
        ApiKey::DescribeGroups => {
            let mut r = Reader::new(body);
            if let Ok(resp) = m::DescribeGroupsResponse::decode_response(&mut r, version) {
                // Go on into the members' subscriptions and assignments.
                for member in resp.groups.iter().flat_map(|g| g.members.iter()) {
                    let _ = crate::group::consumer_protocol::decode_subscription(&member.member_metadata);
                    let _ = crate::group::consumer_protocol::decode_assignment(&member.member_assignment);
                }
            }
        }
        ApiKey::DeleteGroups => decode_as::<m::DeleteGroupsResponse>(body, version),
        ApiKey::ConsumerGroupDescribe => decode_as::<m::ConsumerGroupDescribeResponse>(body, version),
        _ => {}
    }
}

/// Picks (API, version) from the first two bytes: the version is reduced
/// into the range we speak so the fuzzer does not waste time on refusals
/// (a few out-of-range ones still get through via the top bit).
fn select(data: &[u8]) -> Option<(ApiKey, i16, &[u8])> {
    let (&sel, rest) = data.split_first()?;
    let (&v, rest) = rest.split_first()?;
    let key = RESPONSES[sel as usize % RESPONSES.len()];
    let range = SPOKEN_APIS.iter().find(|(k, _, _)| *k == key).map(|(_, _, r)| *r)?;
    let span = (range.max - range.min + 1) as u8;
    let version = if v & 0x80 != 0 {
        (v & 0x7f) as i16 - 1
    } else {
        range.min + (v % span) as i16
    };
    Some((key, version, rest))
}

/// Target `responses`: every response type the client decodes.
pub fn responses(data: &[u8]) {
    if let Some((key, version, body)) = select(data) {
        decode_response_body(key, version, &Bytes::copy_from_slice(body));
    }
}

/// Target `frame`: the frame splitter plus the response header, then the
/// body as the selected response type.
pub fn frame(data: &[u8]) {
    let Some((key, version, rest)) = select(data) else {
        return;
    };
    let decoder = FrameDecoder::new(1 << 20);
    let _ = decoder.decode(rest);
    let mut buf = BytesMut::from(rest);
    while let Ok(Some(frame)) = decoder.decode_bytes(&mut buf) {
        let _ = ResponseFrame::peek_correlation_id(&frame);
        if let Ok(parsed) = ResponseFrame::parse(frame, key, version) {
            decode_response_body(key, version, &parsed.body());
        }
    }
}

/// Target `record_batch` (CRC checked) and `record_batch_nocrc` (CRC
/// skipped so mutations reach the records).
pub fn record_batches(data: Bytes, verify_crc: bool) {
    let opts = DecodeOptions {
        verify_crc,
        max_decompressed_size: 1 << 20,
        ..DecodeOptions::default()
    };
    for batch in BatchIter::new(data.clone(), opts) {
        let Ok(batch) = batch else { break };
        let _ = batch.control_record();
        let mut fast = Vec::new();
        for r in batch.records() {
            match r {
                Ok(r) => {
                    let _ = batch.to_owned_record(&r);
                    fast.push(Ok(r));
                }
                Err(e) => {
                    fast.push(Err(e.to_string()));
                    break;
                }
            }
        }
        // The fast record parser must agree with the careful one exactly.
        let slow: Vec<_> = batch
            .records_slow_path()
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(fast, slow, "fast and slow record parsers disagree");
    }
    let _ = RecordBatch::decode_exact(&data, &opts);
    txn_end_scan(&data);
    streamed_batches(data, &opts);
}

/// The log-proof judge ([`crate::record::TxnEndScan`]) over the same bytes,
/// looking for the first batch's own transaction (so mutations get past the
/// first-offset check): never panics, and only a COMMIT or ABORT control
/// record can end it.
fn txn_end_scan(data: &Bytes) {
    use crate::record::{PartitionView, ScanStep, TxnEnd, TxnEndQuery, TxnEndScan};
    let Ok(Some((h, _))) = RecordBatch::peek(data, &DecodeOptions::default()) else {
        return;
    };
    for tv in [1, 2] {
        let Some(query) = TxnEndQuery::new(h.producer_id, h.producer_epoch, tv, h.base_offset) else {
            continue;
        };
        let mut scan = TxnEndScan::new(query, 1 << 20);
        let view = PartitionView {
            high_watermark: h.base_offset.saturating_add(1 << 20),
            last_stable_offset: h.base_offset,
            log_start_offset: 0,
        };
        if let ScanStep::Ended(TxnEnd::Committed { epoch, .. }) = scan.handle_fetch(data, view) {
            assert_eq!(
                epoch, query.commit_epoch,
                "a commit proven at an epoch the commit does not write"
            );
        }
    }
}

/// The consumer's path: each compressed batch inflated chunk by chunk
/// ([`BatchStream`], 64-byte windows so records and length varints are cut
/// everywhere) yields exactly the records of the whole batch whenever the
/// whole batch decodes; and never panics or runs away otherwise (stopped
/// after 2 MiB of windows: the property needs no more, the whole batch is
/// capped at 1 MiB).
fn streamed_batches(mut data: Bytes, opts: &DecodeOptions) {
    while let Ok(Some((header, total))) = RecordBatch::peek(&data, opts) {
        let bytes = data.split_to(total);
        if header.compression().map_or(true, |c| c == Compression::None) {
            continue;
        }
        let whole = RecordBatch::inflate(&bytes, header, opts).and_then(|b| b.decode_records());
        let Ok(mut stream) = BatchStream::new(&bytes, header, 64, 1 << 20) else {
            assert!(whole.is_err(), "the whole batch decodes, its stream does not start");
            continue;
        };
        let mut streamed = Vec::new();
        let mut inflated = 0usize;
        let result = loop {
            match stream.next_window() {
                Ok(Some(w)) => {
                    inflated += w.records_bytes().len();
                    match w.decode_records() {
                        Ok(r) => streamed.extend(r),
                        Err(e) => break Err(e),
                    }
                    if inflated > 2 << 20 {
                        break Ok(false);
                    }
                }
                Ok(None) => break Ok(true),
                Err(e) => break Err(e),
            }
        };
        if let Ok(whole) = whole {
            assert!(
                matches!(result, Ok(true)),
                "the whole batch decodes, its stream fails: {result:?}"
            );
            assert!(streamed == whole, "streamed records differ from the whole batch's");
        }
    }
}

/// Targets `decompress_*`.
pub fn decompress(codec: Compression, data: &[u8]) {
    crate::compression::fuzzing::decompress(codec, data);
    crate::compression::fuzzing::round_trip(codec, data);
}

/// Target `scram`: server-first and server-final parsing.
pub fn scram(data: &[u8]) {
    crate::sasl::fuzzing::scram_server_messages(data);
}

/// Target `oauthbearer`: the OAUTHBEARER server error reply, extension
/// lists and tokens.
pub fn oauthbearer(data: &[u8]) {
    crate::sasl::fuzzing::oauthbearer(data);
}

/// Target `gssapi`: the SASL GSSAPI state machine over a scripted context.
pub fn gssapi(data: &[u8]) {
    crate::sasl::fuzzing::gssapi_server_messages(data);
}

/// Target `confluent_frame`: the Schema Registry framing, both layouts; a
/// frame that decodes re-encodes to the same bytes.
pub fn confluent_frame(data: &[u8]) {
    for protobuf in [false, true] {
        if let Ok(f) = crate::confluent::decode(data, protobuf) {
            let mut out = Vec::new();
            crate::confluent::encode(
                f.schema_id,
                protobuf.then_some(&f.message_indexes[..]),
                f.payload,
                &mut out,
            );
            assert_eq!(crate::confluent::decode(&out, protobuf).unwrap(), f);
        }
    }
}

/// Replays the committed corpus (`fuzz/corpus/<target>/`) through the same
/// harnesses the fuzz targets call, so every input a fuzzer ever kept is
/// re-checked by `cargo test`. With `CLINK_WRITE_FUZZ_SEEDS=1` it first
/// (re)writes the hand-made seeds.
#[cfg(test)]
mod corpus_replay {
    use std::path::PathBuf;

    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{self as m, ApiKey};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn corpus_dir(target: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target)
    }

    const TARGETS: &[&str] = &[
        "frame",
        "responses",
        "record_batch",
        "record_batch_nocrc",
        "decompress_gzip",
        "decompress_snappy",
        "decompress_lz4",
        "decompress_zstd",
        // Our half of that target (ruzstd, the other half, is fuzz/'s only).
        "decompress_zstd_vs_ruzstd",
        "scram",
        "fetch",
        "produce",
        "confluent_frame",
        "group",
        "oauthbearer",
        "gssapi",
    ];

    fn run(target: &str, data: &[u8]) {
        match target {
            "frame" => frame(data),
            "responses" => responses(data),
            "record_batch" => record_batches(Bytes::copy_from_slice(data), true),
            "record_batch_nocrc" => record_batches(Bytes::copy_from_slice(data), false),
            "decompress_gzip" => decompress(Compression::Gzip, data),
            "decompress_snappy" => decompress(Compression::Snappy, data),
            "decompress_lz4" => decompress(Compression::Lz4, data),
            "decompress_zstd" | "decompress_zstd_vs_ruzstd" => decompress(Compression::Zstd, data),
            "scram" => scram(data),
            "fetch" => {
                crate::fetcher::fuzzing::fetch(data);
            }
            "produce" => produce(data),
            "confluent_frame" => confluent_frame(data),
            "group" => {
                crate::group::fuzzing::group(data);
            }
            "oauthbearer" => oauthbearer(data),
            "gssapi" => gssapi(data),
            other => panic!("unknown target {other}"),
        }
    }

    fn selector(key: ApiKey, version: i16) -> [u8; 2] {
        let sel = RESPONSES.iter().position(|k| *k == key).unwrap() as u8;
        let min = SPOKEN_APIS.iter().find(|(k, _, _)| *k == key).unwrap().2.min;
        [sel, (version - min) as u8]
    }

    fn seed_responses() -> Vec<(ApiKey, i16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut push = |key: ApiKey, version: i16, body: &dyn Fn(&mut BytesMut, i16)| {
            let mut b = BytesMut::new();
            body(&mut b, version);
            out.push((key, version, b.to_vec()));
        };
        for v in [4i16, 9, 12, 13] {
            push(ApiKey::Metadata, v, &|b, v| {
                let mut r = m::MetadataResponse::default();
                let mut broker = m::metadata_response::MetadataResponseBroker::default();
                broker.node_id = 1.into();
                broker.host = StrBytes::from_static_str("127.0.0.1");
                broker.port = 19092;
                r.brokers.push(broker);
                let mut t = m::metadata_response::MetadataResponseTopic::default();
                t.name = Some(StrBytes::from_static_str("topic").into());
                let mut p = m::metadata_response::MetadataResponsePartition::default();
                p.partition_index = 0;
                p.leader_id = 1.into();
                p.replica_nodes = vec![1.into()];
                p.isr_nodes = vec![1.into()];
                t.partitions.push(p);
                r.topics.push(t);
                r.encode(b, v).unwrap();
            });
        }
        for v in [4i16, 11, 12, 16] {
            push(ApiKey::Fetch, v, &|b, v| {
                let mut r = m::FetchResponse::default();
                let mut t = m::fetch_response::FetchableTopicResponse::default();
                if v < 13 {
                    t.topic = StrBytes::from_static_str("topic").into();
                }
                let mut p = m::fetch_response::PartitionData::default();
                p.high_watermark = 3;
                p.last_stable_offset = 3;
                let golden =
                    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/golden/multi.bin")).unwrap();
                p.records = Some(Bytes::from(golden));
                t.partitions.push(p);
                r.responses.push(t);
                r.encode(b, v).unwrap();
            });
        }
        for v in [0i16, 3] {
            push(ApiKey::ApiVersions, v, &|b, v| {
                let mut r = m::ApiVersionsResponse::default();
                let mut k = m::api_versions_response::ApiVersion::default();
                k.api_key = 1;
                k.max_version = 17;
                r.api_keys.push(k);
                r.encode(b, v).unwrap();
            });
        }
        for v in [3i16, 9] {
            push(ApiKey::Produce, v, &|b, v| {
                let mut r = m::ProduceResponse::default();
                let mut t = m::produce_response::TopicProduceResponse::default();
                t.name = StrBytes::from_static_str("topic").into();
                t.partition_responses
                    .push(m::produce_response::PartitionProduceResponse::default());
                r.responses.push(t);
                r.encode(b, v).unwrap();
            });
        }
        for v in [0i16, 4] {
            push(ApiKey::FindCoordinator, v, &|b, v| {
                let mut r = m::FindCoordinatorResponse::default();
                if v >= 4 {
                    let mut c = m::find_coordinator_response::Coordinator::default();
                    c.key = StrBytes::from_static_str("txn-1");
                    c.host = StrBytes::from_static_str("127.0.0.1");
                    r.coordinators.push(c);
                } else {
                    r.host = StrBytes::from_static_str("127.0.0.1");
                }
                r.encode(b, v).unwrap();
            });
        }
        for v in [0i16, 5] {
            push(ApiKey::EndTxn, v, &|b, v| {
                m::EndTxnResponse::default().encode(b, v).unwrap()
            });
            push(ApiKey::InitProducerId, v, &|b, v| {
                m::InitProducerIdResponse::default().encode(b, v).unwrap()
            });
        }
        push(ApiKey::DescribeTransactions, 0, &|b, v| {
            let mut r = m::DescribeTransactionsResponse::default();
            let mut s = m::describe_transactions_response::TransactionState::default();
            s.transactional_id = StrBytes::from_static_str("txn-1").into();
            s.transaction_state = StrBytes::from_static_str("Ongoing");
            r.transaction_states.push(s);
            r.encode(b, v).unwrap();
        });
        push(ApiKey::ListTransactions, 1, &|b, v| {
            m::ListTransactionsResponse::default().encode(b, v).unwrap()
        });
        push(ApiKey::SaslHandshake, 1, &|b, v| {
            let mut r = m::SaslHandshakeResponse::default();
            r.mechanisms = vec![StrBytes::from_static_str("SCRAM-SHA-512")];
            r.encode(b, v).unwrap();
        });
        push(ApiKey::SaslAuthenticate, 2, &|b, v| {
            let mut r = m::SaslAuthenticateResponse::default();
            r.auth_bytes = Bytes::from_static(b"r=abc,s=c2FsdA==,i=4096");
            r.encode(b, v).unwrap();
        });
        for (key, v) in [
            (ApiKey::ListOffsets, 9i16),
            (ApiKey::OffsetFetch, 9),
            (ApiKey::OffsetCommit, 9),
            (ApiKey::AddPartitionsToTxn, 5),
            (ApiKey::CreateTopics, 7),
            (ApiKey::AddOffsetsToTxn, 4),
            (ApiKey::TxnOffsetCommit, 5),
            (ApiKey::DeleteTopics, 6),
            (ApiKey::CreatePartitions, 3),
            (ApiKey::DescribeProducers, 0),
            (ApiKey::DescribeCluster, 1),
            (ApiKey::JoinGroup, 9),
            (ApiKey::SyncGroup, 5),
            (ApiKey::Heartbeat, 4),
            (ApiKey::LeaveGroup, 5),
            (ApiKey::ConsumerGroupHeartbeat, 1),
        ] {
            push(key, v, &|b, v| match key {
                ApiKey::ListOffsets => m::ListOffsetsResponse::default().encode(b, v).unwrap(),
                ApiKey::OffsetFetch => m::OffsetFetchResponse::default().encode(b, v).unwrap(),
                ApiKey::OffsetCommit => m::OffsetCommitResponse::default().encode(b, v).unwrap(),
                ApiKey::AddPartitionsToTxn => m::AddPartitionsToTxnResponse::default().encode(b, v).unwrap(),
                ApiKey::CreateTopics => m::CreateTopicsResponse::default().encode(b, v).unwrap(),
                ApiKey::AddOffsetsToTxn => m::AddOffsetsToTxnResponse::default().encode(b, v).unwrap(),
                ApiKey::TxnOffsetCommit => m::TxnOffsetCommitResponse::default().encode(b, v).unwrap(),
                ApiKey::DeleteTopics => m::DeleteTopicsResponse::default().encode(b, v).unwrap(),
                ApiKey::CreatePartitions => m::CreatePartitionsResponse::default().encode(b, v).unwrap(),
                ApiKey::DescribeProducers => m::DescribeProducersResponse::default().encode(b, v).unwrap(),
                ApiKey::DescribeCluster => m::DescribeClusterResponse::default().encode(b, v).unwrap(),
                ApiKey::JoinGroup => m::JoinGroupResponse::default().encode(b, v).unwrap(),
                ApiKey::SyncGroup => m::SyncGroupResponse::default().encode(b, v).unwrap(),
                ApiKey::Heartbeat => m::HeartbeatResponse::default().encode(b, v).unwrap(),
                ApiKey::LeaveGroup => m::LeaveGroupResponse::default().encode(b, v).unwrap(),
                ApiKey::ConsumerGroupHeartbeat => m::ConsumerGroupHeartbeatResponse::default().encode(b, v).unwrap(),
                _ => unreachable!(),
            });
        }
        out
    }

    fn write_seeds() {
        let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
        let write = |target: &str, name: &str, data: &[u8]| {
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
        };
        for entry in std::fs::read_dir(&golden).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "bin") {
                let name = path.file_stem().unwrap().to_string_lossy().to_string();
                let data = std::fs::read(&path).unwrap();
                if data.len() < 8192 {
                    write("record_batch", &name, &data);
                    write("record_batch_nocrc", &name, &data);
                }
            }
        }
        for (key, version, body) in seed_responses() {
            let sel = selector(key, version);
            let name = format!("{key:?}-v{version}");
            let mut resp = sel.to_vec();
            resp.extend_from_slice(&body);
            write("responses", &name, &resp);
            // A frame: size prefix, correlation id, header tags when flexible, body.
            let mut frame = sel.to_vec();
            let mut inner = 7i32.to_be_bytes().to_vec();
            if crate::frame::response_header_version(key, version) >= 1 {
                inner.push(0);
            }
            inner.extend_from_slice(&body);
            frame.extend_from_slice(&(inner.len() as i32).to_be_bytes());
            frame.extend_from_slice(&inner);
            write("frame", &name, &frame);
        }
        let text = b"hello kafka hello kafka hello kafka 0123456789".repeat(20);
        for (target, codec) in [
            ("decompress_gzip", Compression::Gzip),
            ("decompress_snappy", Compression::Snappy),
            ("decompress_lz4", Compression::Lz4),
            ("decompress_zstd", Compression::Zstd),
        ] {
            let mut out = Vec::new();
            crate::compression::compress(codec, &text, &mut out).unwrap();
            write(target, "text", &out);
        }
        let mut raw = Vec::new();
        raw.extend_from_slice(&snap::raw::Encoder::new().compress_vec(&text).unwrap());
        write("decompress_snappy", "raw", &raw);
        let nonce = crate::sasl::fuzzing::CLIENT_NONCE;
        let first = format!("r={nonce}srv,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        write("scram", "server-first", first.as_bytes());
        let mut both = first.into_bytes();
        both.push(0xff);
        both.extend_from_slice(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        write("scram", "first-and-final", &both);
        write("scram", "error", b"e=invalid-proof");
        write(
            "oauthbearer",
            "server-error",
            br#"{"status":"invalid_token","scope":"kafka","openid-configuration":"https://idp/.well-known/openid-configuration"}"#,
        );
        write("oauthbearer", "extensions", b"traceId=1,logicalCluster=lkc-1");
        write(
            "oauthbearer",
            "token",
            b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\xffjunk",
        );
        write("gssapi", "one-round", b"\x01srv\xffW\x07\x00\x10\x00");
        write("gssapi", "no-round", b"\x00W\x01\x00\x00\x00\xff");
        write("gssapi", "bad-offer", b"\x02srv\xffsrv\xffW\x04\x00\x00\x00");
        // gssapi also has seed-keytab (a synthetic two-entry keytab) and
        // seed-wrap-token (an RFC 4121 acceptor token), not regenerated here.
        for (name, seed) in crate::fetcher::fuzzing::seeds() {
            write("fetch", name, &seed);
        }
        for (name, seed) in crate::group::fuzzing::seeds() {
            write("group", name, &seed);
        }
        for v in [3i16, 8, 9, 12] {
            // Sent: topic[0] (3 records), a[1], b[2]; answered: topic[0] ok,
            // a[1] NOT_LEADER, b[2] twice, c[0] unexpected.
            let mut data = vec![(v - 3) as u8, 3, 0, 2, 4, 0, 8, 1];
            let mut r = m::ProduceResponse::default();
            for (name, index, code, base) in [
                ("topic", 0, 0i16, 10i64),
                ("a", 1, 6, -1),
                ("b", 2, 0, 4),
                ("b", 2, 0, 5),
                ("c", 0, 0, 1),
            ] {
                let mut t = m::produce_response::TopicProduceResponse::default();
                t.name = StrBytes::from_static_str(name).into();
                let mut p = m::produce_response::PartitionProduceResponse::default();
                p.index = index;
                p.error_code = code;
                p.base_offset = base;
                p.log_append_time_ms = -1;
                t.partition_responses.push(p);
                r.responses.push(t);
            }
            let mut b = BytesMut::new();
            r.encode(&mut b, v).unwrap();
            data.extend_from_slice(&b);
            write("produce", &format!("v{v}"), &data);
        }
    }

    #[test]
    fn replay_committed_corpus() {
        if std::env::var_os("CLINK_WRITE_FUZZ_SEEDS").is_some() {
            write_seeds();
        }
        let mut total = 0;
        for target in TARGETS {
            let dir = corpus_dir(target);
            let entries: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("corpus for {target} missing at {}: {e}", dir.display()))
                .map(|e| e.unwrap().path())
                .collect();
            assert!(!entries.is_empty(), "corpus for {target} is empty");
            for path in entries {
                let data = std::fs::read(&path).unwrap();
                run(target, &data);
                total += 1;
            }
        }
        assert!(total >= TARGETS.len());
    }

    #[test]
    fn every_response_type_is_reachable() {
        // The selector maps onto every type the client decodes.
        for (i, key) in RESPONSES.iter().enumerate() {
            let (k, _, _) = select(&[i as u8, 0]).unwrap();
            assert_eq!(k, *key);
        }
        for required in [
            ApiKey::ApiVersions,
            ApiKey::Metadata,
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::ListOffsets,
            ApiKey::OffsetFetch,
            ApiKey::OffsetCommit,
            ApiKey::FindCoordinator,
            ApiKey::InitProducerId,
            ApiKey::AddPartitionsToTxn,
            ApiKey::EndTxn,
            ApiKey::DescribeTransactions,
            ApiKey::ListTransactions,
            ApiKey::SaslHandshake,
            ApiKey::SaslAuthenticate,
            ApiKey::CreateTopics,
            ApiKey::OffsetForLeaderEpoch,
        ] {
            assert!(RESPONSES.contains(&required), "{required:?}");
        }
    }
}
