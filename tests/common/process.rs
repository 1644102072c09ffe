//! Running a command-line tool from a test: bounded in time, output pipes
//! drained while it runs, a clear panic with its output when it fails.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The path of `name` on PATH, if any.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Runs `cmd` with `stdin`, killing it after `deadline`. Both output pipes
/// are drained while it runs (a full pipe would otherwise stall the tool).
/// Panics, with its output, unless it succeeds.
pub fn run(cmd: &mut Command, stdin: &str, deadline: Duration) -> Output {
    let out = run_to_exit(cmd, stdin, deadline);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// [`run`] for a command that may fail: its output whatever its exit status
/// (still a panic when it outlives `deadline`).
pub fn run_to_exit(cmd: &mut Command, stdin: &str, deadline: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let mut input = child.stdin.take().unwrap();
    let data = stdin.as_bytes().to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            break Some(status);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = writer.join();
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let Some(status) = status else {
        panic!(
            "{cmd:?} did not finish within {deadline:?}\nstdout:\n{}\nstderr:\n{}",
            text(&stdout),
            text(&stderr)
        );
    };
    Output { status, stdout, stderr }
}

pub fn missing(what: &str) -> Option<PathBuf> {
    assert!(!super::in_ci(), "CI=true but {what} is missing (.ci/run installs it)");
    eprintln!("note: {what} is missing; skipping this interop test");
    None
}

/// `kcat` from PATH (Debian's package puts it in /usr/bin).
pub fn kcat() -> Option<PathBuf> {
    on_path("kcat").or_else(|| missing("kcat (apt-get install kcat)"))
}

/// `scripts/kafka-local`, when its tools jars are installed.
pub fn kafka_tools() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let home = std::env::var("KAFKA_LOCAL_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".kafka-local"));
    if home.join("tools-lib").join(".installed").exists() || has_jars(&home.join("tools-lib")) {
        Some(root.join("scripts/kafka-local"))
    } else {
        missing("the Kafka tools jars (scripts/kafka-local install-tools)")
    }
}

fn has_jars(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("kafka-tools-"))
        })
        .unwrap_or(false)
}
