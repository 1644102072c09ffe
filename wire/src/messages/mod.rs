//! Bounded decoders for the responses the client reads, into `kafka-protocol`'s
//! generated types. Requests are encoded with `kafka-protocol` itself (we
//! control those inputs); responses come from the network and are decoded here
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
mod sasl_authenticate;
mod sasl_handshake;
mod txn_offset_commit;

pub use init_producer_id::{InitProducerIdTwoPhaseRequest, TWO_PHASE_COMMIT_VERSION};
