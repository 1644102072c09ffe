//! Bounded decoders for the responses the client reads, into `kafka-protocol`'s
//! generated types. Requests are encoded with `kafka-protocol` itself (we
//! control those inputs), but for Produce, whose batches go into the frame
//! uncopied ([`encode_produce_request`]); responses come from the network and are decoded here
//! with [`crate::codec::Reader`], which bounds every length before allocating.
//!
//! Field layouts follow the Kafka message schemas
//! (<https://kafka.apache.org/protocol#protocol_messages>).

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_topics;
mod describe_cluster;
mod describe_producers;
mod describe_transactions;
mod end_txn;
mod fetch;
mod find_coordinator;
mod group_admin;
mod group_membership;
mod init_producer_id;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod produce_request;
mod sasl_authenticate;
mod sasl_handshake;
mod txn_offset_commit;

/// Refuses a response `version` outside `min..=max` of `api`'s decoder.
pub(crate) fn check_version(api: &'static str, version: i16, min: i16, max: i16) -> crate::error::Result<()> {
    if (min..=max).contains(&version) {
        Ok(())
    } else {
        Err(crate::error::Error::UnsupportedVersion { api, version, min, max })
    }
}

/// Reads a tagged-field section in which no tag is known: every field is
/// kept as unknown bytes (bounded by the reader).
pub(crate) fn no_tags(
    r: &mut crate::codec::Reader<'_>,
    context: &'static str,
) -> crate::error::Result<std::collections::BTreeMap<i32, bytes::Bytes>> {
    r.tagged_fields(context, |_, _, _| Ok(false))
}

pub use init_producer_id::{InitProducerIdTwoPhaseRequest, TWO_PHASE_COMMIT_VERSION};
pub use produce_request::{
    encode_produce_request, FrameParts, ProduceTopic, PRODUCE_REQUEST_MAX_VERSION, PRODUCE_REQUEST_MIN_VERSION,
};
