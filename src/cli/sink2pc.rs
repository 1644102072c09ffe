//! `clink-kafka sink2pc-barrier-and-hang` (hidden, a test helper): runs a
//! `kafka_2pc_sink_string` sink, writes `--count` records, takes the barrier
//! for `--checkpoint`, prints each staged state row as
//! `state-row<TAB>key<TAB>value` and then `barrier-done`, and sleeps until
//! killed — so a test can SIGKILL it between barrier and commit and restore
//! a new sink from the printed rows.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use clink_kafka::connector::{install, BuildContext, Registry, Text};

/// Options of `sink2pc-barrier-and-hang`.
#[derive(Args, Debug)]
pub struct Sink2pcArgs {
    /// A factory parameter, `key=value` (repeat: brokers, topic, transactional_id, …).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Records written before the barrier.
    #[arg(long, default_value_t = 100)]
    pub count: u64,
    /// Values are this prefix and the record's index.
    #[arg(long, default_value = "v")]
    pub value_prefix: String,
    /// The barrier's checkpoint id.
    #[arg(long, default_value_t = 1)]
    pub checkpoint: u64,
    /// Upper bound on the sleep after the barrier.
    #[arg(long, default_value_t = 600)]
    pub hang_secs: u64,
}

pub async fn run(args: Sink2pcArgs) -> anyhow::Result<()> {
    let mut params = BTreeMap::new();
    for p in &args.params {
        let Some((k, v)) = p.split_once('=') else {
            bail!("--param {p:?} is not key=value");
        };
        params.insert(k.to_owned(), v.to_owned());
    }
    let mut registry = Registry::new();
    install(&mut registry)?;
    let mut sink = registry
        .build("kafka_2pc_sink_string", &BuildContext::new(params))?
        .into_text_sink("kafka_2pc_sink_string")?;
    sink.open().await.context("opening the sink")?;
    let batch: Vec<Text> = (0..args.count)
        .map(|i| Text::from(format!("{}{i}", args.value_prefix)))
        .collect();
    sink.on_data(batch).await?;
    let rows = sink.on_barrier(args.checkpoint).await?;
    let mut out = std::io::stdout().lock();
    for row in rows {
        writeln!(out, "state-row\t{}\t{}", row.key, String::from_utf8_lossy(&row.value))?;
    }
    writeln!(out, "barrier-done")?;
    out.flush()?;
    drop(out);
    tokio::time::sleep(Duration::from_secs(args.hang_secs)).await;
    // Nobody killed us: exit without committing or closing.
    std::process::exit(3);
}
