//! What the binary writes around its data: logs without ANSI escapes when
//! stderr is a file or a pipe, coloured on a terminal unless `NO_COLOR`,
//! `--log-format json` lines that parse; progress only on a terminal; the
//! exit codes in `--help`. A terminal is a pseudo-terminal from util-linux's
//! `script`.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(90);
const ESC: u8 = 0x1b;
/// Nothing listens there: connecting fails at once, after debug logs.
const NOWHERE: &str = "127.0.0.1:1";

fn clink(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
    cmd.args(args).env_remove("NO_COLOR").env_remove("RUST_LOG");
    cmd
}

/// `clink-kafka ARGS` run by `script` on a pseudo-terminal, with `envs`;
/// everything it wrote to the terminal (stdout and stderr together).
fn on_a_terminal(args: &[&str], envs: &[(&str, &str)]) -> Option<String> {
    let script = common::process::on_path("script").or_else(|| common::process::missing("script (util-linux)"))?;
    let line = std::iter::once(env!("CARGO_BIN_EXE_clink-kafka"))
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new(script);
    cmd.args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = common::process::run_to_exit(&mut cmd, "", DEADLINE);
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn logs_written_to_a_file_carry_no_escapes() {
    let dir = std::env::temp_dir().join(format!("clink-cli-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stderr.log");
    let status = clink(&["metadata", "--brokers", NOWHERE])
        .env("RUST_LOG", "clink_kafka=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&path).unwrap())
        .status()
        .expect("running clink-kafka");
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("DEBUG") && text.contains("error: ") && text.contains(NOWHERE),
        "debug logs and the error: {text}"
    );
    assert!(!log.contains(&ESC), "escape in a log file: {text:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let args = ["metadata", "--brokers", NOWHERE];
    let Some(coloured) = on_a_terminal(&args, &[("RUST_LOG", "clink_kafka=debug")]) else {
        return;
    };
    assert!(
        coloured.contains("DEBUG") && coloured.contains('\u{1b}'),
        "{coloured:?}"
    );
    let plain = on_a_terminal(&args, &[("RUST_LOG", "clink_kafka=debug"), ("NO_COLOR", "1")]).unwrap();
    assert!(plain.contains("DEBUG") && !plain.contains('\u{1b}'), "{plain:?}");
}

#[test]
fn json_logs_are_one_object_per_line_the_error_included() {
    // The flag is global: after the subcommand as well as before it.
    for args in [
        vec!["--log-format", "json", "metadata", "--brokers", NOWHERE],
        vec!["metadata", "--brokers", NOWHERE, "--log-format", "json"],
    ] {
        let out = common::process::run_to_exit(clink(&args).env("RUST_LOG", "clink_kafka=debug"), "", DEADLINE);
        assert_eq!(out.status.code(), Some(1));
        assert!(!out.stderr.contains(&ESC));
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        assert!(lines.len() >= 2, "{lines:?}");
        assert!(lines.iter().any(|l| l["level"] == "DEBUG"), "{lines:?}");
        let last = lines.last().unwrap();
        assert_eq!(last["level"], "ERROR");
        let message = last["fields"]["message"].as_str().expect("message");
        assert!(message.contains(NOWHERE) && message.contains("connecting"), "{message}");
    }
}

#[test]
fn progress_is_shown_on_a_terminal_only() {
    let Some(b) = common::brokers() else { return };
    let cluster = common::config(&b);
    let t = common::unique_topic("cli-progress");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let cluster = common::cluster(cluster).await;
        common::create_topic(&cluster, clink_kafka::client::NewTopic::new(&t, 1, 1)).await;
    });
    let produce = ["produce", "--brokers", &b, "--topic", &t, "--count", "20000"];
    let out = common::process::run(&mut clink(&produce), "", DEADLINE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("produced 20,000 records to {t} in ")) && stderr.lines().count() == 1,
        "one report line, no progress: {stderr:?}"
    );
    let consume = [
        "consume",
        "--brokers",
        &b,
        "--topic",
        &t,
        "--from-beginning",
        "--count",
        "20000",
    ];
    let out = common::process::run(&mut clink(&consume), "", DEADLINE);
    assert_eq!(out.stdout.len(), 20_000 * 101, "the records, and only them, on stdout");
    assert!(out.stderr.is_empty(), "{:?}", String::from_utf8_lossy(&out.stderr));

    let Some(shown) = on_a_terminal(&produce, &[]) else {
        return;
    };
    assert!(
        shown.contains("\rproduce: ") && shown.contains(" records/s"),
        "{shown:?}"
    );
    assert!(shown.contains("produced 20,000 records"), "{shown:?}");
    let consume_some = [
        "consume",
        "--brokers",
        &b,
        "--topic",
        &t,
        "--from-beginning",
        "--count",
        "40000",
        "--format",
        "",
    ];
    let shown = on_a_terminal(&consume_some, &[]).unwrap();
    assert!(shown.contains("\rconsume: ") && shown.contains(", lag "), "{shown:?}");
}

#[test]
fn help_lists_the_exit_codes_and_they_are_kept() {
    let out = common::process::run(&mut clink(&["--help"]), "", DEADLINE);
    let help = String::from_utf8_lossy(&out.stdout);
    for line in [
        "Exit codes:",
        "  0  success",
        "  1  error: stderr says what failed",
        "  2  bad or missing arguments",
        "  3  copy: idle with fewer than --expected records copied",
        "  12 txn resolve: not committed: aborted",
        "  20 txn resolve: unreachable",
    ] {
        assert!(help.contains(line), "{line:?} missing from --help:\n{help}");
    }
    assert!(help.contains("--log-format"), "{help}");
    let out = common::process::run(&mut clink(&["txn", "resolve", "--help"]), "", DEADLINE);
    assert!(String::from_utf8_lossy(&out.stdout).contains("  13 txn resolve: not committed: unknown transactional id"));
    let usage = common::process::run_to_exit(&mut clink(&["topics", "create"]), "", DEADLINE);
    assert_eq!(usage.status.code(), Some(2), "a missing argument");
    let error = common::process::run_to_exit(&mut clink(&["topics", "list", "--brokers", NOWHERE]), "", DEADLINE);
    assert_eq!(error.status.code(), Some(1), "an error");
}

#[test]
fn the_first_run_scripts_show_the_build() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let roundtrip = std::fs::read_to_string(root.join("scripts/roundtrip")).unwrap();
    let build = roundtrip
        .lines()
        .position(|l| l.trim() == "cargo build --release")
        .expect("scripts/roundtrip builds in a step of its own, cargo's progress shown (no --quiet)");
    let run = roundtrip
        .lines()
        .position(|l| l.trim_start().starts_with("cargo run --release"))
        .expect("then runs");
    assert!(build < run, "build first, then run");
    let test = std::fs::read_to_string(root.join("scripts/test")).unwrap();
    for script in [&roundtrip, &test] {
        assert!(
            script.contains("the first build takes"),
            "says the first build takes minutes"
        );
        assert!(
            !script
                .lines()
                .any(|l| l.trim_start().starts_with("cargo") && l.contains("--no-run") && l.contains("--quiet")),
            "the build step shows its progress"
        );
    }
}
