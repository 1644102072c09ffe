//! clink-kafka: a pure-Rust Kafka client and connector.
//!
//! - [`client`]: the native async (tokio) client: connections, cluster
//!   metadata, admin, the idempotent producer and the consumer.
//! - [`connector`]: the engine-facing connector layer: source, sinks,
//!   factory registry, options, the SQL table front.
//! - [`error`]: the client's typed errors.
//! - [`wire`]: the sans-IO protocol crate the client is built on.

pub mod client;
pub mod connector;
pub mod error;

/// The sans-IO protocol crate: framing, messages, record batches, codecs, SASL.
pub use clink_kafka_wire as wire;

pub use error::{Error, Result};
