//! Bounded decoders for the responses the client reads, into `kafka-protocol`'s
//! generated types. Requests are encoded with `kafka-protocol` itself (we
//! control those inputs); responses come from the network and are decoded here
//! with [`crate::codec::Reader`], which bounds every length before allocating.
//!
//! Field layouts follow the Kafka message schemas
//! (<https://kafka.apache.org/protocol#protocol_messages>).

mod api_versions;
mod metadata;
mod produce;
mod fetch;
mod list_offsets;
mod offset_fetch;
mod offset_commit;
mod create_topics;
mod find_coordinator;
mod init_producer_id;
mod add_partitions_to_txn;
mod end_txn;
mod describe_transactions;
mod list_transactions;
mod sasl_handshake;
mod sasl_authenticate;
mod add_offsets_to_txn;
mod txn_offset_commit;
mod delete_topics;
mod create_partitions;
mod describe_producers;
mod describe_cluster;
