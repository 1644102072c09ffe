//! The `clink-kafka roundtrip` command as a user runs it: the built binary
//! against the broker, 20,000 records, on the backend of
//! `CLINK_KAFKA_TEST_BACKEND` (`--backend`).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

fn run_with_deadline(cmd: &mut Command, deadline: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting clink-kafka");
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
    for compression in ["lz4", "zstd"] {
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
