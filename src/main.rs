//! The `clink-kafka` command line: `produce`, `consume`, `roundtrip`, `copy` and `txn`
//! (an end-to-end check and measurement against a real cluster). Argument
//! parsing lives here; each command lives in `src/cli/`.

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod cli;

/// A pure-Rust Kafka client.
///
/// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=clink_kafka=debug) for more.
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
#[command(name = "clink-kafka", version, verbatim_doc_comment)]
struct Cli {
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
    /// after any crash; see --help for the fault points).
    Copy(cli::copy::CopyArgs),
    /// Transactions: list, describe, resolve an in-doubt one.
    Txn(cli::txn::TxnArgs),
    /// Test helper: a 2PC sink takes a barrier, prints its state rows, hangs.
    #[command(hide = true, name = "sink2pc-barrier-and-hang")]
    Sink2pc(cli::sink2pc::Sink2pcArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Produce(args) => cli::produce::run(args).await.map(|()| 0),
            Command::Consume(args) => cli::consume::run(args).await.map(|()| 0),
            Command::Roundtrip(args) => cli::roundtrip::run(args).await.map(|()| 0),
            Command::Copy(args) => cli::copy::run(args).await,
            Command::Txn(args) => cli::txn::run(args).await,
            Command::Sink2pc(args) => cli::sink2pc::run(args).await.map(|()| 0),
        }
    });
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
