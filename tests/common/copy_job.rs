//! Running `clink-kafka copy` the way the crash tests do: its output to
//! `<log>.out` / `<log>.err`, `CLINK_KAFKA_FAULT` set to the fault (or
//! removed), and a bounded wait that kills the job and fails the test with
//! its stderr past the bound.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What one run of the job left.
pub struct CopyRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (a `clink-kafka copy` with its arguments) to completion,
/// armed with `fault`; panics, after killing it, when it runs longer than
/// `timeout`.
pub fn run_copy_command(mut cmd: Command, fault: Option<&str>, log: &Path, timeout: Duration) -> CopyRun {
    let out_path = log.with_extension("out");
    let err_path = log.with_extension("err");
    cmd.env_remove("CLINK_KAFKA_FAULT")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    if let Some(f) = fault {
        cmd.env("CLINK_KAFKA_FAULT", f);
    }
    let mut child = cmd.spawn().expect("spawning clink-kafka copy");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "clink-kafka copy (fault {fault:?}) ran longer than {timeout:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    CopyRun {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// A `name=` field of the job's `copy-done` line.
pub fn done_field(stdout: &str, name: &str) -> Option<u64> {
    let line = stdout.lines().find(|l| l.starts_with("copy-done "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}
