//! clink-kafka: a pure-Rust Kafka client and connector.
//!
//! - [`client`]: the native async (tokio) client: connections, cluster
//!   metadata, admin, the idempotent producer and the consumer.
//! - [`connector`]: the engine-facing connector layer: source, sinks,
//!   factory registry, options, the SQL table front.
//! - [`Error`], [`Result`], [`BrokerRef`], [`TlsFailure`]: the client's typed errors.
//! - [`schema_registry`]: a Confluent-compatible Schema Registry client (cached).
//! - [`metrics`]: series names, the Prometheus recorder and its loopback
//!   scrape endpoint.
//! - [`wire`]: the sans-IO protocol crate the client is built on.
//!
//! # Public API
//!
//! Every public item has exactly one path: implementation modules are
//! private and their items are re-exported by their parent
//! (`clink_kafka::client::Consumer`, `clink_kafka::connector::KafkaSource`);
//! a module that stays public is a namespace whose items are not
//! re-exported anywhere else (`client::properties`, `connector::options`,
//! `connector::sql`, ...). Raw protocol access, whose signatures follow
//! `kafka-protocol`'s semver, is kept behind `client::raw`.

// No unsafe code; the one exception is the optional librdkafka backend's
// FFI (`connector::rdkafka`, feature `rdkafka`), each block with its proof.
#![cfg_attr(not(feature = "rdkafka"), forbid(unsafe_code))]
#![cfg_attr(feature = "rdkafka", deny(unsafe_code))]
// Every public item is documented (issue 16).
#![deny(missing_docs)]

pub mod client;
pub mod connector;
mod error;
pub mod metrics;
pub mod schema_registry;

/// The sans-IO protocol crate: framing, messages, record batches, codecs, SASL.
pub use clink_kafka_wire as wire;

pub use error::{BrokerRef, Error, Result, TlsFailure};
