//! `clink-kafka-wire`: the Kafka protocol as a sans-IO library.
//!
//! Bytes in, typed values out, and back. Nothing here touches a socket, a
//! clock or a random number generator: time and nonces are parameters. That
//! is what lets the same code serve the async client, the in-doubt resolver,
//! the fuzzers and the benchmarks.
//!
//! - [`frame`]: size-prefixed frames, request/response headers.
//! - [`protocol`]: requests as typed values, version negotiation.
//! - [`messages`]: bounded response decoders into `kafka-protocol`'s types.
//! - [`record`]: record batch v2, zero-copy over [`bytes::Bytes`].
//! - [`compression`]: gzip, snappy (xerial), lz4 (frame) and zstd, pure Rust.
//! - [`produce_state`]: a Produce answer checked against what was sent.
//! - [`sasl`]: PLAIN and SCRAM-SHA-256/512 state machines.
//! - [`error_code`]: Kafka's error-code table.
//! - [`fetcher`]: the consumer's fetch state machine (sessions, bounded polls).
//! - [`group`]: consumer group membership (classic protocol), the consumer
//!   protocol's bytes and the assignors, sans-IO.
//! - [`confluent`]: the Schema Registry framing of a value (magic, schema id, Protobuf indexes).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Hostile bytes must give typed errors, never a panic: no unwrap, no
// indexing that can go out of bounds, no arithmetic that can overflow
// (tests may do all three).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::indexing_slicing, clippy::arithmetic_side_effects)
)]

pub mod codec;
pub mod compression;
pub mod confluent;
pub mod error;
pub mod error_code;
pub mod fetcher;
pub mod frame;
pub mod group;
pub mod messages;
pub mod produce_state;
pub mod protocol;
pub mod record;
pub mod sasl;
pub mod secret;

#[cfg(any(fuzzing, test))]
pub mod fuzzing;

pub use error::{Error, Result};
pub use error_code::KafkaCode;
/// The `kafka-protocol` crate whose generated message types we speak.
pub use kafka_protocol;
