//! Isolation levels against the broker.
//!
//! Transactions are written by the Java client (`tests/java/TxnProducer.java`,
//! run with `java` in source-file mode on the kafka-clients jar the local
//! broker already has): committed, aborted, committed, then one left open.
//! `read_committed` must deliver only the committed records, stop at the last
//! stable offset while the transaction is open, and continue once it
//! commits; `read_uncommitted` sees everything; neither ever delivers a
//! control record (transaction marker).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel, NewTopic, Offset, Producer, ProducerConfig,
    ProducerRecord, TopicPartition, Watermarks,
};

fn read_committed() -> ConsumerConfig {
    ConsumerConfig::default().with_isolation(IsolationLevel::ReadCommitted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_without_transactions_reads_to_the_end() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("rc-plain");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..50 {
        futures.push(
            producer
                .send(ProducerRecord::new(&topic, format!("{i}")))
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    let got = common::consume_exactly(&cluster, read_committed(), &topic, 0, Offset::Earliest, 50).await;
    assert_eq!(got.last().unwrap().record.offset, 49);
    let mut consumer = Consumer::new(cluster.clone(), read_committed());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    assert_eq!(
        consumer.seek(&topic, 0, Offset::Latest).await.unwrap(),
        50,
        "latest = LSO = HW"
    );
    // poll's timeout is a deadline for the whole call, so the first answer
    // may come after it: poll (bounded) until one did.
    for _ in 0..25 {
        let past_the_end = consumer.poll(Duration::from_millis(200)).await.unwrap();
        assert!(
            past_the_end.is_empty(),
            "positioned at the end, yet {} records came",
            past_the_end.len()
        );
        if consumer.watermarks(&topic, 0) != Some(watermarks(-1, -1)) {
            break;
        }
    }
    assert_eq!(consumer.watermarks(&topic, 0), Some(watermarks(50, 50)));
}

/// Where the Java client's jars are: the tools classpath if installed, else
/// the broker's own lib dir (it holds kafka-clients and its codecs).
fn java_classpath() -> Option<String> {
    if let Ok(cp) = std::env::var("CLINK_KAFKA_TOOLS_CLASSPATH") {
        if !cp.is_empty() {
            return Some(cp);
        }
    }
    let home = std::env::var("KAFKA_LOCAL_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".kafka-local"));
    let lib = home.join("broker-lib");
    lib.join("kafka-clients-4.4.0.jar")
        .exists()
        .then(|| format!("{}/*", lib.display()))
        .or_else(|| {
            std::fs::read_dir(&lib)
                .ok()?
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("kafka-clients-"))
                .then(|| format!("{}/*", lib.display()))
        })
}

struct JavaTxnProducer {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl JavaTxnProducer {
    fn start(classpath: &str, brokers: &str, topic: &str) -> Self {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/java/TxnProducer.java");
        let mut child = Command::new("java")
            .arg("-cp")
            .arg(classpath)
            .arg("-Dlog4j2.level=WARN")
            .arg(source)
            .arg(brokers)
            .arg(topic)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting java");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                if s.len() < 20_000 {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        JavaTxnProducer { child, lines, stderr }
    }

    fn expect_line(&mut self, want: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim() == want => return,
                Ok(_) => continue,
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    panic!(
                        "TxnProducer.java did not print {want:?} within {within:?} (exit status {status:?}); stderr:\n{}",
                        self.stderr.lock().unwrap()
                    );
                }
            }
        }
    }
}

impl Drop for JavaTxnProducer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keys(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.record.key.as_deref().unwrap_or(b"<null>")).into_owned())
        .collect()
}

async fn poll_until(consumer: &mut Consumer, count: usize, what: &str) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < count {
        assert!(Instant::now() < deadline, "{what}: only {:?} within 30 s", keys(&out));
        out.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_skips_aborted_and_stops_at_lso() {
    let Some(brokers) = common::brokers() else { return };
    let Some(classpath) = java_classpath() else {
        common::skip_or_fail("the Java client jars (.kafka-local/broker-lib: run scripts/kafka-local up)");
        return;
    };
    let cluster: Cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("rc-txn");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let mut java = JavaTxnProducer::start(&classpath, &brokers, &topic);
    java.expect_line("OPEN", Duration::from_secs(120));

    let committed: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let mut rc = Consumer::new(cluster.clone(), read_committed());
    rc.assign(&[TopicPartition::new(&topic, 0)]);
    rc.seek(&topic, 0, Offset::Earliest).await.unwrap();
    let got = poll_until(&mut rc, 10, "read_committed").await;
    assert_eq!(keys(&got), committed, "only committed records, in order");
    // The open transaction holds the LSO back: nothing more arrives.
    for _ in 0..3 {
        let more = rc.poll(Duration::from_millis(300)).await.unwrap();
        assert!(more.is_empty(), "read past the LSO: {:?}", keys(&more));
    }
    let Watermarks {
        high_watermark: hw,
        last_stable_offset: lso,
    } = rc.watermarks(&topic, 0).unwrap();
    assert!(
        lso < hw,
        "an open transaction keeps the LSO ({lso}) below the high watermark ({hw})"
    );
    assert_eq!(rc.position(&topic, 0), Some(lso), "stopped exactly at the LSO");
    // Offsets: c0-4 at 0-4, COMMIT 5, a0-4 6-10, ABORT 11, c5-9 12-16, COMMIT 17, o0-4 18-22.
    assert_eq!(lso, 18);
    let offsets: Vec<i64> = got.iter().map(|r| r.record.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4, 12, 13, 14, 15, 16]);
    assert!(got.iter().all(|r| r.batch.is_transactional() && !r.batch.is_control()));

    // read_uncommitted sees every data record, aborted and open ones too,
    // but no marker.
    let mut ru = Consumer::new(cluster.clone(), ConsumerConfig::default());
    ru.assign(&[TopicPartition::new(&topic, 0)]);
    ru.seek(&topic, 0, Offset::Earliest).await.unwrap();
    let all = poll_until(&mut ru, 20, "read_uncommitted").await;
    let want: Vec<String> = [
        "c0", "c1", "c2", "c3", "c4", "a0", "a1", "a2", "a3", "a4", "c5", "c6", "c7", "c8", "c9",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain((0..5).map(|i| format!("o{i}")))
    .collect();
    assert_eq!(keys(&all), want);
    let more = ru.poll(Duration::from_millis(300)).await.unwrap();
    assert!(
        more.is_empty(),
        "control records must never be delivered: {:?}",
        keys(&more)
    );

    // Commit the open transaction: read_committed moves on.
    writeln!(java.child.stdin.as_mut().unwrap()).unwrap();
    java.child.stdin.as_mut().unwrap().flush().unwrap();
    java.expect_line("DONE", Duration::from_secs(60));
    let rest = poll_until(&mut rc, 5, "read_committed after commit").await;
    assert_eq!(keys(&rest), (0..5).map(|i| format!("o{i}")).collect::<Vec<_>>());
    let more = rc.poll(Duration::from_millis(300)).await.unwrap();
    assert!(more.is_empty(), "{:?}", keys(&more));
    let Watermarks {
        high_watermark: hw,
        last_stable_offset: lso,
    } = rc.watermarks(&topic, 0).unwrap();
    assert_eq!((hw, lso), (24, 24));
    assert_eq!(rc.position(&topic, 0), Some(24), "past the last COMMIT marker");
}

fn watermarks(high_watermark: i64, last_stable_offset: i64) -> Watermarks {
    Watermarks {
        high_watermark,
        last_stable_offset,
    }
}
