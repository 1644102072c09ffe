//! Drive the two-phase-commit sink (`kafka_2pc_sink_string`) by hand, as an
//! engine would: records, a barrier that prepares checkpoint 1, its commit;
//! then checkpoint 2 prepared and the process "lost" before its commit, and
//! a new sink restored from checkpoint 2's state rows, whose `open`
//! resolves the prepared transaction (commits it over the wire) before
//! anything can fence it.
//!
//! ```text
//! cargo run --example twopc_sink -- [BROKERS] [TOPIC]
//! ```
//!
//! `BROKERS` defaults to `$CLINK_KAFKA_BROKERS`, then `127.0.0.1:9092`.
//! Commit receipts go to a fresh directory under the system temp dir.

use std::io::Write;
use std::path::Path;

use clink_kafka::connector::options::TwoPhaseCommitOptions;
use clink_kafka::connector::{Sink, Text, TwoPhaseCommitSink};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The walk-through above, with receipts in `receipt_dir`; writes one line
/// per step to `out`.
pub async fn run(
    brokers: &str,
    topic: &str,
    transactional_id: &str,
    receipt_dir: &Path,
    out: &mut dyn Write,
) -> Result<(), BoxError> {
    let mut options = TwoPhaseCommitOptions::new(brokers.to_owned(), topic.to_owned(), transactional_id);
    options.receipt_dir = Some(receipt_dir.to_path_buf());

    let mut sink = TwoPhaseCommitSink::new(options.clone())?;
    sink.open().await?;
    sink.on_data(vec![Text::from("one"), Text::from("two")]).await?;
    // Pre-commit: flush and seal the transaction PREPARED; the rows are
    // what the engine stores in checkpoint 1 (a resume handle, no secret).
    let rows = sink.on_barrier(1).await?;
    writeln!(out, "checkpoint 1 prepared: {} state rows", rows.len())?;
    // The engine made checkpoint 1 durable: commit (EndTxn, then a receipt).
    sink.on_commit(1).await?;
    writeln!(out, "checkpoint 1 committed")?;

    sink.on_data(vec![Text::from("three")]).await?;
    let rows = sink.on_barrier(2).await?;
    writeln!(out, "checkpoint 2 prepared: {} state rows", rows.len())?;
    // The process is lost here: no on_commit(2). Dropping the sink leaves
    // the prepared transaction pending at the coordinator.
    drop(sink);

    // Restart from checkpoint 2: restore its rows, then open. The prepared
    // transaction is owed a commit; open resolves it before the new
    // producer's init would fence (abort) it.
    let mut sink = TwoPhaseCommitSink::new(options)?;
    sink.restore(&rows)?;
    sink.open().await?;
    for v in sink.restore_verdicts() {
        writeln!(
            out,
            "checkpoint {} restored: {:?} ({} records)",
            v.checkpoint, v.verdict, v.records
        )?;
    }
    sink.close().await?;
    Ok(())
}

#[allow(dead_code)] // the tests include this file without calling main
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let brokers = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("CLINK_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = std::env::args().nth(2).unwrap_or_else(|| "clink-example-2pc".into());
    let receipts = std::env::temp_dir().join(format!("clink-example-receipts-{}", std::process::id()));
    std::fs::create_dir_all(&receipts)?;
    run(&brokers, &topic, "clink-example-2pc", &receipts, &mut std::io::stdout()).await
}
