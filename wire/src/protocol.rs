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

use crate::codec::DecodeResponse;
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
