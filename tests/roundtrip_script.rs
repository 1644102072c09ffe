//! `scripts/roundtrip` with a broker already running: it uses that broker,
//! says so, and leaves it running (a broker it starts itself it stops,
//! unless `--keep`; that case needs a broker of its own and is not run
//! here).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The state dir of the running brokers: `KAFKA_LOCAL_HOME`, else the one
/// their TLS material (exported by `scripts/kafka-local env`) lives in.
fn state_dir() -> Option<PathBuf> {
    if let Ok(home) = std::env::var("KAFKA_LOCAL_HOME") {
        return Some(PathBuf::from(home));
    }
    let ca = common::required_env("CLINK_KAFKA_TLS_CA")?;
    PathBuf::from(ca).parent()?.parent().map(PathBuf::from)
}

fn main_status(home: &PathBuf) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/kafka-local"))
        .arg("status")
        .env("KAFKA_LOCAL_HOME", home)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("main:"))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_running_broker_is_used_said_so_and_left_running() {
    let Some(_) = common::brokers() else { return };
    let Some(home) = state_dir() else { return };
    let before = main_status(&home);
    assert!(before.starts_with("main: running"), "{before}");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(root.join("scripts/roundtrip"));
    cmd.args(["--records", "2000"])
        .env("KAFKA_LOCAL_HOME", &home)
        .env("CLINK_ROUNDTRIP_BIN", env!("CARGO_BIN_EXE_clink-kafka"));
    let out = common::process::run_to_exit(&mut cmd, "", Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("already running here: using it, and leaving it running"),
        "{stdout}"
    );
    assert!(!stdout.contains("stopping"), "{stdout}");
    assert!(
        stdout.contains("verified: all 2,000 records arrived exactly once"),
        "{stdout}"
    );
    let after = main_status(&home);
    assert!(after.starts_with("main: running"), "the broker was stopped: {after}");
}
