//! Produce records with the idempotent producer and print where each landed.
//!
//! ```text
//! cargo run --example produce -- [BROKERS] [TOPIC] [COUNT]
//! ```
//!
//! `BROKERS` defaults to `$CLINK_KAFKA_BROKERS`, then `127.0.0.1:9092`;
//! `TOPIC` to `clink-example`, `COUNT` to 10. The topic is created (one
//! partition) when it does not exist.

use std::io::Write;
use std::time::Duration;

use clink_kafka::client::{Admin, ClientConfig, Cluster, NewTopic, Producer, ProducerConfig, ProducerRecord};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Produces `count` records `key-<i>` = `value-<i>` to `topic`; writes one
/// `delivered <topic>[<partition>]@<offset>` line per record to `out`.
pub async fn run(brokers: &str, topic: &str, count: u32, out: &mut dyn Write) -> Result<(), BoxError> {
    let cluster = Cluster::connect(ClientConfig::new(brokers)).await?;
    // Already there is fine (TOPIC_ALREADY_EXISTS is the only error expected).
    let _ = Admin::new(cluster.clone())
        .create_topics(&[NewTopic::new(topic, 1, 1)])
        .await;
    let producer = Producer::new(cluster, ProducerConfig::default()).await?;
    let mut deliveries = Vec::new();
    for i in 0..count {
        let record = ProducerRecord::new(topic, format!("value-{i}")).with_key(format!("key-{i}"));
        // `send` waits only for buffer space; the delivery is a future.
        deliveries.push(producer.send(record).await?);
    }
    producer.flush(Duration::from_secs(30)).await?;
    for delivery in deliveries {
        let report = delivery.await?;
        writeln!(
            out,
            "delivered {}[{}]@{}",
            report.topic, report.partition, report.offset
        )?;
    }
    producer.close(Duration::from_secs(30)).await?;
    Ok(())
}

/// `BROKERS` from the first argument, `$CLINK_KAFKA_BROKERS`, or the default.
#[allow(dead_code)] // the tests include this file without calling main
fn brokers_arg() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("CLINK_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".into())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let topic = std::env::args().nth(2).unwrap_or_else(|| "clink-example".into());
    let count = std::env::args().nth(3).map(|n| n.parse()).transpose()?.unwrap_or(10);
    run(&brokers_arg(), &topic, count, &mut std::io::stdout()).await
}
