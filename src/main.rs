//! The `clink-kafka` command line: `produce`, `consume`, `roundtrip`, `copy`,
//! `txn`, `topics`, `groups` and `metadata` (an end-to-end check and measurement
//! against a real cluster). Argument parsing lives here; each command lives
//! in `src/cli/`, the exit codes in `src/cli/exit.rs`, the log setup in
//! `src/cli/logs.rs`.

use clap::{Parser, Subcommand};

mod cli;

/// A pure-Rust Kafka client.
///
/// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=clink_kafka=debug) for more.
/// They are coloured only on a terminal, never when NO_COLOR is set;
/// --log-format json writes one JSON object per line instead. Progress
/// (produce, consume, copy) is shown only when stderr is a terminal.
///
/// SASL example (the password comes from an environment variable, never the
/// command line):
///
///   clink-kafka consume --brokers 127.0.0.1:19093 --topic t --from-beginning
///     --sasl-mechanism SCRAM-SHA-512 --sasl-username alice
///     --sasl-password-env CLINK_KAFKA_SASL_PASSWORD
///
/// TLS with a client certificate (mTLS; --security-protocol ssl, or sasl_ssl
/// together with the --sasl-* options):
///
///   clink-kafka consume --brokers 127.0.0.1:19095 --topic t --from-beginning
///     --security-protocol ssl --tls-ca ca.pem --tls-cert client.pem
///     --tls-key client.key [--tls-key-password-env VAR]
#[derive(Parser, Debug)]
#[command(name = "clink-kafka", version, verbatim_doc_comment, after_help = cli::exit::help())]
struct Cli {
    /// Log format on stderr: text, or json (each log event and the final
    /// error as one object per line; a command's report stays text).
    #[arg(long, global = true, value_enum, default_value_t = cli::logs::LogFormat::Text)]
    log_format: cli::logs::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Produce records: generated ones (--count, --value-size) or one per stdin line.
    Produce(cli::produce::ProduceArgs),
    /// Consume records from a topic and print them.
    Consume(cli::consume::ConsumeArgs),
    /// Create a fresh topic, produce N records, consume them back
    /// (read_committed), verify each arrived exactly once in order, and
    /// report throughput and CPU time per record.
    Roundtrip(cli::roundtrip::RoundtripArgs),
    /// Copy a topic exactly once: a source, a two-phase-commit sink and a
    /// checkpoint coordinator with its state in --state-dir (restartable
    /// after any crash; see --help for the fault points). One process per
    /// job: a second copy on the same --state-dir waits for the first to
    /// exit (--lock-wait-ms), then gives up with exit code 4.
    Copy(cli::copy::CopyArgs),
    /// Transactions: list, describe, resolve an in-doubt one.
    Txn(cli::txn::TxnArgs),
    /// Topics: list, describe, create, delete.
    Topics(cli::topics::TopicsArgs),
    /// Consumer groups (like kafka-consumer-groups.sh): list, describe
    /// (members, offsets, lag), delete, reset-offsets.
    Groups(cli::groups::GroupsArgs),
    /// The cluster as Metadata shows it (like kcat -L): brokers, controller,
    /// topics, partitions with leader, replicas and in-sync replicas.
    Metadata(cli::topics::MetadataArgs),
    /// Test helper: a 2PC sink takes a barrier, prints its state rows, hangs.
    #[command(hide = true, name = "sink2pc-barrier-and-hang")]
    Sink2pc(cli::sink2pc::Sink2pcArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    cli::logs::init(log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            cli::logs::report_error(log_format, &anyhow::Error::new(e).context("starting the async runtime"));
            return std::process::ExitCode::from(cli::exit::ERROR);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Produce(args) => cli::produce::run(args).await.map(|()| cli::exit::OK),
            Command::Consume(args) => cli::consume::run(args).await.map(|()| cli::exit::OK),
            Command::Roundtrip(args) => cli::roundtrip::run(args).await.map(|()| cli::exit::OK),
            Command::Copy(args) => cli::copy::run(args).await,
            Command::Txn(args) => cli::txn::run(args).await,
            Command::Topics(args) => cli::topics::run(args).await.map(|()| cli::exit::OK),
            Command::Groups(args) => cli::groups::run(args).await.map(|()| cli::exit::OK),
            Command::Metadata(args) => cli::topics::metadata(args).await.map(|()| cli::exit::OK),
            Command::Sink2pc(args) => cli::sink2pc::run(args).await.map(|()| cli::exit::OK),
        }
    });
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            cli::logs::report_error(log_format, &e);
            std::process::ExitCode::from(cli::exit::ERROR)
        }
    }
}
