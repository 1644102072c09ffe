//! Resolve an in-doubt transaction from its resume handle: commit it (or
//! abort it) with the identity it ran under, from any process, and get a
//! verdict that says what happened (`Committed`, `NotCommitted` with a
//! reason, or `Unreachable`).
//!
//! ```text
//! cargo run --example resolve -- [BROKERS] [HANDLE]
//! ```
//!
//! `BROKERS` defaults to `$CLINK_KAFKA_BROKERS`, then `127.0.0.1:9092`.
//! Without `HANDLE` (the one-line form `clink-txn-handle/1 …` a 2PC sink
//! stages, or `clink-kafka txn open-and-hang` prints), it first makes an
//! orphan: a transaction with records whose producer goes away without
//! EndTxn.

use std::io::Write;
use std::time::Duration;

use clink_kafka::client::{
    ClientConfig, Cluster, Decision, ProducerConfig, ProducerRecord, Resolver, ResumeHandle, TransactionalProducer,
    TxnConfig,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Leaves a transaction with `records` records to `topic` open and returns
/// its handle (the producer is dropped without EndTxn).
pub async fn orphan(
    brokers: &str,
    topic: &str,
    transactional_id: &str,
    records: u32,
) -> Result<ResumeHandle, BoxError> {
    let cluster = Cluster::connect(ClientConfig::new(brokers)).await?;
    let mut producer =
        TransactionalProducer::init(cluster, ProducerConfig::default(), TxnConfig::new(transactional_id)).await?;
    let transaction = producer.begin().await?;
    for i in 0..records {
        transaction
            .send(ProducerRecord::new(topic, format!("in-doubt-{i}")))
            .await?;
    }
    transaction.flush(Duration::from_secs(30)).await?;
    let handle = transaction.identity();
    // No commit, no abort, no close: the process "dies" here.
    drop(transaction);
    drop(producer);
    Ok(handle)
}

/// Commits the transaction `handle` names; writes the handle and the
/// verdict to `out` and returns whether it is committed.
pub async fn run(brokers: &str, handle: &ResumeHandle, out: &mut dyn Write) -> Result<bool, BoxError> {
    // Credentials for a secured cluster come from CLINK_KAFKA_RESUME_*
    // (Resolver::from_env); a plaintext one needs none.
    let resolver = Resolver::new(ClientConfig::new(brokers));
    let verdict = resolver.resolve(handle, Decision::Commit).await;
    writeln!(out, "handle: {handle}")?;
    writeln!(out, "verdict: {verdict}")?;
    Ok(verdict.is_committed())
}

#[allow(dead_code)] // the tests include this file without calling main
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let brokers = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("CLINK_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let handle = match std::env::args().nth(2) {
        Some(line) => line.parse()?,
        None => orphan(&brokers, "clink-example-in-doubt", "clink-example-in-doubt", 3).await?,
    };
    let committed = run(&brokers, &handle, &mut std::io::stdout()).await?;
    std::process::exit(if committed { 0 } else { 1 });
}
