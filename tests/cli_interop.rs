//! `clink-kafka produce` and `clink-kafka consume` as a script drives them,
//! checked against librdkafka's `kcat` on the same topics: what our CLI
//! writes (keys split from stdin lines, null keys and tombstones through
//! `--null-marker`, headers, a codec) kcat reads exactly, and what kcat
//! writes our CLI prints exactly, in a kcat-like template and as JSON lines.

mod common;

use std::process::Command;
use std::time::Duration;

use clink_kafka::client::NewTopic;
use common::process::run;

const N: usize = 200;

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink-kafka"))
}

fn stdout_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_reads_what_the_cli_produces() {
    let Some(brokers) = common::brokers() else { return };
    let Some(kcat) = common::process::kcat() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("cli-to-kcat");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    // key|value per line; every 5th key null, every 11th value a tombstone.
    let expected: Vec<String> = (0..N)
        .map(|i| {
            let key = if i % 5 == 0 { "NULL".to_owned() } else { format!("k{i}") };
            let value = if i % 11 == 0 {
                "NULL".to_owned()
            } else {
                format!("value {i}")
            };
            format!("{key}|{value}")
        })
        .collect();
    let input = expected.join("\n") + "\n";
    let out = run(
        cli()
            .args(["produce", "--brokers", &brokers, "--topic", &topic, "--partition", "1"])
            .args([
                "--key-delimiter",
                "|",
                "--null-marker",
                "NULL",
                "--compression",
                "snappy",
            ])
            .args(["--header", "origin=clink-cli", "--header", "run=1"]),
        &input,
        Duration::from_secs(60),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("produced {N} records")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        Command::new(&kcat)
            .args([
                "-C",
                "-b",
                &brokers,
                "-t",
                &topic,
                "-p",
                "1",
                "-o",
                "beginning",
                "-e",
                "-Z",
            ])
            .args(["-c", &N.to_string(), "-f", "%k|%s|%h\n"]),
        "",
        Duration::from_secs(60),
    );
    let want: Vec<String> = expected.iter().map(|l| format!("{l}|origin=clink-cli,run=1")).collect();
    assert_eq!(stdout_lines(&out), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_what_kcat_produces() {
    let Some(brokers) = common::brokers() else { return };
    let Some(kcat) = common::process::kcat() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("kcat-to-cli");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let lines: Vec<(Option<String>, String)> = (0..N)
        .map(|i| ((i % 4 != 0).then(|| format!("key{i}")), format!("kcat value {i}")))
        .collect();
    let input: String = lines
        .iter()
        .map(|(k, v)| format!("{}\t{v}\n", k.as_deref().unwrap_or("")))
        .collect();
    run(
        Command::new(&kcat)
            .args([
                "-P", "-b", &brokers, "-t", &topic, "-p", "0", "-z", "zstd", "-K", "\t", "-Z",
            ])
            .args(["-H", "tool=kcat"]),
        &input,
        Duration::from_secs(60),
    );
    let out = run(
        cli()
            .args(["consume", "--brokers", &brokers, "--topic", &topic, "--from-beginning"])
            .args(["--count", &N.to_string(), "--idle-timeout-ms", "20000"])
            .args(["--null-marker", "NULL", "--format", "%p/%o|%k|%v|%h\\n"]),
        "",
        Duration::from_secs(60),
    );
    let want: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, (k, v))| format!("0/{i}|{}|{v}|tool=kcat", k.as_deref().unwrap_or("NULL")))
        .collect();
    assert_eq!(stdout_lines(&out), want);

    // JSON lines: one object per record, nulls as JSON null.
    let out = run(
        cli()
            .args(["consume", "--brokers", &brokers, "--topic", &topic, "--from-beginning"])
            .args(["--count", "2", "--idle-timeout-ms", "20000", "--format", "json"]),
        "",
        Duration::from_secs(60),
    );
    let json = stdout_lines(&out);
    assert_eq!(json.len(), 2, "{json:?}");
    assert!(
        json[0].contains("\"key\":null") && json[0].contains("\"kcat value 0\""),
        "{}",
        json[0]
    );
    assert!(
        json[1].contains("\"key\":\"key1\"") && json[1].contains("\"offset\":1"),
        "{}",
        json[1]
    );
    assert!(json[1].contains("\"tool\""), "{}", json[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_without_the_key_delimiter_is_a_clear_error() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("cli-bad-line");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let mut child = cli()
        .args([
            "produce",
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            "--key-delimiter",
            ":",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"k:fine\nno delimiter here\n").unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "produce did not give up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stdin line 2 has no key delimiter \":\" (--key-delimiter)"),
        "{stderr}"
    );
}
