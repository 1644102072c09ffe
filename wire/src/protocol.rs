//! Requests as typed values: each knows its API key, the versions this crate
//! speaks, whether a version is flexible, and what type answers it. Plus
//! version negotiation from an ApiVersions answer.
//!
//! See <https://kafka.apache.org/protocol#api_versions> and KIP-482 (flexible
//! versions and tagged fields). The minimum versions respect KIP-896: Kafka
//! 4.0 removed everything older, so we never speak it.

use std::collections::HashMap;

use kafka_protocol::messages::{self as m, ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Encodable, VersionRange};

use bytes::Bytes;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// A request this crate can send.
pub trait ApiRequest: Encodable {
    /// The API key.
    const KEY: ApiKey;
    /// The API's name as Kafka spells it, for errors and logs.
    const NAME: &'static str;
    /// The versions we speak (inclusive).
    const VERSIONS: VersionRange;
    /// The answer's type.
    type Response: DecodeResponse;

    /// Whether `version` uses flexible encoding (compact strings, tagged fields).
    fn is_flexible(version: i16) -> bool {
        Self::KEY.request_header_version(version) >= 2
    }

    /// Fails unless we speak `version`.
    fn check_version(version: i16) -> Result<()> {
        if version < Self::VERSIONS.min || version > Self::VERSIONS.max {
            return Err(Error::UnsupportedVersion {
                api: Self::NAME,
                version,
                min: Self::VERSIONS.min,
                max: Self::VERSIONS.max,
            });
        }
        Ok(())
    }
}

macro_rules! api_requests {
    ($($req:ident => $resp:ident, $key:ident, $name:literal, $min:literal..=$max:literal;)*) => {
        $(
            impl ApiRequest for m::$req {
                const KEY: ApiKey = ApiKey::$key;
                const NAME: &'static str = $name;
                const VERSIONS: VersionRange = VersionRange { min: $min, max: $max };
                type Response = m::$resp;
            }
        )*

        /// Every API this crate speaks, with its name and our version range.
        pub const SPOKEN_APIS: &[(ApiKey, &str, VersionRange)] = &[
            $((ApiKey::$key, $name, VersionRange { min: $min, max: $max }),)*
        ];
    };
}

// Ranges: from Kafka 4.0's floor (KIP-896) up to what kafka-protocol 0.18's
// types describe and our decoders are tested at.
api_requests! {
    ApiVersionsRequest => ApiVersionsResponse, ApiVersions, "ApiVersions", 0..=4;
    MetadataRequest => MetadataResponse, Metadata, "Metadata", 4..=13;
    ProduceRequest => ProduceResponse, Produce, "Produce", 3..=13;
    FetchRequest => FetchResponse, Fetch, "Fetch", 4..=18;
    ListOffsetsRequest => ListOffsetsResponse, ListOffsets, "ListOffsets", 1..=10;
    OffsetForLeaderEpochRequest => OffsetForLeaderEpochResponse, OffsetForLeaderEpoch, "OffsetForLeaderEpoch", 2..=4;
    OffsetFetchRequest => OffsetFetchResponse, OffsetFetch, "OffsetFetch", 1..=9;
    OffsetCommitRequest => OffsetCommitResponse, OffsetCommit, "OffsetCommit", 2..=9;
    FindCoordinatorRequest => FindCoordinatorResponse, FindCoordinator, "FindCoordinator", 0..=6;
    InitProducerIdRequest => InitProducerIdResponse, InitProducerId, "InitProducerId", 0..=5;
    AddPartitionsToTxnRequest => AddPartitionsToTxnResponse, AddPartitionsToTxn, "AddPartitionsToTxn", 0..=5;
    AddOffsetsToTxnRequest => AddOffsetsToTxnResponse, AddOffsetsToTxn, "AddOffsetsToTxn", 0..=4;
    TxnOffsetCommitRequest => TxnOffsetCommitResponse, TxnOffsetCommit, "TxnOffsetCommit", 0..=5;
    EndTxnRequest => EndTxnResponse, EndTxn, "EndTxn", 0..=5;
    DescribeTransactionsRequest => DescribeTransactionsResponse, DescribeTransactions, "DescribeTransactions", 0..=0;
    ListTransactionsRequest => ListTransactionsResponse, ListTransactions, "ListTransactions", 0..=2;
    DescribeProducersRequest => DescribeProducersResponse, DescribeProducers, "DescribeProducers", 0..=0;
    SaslHandshakeRequest => SaslHandshakeResponse, SaslHandshake, "SaslHandshake", 1..=1;
    SaslAuthenticateRequest => SaslAuthenticateResponse, SaslAuthenticate, "SaslAuthenticate", 0..=2;
    CreateTopicsRequest => CreateTopicsResponse, CreateTopics, "CreateTopics", 2..=7;
    DeleteTopicsRequest => DeleteTopicsResponse, DeleteTopics, "DeleteTopics", 1..=6;
    CreatePartitionsRequest => CreatePartitionsResponse, CreatePartitions, "CreatePartitions", 0..=3;
    DescribeClusterRequest => DescribeClusterResponse, DescribeCluster, "DescribeCluster", 0..=1;
    JoinGroupRequest => JoinGroupResponse, JoinGroup, "JoinGroup", 2..=9;
    SyncGroupRequest => SyncGroupResponse, SyncGroup, "SyncGroup", 0..=5;
    HeartbeatRequest => HeartbeatResponse, Heartbeat, "Heartbeat", 0..=4;
    LeaveGroupRequest => LeaveGroupResponse, LeaveGroup, "LeaveGroup", 0..=5;
    ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse, ConsumerGroupHeartbeat, "ConsumerGroupHeartbeat", 0..=1;
    ListGroupsRequest => ListGroupsResponse, ListGroups, "ListGroups", 0..=5;
    DescribeGroupsRequest => DescribeGroupsResponse, DescribeGroups, "DescribeGroups", 0..=6;
    DeleteGroupsRequest => DeleteGroupsResponse, DeleteGroups, "DeleteGroups", 0..=2;
    ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse, ConsumerGroupDescribe, "ConsumerGroupDescribe", 0..=1;
}

/// The name we use for an API key, or `ApiKey`'s Debug form for one we do not speak.
pub fn api_name(key: ApiKey) -> String {
    SPOKEN_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, n, _)| (*n).to_string())
        .unwrap_or_else(|| format!("{key:?}"))
}

/// What a broker speaks, from its ApiVersions answer, and the version we pick
/// for each request.
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions {
    ranges: HashMap<i16, VersionRange>,
}

impl BrokerVersions {
    /// Reads the broker's ranges. The caller checks the response's error code.
    pub fn from_response(resp: &ApiVersionsResponse) -> Self {
        let ranges = resp
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    VersionRange {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        BrokerVersions { ranges }
    }

    /// The broker's range for `key`, if it speaks it at all.
    pub fn broker_range(&self, key: ApiKey) -> Option<VersionRange> {
        self.ranges.get(&(key as i16)).copied()
    }

    /// The highest version of `key` both sides speak, given our range.
    pub fn choose(&self, key: ApiKey, name: &'static str, ours: VersionRange) -> Result<i16> {
        let Some(theirs) = self.broker_range(key) else {
            return Err(Error::NoCommonVersion {
                api: name,
                ours_min: ours.min,
                ours_max: ours.max,
                broker: "does not support it".into(),
            });
        };
        let common = ours.intersect(&theirs);
        if common.is_empty() {
            return Err(Error::NoCommonVersion {
                api: name,
                ours_min: ours.min,
                ours_max: ours.max,
                broker: format!("speaks v{}..=v{}", theirs.min, theirs.max),
            });
        }
        Ok(common.max)
    }

    /// The version to use for request type `R`.
    pub fn version_for<R: ApiRequest>(&self) -> Result<i16> {
        self.choose(R::KEY, R::NAME, R::VERSIONS)
    }
}

/// The ApiVersions version to retry at after a broker answered ours
/// (`attempted`) with UNSUPPORTED_VERSION, from that answer's body (KIP-511,
/// as the Java client does it).
///
/// Such an answer lists at least the broker's ApiVersions range. Kafka writes
/// it as a v0 body whatever version was asked; the body is read in the shapes
/// a broker sends, each of which must use every byte:
///
/// * v0 (Kafka): `error_code`, an `i32`-counted array of
///   `(api_key, min, max)`;
/// * the attempted version's own shape (a broker that answers in kind);
/// * librdkafka's mock cluster (2.12): `error_code`, a one-byte *raw* count,
///   untagged entries, `throttle_time_ms` — neither v0 nor flexible.
///
/// The retry is at the highest version both sides speak below `attempted`:
/// `min(listed max, attempted - 1, our max)`. An answer that lists no
/// ApiVersions range, or that cannot be read, gives v0, which every broker
/// answers. Returns `None` when `attempted` is already v0 (or the broker's
/// range lies entirely above what we can retry at): nothing lower to try.
pub fn api_versions_retry_version(error_body: &Bytes, attempted: i16) -> Option<i16> {
    if attempted <= m::ApiVersionsRequest::VERSIONS.min {
        return None;
    }
    let ceiling = attempted.checked_sub(1)?.min(m::ApiVersionsRequest::VERSIONS.max);
    let listed = [0, attempted]
        .into_iter()
        .find_map(|version| {
            let mut r = Reader::new(error_body);
            let resp = ApiVersionsResponse::decode_response(&mut r, version).ok()?;
            r.finish("ApiVersionsResponse").ok()?;
            Some(resp.api_keys)
        })
        .map(|keys| {
            keys.into_iter()
                .map(|k| (k.api_key, k.min_version, k.max_version))
                .collect::<Vec<_>>()
        })
        .or_else(|| librdkafka_mock_api_versions(error_body));
    let Some(listed) = listed else {
        return Some(0);
    };
    match listed.iter().find(|(key, _, _)| *key == ApiKey::ApiVersions as i16) {
        None => Some(0),
        Some(&(_, min, max)) => {
            let version = max.min(ceiling);
            if version < min.max(m::ApiVersionsRequest::VERSIONS.min) {
                None
            } else {
                Some(version)
            }
        }
    }
}

/// librdkafka 2.12's mock cluster answers an unsupported flexible
/// ApiVersions request with a one-byte raw element count (not the compact
/// `n + 1`), 6-byte untagged entries and a throttle time. Exact length only.
fn librdkafka_mock_api_versions(body: &Bytes) -> Option<Vec<(i16, i16, i16)>> {
    let mut r = Reader::new(body);
    r.i16("error_code").ok()?;
    let count = usize::try_from(r.i8("count").ok()?).ok()?;
    if count.checked_mul(6).and_then(|n| n.checked_add(4)) != Some(r.remaining()) {
        return None;
    }
    let entries = (0..count)
        .map(|_| Some((r.i16("api_key").ok()?, r.i16("min").ok()?, r.i16("max").ok()?)))
        .collect::<Option<Vec<_>>>()?;
    r.i32("throttle_time_ms").ok()?;
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    fn broker(ranges: &[(ApiKey, i16, i16)]) -> BrokerVersions {
        let mut resp = ApiVersionsResponse::default();
        for (k, min, max) in ranges {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *min;
            v.max_version = *max;
            resp.api_keys.push(v);
        }
        BrokerVersions::from_response(&resp)
    }

    #[test]
    fn picks_highest_common() {
        let b = broker(&[
            (ApiKey::Metadata, 0, 20),
            (ApiKey::Fetch, 4, 10),
            (ApiKey::Produce, 3, 99),
        ]);
        assert_eq!(b.version_for::<m::MetadataRequest>().unwrap(), 13);
        assert_eq!(b.version_for::<m::FetchRequest>().unwrap(), 10);
        assert_eq!(b.version_for::<m::ProduceRequest>().unwrap(), 13);
    }

    #[test]
    fn no_common_version_names_the_api() {
        let b = broker(&[(ApiKey::Fetch, 19, 20)]);
        let err = b.version_for::<m::FetchRequest>().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Fetch") && text.contains("v19..=v20"), "{text}");
        let err = b.version_for::<m::EndTxnRequest>().unwrap_err();
        assert!(err.to_string().contains("EndTxn") && err.to_string().contains("does not support"));
    }

    /// An ApiVersions body: error code, then `(key, min, max)` entries in
    /// the given shape.
    fn api_versions_body(shape: &str, code: i16, apis: &[(i16, i16, i16)]) -> Bytes {
        use bytes::BufMut;
        let mut b = bytes::BytesMut::new();
        b.put_i16(code);
        match shape {
            "v0" | "v2" => b.put_i32(apis.len() as i32),
            "v3" => b.put_u8(apis.len() as u8 + 1),
            "mock" => b.put_u8(apis.len() as u8),
            _ => unreachable!(),
        }
        for (k, min, max) in apis {
            b.put_i16(*k);
            b.put_i16(*min);
            b.put_i16(*max);
            if shape == "v3" {
                b.put_u8(0);
            }
        }
        if shape != "v0" {
            b.put_i32(0); // throttle
        }
        if shape == "v3" {
            b.put_u8(0);
        }
        b.freeze()
    }

    #[test]
    fn api_versions_retry_at_the_highest_listed_version() {
        // Kafka: a v0 body listing its ApiVersions range.
        let body = api_versions_body("v0", 35, &[(18, 0, 2)]);
        assert_eq!(api_versions_retry_version(&body, 3), Some(2));
        // A broker that speaks more than we tried: one below what we tried.
        let body = api_versions_body("v0", 35, &[(18, 0, 9)]);
        assert_eq!(api_versions_retry_version(&body, 3), Some(2));
        // Other keys around it.
        let body = api_versions_body("v0", 35, &[(0, 3, 9), (18, 0, 1), (3, 4, 12)]);
        assert_eq!(api_versions_retry_version(&body, 3), Some(1));
        // Answered in the attempted version's own shape.
        let body = api_versions_body("v3", 35, &[(18, 0, 2)]);
        assert_eq!(api_versions_retry_version(&body, 4), Some(2));
        let body = api_versions_body("v2", 35, &[(18, 0, 1)]);
        assert_eq!(api_versions_retry_version(&body, 2), Some(1));
        // librdkafka's mock cluster: raw one-byte count, untagged entries.
        let body = api_versions_body("mock", 35, &[(18, 0, 2)]);
        assert_eq!(body.len(), 2 + 1 + 6 + 4);
        assert_eq!(api_versions_retry_version(&body, 3), Some(2));
    }

    #[test]
    fn api_versions_retry_falls_back_to_v0_or_stops() {
        // Nothing listed (pre-2.4 brokers), or no ApiVersions entry: v0.
        assert_eq!(
            api_versions_retry_version(&api_versions_body("v0", 35, &[]), 3),
            Some(0)
        );
        let body = api_versions_body("v0", 35, &[(3, 4, 12)]);
        assert_eq!(api_versions_retry_version(&body, 3), Some(0));
        // Unreadable bodies: v0, never a panic.
        for body in [
            Bytes::new(),
            Bytes::from_static(&[0, 35]),
            Bytes::from_static(&[0, 35, 0x7f, 0xff, 0xff, 0xff]),
            Bytes::from_static(&[0, 35, 5, 0, 18]),
        ] {
            assert_eq!(api_versions_retry_version(&body, 3), Some(0), "{body:?}");
        }
        // Already at v0: nothing lower.
        let body = api_versions_body("v0", 35, &[(18, 0, 2)]);
        assert_eq!(api_versions_retry_version(&body, 0), None);
        // The broker's range lies above what we could retry at.
        let body = api_versions_body("v0", 35, &[(18, 3, 9)]);
        assert_eq!(api_versions_retry_version(&body, 3), None);
        // Retries strictly descend, so a loop over them ends.
        let body = api_versions_body("v0", 35, &[(18, 0, 4)]);
        let mut v = 4;
        let mut steps = 0;
        while let Some(next) = api_versions_retry_version(&body, v) {
            assert!(next < v);
            v = next;
            steps += 1;
        }
        assert_eq!((v, steps), (0, 4));
    }

    #[test]
    fn flexible_rules() {
        assert!(!m::MetadataRequest::is_flexible(8));
        assert!(m::MetadataRequest::is_flexible(9));
        assert!(m::EndTxnRequest::is_flexible(3));
        assert!(!m::FetchRequest::is_flexible(11));
        assert!(m::FetchRequest::is_flexible(12));
        assert!(m::ApiVersionsRequest::is_flexible(3));
    }

    #[test]
    fn our_ranges_are_valid_kafka_protocol_ranges() {
        for (key, name, ours) in SPOKEN_APIS {
            let valid = key.valid_versions();
            assert!(
                ours.min >= valid.min && ours.max <= valid.max,
                "{name}: ours {ours} vs kafka-protocol {valid}"
            );
        }
    }
}

/// How long a connection stays muted after an answer carrying
/// `throttle_time_ms` (KIP-219: the broker answers at once and expects the
/// client to send nothing more on that connection for that long), bounded
/// by `max` (a hostile or broken broker cannot stall the client for
/// longer). Negative values count as 0.
pub fn throttle_delay(throttle_time_ms: i32, max: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(throttle_time_ms.max(0) as u64).min(max)
}

#[cfg(test)]
mod throttle_tests {
    use super::throttle_delay;
    use std::time::Duration;

    #[test]
    fn throttle_delay_is_clamped() {
        let max = Duration::from_secs(30);
        assert_eq!(throttle_delay(-5, max), Duration::ZERO);
        assert_eq!(throttle_delay(0, max), Duration::ZERO);
        assert_eq!(throttle_delay(250, max), Duration::from_millis(250));
        assert_eq!(throttle_delay(i32::MAX, max), max);
    }
}
