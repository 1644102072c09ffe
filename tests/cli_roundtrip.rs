//! The `clink-kafka roundtrip` command as a user runs it: the built binary
//! against the broker, 20,000 records, on the backend of
//! `CLINK_KAFKA_TEST_BACKEND` (`--backend`); and `produce` from stdin,
//! whose memory does not grow with the input.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

fn run_with_deadline(cmd: &mut Command, deadline: Duration) -> std::process::Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting clink-kafka");
    run_with_deadline_child(child, deadline)
}

/// Waits for a spawned child, bounded (killed past the deadline, and its
/// output shown).
fn run_with_deadline_child(mut child: std::process::Child, deadline: Duration) -> std::process::Output {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("waiting").is_some() {
            return child.wait_with_output().expect("collecting output");
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting output");
            panic!(
                "clink-kafka did not finish within {deadline:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn roundtrip_command_verifies_20000_records() {
    let Some(brokers) = common::brokers() else { return };
    for (compression, level) in [("lz4", "-1"), ("zstd", "-1"), ("gzip", "9")] {
        let out = run_with_deadline(
            Command::new(env!("CARGO_BIN_EXE_clink-kafka")).args([
                "roundtrip",
                "--backend",
                common::connector::backend(),
                "--brokers",
                &brokers,
                "--records",
                "20000",
                "--compression",
                compression,
                "--compression-level",
                level,
                "--timeout-secs",
                "120",
            ]),
            Duration::from_secs(180),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "roundtrip failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains("verified: all 20,000 records arrived exactly once"),
            "{stdout}"
        );
        assert!(
            stdout.contains("produce: 20,000 records") && stdout.contains("consume: 20,000 records"),
            "{stdout}"
        );
        assert!(stdout.contains("records/s") && stdout.contains("ns/record"), "{stdout}");
        assert!(stdout.contains(&format!("compression {compression}")), "{stdout}");
    }
}

#[test]
fn a_compression_level_the_codec_lacks_is_refused_by_name() {
    let Some(brokers) = common::brokers() else { return };
    // Natively: LZ4's HC levels are not available (lz4_flex has the fast
    // mode only); librdkafka has them, so this refusal is the native one.
    if common::connector::backend() != "native" {
        return;
    }
    let out = run_with_deadline(
        Command::new(env!("CARGO_BIN_EXE_clink-kafka")).args([
            "roundtrip",
            "--brokers",
            &brokers,
            "--records",
            "10",
            "--compression",
            "lz4",
            "--compression-level",
            "9",
        ]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("compression.level 9") && stderr.contains("lz4 takes -1, 0, 1 or 2"),
        "{stderr}"
    );
}

#[test]
fn roundtrip_command_fails_cleanly_without_a_broker() {
    // Nothing listens on port 1: connect fails fast with a clear message.
    let out = run_with_deadline(
        Command::new(env!("CARGO_BIN_EXE_clink-kafka")).args([
            "roundtrip",
            "--backend",
            common::connector::backend(),
            "--brokers",
            "127.0.0.1:1",
            "--records",
            "10",
        ]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("127.0.0.1:1") && stderr.contains("connect"), "{stderr}");
}

/// The process's resident memory now (VmRSS, in bytes), from /proc.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("reading /proc/PID/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// `produce` reading stdin keeps its memory whatever the input's length:
/// it holds at most a bounded number of delivery results, not one per line
/// read (it used to keep every line's until stdin ended, about 24 bytes a
/// line: 22 MB more after another 900,000 lines). The test writes 300,000
/// lines, waits until the broker holds them all, reads the producer's
/// resident memory while it waits on stdin, writes 900,000 more, and reads
/// it again.
#[test]
fn produce_from_stdin_keeps_its_memory_whatever_the_input_length() {
    use clink_kafka::client::{ConsumerConfig, NewTopic, Offset};
    use std::io::Write;

    let Some(brokers) = common::brokers() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = common::unique_topic("stdin-memory");
    let cluster = rt.block_on(async {
        let cluster = common::cluster(common::config(&brokers)).await;
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        cluster
    });
    let consumer = clink_kafka::client::Consumer::new(cluster, ConsumerConfig::default());
    let end = || {
        rt.block_on(consumer.list_offset(&topic, 0, Offset::Latest))
            .expect("end offset")
    };

    let mut child = Command::new(env!("CARGO_BIN_EXE_clink-kafka"))
        .args(["produce", "--backend", common::connector::backend()])
        .args(["--brokers", &brokers, "--topic", &topic])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting clink-kafka produce");
    let mut stdin = child.stdin.take().unwrap();
    let line = format!("{}\n", "v".repeat(20));
    let chunk = line.repeat(10_000);
    let mut written = 0u64;
    let mut resident = Vec::new();
    for target in [300_000u64, 1_200_000] {
        while written < target {
            stdin.write_all(chunk.as_bytes()).expect("writing produce's stdin");
            written += 10_000;
        }
        stdin.flush().unwrap();
        // Every line written is on the broker (bounded: 120 s).
        let started = Instant::now();
        while end() < written as i64 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{written} lines written, {} on the broker after 120 s",
                end()
            );
            assert!(child.try_wait().unwrap().is_none(), "produce exited before stdin ended");
            std::thread::sleep(Duration::from_millis(100));
        }
        resident.push(resident_bytes(child.id()));
    }
    drop(stdin);
    let out = run_with_deadline_child(child, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "produce failed: {stderr}");
    assert!(stderr.contains("produced 1,200,000 records"), "{stderr}");
    let grown = resident[1] as i64 - resident[0] as i64;
    eprintln!(
        "resident after 300,000 lines: {} KiB; after 1,200,000: {} KiB ({grown:+} bytes)",
        resident[0] / 1024,
        resident[1] / 1024
    );
    assert!(
        grown < 8 << 20,
        "produce grew by {grown} bytes over 900,000 more stdin lines (at 300,000: {} B, at 1,200,000: {} B)",
        resident[0],
        resident[1]
    );
}

/// `produce < file` reads a regular file in whole blocks, each read into
/// again once its lines are sent: every line of a file several blocks long
/// (its length an exact multiple of the block, so the end is found by an
/// empty read) arrives once, in order, with its key.
#[test]
fn produce_from_a_file_on_stdin_sends_every_line_once_in_order() {
    use clink_kafka::client::{ConsumerConfig, NewTopic, Offset};
    use std::io::Write;

    let Some(brokers) = common::brokers() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = common::unique_topic("stdin-file");
    let cluster = rt.block_on(async {
        let cluster = common::cluster(common::config(&brokers)).await;
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        cluster
    });
    // 4 MiB exactly (the reader's blocks are 1 MiB): 32,768 lines of 128 B.
    let lines = 32_768usize;
    let line = |i: usize| format!("k{i:07}\tv{i:07}-{}\n", "x".repeat(128 - 19));
    assert_eq!(line(0).len(), 128);
    let dir = std::env::temp_dir().join(format!("clink-stdin-{}-{}", std::process::id(), topic));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("input");
    let mut file = std::fs::File::create(&path).unwrap();
    for i in 0..lines {
        file.write_all(line(i).as_bytes()).unwrap();
    }
    drop(file);
    let child = Command::new(env!("CARGO_BIN_EXE_clink-kafka"))
        .args(["produce", "--backend", common::connector::backend()])
        .args(["--brokers", &brokers, "--topic", &topic, "--key-delimiter", "\t"])
        .stdin(std::fs::File::open(&path).unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting clink-kafka produce");
    let out = run_with_deadline_child(child, Duration::from_secs(120));
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "produce failed: {stderr}");
    assert!(stderr.contains("produced 32,768 records"), "{stderr}");
    let records = rt.block_on(common::consume_exactly(
        &cluster,
        ConsumerConfig::default(),
        &topic,
        0,
        Offset::Earliest,
        lines,
    ));
    for (i, r) in records.iter().enumerate() {
        let want = line(i);
        let (k, v) = want.trim_end().split_once('\t').unwrap();
        assert_eq!(r.record.key.as_deref(), Some(k.as_bytes()), "key of line {i}");
        assert_eq!(r.record.value.as_deref(), Some(v.as_bytes()), "value of line {i}");
    }
}
