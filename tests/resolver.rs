//! In-doubt resolution against the real broker, under transaction.version 2
//! (main broker) and 1 (tv1 broker), across real processes: a child
//! (`clink-kafka txn open-and-hang`) opens a transaction, produces, flushes,
//! prints its resume handle and is SIGKILLed before EndTxn; another process
//! (`clink-kafka txn resolve`) finishes it. Plus expiry, an outage, SASL
//! (SCRAM-SHA-256/512), refusals before any byte is sent, fencing, and an
//! orphan left by the Java client.
//!
//! Broker answers pinned here (Kafka 4.4.0):
//! - a repeated commit after a landed commit: EndTxn answers NONE on both
//!   paths (TV1 v4: same epoch in CompleteCommit; TV2 v5: the handle's epoch
//!   is the stored one minus one, a retry), so the verdict is
//!   `Committed(Acknowledged)`;
//! - an abort after a landed commit: TV2 answers INVALID_TXN_STATE and TV1
//!   answers INVALID_TXN_STATE; DescribeTransactions shows CompleteCommit,
//!   so the verdict is `Committed(Described)`;
//! - a commit after the coordinator expired the transaction (it aborts and
//!   bumps the epoch once): TV2 v5 answers INVALID_TXN_STATE (CompleteAbort,
//!   the handle's epoch is a "retry" one below the stored), TV1 answers
//!   PRODUCER_FENCED; DescribeTransactions shows CompleteAbort one epoch up,
//!   past the timeout: `NotCommitted(TimedOut)`;
//! - a commit after a successor's InitProducerId: PRODUCER_FENCED on both,
//!   Empty two epochs up: `NotCommitted(Fenced)`;
//! - an unknown transactional id: INVALID_PRODUCER_ID_MAPPING, then
//!   TRANSACTIONAL_ID_NOT_FOUND: `NotCommitted(UnknownId)`.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Admin, ClientConfig, Cluster, CommitProof, Decision, NewTopic, NotCommittedReason, ProducerConfig, Resolver,
    ResumeHandle, TransactionState, TransactionVersion, TransactionalProducer, TxnConfig, Verdict,
};
use clink_kafka::wire::KafkaCode;

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const ORPHAN_RECORDS: usize = 10_000;

async fn topic(cluster: &Cluster, prefix: &str) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, 1, 1)).await;
    topic
}

/// A child process holding an open transaction.
struct Orphan {
    child: Child,
    handle: ResumeHandle,
}

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `txn open-and-hang`, waits (bounded) for its handle line.
fn open_orphan(brokers: &str, topic: &str, txn_id: &str, count: usize, timeout_ms: u64) -> Orphan {
    let mut child = Command::new(BIN)
        .args(["txn", "open-and-hang", "--brokers", brokers, "--topic", topic])
        .args(["--transactional-id", txn_id, "--count", &count.to_string()])
        .args([
            "--transaction-timeout-ms",
            &timeout_ms.to_string(),
            "--hang-secs",
            "600",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting clink-kafka txn open-and-hang");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            let status = child.wait();
            panic!("open-and-hang printed no handle within 120 s (status {status:?})");
        }
    };
    let handle: ResumeHandle = line.parse().unwrap_or_else(|e| panic!("handle line {line:?}: {e}"));
    assert_eq!(handle.transactional_id, txn_id);
    Orphan { child, handle }
}

/// SIGKILLs the orphan's process (no EndTxn is ever sent) and returns its handle.
fn kill(mut orphan: Orphan) -> ResumeHandle {
    orphan.child.kill().expect("SIGKILL");
    let status = orphan.child.wait().expect("wait");
    assert!(!status.success(), "the child was killed, not finished: {status}");
    orphan.handle.clone()
}

/// Runs `txn resolve` in its own process: (exit code, stdout).
fn cli_resolve(brokers: &str, handle: &ResumeHandle, decision: &str, env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "txn",
        "resolve",
        "--brokers",
        brokers,
        "--handle",
        &handle.to_string(),
        decision,
    ])
    .args(["--unreachable-after-ms", "10000"])
    .env_remove("CLINK_KAFKA_RESUME_SASL_MECHANISM")
    .env_remove("CLINK_KAFKA_RESUME_SASL_USERNAME")
    .env_remove("CLINK_KAFKA_RESUME_SASL_PASSWORD")
    .env_remove("CLINK_KAFKA_RESUME_TLS_CA")
    .env_remove("CLINK_KAFKA_RESUME_TLS_CERT")
    .env_remove("CLINK_KAFKA_RESUME_TLS_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_bounded(&mut cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().expect("exit code");
    eprintln!("txn resolve {decision} -> {code}: {}{}", stdout.trim(), stderr.trim());
    (code, format!("{stdout}{stderr}"))
}

fn run_bounded(cmd: &mut Command, bound: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} did not finish within {bound:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn orphan_values() -> BTreeSet<String> {
    (0..ORPHAN_RECORDS).map(|i| format!("v{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_producers_transaction_is_committed_by_another_process() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-commit").await;
        let txn_id = common::unique_topic("orphan-commit");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, ORPHAN_RECORDS, 120_000));
        assert_eq!(handle.transaction_version, version, "{brokers}");

        // Nothing is visible while the orphan is open.
        let before = common::read_committed_until(&cluster, &topic, 1, 0, false).await;
        assert!(
            before.is_empty(),
            "{brokers}: {} records visible before the commit",
            before.len()
        );

        let (code, out) = cli_resolve(&brokers, &handle, "--commit", &[]);
        assert_eq!(code, 0, "{brokers}: {out}");
        assert!(out.contains("committed (EndTxn acknowledged)"), "{out}");

        let got = common::read_committed_values(&cluster, &topic, 1, ORPHAN_RECORDS).await;
        assert_eq!(got.len(), ORPHAN_RECORDS, "{brokers}: every record exactly once");
        assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), orphan_values());
        // In order, too (one partition).
        assert_eq!(got.first().map(String::as_str), Some("v0"));
        assert_eq!(got.last().map(String::as_str), Some("v9999"));
        if let Some(java) = common::java_read_committed(&brokers, &topic, ORPHAN_RECORDS + 1, 10_000) {
            assert_eq!(java.len(), ORPHAN_RECORDS, "{brokers}: Java read_committed");
        }

        // A repeated commit after the landed one: the broker answers NONE on
        // both paths (pinned), so it is Committed(Acknowledged) again.
        let resolver = Resolver::new(common::config(&brokers));
        let again = resolver.resolve(&handle, Decision::Commit).await;
        assert_eq!(
            again,
            Verdict::Committed {
                proof: CommitProof::Acknowledged
            },
            "{brokers} ({version:?}): repeated commit"
        );
        // Aborting what committed is refused by the broker; the description
        // proves the commit.
        let abort = resolver.resolve(&handle, Decision::Abort).await;
        match &abort {
            Verdict::Committed {
                proof: CommitProof::Described { answer, state },
            } => {
                assert_eq!(*answer, KafkaCode::INVALID_TXN_STATE, "{brokers} ({version:?})");
                assert_eq!(*state, TransactionState::CompleteCommit);
            }
            other => panic!("{brokers} ({version:?}): abort after commit gave {other}"),
        }
        let got = common::read_committed_values(&cluster, &topic, 1, ORPHAN_RECORDS).await;
        assert_eq!(got.len(), ORPHAN_RECORDS, "{brokers}: still exactly once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_producers_transaction_is_aborted_by_another_process() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-abort").await;
        let txn_id = common::unique_topic("orphan-abort");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, ORPHAN_RECORDS, 120_000));
        let (code, out) = cli_resolve(&brokers, &handle, "--abort", &[]);
        assert_eq!(code, 12, "{brokers}: {out}");
        assert!(out.contains("not committed: aborted"), "{out}");
        let described = Admin::new(cluster.clone())
            .describe_transactions(&[&txn_id])
            .await
            .unwrap();
        let d = described[0].1.as_ref().unwrap();
        assert!(
            matches!(
                d.state,
                TransactionState::CompleteAbort | TransactionState::PrepareAbort
            ),
            "{brokers}: {d:?}"
        );
        // Committing it afterwards is refused and judged aborted (not committed).
        let resolver = Resolver::new(common::config(&brokers));
        let commit = resolver.resolve(&handle, Decision::Commit).await;
        assert!(
            matches!(
                commit,
                Verdict::NotCommitted {
                    reason: NotCommittedReason::Aborted,
                    ..
                }
            ),
            "{brokers} ({version:?}): commit after abort: {commit}"
        );
        let got = common::read_committed_values(&cluster, &topic, 1, 0).await;
        assert!(got.is_empty(), "{brokers}: {} aborted records visible", got.len());
        if let Some(java) = common::java_read_committed(&brokers, &topic, 1, 5_000) {
            assert!(java.is_empty(), "{brokers}: Java sees {} aborted records", java.len());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_transaction_is_not_committed_and_stays_invisible() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-expired").await;
        let txn_id = common::unique_topic("orphan-expired");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, 100, 3_000));
        // Wait (bounded) until the coordinator has aborted it: its cleanup
        // runs every transaction.abort.timed.out.transaction.cleanup.interval.ms.
        let admin = Admin::new(cluster.clone());
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let described = admin.describe_transactions(&[&txn_id]).await.unwrap();
            let d = described[0].1.as_ref().unwrap();
            if d.state == TransactionState::CompleteAbort {
                eprintln!("{brokers}: expired: {d:?} (handle epoch {})", handle.producer_epoch);
                break;
            }
            assert!(Instant::now() < deadline, "{brokers}: not expired within 90 s: {d:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (code, out) = cli_resolve(&brokers, &handle, "--commit", &[]);
        assert_eq!(code, 11, "{brokers} ({version:?}): {out}");
        assert!(out.contains("timed-out"), "{out}");
        let got = common::read_committed_values(&cluster, &topic, 1, 0).await;
        assert!(got.is_empty(), "{brokers}: {} expired records visible", got.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_orphan_is_not_committed() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-fenced").await;
        let txn_id = common::unique_topic("orphan-fenced");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, 100, 120_000));
        // A successor initializes the same id: the orphan is aborted and fenced.
        let successor =
            TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(&txn_id))
                .await
                .expect("successor init");
        assert!(successor.identity().producer_epoch > handle.producer_epoch);
        let (code, out) = cli_resolve(&brokers, &handle, "--commit", &[]);
        assert_eq!(code, 10, "{brokers} ({version:?}): {out}");
        let got = common::read_committed_values(&cluster, &topic, 1, 0).await;
        assert!(got.is_empty(), "{brokers}: fenced records visible");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_without_identity_or_with_unknown_ids_are_refused() {
    let Some(brokers) = common::brokers() else { return };
    let unknown = ResumeHandle {
        transactional_id: common::unique_topic("never-used"),
        producer_id: 1,
        producer_epoch: 0,
        transaction_version: TransactionVersion::V2,
    };
    let (code, out) = cli_resolve(&brokers, &unknown, "--commit", &[]);
    assert_eq!(code, 13, "{out}");
    let out = run_bounded(
        Command::new(BIN).args([
            "txn",
            "resolve",
            "--brokers",
            &brokers,
            "--transactional-id",
            "x",
            "--producer-id",
            "-1",
            "--epoch",
            "-1",
            "--commit",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(16), "{}", String::from_utf8_lossy(&out.stdout));
    // A transaction.version 2 handle against the transaction.version 1 broker.
    if let Some(tv1) = common::tv1_brokers() {
        let (code, out) = cli_resolve(&tv1, &unknown, "--commit", &[]);
        assert_eq!(code, 14, "{out}");
        assert!(out.contains("unsupported-broker"), "{out}");
    }
}

/// A TCP proxy to `target` on a fixed local port, which can be stopped and
/// started again.
struct Proxy {
    port: u16,
    target: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    fn new(target: &str) -> Self {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        Proxy {
            port,
            target: target.to_owned(),
            task: None,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn start(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr()).await.expect("proxy bind");
        let target = self.target.clone();
        self.task = Some(tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    break;
                };
                let target = target.clone();
                conns.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_unreachable_then_committed_once_the_broker_is_back() {
    for (brokers, _) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-outage").await;
        let txn_id = common::unique_topic("orphan-outage");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, 500, 120_000));

        // The resolver bootstraps through the proxy; with the proxy down the
        // broker is unreachable.
        let mut proxy = Proxy::new(&brokers);
        let mut config = ClientConfig::new(&proxy.addr());
        config.connect_timeout = Duration::from_secs(2);
        config.request_timeout = Duration::from_secs(10);
        let resolver = Resolver::new(config).with_unreachable_after(Duration::from_secs(3));
        let verdict = resolver.resolve(&handle, Decision::Commit).await;
        assert!(matches!(verdict, Verdict::Unreachable { .. }), "{brokers}: {verdict}");
        let still = Admin::new(cluster.clone())
            .describe_transactions(&[&txn_id])
            .await
            .unwrap();
        assert_eq!(
            still[0].1.as_ref().unwrap().state,
            TransactionState::Ongoing,
            "nothing was decided"
        );

        // Down at first, back while the resolver retries in place.
        let resolver = resolver.with_unreachable_after(Duration::from_secs(60));
        let resolving = tokio::spawn({
            let handle = handle.clone();
            async move { resolver.resolve(&handle, Decision::Commit).await }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.start().await;
        let verdict = tokio::time::timeout(Duration::from_secs(90), resolving)
            .await
            .expect("resolve finished")
            .unwrap();
        assert!(verdict.is_committed(), "{brokers}: {verdict}");
        let got = common::read_committed_values(&cluster, &topic, 1, 500).await;
        assert_eq!(got.len(), 500, "{brokers}");
        proxy.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolution_over_scram_sha_256_and_512() {
    let Some(sasl) = common::sasl() else { return };
    let mut targets = vec![(common::brokers(), sasl.brokers.clone())];
    if let (Some(tv1), Ok(tv1_sasl)) = (common::tv1_brokers(), std::env::var("CLINK_KAFKA_TV1_SASL_BROKERS")) {
        targets.push((Some(tv1), tv1_sasl));
    }
    for (plain, sasl_brokers) in targets {
        let plain = plain.expect("plaintext listener of the same broker");
        let cluster = common::cluster(common::config(&plain)).await;
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let topic = topic(&cluster, "resolve-scram").await;
            let txn_id = common::unique_topic("orphan-scram");
            let handle = kill(open_orphan(&plain, &topic, &txn_id, 200, 120_000));
            let env = |password: &'static str| {
                vec![
                    ("CLINK_KAFKA_RESUME_SASL_MECHANISM", mechanism),
                    ("CLINK_KAFKA_RESUME_SASL_USERNAME", "alice"),
                    ("CLINK_KAFKA_RESUME_SASL_PASSWORD", password),
                ]
            };
            assert_eq!(sasl.username, "alice");
            // A wrong password is refused by the broker: not committed, and
            // the transaction is untouched.
            let (code, out) = cli_resolve(&sasl_brokers, &handle, "--commit", &env("wrong-password"));
            assert_eq!(code, 15, "{mechanism}: {out}");
            assert!(!out.contains("wrong-password"), "the password leaked: {out}");
            // Without credentials the SASL listener drops us: unreachable, never "not committed".
            let (code, out) = cli_resolve(&sasl_brokers, &handle, "--commit", &[]);
            // Pinned: the SASL listener closes a client that sends Metadata
            // unauthenticated, so this is a transport failure (20).
            assert_eq!(code, 20, "{mechanism} without credentials: {out}");
            let password: &'static str = Box::leak(sasl.password.clone().into_boxed_str());
            let (code, out) = cli_resolve(&sasl_brokers, &handle, "--commit", &env(password));
            assert_eq!(code, 0, "{mechanism}: {out}");
            assert!(!out.contains(password), "the password leaked: {out}");
            let got = common::read_committed_values(&cluster, &topic, 1, 200).await;
            assert_eq!(got.len(), 200, "{mechanism} on {sasl_brokers}");
        }
    }
}

/// A plaintext listener standing ready at the resolver's address: counts
/// connections and keeps the first bytes each one sent.
fn plaintext_catcher() -> (String, std::sync::Arc<Mutex<Vec<Vec<u8>>>>) {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 16];
            let n = conn.read(&mut buf).unwrap_or(0);
            s.lock().unwrap().push(buf[..n].to_vec());
        }
    });
    (addr, seen)
}

#[test]
fn refusals_happen_before_any_connection_and_tls_never_falls_back() {
    let handle = ResumeHandle {
        transactional_id: "t".into(),
        producer_id: 1,
        producer_epoch: 0,
        transaction_version: TransactionVersion::V2,
    };
    let (addr, seen) = plaintext_catcher();
    // An unknown mechanism.
    let (code, out) = cli_resolve(
        &addr,
        &handle,
        "--commit",
        &[
            ("CLINK_KAFKA_RESUME_SASL_MECHANISM", "GSSAPI"),
            ("CLINK_KAFKA_RESUME_SASL_USERNAME", "alice"),
            ("CLINK_KAFKA_RESUME_SASL_PASSWORD", "alice-secret"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("CLINK_KAFKA_RESUME_SASL_MECHANISM") && out.contains("SCRAM-SHA-256"),
        "{out}"
    );
    assert!(!out.contains("alice-secret"), "{out}");
    // An unusable CA: missing, and not a certificate.
    let junk = std::env::temp_dir().join(format!("clink-junk-ca-{}.pem", std::process::id()));
    std::fs::write(&junk, "not a certificate\n").unwrap();
    for ca in ["/nonexistent/ca.pem", junk.to_str().unwrap()] {
        let (code, out) = cli_resolve(&addr, &handle, "--commit", &[("CLINK_KAFKA_RESUME_TLS_CA", ca)]);
        assert_eq!(code, 1, "{ca}: {out}");
        assert!(out.contains("CLINK_KAFKA_RESUME_TLS_CA"), "{ca}: {out}");
    }
    let _ = std::fs::remove_file(&junk);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        seen.lock().unwrap().is_empty(),
        "a connection was made: {:?}",
        seen.lock().unwrap()
    );

    // A usable CA, and a plaintext listener at the address: the resolver
    // speaks TLS to it (a handshake record), never a plaintext Kafka request,
    // and reports the failure as transport (unreachable), not a verdict.
    let Some(ca) = common::required_env("CLINK_KAFKA_TLS_CA") else {
        return;
    };
    let mut cmd = Command::new(BIN);
    cmd.args([
        "txn",
        "resolve",
        "--brokers",
        &addr,
        "--handle",
        &handle.to_string(),
        "--commit",
    ])
    .args(["--unreachable-after-ms", "2000"])
    .env("CLINK_KAFKA_RESUME_TLS_CA", &ca)
    .env_remove("CLINK_KAFKA_RESUME_SASL_MECHANISM");
    let out = run_bounded(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(20), "{}", String::from_utf8_lossy(&out.stdout));
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the resolver never dialled");
    for first in seen.iter() {
        // 0x16 0x03: a TLS handshake record. A Kafka request would start
        // with a 4-byte size then the ApiVersions key (0x00 0x12).
        assert_eq!(&first[..2], &[0x16, 0x03], "not a TLS ClientHello: {first:02x?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolution_over_mtls_and_sasl_ssl() {
    let (Some(brokers), Some(tls), Some(sasl)) = (common::brokers(), common::tls(), common::sasl()) else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    let ca = tls.ca.to_str().unwrap().to_owned();
    let cert = tls.cert.to_str().unwrap().to_owned();
    let key = tls.key.to_str().unwrap().to_owned();
    let password = sasl.password.clone();
    type Case<'a> = (&'a str, String, Vec<(&'a str, String)>);
    let cases: Vec<Case> = vec![
        (
            "mTLS",
            tls.mtls_brokers.clone(),
            vec![
                ("CLINK_KAFKA_RESUME_TLS_CA", ca.clone()),
                ("CLINK_KAFKA_RESUME_TLS_CERT", cert),
                ("CLINK_KAFKA_RESUME_TLS_KEY", key),
            ],
        ),
        (
            "SASL_SSL SCRAM-SHA-512",
            tls.sasl_ssl_brokers.clone(),
            vec![
                ("CLINK_KAFKA_RESUME_TLS_CA", ca.clone()),
                ("CLINK_KAFKA_RESUME_SASL_MECHANISM", "SCRAM-SHA-512".into()),
                ("CLINK_KAFKA_RESUME_SASL_USERNAME", sasl.username.clone()),
                ("CLINK_KAFKA_RESUME_SASL_PASSWORD", password.clone()),
            ],
        ),
        (
            "SASL_SSL PLAIN",
            tls.sasl_ssl_brokers.clone(),
            vec![
                ("CLINK_KAFKA_RESUME_TLS_CA", ca.clone()),
                ("CLINK_KAFKA_RESUME_SASL_MECHANISM", "PLAIN".into()),
                ("CLINK_KAFKA_RESUME_SASL_USERNAME", sasl.username.clone()),
                ("CLINK_KAFKA_RESUME_SASL_PASSWORD", password.clone()),
            ],
        ),
    ];
    for (what, listener, env) in cases {
        let topic = topic(&cluster, "resolve-tls").await;
        let txn_id = common::unique_topic("orphan-tls");
        let handle = kill(open_orphan(&brokers, &topic, &txn_id, 200, 120_000));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if what == "mTLS" {
            // A broker whose certificate our CA did not sign is refused (authentication).
            let other = [("CLINK_KAFKA_RESUME_TLS_CA", tls.other_ca.to_str().unwrap())];
            let (code, out) = cli_resolve(&listener, &handle, "--commit", &other);
            assert_eq!(code, 15, "{what} with an unrelated CA: {out}");
            // Without the client certificate the mTLS listener refuses the handshake.
            let (code, out) = cli_resolve(&listener, &handle, "--commit", &env[..1]);
            assert_eq!(code, 15, "{what} without a client certificate: {out}");
            assert!(out.contains("authentication-refused"), "{out}");
        }
        let (code, out) = cli_resolve(&listener, &handle, "--commit", &env);
        assert_eq!(code, 0, "{what}: {out}");
        assert!(!out.contains(&password), "the password leaked: {out}");
        let got = common::read_committed_values(&cluster, &topic, 1, 200).await;
        assert_eq!(got.len(), 200, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_clients_orphan_is_described_and_committed() {
    let Some(classpath) = common::java_clients_classpath() else {
        return;
    };
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "resolve-java").await;
        let txn_id = common::unique_topic("java-orphan");
        let source = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/java/TxnProducer.java");
        let out = run_bounded(
            Command::new("java")
                .arg("-cp")
                .arg(&classpath)
                .arg("-Dlog4j2.level=WARN")
                .arg(source)
                .args([&brokers, &topic, "open-and-halt", &txn_id, "300"]),
            Duration::from_secs(180),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.lines().any(|l| l.trim() == "OPEN"),
            "TxnProducer.java open-and-halt: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let admin = Admin::new(cluster.clone());
        let (handle, described) = clink_kafka::client::handle_from_description(&admin, &txn_id)
            .await
            .expect("describe the Java orphan");
        assert_eq!(described.state, TransactionState::Ongoing, "{brokers}");
        assert_eq!(handle.transaction_version, version);
        assert_eq!(described.partitions.get(&topic), Some(&vec![0]));
        let (code, out) = cli_resolve(&brokers, &handle, "--commit", &[]);
        assert_eq!(code, 0, "{brokers}: {out}");
        let got = common::read_committed_values(&cluster, &topic, 1, 300).await;
        let want: BTreeSet<String> = (0..300).map(|i| format!("f{i}")).collect();
        assert_eq!(got.len(), 300, "{brokers}");
        assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
    }
}
