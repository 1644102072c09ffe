//! `kafka_2pc_sink_string` against the real brokers, under
//! transaction.version 2 (main broker) and 1 (tv1 broker): a committed
//! checkpoint is visible to read_committed and an aborted one never is;
//! records after a barrier wait app-side while the commit is outstanding and
//! land in the next transaction; close aborts the open tail and leaves a
//! prepared transaction pending, which a restored sink commits; a SIGKILLed
//! process's prepared checkpoint is committed by the restored sink; an
//! expired one is an unresolved orphan (error, marker, invisible); an
//! unreachable broker fails `open`; receipts confirm a commit without the
//! broker; the SASL password never reaches state rows, receipts or logs.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clink_kafka::client::{Admin, Cluster, NewTopic, TransactionState, TransactionVersion};
use clink_kafka::connector::options::parse_two_phase_commit;
use clink_kafka::connector::selected::{self, SelectedTransactionalProducer};
use clink_kafka::connector::{
    install, BuildContext, ConnectorError, Registry, Sink, StagedCheckpoint, StateRow, Text, TwoPhaseCommitSink,
};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");

struct Fixture {
    brokers: String,
    version: TransactionVersion,
    cluster: Cluster,
    topic: String,
    txn_id: String,
    receipts: PathBuf,
}

impl Fixture {
    async fn new(brokers: &str, version: TransactionVersion, prefix: &str) -> Fixture {
        let cluster = common::cluster(common::config(brokers)).await;
        let topic = common::unique_topic(prefix);
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let receipts = std::env::temp_dir().join(format!("{topic}-receipts"));
        Fixture {
            brokers: brokers.to_owned(),
            version,
            cluster,
            txn_id: format!("{topic}-txn"),
            topic,
            receipts,
        }
    }

    fn params(&self, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut p: BTreeMap<String, String> = [
            ("brokers", self.brokers.as_str()),
            ("topic", self.topic.as_str()),
            ("transactional_id", self.txn_id.as_str()),
            ("receipt_dir", self.receipts.to_str().unwrap()),
            ("linger_ms", "1"),
            ("backend", common::connector::backend()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            p.insert(k.to_string(), v.to_string());
        }
        p
    }

    fn sink(&self, extra: &[(&str, &str)]) -> TwoPhaseCommitSink<SelectedTransactionalProducer> {
        let o = parse_two_phase_commit(&self.params(extra), 0, 1).expect("options");
        selected::two_phase_commit_sink(o).expect("sink")
    }

    async fn committed(&self, expected: usize) -> Vec<String> {
        common::read_committed_values(&self.cluster, &self.topic, 1, expected).await
    }

    /// What read_committed shows now, not waiting for open transactions.
    async fn visible_now(&self) -> Vec<String> {
        common::read_committed_until(&self.cluster, &self.topic, 1, 0, false).await
    }

    async fn state(&self) -> TransactionState {
        let admin = Admin::new(self.cluster.clone());
        let described = admin.describe_transactions(&[&self.txn_id]).await.expect("describe");
        described[0].1.as_ref().expect("described").state.clone()
    }

    /// A sink of the same transactional id and receipt_dir whose broker
    /// never answers (resolution is Unreachable after 2 s).
    fn unreachable_sink(&self) -> TwoPhaseCommitSink<SelectedTransactionalProducer> {
        let mut p = self.params(&[]);
        p.insert("brokers".into(), "127.0.0.1:1".into());
        let mut o = parse_two_phase_commit(&p, 0, 1).expect("options");
        o.resolve_unreachable_after = Duration::from_secs(2);
        o.sink.client.connect_timeout = Some(Duration::from_millis(500));
        o.sink.client.bootstrap_timeout = Some(Duration::ZERO);
        selected::two_phase_commit_sink(o).expect("sink")
    }

    fn label(&self) -> String {
        format!("{} ({:?})", self.brokers, self.version)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.receipts);
    }
}

fn batch(prefix: &str, n: usize) -> Vec<Text> {
    (0..n).map(|i| Text::from(format!("{prefix}-{i}"))).collect()
}

/// The texts with event times `first`, `first + 1`, ...
fn timed(texts: Vec<Text>, first: i64) -> Vec<(Text, Option<i64>)> {
    texts.into_iter().zip(first..).map(|(t, at)| (t, Some(at))).collect()
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn staged(rows: &[StateRow]) -> Vec<StagedCheckpoint> {
    rows.iter()
        .map(|r| StagedCheckpoint::from_row(r).unwrap().expect("a 2PC row"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_checkpoint_is_visible_and_an_aborted_one_never_is() {
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-commit").await;
        let mut sink = f.sink(&[]);
        let caps = sink.capabilities();
        assert!(
            caps.two_phase && !caps.commit_recoverable && caps.stages_state,
            "{caps:?}"
        );
        sink.open().await.unwrap();

        sink.on_data(batch("cp1", 20)).await.unwrap();
        let rows = sink.on_barrier(1).await.unwrap();
        let s = staged(&rows);
        assert_eq!(s.len(), 1, "{rows:?}");
        assert_eq!((s[0].checkpoint, s[0].records), (1, 20));
        let handle = s[0].handle.clone().expect("a prepared checkpoint carries its handle");
        assert_eq!(handle.transactional_id, f.txn_id);
        assert_eq!(handle.transaction_version, common::connector::handle_version(version));
        assert!(handle.has_identity(), "{handle:?}");
        assert!(
            f.visible_now().await.is_empty(),
            "{}: prepared is not visible",
            f.label()
        );

        sink.on_commit(1).await.unwrap();
        assert!(f.receipts.join("sub0-1").exists(), "the commit wrote its receipt");

        sink.on_data(batch("cp2", 15)).await.unwrap();
        sink.on_barrier(2).await.unwrap();
        sink.on_abort(2).await.unwrap();
        assert!(!f.receipts.join("sub0-2").exists(), "no receipt for an abort");

        sink.on_data(batch("cp3", 5)).await.unwrap();
        sink.on_barrier(3).await.unwrap();
        sink.on_commit(3).await.unwrap();
        // A stale or repeated commit does nothing.
        sink.on_commit(3).await.unwrap();
        sink.on_commit(1).await.unwrap();

        let mut want = values("cp1", 20);
        want.extend(values("cp3", 5));
        assert_eq!(f.committed(25).await, want, "{}", f.label());
        let st = sink.stats();
        assert_eq!(
            (
                st.records_sent,
                st.records_committed,
                st.transactions_committed,
                st.transactions_aborted
            ),
            (40, 25, 2, 1),
            "{st:?}"
        );
        sink.close().await.unwrap();
        let e = sink.on_data(batch("late", 1)).await.unwrap_err();
        assert!(matches!(e, ConnectorError::CallOrder { .. }), "{e}");
    }
}

/// `commit_group` (DESIGN.md, "Commit groups"): a driver delivers the
/// abort of checkpoint 1 to sink A only and asks sink B to commit it.
/// Without a group B commits (its records are visible); with A and B in
/// one group, B aborts checkpoint 1 too (`GroupAborted`, nothing visible),
/// the group's epoch advances once, and both commit checkpoint 2 as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_group_member_does_not_commit_a_checkpoint_another_member_aborted() {
    let Some(brokers) = common::brokers() else { return };
    let group = common::unique_topic("commit-group");
    for grouped in [false, true] {
        let a = Fixture::new(&brokers, TransactionVersion::V2, "cg-a").await;
        let b = Fixture::new(&brokers, TransactionVersion::V2, "cg-b").await;
        let extra: Vec<(&str, &str)> = if grouped {
            vec![("commit_group", group.as_str())]
        } else {
            vec![]
        };
        let (mut sa, mut sb) = (a.sink(&extra), b.sink(&extra));
        sa.open().await.unwrap();
        sb.open().await.unwrap();
        assert_eq!(sb.stats().commit_group_epoch, grouped.then_some(0), "joined at epoch 0");
        sa.on_data(batch("a1", 3)).await.unwrap();
        sb.on_data(batch("b1", 4)).await.unwrap();
        sa.on_barrier(1).await.unwrap();
        sb.on_barrier(1).await.unwrap();
        sa.on_abort(1).await.unwrap();
        let committed_1 = sb.on_commit(1).await;
        if grouped {
            let e = committed_1.unwrap_err();
            assert!(
                matches!(&e, ConnectorError::GroupAborted { group: g, checkpoint: 1, epoch: 1 } if *g == group),
                "{e}"
            );
            assert!(b.visible_now().await.is_empty(), "the group aborted b1");
            assert!(!b.receipts.join("sub0-1").exists(), "no receipt for a group abort");
            let st = sb.stats();
            assert_eq!((st.commits_refused_by_group, st.transactions_aborted), (1, 1), "{st:?}");
            assert_eq!(st.commit_group_epoch, Some(1));
        } else {
            committed_1.expect("without a group B commits what A aborted");
            assert_eq!(b.committed(4).await, values("b1", 4));
            assert_eq!(sb.stats().commit_group_epoch, None);
        }
        // Checkpoint 2 commits in both either way; the epoch stays.
        sa.on_data(batch("a2", 2)).await.unwrap();
        sb.on_data(batch("b2", 2)).await.unwrap();
        sa.on_barrier(2).await.unwrap();
        sb.on_barrier(2).await.unwrap();
        sa.on_commit(2).await.unwrap();
        sb.on_commit(2).await.unwrap();
        assert_eq!(a.committed(2).await, values("a2", 2));
        let mut want_b = if grouped { vec![] } else { values("b1", 4) };
        want_b.extend(values("b2", 2));
        assert_eq!(b.committed(want_b.len()).await, want_b, "grouped = {grouped}");
        if grouped {
            let g = clink_kafka::connector::commit_group::CommitGroup::named(&group);
            assert_eq!(g.epoch(), 1, "only the abort moved the group");
            assert_eq!(g.epoch_members(), vec![a.txn_id.clone(), b.txn_id.clone()]);
        }
        sa.close().await.unwrap();
        sb.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_after_a_barrier_wait_for_the_commit_and_land_in_the_next_transaction() {
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-queued").await;
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();

        sink.on_data(batch("a", 10)).await.unwrap();
        sink.on_barrier(1).await.unwrap();
        // The commit of 1 is outstanding: these wait app-side.
        sink.on_data(batch("b", 5)).await.unwrap();
        assert_eq!(sink.stats().records_sent, 10, "buffered, not produced");
        let rows = sink.on_barrier(2).await.unwrap();
        let s = staged(&rows);
        assert_eq!(s.len(), 2, "{rows:?}");
        assert!(s[0].checkpoint == 1 && s[0].handle.is_some(), "{s:?}");
        assert!(
            s[1].checkpoint == 2 && s[1].handle.is_none() && s[1].records == 5,
            "{s:?}"
        );
        sink.on_data(batch("c", 3)).await.unwrap();

        sink.on_commit(1).await.unwrap();
        // Checkpoint 2's segment is now its own (prepared) transaction.
        assert_eq!(sink.prepared_checkpoint(), Some(2));
        assert_eq!(sink.stats().records_sent, 15);
        assert_eq!(f.visible_now().await, values("a", 10), "{}", f.label());

        sink.on_commit(2).await.unwrap();
        assert_eq!(sink.prepared_checkpoint(), None);
        assert_eq!(sink.stats().records_sent, 18, "the buffer became the open tail");
        sink.on_barrier(3).await.unwrap();
        sink.on_data(batch("d", 2)).await.unwrap();
        sink.on_barrier(4).await.unwrap();
        sink.on_data(batch("e", 1)).await.unwrap();
        // One commit subsumes both: 3 prepared, 4 queued, committed in turn.
        sink.on_commit(4).await.unwrap();
        sink.on_barrier(5).await.unwrap();
        sink.on_commit(5).await.unwrap();

        let mut want = values("a", 10);
        for (p, n) in [("b", 5), ("c", 3), ("d", 2), ("e", 1)] {
            want.extend(values(p, n));
        }
        assert_eq!(f.committed(want.len()).await, want, "{}", f.label());
        let st = sink.stats();
        assert_eq!((st.transactions_committed, st.records_committed), (5, 21), "{st:?}");
        for n in 1..=5 {
            assert!(f.receipts.join(format!("sub0-{n}")).exists(), "receipt {n}");
        }
        sink.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_aborts_the_open_tail_and_leaves_the_prepared_one_for_the_restored_sink() {
    for (brokers, version) in common::transaction_brokers() {
        // The open tail is aborted.
        let f = Fixture::new(&brokers, version, "2pc-close-tail").await;
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();
        sink.on_data(batch("tail", 7)).await.unwrap();
        sink.flush().await.unwrap();
        assert_eq!(f.state().await, TransactionState::Ongoing, "{}", f.label());
        sink.close().await.unwrap();
        // PrepareAbort until the markers are written: the decision is abort either way.
        let state = f.state().await;
        assert!(
            matches!(state, TransactionState::PrepareAbort | TransactionState::CompleteAbort),
            "{}: {state:?}",
            f.label()
        );
        assert!(f.committed(0).await.is_empty());
        drop(f);

        // The prepared one is left pending, then committed by the restored sink.
        let f = Fixture::new(&brokers, version, "2pc-close-prepared").await;
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();
        sink.on_data(batch("a", 4)).await.unwrap();
        sink.on_barrier(1).await.unwrap();
        sink.on_commit(1).await.unwrap();
        sink.on_data(batch("b", 6)).await.unwrap();
        let rows = sink.on_barrier(2).await.unwrap();
        sink.on_data(batch("buffered", 2)).await.unwrap();
        sink.close().await.unwrap();
        assert_eq!(
            f.state().await,
            TransactionState::Ongoing,
            "{}: the prepared transaction is left pending",
            f.label()
        );
        assert_eq!(f.visible_now().await, values("a", 4));

        let mut restored = f.sink(&[]);
        // A union of rows: another subtask's are ignored.
        let mut union = rows.clone();
        union.push(
            StagedCheckpoint {
                transactional_id: "someone-else".into(),
                checkpoint: 2,
                records: 3,
                handle: None,
                horizon: None,
                coverage: Default::default(),
                written: Vec::new(),
            }
            .to_row(),
        );
        restored.restore(&union).unwrap();
        restored.open().await.unwrap();
        let st = restored.stats();
        assert_eq!((st.resolved_over_the_wire, st.resolved_by_receipt), (1, 0), "{st:?}");
        assert!(restored.orphans().is_empty(), "{:?}", restored.orphans());
        assert!(
            f.receipts.join("sub0-2").exists(),
            "the resolution materialised the receipt"
        );
        let mut want = values("a", 4);
        want.extend(values("b", 6));
        assert_eq!(f.committed(10).await, want, "{}: exactly once", f.label());
        // The restored sink works on.
        restored.on_data(batch("c", 2)).await.unwrap();
        restored.on_barrier(3).await.unwrap();
        restored.on_commit(3).await.unwrap();
        want.extend(values("c", 2));
        assert_eq!(f.committed(12).await, want);
        restored.close().await.unwrap();
    }
}

/// Runs the hidden CLI helper; returns its state rows once it took the
/// barrier, and the child (still running).
fn barrier_in_child(f: &Fixture, extra: &[(&str, &str)], count: u64) -> (std::process::Child, Vec<StateRow>) {
    let mut cmd = Command::new(BIN);
    cmd.arg("sink2pc-barrier-and-hang");
    for (k, v) in f.params(extra) {
        cmd.arg("--param").arg(format!("{k}={v}"));
    }
    let mut child = cmd
        .args([
            "--count",
            &count.to_string(),
            "--value-prefix",
            "killed-",
            "--checkpoint",
            "1",
        ])
        .args(["--hang-secs", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting clink-kafka sink2pc-barrier-and-hang");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rows = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line == "barrier-done" => break,
            Ok(line) => {
                let mut parts = line.splitn(3, '\t');
                assert_eq!(parts.next(), Some("state-row"), "{line:?}");
                rows.push(StateRow {
                    key: parts.next().expect("key").to_owned(),
                    value: parts.next().expect("value").as_bytes().to_vec(),
                });
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("the sink child took no barrier within 120 s (status {status:?})");
            }
        }
    }
    (child, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_sinks_prepared_checkpoint_is_committed_by_the_restored_sink() {
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-killed").await;
        let (mut child, rows) = barrier_in_child(&f, &[], 1000);
        // SIGKILL between barrier and commit: no EndTxn is ever sent.
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert!(!status.success(), "killed, not finished: {status}");
        let s = staged(&rows);
        assert_eq!(s.len(), 1, "{rows:?}");
        assert_eq!((s[0].checkpoint, s[0].records), (1, 1000));
        assert_eq!(f.state().await, TransactionState::Ongoing, "{}", f.label());

        // The engine restores completed checkpoint 1 into a new sink.
        let mut registry = Registry::new();
        install(&mut registry).unwrap();
        let ctx = BuildContext::new(f.params(&[]));
        let mut restored = registry
            .build("kafka_2pc_sink_string", &ctx)
            .unwrap()
            .into_text_sink("kafka_2pc_sink_string")
            .unwrap();
        restored.restore(&rows).unwrap();
        restored.open().await.unwrap();
        let want: Vec<String> = (0..1000).map(|i| format!("killed-{i}")).collect();
        assert_eq!(f.committed(1000).await, want, "{}: exactly once, in order", f.label());
        assert!(f.receipts.join("sub0-1").exists());
        assert!(!f.receipts.join("sub0-1.unresolved").exists());
        restored.close().await.unwrap();

        // Restoring the same checkpoint again (a second recovery) finds the
        // receipt and publishes nothing twice.
        let mut again = f.sink(&[]);
        again.restore(&rows).unwrap();
        again.open().await.unwrap();
        let st = again.stats();
        assert_eq!((st.resolved_by_receipt, st.resolved_over_the_wire), (1, 0), "{st:?}");
        assert_eq!(f.committed(1000).await.len(), 1000);
        again.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_prepared_transaction_is_an_unresolved_orphan() {
    let logs = common::connector::capture_logs();
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-expired").await;
        let mut sink = f.sink(&[("transaction_timeout_ms", "3000")]);
        sink.open().await.unwrap();
        sink.on_data(batch("expiring", 30)).await.unwrap();
        let rows = sink.on_barrier(1).await.unwrap();
        sink.close().await.unwrap();
        // Wait (bounded) for the coordinator to expire it.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let state = f.state().await;
            if state == TransactionState::CompleteAbort {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: not expired within 90 s: {state:?}",
                f.label()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut restored = f.sink(&[("transaction_timeout_ms", "3000")]);
        restored.restore(&rows).unwrap();
        restored.open().await.expect("a final verdict does not block open");
        let orphans = restored.orphans().to_vec();
        assert_eq!(orphans.len(), 1, "{}: {orphans:?}", f.label());
        let o = &orphans[0];
        assert_eq!((o.checkpoint, o.records), (1, 30));
        assert!(o.reason.contains("not committed"), "{}", o.reason);
        // The coordinator's answer is confirmed by the log: its ABORT marker.
        assert!(o.reason.contains("ABORT marker"), "{}", o.reason);
        let marker = o.marker.clone().expect("a marker under receipt_dir");
        assert_eq!(marker, f.receipts.join("sub0-1.unresolved"));
        let text = std::fs::read_to_string(&marker).unwrap();
        assert!(text.contains(&o.handle.as_ref().unwrap().to_string()), "{text}");
        assert!(!f.receipts.join("sub0-1").exists(), "no receipt for an orphan");
        assert!(
            logs.contents().contains("unresolved orphan"),
            "the loss is logged as an error"
        );
        assert!(
            f.committed(0).await.is_empty(),
            "{}: expired records are invisible",
            f.label()
        );
        restored.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_fails_open_and_is_never_a_verdict() {
    let receipts = std::env::temp_dir().join(common::unique_topic("2pc-unreachable"));
    let params: BTreeMap<String, String> = [
        ("brokers", "127.0.0.1:1"),
        ("topic", "t"),
        ("transactional_id", "tx-unreachable"),
        ("receipt_dir", receipts.to_str().unwrap()),
        ("backend", common::connector::backend()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut o = parse_two_phase_commit(&params, 0, 1).unwrap();
    o.resolve_unreachable_after = Duration::from_secs(2);
    o.sink.client.connect_timeout = Some(Duration::from_millis(500));
    o.sink.client.bootstrap_timeout = Some(Duration::ZERO);
    let mut sink = selected::two_phase_commit_sink(o).unwrap();
    let handle = clink_kafka::client::ResumeHandle {
        transactional_id: "tx-unreachable".into(),
        producer_id: 17,
        producer_epoch: 2,
        transaction_version: TransactionVersion::V2,
    };
    let row = StagedCheckpoint {
        transactional_id: "tx-unreachable".into(),
        checkpoint: 9,
        records: 3,
        handle: Some(handle),
        horizon: None,
        coverage: Default::default(),
        written: Vec::new(),
    }
    .to_row();
    sink.restore(&[row]).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(60), sink.open())
        .await
        .expect("open is bounded")
        .unwrap_err();
    assert!(
        matches!(&e, ConnectorError::InDoubt { checkpoint: 9, .. }),
        "unreachable is not a verdict: {e}"
    );
    assert!(sink.orphans().is_empty(), "not counted as lost");
    assert!(receipts.join("sub0-9.unresolved").exists(), "the marker is written");
    let _ = std::fs::remove_dir_all(&receipts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_confirm_commits_and_arm_replay_suppression() {
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-receipts").await;
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();
        sink.on_data(batch("one", 3)).await.unwrap();
        let rows1 = sink.on_barrier(1).await.unwrap();
        sink.on_commit(1).await.unwrap();
        // The engine's event times (998, 999, 1000) and its watermark.
        sink.on_timed_data(timed(batch("two", 3), 998)).await.unwrap();
        sink.on_watermark(1_000);
        sink.on_barrier(2).await.unwrap();
        sink.on_commit(2).await.unwrap();
        sink.close().await.unwrap();

        // Restoring checkpoint 1 (below the committed 2): 1 is receipted, no
        // wire call; the receipt of 2 (watermark horizon 1000) arms
        // suppression: the replayed records with their event times are
        // swallowed (at or below the watermark: nothing at or below it
        // followed), a record without an event time (plain on_data) is
        // passed through and counted, a record past the horizon is passed.
        let mut restored = f.sink(&[]);
        restored.restore(&rows1).unwrap();
        restored.open().await.unwrap();
        let st = restored.stats();
        assert_eq!((st.resolved_by_receipt, st.resolved_over_the_wire), (1, 0), "{st:?}");
        assert!(st.replay_suppression_armed, "{st:?}");
        assert_eq!(st.suppression_horizon, Some(1_000), "{st:?}");
        restored.on_timed_data(timed(batch("two", 3), 998)).await.unwrap();
        restored.on_data(batch("untimed", 1)).await.unwrap();
        restored.on_timed_data(timed(batch("three", 1), 1_001)).await.unwrap();
        let st = restored.stats();
        assert_eq!((st.records_suppressed, st.suppression_passed_through), (3, 1), "{st:?}");
        restored.on_barrier(3).await.unwrap();
        restored.on_commit(3).await.unwrap();
        restored.close().await.unwrap();

        // replay_suppression = false never arms.
        let mut off = f.sink(&[("replay_suppression", "false")]);
        off.restore(&rows1).unwrap();
        off.open().await.unwrap();
        assert!(!off.stats().replay_suppression_armed);
        off.close().await.unwrap();
        let mut want = values("one", 3);
        want.extend(values("two", 3));
        want.extend(values("untimed", 1));
        want.extend(values("three", 1));
        assert_eq!(f.committed(8).await, want, "{}", f.label());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sasl_password_never_reaches_state_rows_receipts_or_logs() {
    let Some(sasl) = common::sasl() else { return };
    let logs = common::connector::capture_logs();
    let plain = common::brokers().expect("the SASL listener comes with the plaintext one");
    let mut f = Fixture::new(&plain, TransactionVersion::V2, "2pc-sasl").await;
    f.brokers = sasl.brokers.clone();
    let extra = [
        ("security_protocol", "sasl_plaintext"),
        ("sasl_mechanism", common::connector::sasl_mechanism()),
        ("sasl_username", sasl.username.as_str()),
        ("sasl_password", sasl.password.as_str()),
    ];
    let mut sink = f.sink(&extra);
    sink.open().await.unwrap();
    sink.on_data(batch("sasl", 5)).await.unwrap();
    let rows = sink.on_barrier(1).await.unwrap();
    let debug = format!("{sink:?} {:?}", sink.options());
    sink.close().await.unwrap();
    let mut restored = f.sink(&extra);
    restored.restore(&rows).unwrap();
    restored.open().await.unwrap();
    assert_eq!(restored.stats().resolved_over_the_wire, 1, "committed over SASL");
    restored.close().await.unwrap();
    assert_eq!(f.committed(5).await, values("sasl", 5));

    let password = sasl.password.as_str();
    for row in &rows {
        assert!(!row.key.contains(password));
        assert!(!String::from_utf8_lossy(&row.value).contains(password), "{row:?}");
    }
    assert!(!debug.contains(password), "{debug}");
    for entry in std::fs::read_dir(&f.receipts).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains(password), "{text}");
    }
    let logged = logs.contents();
    assert!(!logged.contains(password), "the password was logged");
    assert!(logged.contains("two-phase-commit sink open"), "logs were captured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolved_marker_is_described_before_the_next_open_fences_it() {
    for (brokers, version) in common::transaction_brokers() {
        let f = Fixture::new(&brokers, version, "2pc-marker").await;
        // A commit that landed but whose receipt was lost (a kill between
        // EndTxn and the receipt), then a resolution that could not reach
        // the broker: a pending marker.
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();
        sink.on_data(batch("landed", 8)).await.unwrap();
        let rows = sink.on_barrier(1).await.unwrap();
        sink.on_commit(1).await.unwrap();
        sink.close().await.unwrap();
        std::fs::remove_file(f.receipts.join("sub0-1")).unwrap();
        let mut cut_off = f.unreachable_sink();
        cut_off.restore(&rows).unwrap();
        let e = cut_off.open().await.unwrap_err();
        assert!(matches!(e, ConnectorError::InDoubt { checkpoint: 1, .. }), "{e}");
        let marker = f.receipts.join("sub0-1.unresolved");
        assert!(std::fs::read_to_string(&marker).unwrap().contains("final=false"));
        // The engine restores below it; the sink describes the marked
        // transaction before its init fences it: the commit landed.
        let mut next = f.sink(&[]);
        next.open().await.unwrap();
        let st = next.stats();
        assert_eq!(
            (st.markers_consumed, st.markers_found_committed),
            (1, 1),
            "{}: {st:?}",
            f.label()
        );
        assert!(f.receipts.join("sub0-1").exists(), "the receipt is materialised");
        assert!(!marker.exists(), "the marker is retired");
        next.close().await.unwrap();

        // A prepared transaction that never committed: the marker is
        // retired, and the init's abort is legitimate.
        let mut sink = f.sink(&[]);
        sink.open().await.unwrap();
        sink.on_data(batch("undecided", 5)).await.unwrap();
        let rows = sink.on_barrier(2).await.unwrap();
        sink.close().await.unwrap();
        let mut cut_off = f.unreachable_sink();
        cut_off.restore(&rows).unwrap();
        assert!(cut_off.open().await.is_err());
        let mut next = f.sink(&[]);
        next.open().await.unwrap();
        let st = next.stats();
        assert_eq!(
            (st.markers_consumed, st.markers_found_committed),
            (1, 0),
            "{}: {st:?}",
            f.label()
        );
        assert!(!f.receipts.join("sub0-2").exists());
        assert!(!f.receipts.join("sub0-2.unresolved").exists());
        next.close().await.unwrap();
        assert_eq!(f.committed(8).await, values("landed", 8), "{}", f.label());
    }
}
