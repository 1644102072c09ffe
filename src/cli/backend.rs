//! `--backend native|rdkafka` for `produce`, `consume`, `roundtrip` and
//! `copy`: which Kafka client runs underneath. `native` is the pure-Rust
//! client; `rdkafka` is librdkafka and needs a binary built with
//! `--features rdkafka`: without it the command fails naming the feature.
//!
//! Every one of these commands has one code path, over the connector's
//! backend traits ([`ConsumerBackend`](clink_kafka::connector::ConsumerBackend),
//! [`ProducerBackend`](clink_kafka::connector::ProducerBackend)), whichever
//! backend runs: [`producer`] and [`consumer`] build the backend from the
//! CLI's settings. The native backend gets the client's full configuration
//! (the native-only flags included); librdkafka its properties from the
//! connector options.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use clink_kafka::client::{Acks, ClientConfig, ConsumerConfig, PartitionOffset, ProducerConfig};
use clink_kafka::connector::options::Backend;
use clink_kafka::connector::selected::{SelectedConsumer, SelectedProducer};
use clink_kafka::connector::{ConsumerBackend, ProducerBackend, Watermark};
use clink_kafka::connector::{NativeConsumer, NativeProducer};
use clink_kafka::wire::compression::Compression;

/// The `--backend` option.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Kafka client: native (pure Rust) or rdkafka (librdkafka; needs a
    /// binary built with --features rdkafka).
    #[arg(long = "backend", value_name = "native|rdkafka", default_value = "native")]
    pub name: String,
}

impl BackendArgs {
    /// The backend named, refused when this binary cannot run it.
    pub fn backend(&self) -> anyhow::Result<Backend> {
        let backend = match Backend::parse("--backend", &self.name) {
            Ok(b) => b,
            Err(e) => bail!("{e}"),
        };
        if let Err(e) = backend.check_available("--backend", &self.name) {
            bail!("{e}");
        }
        Ok(backend)
    }
}

/// What a CLI producer is asked for, on either backend.
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    pub acks: Acks,
    pub compression: Compression,
    /// compression.level (-1: the codec's default).
    pub compression_level: i32,
    pub linger: Duration,
    pub batch_size: usize,
    /// max.in.flight.requests.per.connection (native only: librdkafka keeps
    /// its default).
    pub max_in_flight: usize,
    pub allow_auto_create_topics: bool,
    /// The largest record accepted (native only), when not the default.
    pub max_record_size: Option<usize>,
}

/// A connected producer on `backend` for `topic`.
pub async fn producer(
    backend: Backend,
    config: &ClientConfig,
    topic: &str,
    s: &ProducerSettings,
) -> anyhow::Result<SelectedProducer> {
    let mut p = match backend {
        Backend::Native => {
            let mut c = ProducerConfig::default()
                .with_acks(s.acks)
                .with_idempotent(s.acks == Acks::All)
                .with_compression(s.compression)
                .with_compression_level(s.compression_level)
                .with_linger(s.linger)
                .with_batch_size(s.batch_size)
                .with_max_in_flight(s.max_in_flight)
                .with_allow_auto_create_topics(s.allow_auto_create_topics);
            if let Some(n) = s.max_record_size {
                c = c.with_max_record_size(n);
            }
            SelectedProducer::Native(NativeProducer::new(config.clone(), c))
        }
        _ => {
            let mut o = clink_kafka::connector::options::SinkOptions::new(brokers(config), topic);
            o.backend = backend;
            o.client_id = config.client_id.clone();
            o.security = security(config);
            o.client.request_timeout = Some(config.request_timeout);
            o.acks = s.acks;
            o.compression = s.compression;
            o.producer.compression_level = Some(s.compression_level);
            o.linger = s.linger;
            o.producer.batch_size = Some(s.batch_size);
            if !s.allow_auto_create_topics {
                // librdkafka's producer default is true, as natively.
                o.rdkafka_properties
                    .0
                    .insert("allow.auto.create.topics".into(), "false".into());
            }
            SelectedProducer::for_options(&o).context("configuring the producer")?
        }
    };
    p.connect().await.context("starting the producer")?;
    Ok(p)
}

/// A connected consumer on `backend`, assigned to `partitions` of `topic`
/// (all when `None`) at the log start (`from_beginning`) or end. `native`
/// is the native backend's configuration; librdkafka takes its isolation
/// level.
pub async fn consumer(
    backend: Backend,
    config: &ClientConfig,
    topic: &str,
    partition: Option<i32>,
    from_beginning: bool,
    native: ConsumerConfig,
) -> anyhow::Result<SelectedConsumer> {
    let mut c = match backend {
        Backend::Native => SelectedConsumer::Native(NativeConsumer::new(config.clone(), native)),
        _ => {
            let mut o = clink_kafka::connector::options::SourceOptions::new(brokers(config), topic);
            o.backend = backend;
            o.client_id = config.client_id.clone();
            o.security = security(config);
            o.client.request_timeout = Some(config.request_timeout);
            o.client.metadata_max_wait = Some(config.metadata_max_wait);
            o.consumer.isolation = Some(native.isolation);
            SelectedConsumer::for_options(&o).context("configuring the consumer")?
        }
    };
    c.connect().await.context("connecting to the cluster")?;
    let partitions: Vec<i32> = match partition {
        Some(p) => vec![p],
        None => (0..c.partition_count(topic).await?).collect(),
    };
    let which = if from_beginning {
        Watermark::Low
    } else {
        Watermark::High
    };
    let mut at = Vec::with_capacity(partitions.len());
    for p in partitions {
        at.push(PartitionOffset::new(
            p,
            c.watermark(topic, p, which).await.context("seeking")?,
        ));
    }
    c.assign(topic, &at).await?;
    Ok(c)
}

/// The bootstrap list of `config`, as connector options take it.
fn brokers(config: &ClientConfig) -> String {
    config.bootstrap.join(",")
}

/// The connector's security settings for what the CLI options resolved to.
fn security(config: &ClientConfig) -> clink_kafka::connector::security::SecurityConfig {
    clink_kafka::connector::security::SecurityConfig {
        protocol: config.security_protocol,
        sasl: config.sasl.clone(),
        tls: config.security_protocol.uses_tls().then(|| config.tls.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_unavailable_backends_are_refused_by_name() {
        let e = BackendArgs {
            name: "librdkafka".into(),
        }
        .backend()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--backend") && e.contains("one of native, rdkafka"), "{e}");
        assert_eq!(
            BackendArgs { name: "NATIVE".into() }.backend().unwrap(),
            Backend::Native
        );
        let rd = BackendArgs { name: "rdkafka".into() }.backend();
        if cfg!(feature = "rdkafka") {
            assert_eq!(rd.unwrap(), Backend::Rdkafka);
        } else {
            let e = rd.unwrap_err().to_string();
            assert!(e.contains("cargo feature `rdkafka`"), "{e}");
        }
    }
}
