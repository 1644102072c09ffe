//! A transactional read-process-write loop (consume → transform → produce,
//! exactly once): each polled batch is upper-cased into the output topic
//! inside one transaction that also commits the input offsets for a group,
//! so the output and the consumed position commit together or not at all.
//!
//! ```text
//! cargo run --example transactional -- [BROKERS] [INPUT] [OUTPUT] [COUNT]
//! ```
//!
//! `BROKERS` defaults to `$CLINK_KAFKA_BROKERS`, then `127.0.0.1:9092`.
//! It stops after `COUNT` records (default 10) or 10 s without one.

use std::collections::BTreeMap;
use std::io::Write;
use std::pin::Pin;
use std::time::Duration;

use clink_kafka::client::{
    ClientConfig, Cluster, Consumer, ConsumerConfig, GroupOffsets, IsolationLevel, Offset, ProducerConfig,
    ProducerRecord, TopicPartition, TopicPartitionOffset, TransactionalProducer, TxnConfig,
};
use futures_core::Stream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Copies up to `count` records of `input` (read_committed, from the
/// group's committed offsets or the earliest) to `output`, value
/// upper-cased, one transaction per poll; writes `committed <n> records`
/// per transaction to `out` and returns the total.
pub async fn run(
    brokers: &str,
    input: &str,
    output: &str,
    group: &str,
    count: usize,
    out: &mut dyn Write,
) -> Result<usize, BoxError> {
    let cluster = Cluster::connect(ClientConfig::new(brokers)).await?;
    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default().with_isolation(IsolationLevel::ReadCommitted),
    );
    consumer.assign_topic(input).await?;
    // Resume where the last committed transaction left the group.
    let assigned = consumer.assignment();
    let committed = GroupOffsets::new(cluster.clone(), group)?
        .fetch(&assigned, true)
        .await?;
    for (TopicPartition { topic, partition }, offset) in committed {
        let start = offset.map_or(Offset::Earliest, |c| Offset::At(c.offset));
        consumer.seek(&topic, partition, start).await?;
    }

    // One transactional id per input partition set; a restart with the
    // same id fences the previous instance.
    let txn = TxnConfig::new(format!("{group}-txn"));
    let mut producer = TransactionalProducer::init(cluster, ProducerConfig::default(), txn).await?;
    let mut total = 0;
    // The consumer as a `Stream` of batches (a poll's worth each, never
    // empty); with the `futures` crate: `batches.next().await`.
    let mut batches = consumer.batches();
    while total < count {
        let next = std::future::poll_fn(|cx| Pin::new(&mut batches).poll_next(cx));
        let Ok(Some(records)) = tokio::time::timeout(Duration::from_secs(10), next).await else {
            break; // 10 s without a record
        };
        let records = records?;
        // The guard: commit(self) / abort(self) end it; dropped, the next
        // begin aborts it.
        let mut transaction = producer.begin().await?;
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in &records {
            let value = r
                .record
                .value
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            transaction
                .send(ProducerRecord::new(output, value.to_uppercase()))
                .await?;
            next.insert((r.topic.to_string(), r.partition), r.record.offset + 1);
        }
        let offsets: Vec<TopicPartitionOffset> = next
            .into_iter()
            .map(|((topic, partition), offset)| TopicPartitionOffset::new(topic, partition, offset))
            .collect();
        transaction.send_offsets(group, &offsets).await?;
        transaction.commit().await?;
        total += records.len();
        writeln!(out, "committed {} records", records.len())?;
    }
    producer.close().await?;
    Ok(total)
}

#[allow(dead_code)] // the tests include this file without calling main
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let arg = |i: usize, default: &str| std::env::args().nth(i).unwrap_or_else(|| default.to_owned());
    let brokers = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("CLINK_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let (input, output) = (arg(2, "clink-example"), arg(3, "clink-example-upper"));
    let count = arg(4, "10").parse()?;
    let total = run(
        &brokers,
        &input,
        &output,
        "clink-example-group",
        count,
        &mut std::io::stdout(),
    )
    .await?;
    eprintln!("copied {total} records");
    Ok(())
}
