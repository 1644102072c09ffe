//! `clink-kafka txn`: list and describe transactions, resolve an in-doubt
//! one from its producer identity, and (for tests) leave one open.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use clink_kafka::client::{
    Admin, Cluster, Decision, ListTransactionsFilter, NotCommittedReason, ProducerConfig, ProducerRecord, Resolver,
    ResumeHandle, TransactionState, TransactionVersion, TransactionalProducer, TxnConfig, Verdict,
};

use super::{ConnectArgs, DEFAULT_BROKERS};

/// Options of `txn`.
#[derive(Args, Debug)]
pub struct TxnArgs {
    #[command(subcommand)]
    pub command: TxnCommand,
}

/// The `txn` subcommands.
#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// List transactions at every broker (ListTransactions).
    List(ListArgs),
    /// Describe transactional ids at their coordinators (DescribeTransactions).
    Describe(DescribeArgs),
    /// Finish an in-doubt transaction with its producer identity
    /// (FindCoordinator + EndTxn; never InitProducerId) and print the verdict.
    ///
    /// Credentials come from the environment only:
    /// CLINK_KAFKA_RESUME_SASL_MECHANISM (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
    /// CLINK_KAFKA_RESUME_SASL_USERNAME, CLINK_KAFKA_RESUME_SASL_PASSWORD;
    /// CLINK_KAFKA_RESUME_TLS_CA (TLS, verified against this CA), plus
    /// CLINK_KAFKA_RESUME_TLS_CERT and _KEY for mTLS. With a CA set every
    /// connection is TLS; an unusable file is refused before connecting.
    ///
    /// Exit codes, one per verdict: see the list below (and `clink-kafka --help`).
    #[command(verbatim_doc_comment, after_help = super::exit::help())]
    Resolve(ResolveArgs),
    /// Test helper: open a transaction, produce --count records, flush, print
    /// the resume handle as one line, then sleep (to be killed) without
    /// committing.
    #[command(hide = true)]
    OpenAndHang(OpenAndHangArgs),
}

/// Options of `txn list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Only this state (repeatable): Ongoing, PrepareCommit, CompleteCommit, ...
    #[arg(long = "state")]
    pub states: Vec<String>,
    /// Only this producer id (repeatable).
    #[arg(long = "producer-id")]
    pub producer_ids: Vec<i64>,
    /// Only transactions open longer than this many milliseconds.
    #[arg(long)]
    pub min_duration_ms: Option<u64>,
    /// Only transactional ids matching this regular expression.
    #[arg(long)]
    pub pattern: Option<String>,
}

/// Options of `txn describe`.
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Transactional ids.
    #[arg(required = true)]
    pub transactional_ids: Vec<String>,
    /// Print each as a resume handle line instead.
    #[arg(long)]
    pub handle: bool,
}

/// Options of `txn resolve`.
#[derive(Args, Debug)]
pub struct ResolveArgs {
    /// Bootstrap brokers, comma-separated host:port.
    #[arg(long, env = "CLINK_KAFKA_BROKERS", default_value = DEFAULT_BROKERS)]
    pub brokers: String,
    /// A resume handle line (as `txn open-and-hang` or a sink prints it),
    /// instead of the four identity options.
    #[arg(long, conflicts_with_all = ["transactional_id", "producer_id", "epoch", "transaction_version"])]
    pub handle: Option<String>,
    #[arg(long, required_unless_present = "handle")]
    pub transactional_id: Option<String>,
    #[arg(long, required_unless_present = "handle", allow_negative_numbers = true)]
    pub producer_id: Option<i64>,
    #[arg(long, required_unless_present = "handle", allow_negative_numbers = true)]
    pub epoch: Option<i16>,
    /// 1 (EndTxn v≤4) or 2 (KIP-890, EndTxn v5).
    #[arg(long, default_value = "2")]
    pub transaction_version: Option<String>,
    /// Commit the transaction.
    #[arg(long, conflicts_with = "abort", required_unless_present = "abort")]
    pub commit: bool,
    /// Abort the transaction.
    #[arg(long)]
    pub abort: bool,
    /// How long transport failures are retried before "unreachable".
    #[arg(long, default_value_t = 30_000)]
    pub unreachable_after_ms: u64,
}

/// Options of `txn open-and-hang`.
#[derive(Args, Debug)]
pub struct OpenAndHangArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[arg(long)]
    pub transactional_id: String,
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 10_000)]
    pub count: u64,
    /// Values are this prefix and the record's index.
    #[arg(long, default_value = "v")]
    pub value_prefix: String,
    #[arg(long, default_value_t = 60_000)]
    pub transaction_timeout_ms: u64,
    /// Commit this many whole transactions (of --count records each) before
    /// the one left open.
    #[arg(long, default_value_t = 0)]
    pub committed_before: u64,
    /// Upper bound on the sleep after printing the handle.
    #[arg(long, default_value_t = 3600)]
    pub hang_secs: u64,
}

/// Runs `txn`; the exit code.
pub async fn run(args: TxnArgs) -> anyhow::Result<u8> {
    match args.command {
        TxnCommand::List(a) => list(a).await.map(|()| 0),
        TxnCommand::Describe(a) => describe(a).await.map(|()| 0),
        TxnCommand::Resolve(a) => resolve(a).await,
        TxnCommand::OpenAndHang(a) => open_and_hang(a).await.map(|()| 0),
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let cluster = Cluster::connect(args.connect.client_config()?)
        .await
        .context("connecting to the cluster")?;
    let filter = ListTransactionsFilter {
        states: args.states.iter().map(|s| TransactionState::from_name(s)).collect(),
        producer_ids: args.producer_ids,
        min_duration: args.min_duration_ms.map(Duration::from_millis),
        transactional_id_pattern: args.pattern,
    };
    let rows = Admin::new(cluster).list_transactions(&filter).await?;
    println!("{:<50} {:>12} STATE", "TRANSACTIONAL ID", "PRODUCER ID");
    for r in rows {
        println!("{:<50} {:>12} {}", r.transactional_id, r.producer_id, r.state);
    }
    Ok(())
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let cluster = Cluster::connect(args.connect.client_config()?)
        .await
        .context("connecting to the cluster")?;
    let version = clink_kafka::client::transaction_version(&cluster).await?;
    let admin = Admin::new(cluster);
    let ids: Vec<&str> = args.transactional_ids.iter().map(String::as_str).collect();
    let mut failed = false;
    for (id, answer) in admin.describe_transactions(&ids).await? {
        match answer {
            Ok(d) if args.handle => println!(
                "{}",
                ResumeHandle {
                    transactional_id: id,
                    producer_id: d.producer_id,
                    producer_epoch: d.producer_epoch,
                    transaction_version: version,
                }
            ),
            Ok(d) => {
                let partitions: Vec<String> = d
                    .partitions
                    .iter()
                    .flat_map(|(t, ps)| ps.iter().map(move |p| format!("{t}[{p}]")))
                    .collect();
                println!(
                    "{id}: state={} producer_id={} epoch={} timeout_ms={} start_time_ms={} partitions=[{}]",
                    d.state,
                    d.producer_id,
                    d.producer_epoch,
                    d.transaction_timeout.as_millis(),
                    d.start_time_ms.map_or("-".into(), |t| t.to_string()),
                    partitions.join(",")
                );
            }
            Err(e) => {
                failed = true;
                println!("{id}: error: {e}");
            }
        }
    }
    if failed {
        anyhow::bail!("some transactional ids could not be described");
    }
    Ok(())
}

/// The exit code of a verdict (documented in `txn resolve --help`).
pub fn exit_code(verdict: &Verdict) -> u8 {
    use super::exit;
    match verdict {
        Verdict::Committed { .. } => exit::OK,
        Verdict::NotCommitted { reason, .. } => match reason {
            NotCommittedReason::Fenced => exit::RESOLVE_FENCED,
            NotCommittedReason::TimedOut => exit::RESOLVE_TIMED_OUT,
            NotCommittedReason::Aborted => exit::RESOLVE_ABORTED,
            NotCommittedReason::UnknownId => exit::RESOLVE_UNKNOWN_ID,
            NotCommittedReason::UnsupportedBroker => exit::RESOLVE_UNSUPPORTED_BROKER,
            NotCommittedReason::AuthenticationRefused => exit::RESOLVE_AUTHENTICATION_REFUSED,
            NotCommittedReason::NoIdentity => exit::RESOLVE_NO_IDENTITY,
            NotCommittedReason::Refused(_) => exit::RESOLVE_REFUSED,
        },
        Verdict::Unreachable { .. } => exit::RESOLVE_UNREACHABLE,
    }
}

async fn resolve(args: ResolveArgs) -> anyhow::Result<u8> {
    let handle = match &args.handle {
        Some(line) => line.parse::<ResumeHandle>().context("--handle")?,
        None => ResumeHandle {
            transactional_id: args.transactional_id.clone().context("--transactional-id")?,
            producer_id: args.producer_id.context("--producer-id")?,
            producer_epoch: args.epoch.context("--epoch")?,
            transaction_version: args
                .transaction_version
                .as_deref()
                .unwrap_or("2")
                .parse::<TransactionVersion>()
                .context("--transaction-version")?,
        },
    };
    let decision = if args.abort { Decision::Abort } else { Decision::Commit };
    let resolver = Resolver::from_env(&args.brokers)
        .context("reading the resolver's credentials from the environment")?
        .with_unreachable_after(Duration::from_millis(args.unreachable_after_ms));
    let verdict = resolver.resolve(&handle, decision).await;
    println!("verdict: {verdict}");
    Ok(exit_code(&verdict))
}

async fn open_and_hang(args: OpenAndHangArgs) -> anyhow::Result<()> {
    let cluster = Cluster::connect(args.connect.client_config()?)
        .await
        .context("connecting to the cluster")?;
    let txn = TxnConfig::new(&args.transactional_id)
        .with_transaction_timeout(Duration::from_millis(args.transaction_timeout_ms));
    let mut producer = TransactionalProducer::init(cluster, ProducerConfig::default(), txn).await?;
    let mut index = 0u64;
    for _ in 0..args.committed_before {
        let txn = producer.begin().await?;
        for _ in 0..args.count {
            txn.send(ProducerRecord::new(
                &args.topic,
                format!("{}{index}", args.value_prefix),
            ))
            .await?;
            index += 1;
        }
        txn.commit().await?;
    }
    let txn = producer.begin().await?;
    let mut deliveries = Vec::with_capacity(args.count as usize);
    for _ in 0..args.count {
        deliveries.push(
            txn.send(ProducerRecord::new(
                &args.topic,
                format!("{}{index}", args.value_prefix),
            ))
            .await?,
        );
        index += 1;
    }
    txn.flush(Duration::from_secs(60)).await?;
    for d in deliveries {
        d.await?;
    }
    println!("{}", txn.identity());
    use std::io::Write;
    std::io::stdout().flush()?;
    tokio::time::sleep(Duration::from_secs(args.hang_secs)).await;
    // Reaching here means nobody killed us: leave the transaction open anyway.
    std::process::exit(3);
}
