//! `clink-kafka copy --group`: one copy job over several processes, members
//! of one consumer group, exactly once through KIP-447. The input is fed
//! live (`v0` … `v{n-1}`, record i to partition i % 6) while processes are
//! SIGKILLed and restarted (each with its own transactional id, kept across
//! its restarts), SIGSTOPped past the session timeout (a zombie), and on
//! the three-broker cluster while a broker is killed. Kafka's Java console
//! consumer, reading the output with read_committed, is the oracle: every
//! input value exactly once (at least once for `--guarantee
//! at-least-once`). The figures are printed (`campaign:` lines).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::NewTopic;
use common::cluster::{self as kc, PARTITIONS};
use common::proxy::{fault_seed, Rng};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const PROCESSES: usize = 3;

/// At most two campaigns at a time in this binary (each runs 3 processes
/// and a feeder, and the machine has 2 cores); two overlap to keep CI
/// short. Nothing in a campaign's verdict depends on timing: a slow member
/// only rebalances more.
static SERIAL: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// One `copy --group` job: its topics, group and processes.
struct Job {
    brokers: String,
    input: String,
    output: String,
    group: String,
    work: PathBuf,
    guarantee: &'static str,
    children: Vec<Option<Child>>,
    starts: Vec<usize>,
}

impl Job {
    async fn new(brokers: &str, config: clink_kafka::client::ClientConfig, name: &str, guarantee: &'static str) -> Job {
        let cluster = common::cluster(config).await;
        let input = common::unique_topic(&format!("{name}-in"));
        let output = common::unique_topic(&format!("{name}-out"));
        let replicas = if brokers.contains(',') { 3 } else { 1 };
        for t in [&input, &output] {
            common::create_topic(&cluster, NewTopic::new(t.as_str(), PARTITIONS, replicas)).await;
        }
        let work = std::env::temp_dir().join(format!("{output}-work"));
        std::fs::create_dir_all(&work).unwrap();
        Job {
            brokers: brokers.to_owned(),
            group: format!("{output}-group"),
            input,
            output,
            work,
            guarantee,
            children: (0..PROCESSES).map(|_| None).collect(),
            starts: vec![0; PROCESSES],
        }
    }

    fn log(&self, i: usize, start: usize) -> PathBuf {
        self.work.join(format!("p{i}-{start}"))
    }

    /// Starts process `i` (again: the same transactional id).
    fn start(&mut self, i: usize) {
        self.start_committing_every(i, 300);
    }

    /// [`start`](Self::start) with `--commit-every-ms commit_every_ms`.
    fn start_committing_every(&mut self, i: usize, commit_every_ms: u64) {
        let start = self.starts[i];
        self.starts[i] += 1;
        let log = self.log(i, start);
        let child = Command::new(BIN)
            .arg("copy")
            .args(["--brokers", &self.brokers, "--from", &self.input, "--to", &self.output])
            .args(["--group", &self.group, "--guarantee", self.guarantee])
            .args(["--transactional-id", &format!("{}-p{i}", self.group)])
            .args([
                "--commit-every-ms",
                &commit_every_ms.to_string(),
                "--until-idle-ms",
                "10000",
            ])
            .args(["--session-timeout-ms", "6000", "--transaction-timeout-ms", "20000"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .expect("spawning clink-kafka copy --group");
        self.children[i] = Some(child);
    }

    fn stderr(&self, i: usize) -> String {
        let start = self.starts[i].saturating_sub(1);
        read(&self.log(i, start).with_extension("err"))
    }

    fn pid(&self, i: usize) -> u32 {
        self.children[i].as_ref().expect("running").id()
    }

    /// SIGKILLs process `i`; panics if it had exited by itself.
    fn kill(&mut self, i: usize) {
        let mut child = self.children[i].take().expect("running");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("process {i} exited by itself ({status}):\n{}", self.stderr(i));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Waits (bounded) for every process to exit, each with 0; the sums of
    /// their last runs' `copy-done` fields.
    fn wait_all(&mut self, timeout: Duration) -> (u64, u64, u64) {
        let deadline = Instant::now() + timeout;
        let (mut transactions, mut aborted, mut fenced) = (0, 0, 0);
        for i in 0..PROCESSES {
            let mut child = self.children[i].take().expect("running");
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("process {i} did not idle-exit within {timeout:?}:\n{}", self.stderr(i));
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            assert!(status.success(), "process {i} failed ({status}):\n{}", self.stderr(i));
            let out = read(&self.log(i, self.starts[i] - 1).with_extension("out"));
            transactions += common::copy_job::done_field(&out, "transactions").unwrap_or(0);
            aborted += common::copy_job::done_field(&out, "aborted").unwrap_or(0);
            fenced += common::copy_job::done_field(&out, "fenced").unwrap_or(0);
        }
        (transactions, aborted, fenced)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The generation of a process's latest `copy: assigned` line, and whether
/// it holds partitions after it; `None` while a revocation or loss came
/// after it (a rebalance under way).
fn latest_assignment(stderr: &str) -> Option<(u64, bool)> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("copy: assigned") || l.starts_with("copy: revoked") || l.starts_with("copy: lost"))?;
    if !line.starts_with("copy: assigned") {
        return None;
    }
    let generation = line
        .split("(generation ")
        .nth(1)?
        .split(';')
        .next()?
        .trim()
        .parse()
        .ok()?;
    Some((generation, !line.contains("now holding nothing")))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Feeds `records` input values at 1,500 a second in the background.
fn feed(job: &Job, config: clink_kafka::client::ClientConfig, records: usize) -> tokio::task::JoinHandle<()> {
    let input = job.input.clone();
    tokio::spawn(async move {
        let cluster = common::cluster(config).await;
        kc::feed_input(cluster, input, 0..records).await
    })
}

/// The oracle: (read, duplicated, missing, foreign), printed.
fn oracle(job: &Job, records: usize, what: &str, kills: usize) -> Option<(usize, usize, usize, usize)> {
    let found = kc::java_exactly_once(&job.brokers, &job.output, records)?;
    let (read, duplicated, missing, foreign) = found;
    eprintln!(
        "campaign: {what}: {records} records, {PROCESSES} processes, {kills} kills: {read} read back by Kafka's \
         console consumer (read_committed), {duplicated} duplicated, {missing} missing, {foreign} foreign"
    );
    Some(found)
}

/// Random SIGKILLs and restarts of the processes while the input is fed.
async fn kill_and_restart(job: &mut Job, rng: &mut Rng, kills: usize) {
    for k in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.range(1_500, 3_000) as u64)).await;
        let i = rng.range(0, PROCESSES);
        job.kill(i);
        tokio::time::sleep(Duration::from_millis(rng.range(0, 1_000) as u64)).await;
        job.start(i);
        eprintln!("kill {k}: SIGKILLed process {i} and started it again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_copy_exactly_once_through_sigkills() {
    let Some(brokers) = common::brokers() else { return };
    let _serial = SERIAL.acquire().await.unwrap();
    const RECORDS: usize = 24_000;
    const KILLS: usize = 6;
    let seed = fault_seed() | 1;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut job = Job::new(&brokers, common::config(&brokers), "copy-group", "exactly-once").await;
    let feeder = feed(&job, common::config(&brokers), RECORDS);
    for i in 0..PROCESSES {
        job.start(i);
    }
    kill_and_restart(&mut job, &mut rng, KILLS).await;
    feeder.await.expect("feeding");
    let (transactions, aborted, fenced) = tokio::task::block_in_place(|| job.wait_all(Duration::from_secs(90)));
    eprintln!(
        "campaign: one broker, seed {seed}: {transactions} transactions, {aborted} aborted, {fenced} fenced in the \
         last runs; {:?} to idle exit",
        started.elapsed()
    );
    let Some((read, duplicated, missing, foreign)) = oracle(&job, RECORDS, "one broker", KILLS) else {
        return;
    };
    assert_eq!((duplicated, missing, foreign, read), (0, 0, 0, RECORDS), "exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_zombie_is_fenced_and_publishes_nothing_twice() {
    let Some(brokers) = common::brokers() else { return };
    let _serial = SERIAL.acquire().await.unwrap();
    const RECORDS: usize = 24_000;
    let mut job = Job::new(&brokers, common::config(&brokers), "copy-group-zombie", "exactly-once").await;
    let feeder = feed(&job, common::config(&brokers), RECORDS);
    // The zombie commits on a rebalance and when it stops, never on a
    // timer: its transaction is then surely open when it is stopped. (At
    // 300 ms it could have just committed, with nothing read since: in CI
    // it once had nothing to abort.)
    job.start_committing_every(0, 60_000);
    for i in 1..PROCESSES {
        job.start(i);
    }
    // Until the group is stable with the zombie holding partitions: every
    // process's latest "assigned" line names the same generation, and the
    // zombie's names some partitions. (Stopped in the middle of a
    // rebalance, after committing on revoke, it would have no transaction
    // open to abort.)
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let latest: Vec<Option<(u64, bool)>> = (0..PROCESSES).map(|i| latest_assignment(&job.stderr(i))).collect();
        let stable = latest.iter().all(|l| l.is_some())
            && latest.iter().all(|l| l.map(|(g, _)| g) == latest[0].map(|(g, _)| g))
            && latest[0].is_some_and(|(_, holds)| holds);
        if stable {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group never settled with process 0 holding partitions ({latest:?}):\n{}",
            job.stderr(0)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second of copying, so that its open transaction holds records.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = job.pid(0).to_string();
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    // Past the 6 s session timeout: the others take its partitions over.
    tokio::time::sleep(Duration::from_secs(10)).await;
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    feeder.await.expect("feeding");
    let (transactions, aborted, fenced) = tokio::task::block_in_place(|| job.wait_all(Duration::from_secs(90)));
    let zombie = read(&job.log(0, 0).with_extension("out"));
    let zombie_err = read(&job.log(0, 0).with_extension("err"));
    let zombie_fenced = common::copy_job::done_field(&zombie, "fenced").unwrap_or(0);
    let zombie_aborted = common::copy_job::done_field(&zombie, "aborted").unwrap_or(0);
    eprintln!(
        "campaign: zombie (SIGSTOP 10 s, session timeout 6 s): the zombie's fenced commits {zombie_fenced}, aborted \
         transactions {zombie_aborted}; all processes: {transactions} transactions, {aborted} aborted, {fenced} fenced"
    );
    assert!(
        zombie_aborted >= 1,
        "the zombie must have aborted the transaction it had open when stopped:\n{zombie_err}"
    );
    let Some((read, duplicated, missing, foreign)) = oracle(&job, RECORDS, "zombie", 0) else {
        return;
    };
    assert_eq!((duplicated, missing, foreign, read), (0, 0, 0, RECORDS), "exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_loses_nothing_through_sigkills() {
    let Some(brokers) = common::brokers() else { return };
    let _serial = SERIAL.acquire().await.unwrap();
    const RECORDS: usize = 15_000;
    const KILLS: usize = 3;
    let seed = fault_seed() | 1;
    let mut rng = Rng(seed);
    let mut job = Job::new(&brokers, common::config(&brokers), "copy-group-alo", "at-least-once").await;
    let feeder = feed(&job, common::config(&brokers), RECORDS);
    for i in 0..PROCESSES {
        job.start(i);
    }
    kill_and_restart(&mut job, &mut rng, KILLS).await;
    feeder.await.expect("feeding");
    tokio::task::block_in_place(|| job.wait_all(Duration::from_secs(90)));
    // Duplicates are allowed: read up to three times the input.
    let Some(got) = common::java_read_committed(&job.brokers, &job.output, RECORDS * 3, 15_000) else {
        return;
    };
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for v in &got {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let duplicated = counts.values().filter(|c| **c > 1).count();
    let missing = (0..RECORDS)
        .filter(|i| !counts.contains_key(format!("v{i}").as_str()))
        .count();
    let foreign = counts.keys().filter(|k| !k.starts_with('v')).count();
    eprintln!(
        "campaign: at-least-once: {RECORDS} records, {PROCESSES} processes, {KILLS} kills: {} read back by Kafka's \
         console consumer (read_committed), {duplicated} duplicated, {missing} missing, {foreign} foreign",
        got.len()
    );
    assert_eq!(
        (missing, foreign),
        (0, 0),
        "at least once (seed {seed}; {duplicated} duplicated)"
    );
}

/// The cross-process lock every test that kills a cluster broker takes.
fn cluster_kill_lock() -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/cluster-kill.lock")
        .unwrap();
    f.lock().unwrap();
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_copy_exactly_once_on_the_cluster_with_a_broker_killed() {
    let Some(brokers) = kc::brokers() else { return };
    let _serial = SERIAL.acquire().await.unwrap();
    const RECORDS: usize = 24_000;
    const KILLS: usize = 4;
    let _lock = kc::ClusterLock::take();
    let seed = fault_seed() | 1;
    let mut rng = Rng(seed);
    let config = kc::config(&brokers);
    let mut job = Job::new(&brokers, config.clone(), "copy-group-cluster", "exactly-once").await;
    let cluster = common::cluster(config.clone()).await;
    for t in [&job.input, &job.output] {
        kc::wait_in_sync(&cluster, t, Duration::from_secs(60)).await;
    }
    let feeder = feed(&job, config.clone(), RECORDS);
    for i in 0..PROCESSES {
        job.start(i);
    }
    kill_and_restart(&mut job, &mut rng, KILLS / 2).await;
    let p = (rng.next() % PARTITIONS as u64) as i32;
    let victim = kc::leader(&cluster, &job.output, p).await;
    {
        let _kill = cluster_kill_lock();
        kc::kill(victim).await;
        eprintln!("SIGKILLed broker {victim} (leader of the output's partition {p})");
        kill_and_restart(&mut job, &mut rng, KILLS - KILLS / 2).await;
        kc::start(victim).await;
    }
    feeder.await.expect("feeding");
    let (transactions, aborted, fenced) = tokio::task::block_in_place(|| job.wait_all(Duration::from_secs(150)));
    eprintln!(
        "campaign: cluster, seed {seed}: 1 broker kill, {transactions} transactions, {aborted} aborted, {fenced} \
         fenced in the last runs"
    );
    let Some((read, duplicated, missing, foreign)) = oracle(&job, RECORDS, "three-broker cluster", KILLS) else {
        return;
    };
    assert_eq!((duplicated, missing, foreign, read), (0, 0, 0, RECORDS), "exactly once");
}
