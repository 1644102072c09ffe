//! Consume a topic from the beginning with manual assignment and print
//! each record, reading the consumer as a `Stream` of records.
//!
//! ```text
//! cargo run --example consume -- [BROKERS] [TOPIC] [COUNT]
//! ```
//!
//! `BROKERS` defaults to `$CLINK_KAFKA_BROKERS`, then `127.0.0.1:9092`;
//! `TOPIC` to `clink-example`. It stops after `COUNT` records (default 10)
//! or after 10 s without one.

use std::io::Write;
use std::pin::Pin;
use std::time::Duration;

use clink_kafka::client::{ClientConfig, Cluster, Consumer, ConsumerConfig, Offset};
use futures_core::Stream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads up to `count` records of every partition of `topic` from the
/// earliest offset; writes `<topic>[<partition>]@<offset> <key> <value>`
/// per record to `out`, and returns how many it read.
pub async fn run(brokers: &str, topic: &str, count: usize, out: &mut dyn Write) -> Result<usize, BoxError> {
    let cluster = Cluster::connect(ClientConfig::new(brokers)).await?;
    let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
    consumer.assign_topic(topic).await?;
    consumer.seek_all(Offset::Earliest).await?;
    let mut read = 0;
    // `consumer.stream()` is a `futures_core::Stream` of records (with the
    // `futures` crate: `while let Some(r) = stream.next().await`). It
    // fetches only while it is read, and dropping it, or a `next()`, at
    // any point loses no record. `consumer.batches()` yields a poll's worth
    // at a time instead.
    let mut stream = consumer.stream();
    while read < count {
        let next = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx));
        let Ok(Some(r)) = tokio::time::timeout(Duration::from_secs(10), next).await else {
            break; // 10 s without a record
        };
        let r = r?;
        writeln!(
            out,
            "{}[{}]@{} {} {}",
            r.topic,
            r.partition,
            r.record.offset,
            text(r.record.key.as_deref()),
            text(r.record.value.as_deref())
        )?;
        read += 1;
    }
    Ok(read)
}

/// Bytes as text (lossy), empty for a null key or value.
fn text(bytes: Option<&[u8]>) -> String {
    bytes
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

#[allow(dead_code)] // the tests include this file without calling main
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let brokers = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("CLINK_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = std::env::args().nth(2).unwrap_or_else(|| "clink-example".into());
    let count = std::env::args().nth(3).map(|n| n.parse()).transpose()?.unwrap_or(10);
    let read = run(&brokers, &topic, count, &mut std::io::stdout()).await?;
    eprintln!("read {read} records");
    Ok(())
}
