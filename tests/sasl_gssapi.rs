//! SASL/GSSAPI (Kerberos, issue 25) with the native client's pure-Rust
//! context (`src/client/kerberos.rs`: sspi for the KDC exchanges, our own
//! AP-REP check and RFC 4121 wrap tokens) against the real MIT KDC
//! (`scripts/kdc-local`: realm `CLINK.TEST`, alice's keytab) and the sasl
//! broker's KRB listener (`CLINK_KAFKA_GSSAPI_BOOTSTRAP`).
//!
//! - produce and consume with the client (`ClientConfig::with_kerberos`),
//!   through the connector's `sasl_kerberos_*` options, and through the CLI
//!   (`--sasl-mechanism GSSAPI --sasl-kerberos-*`, the KDC read from
//!   krb5.conf via `KRB5_CONFIG`);
//! - refusals that say what failed: a principal the keytab does not hold,
//!   a keytab with the wrong key (the KDC refuses the pre-authentication),
//!   an unreachable KDC (bounded), and GSSAPI on the rdkafka backend (a
//!   named difference: its librdkafka has no libsasl2).
//!
//! Native only (tests/backends.tsv): GSSAPI is refused on rdkafka.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    ClientConfig, Consumer, ConsumerConfig, KerberosConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
use clink_kafka::connector::selected;
use clink_kafka::connector::{KafkaMessage, Sink};

const RECORDS: usize = 20;

/// The KRB listener and the KDC's settings.
struct Krb {
    bootstrap: String,
    plaintext: String,
    kdc: String,
    krb5_conf: String,
    keytab: String,
    principal: String,
    service: String,
}

fn krb() -> Option<Krb> {
    let get = common::required_env;
    Some(Krb {
        bootstrap: get("CLINK_KAFKA_GSSAPI_BOOTSTRAP")?,
        plaintext: get("CLINK_KAFKA_SASL_PLAINTEXT_BROKER")?,
        kdc: get("CLINK_KAFKA_KRB5_KDC")?,
        krb5_conf: get("CLINK_KAFKA_KRB5_CONFIG")?,
        keytab: get("CLINK_KAFKA_KRB5_CLIENT_KEYTAB")?,
        principal: get("CLINK_KAFKA_KRB5_CLIENT_PRINCIPAL")?,
        service: get("CLINK_KAFKA_KRB5_SERVICE_NAME")?,
    })
}

impl Krb {
    fn kerberos(&self) -> KerberosConfig {
        let mut k = KerberosConfig::new(&self.principal, &self.keytab);
        k.service_name = self.service.clone();
        k.kdc = Some(self.kdc.clone());
        k
    }

    /// The native client through the KRB listener; one bootstrap pass.
    fn client(&self, kerberos: KerberosConfig) -> ClientConfig {
        let mut c = ClientConfig::new(&self.bootstrap).with_kerberos(kerberos);
        c.request_timeout = Duration::from_secs(15);
        c.metadata_max_wait = Duration::from_secs(10);
        c
    }

    /// A fresh one-partition topic, created over the sasl broker's
    /// PLAINTEXT listener.
    async fn topic(&self, prefix: &str) -> String {
        let cluster = common::cluster(common::config(&self.plaintext)).await;
        let topic = common::unique_topic(prefix);
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        topic
    }

    /// The connector's GSSAPI options.
    fn options(&self) -> Vec<(&str, &str)> {
        vec![
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "GSSAPI"),
            ("sasl_kerberos_service_name", self.service.as_str()),
            ("sasl_kerberos_principal", self.principal.as_str()),
            ("sasl_kerberos_keytab", self.keytab.as_str()),
            ("sasl_kerberos_kdc", self.kdc.as_str()),
        ]
    }
}

/// The authentication error the native client reports with `kerberos`.
async fn native_refusal(k: &Krb, kerberos: KerberosConfig) -> String {
    let mut config = k.client(kerberos);
    config.bootstrap_timeout = Duration::ZERO;
    let e = match clink_kafka::client::Cluster::connect(config).await {
        Err(e) => e,
        Ok(c) => match c.any_broker().await {
            Err(e) => e,
            Ok(_) => panic!("expected an authentication failure"),
        },
    };
    e.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_produces_and_consumes_through_the_krb_listener() {
    let Some(k) = krb() else { return };
    let topic = k.topic("gssapi-client").await;
    let cluster = common::cluster(k.client(k.kerberos())).await;
    cluster
        .wait_for_topic(&topic, 1, Duration::from_secs(30))
        .await
        .expect("topic metadata through the KRB listener");
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let values: Vec<String> = (0..RECORDS).map(|i| format!("gssapi-{i}")).collect();
    for v in &values {
        producer
            .send(ProducerRecord::new(&topic, v.clone()))
            .await
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).await.expect("flush");
    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer.seek(&topic, 0, Offset::Earliest).await.expect("seek");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < RECORDS {
        assert!(Instant::now() < deadline, "only {} records read back", seen.len());
        for r in consumer.poll(Duration::from_millis(500)).await.expect("poll") {
            seen.push(String::from_utf8(r.record.value.expect("a value").to_vec()).unwrap());
        }
    }
    assert_eq!(seen, values);
}

fn params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut p: BTreeMap<String, String> = common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect();
    // GSSAPI runs on the native backend only (a named difference).
    p.insert("backend".into(), "native".into());
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_and_source_with_the_sasl_kerberos_options() {
    let Some(k) = krb() else { return };
    let topic = k.topic("gssapi-conn").await;
    let want: Vec<String> = (0..RECORDS).map(|i| format!("gssapi-conn-{i}")).collect();
    let security = k.options();
    let mut extra = security.clone();
    extra.push(("linger_ms", "0"));
    let mut sink =
        selected::kafka_sink(parse_sink(FactoryKind::MessageSink, &params(&k.bootstrap, &topic, &extra)).unwrap())
            .unwrap();
    sink.open().await.unwrap();
    sink.on_data(want.iter().map(|v| KafkaMessage::new(v.clone())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(
        (sink.counters().delivered(), sink.counters().delivery_errors()),
        (RECORDS as u64, 0)
    );
    sink.close().await.unwrap();
    let options = parse_source(
        FactoryKind::MessageSource,
        &params(&k.bootstrap, &topic, &security),
        0,
        1,
    )
    .unwrap();
    let got = common::connector::read_values(options, RECORDS).await;
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_or_key_the_kdc_does_not_know_is_refused_clearly() {
    let Some(k) = krb() else { return };
    // A principal the keytab has no entry for: found before any I/O.
    let mut bob = k.kerberos();
    bob.principal = "bob@CLINK.TEST".into();
    let e = native_refusal(&k, bob).await;
    eprintln!("bob: {e}");
    assert!(
        e.contains("GSSAPI") && e.contains("no entry") && e.contains("sasl.kerberos.principal"),
        "{e}"
    );
    // alice's name with a key that is not hers: the KDC refuses the
    // pre-authentication (or its reply does not decrypt).
    let dir = std::env::temp_dir().join(format!("clink-gssapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("wrong.keytab");
    std::fs::write(&wrong, keytab_for(&k.principal, &[0x5a; 32])).unwrap();
    let mut forged = k.kerberos();
    forged.keytab = wrong.clone();
    let started = Instant::now();
    let e = native_refusal(&k, forged).await;
    eprintln!("wrong key: {e} ({:?})", started.elapsed());
    assert!(e.contains("GSSAPI") && e.contains("Kerberos"), "{e}");
    assert!(!e.contains("5a, 5a") && !e.contains("90, 90"), "no key bytes: {e}");
    // sasl.kerberos.service.name acts: a service the realm has no
    // principal for (kafka/<host> exists, nokafka/<host> does not) gets no
    // ticket, where the same identity with the right name authenticates
    // (the round-trip tests).
    let mut other_service = k.kerberos();
    other_service.service_name = "nokafka".into();
    let e = native_refusal(&k, other_service).await;
    eprintln!("service nokafka: {e}");
    assert!(e.contains("GSSAPI") && e.contains("Kerberos"), "{e}");
    // Not a keytab at all.
    let junk = dir.join("junk.keytab");
    std::fs::write(&junk, b"not a keytab").unwrap();
    let mut bad = k.kerberos();
    bad.keytab = junk;
    let e = native_refusal(&k, bad).await;
    assert!(e.contains("sasl.kerberos.keytab") && e.contains("version"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A one-entry MIT keytab (0x0502) for `principal` with an aes256 `key`.
fn keytab_for(principal: &str, key: &[u8; 32]) -> Vec<u8> {
    let (name, realm) = principal.split_once('@').expect("name@REALM");
    let mut entry = Vec::new();
    let components: Vec<&str> = name.split('/').collect();
    entry.extend_from_slice(&(components.len() as u16).to_be_bytes());
    entry.extend_from_slice(&(realm.len() as u16).to_be_bytes());
    entry.extend_from_slice(realm.as_bytes());
    for c in components {
        entry.extend_from_slice(&(c.len() as u16).to_be_bytes());
        entry.extend_from_slice(c.as_bytes());
    }
    entry.extend_from_slice(&1u32.to_be_bytes()); // NT-PRINCIPAL
    entry.extend_from_slice(&0u32.to_be_bytes()); // timestamp
    entry.push(1); // kvno
    entry.extend_from_slice(&18u16.to_be_bytes());
    entry.extend_from_slice(&32u16.to_be_bytes());
    entry.extend_from_slice(key);
    let mut out = vec![5, 2];
    out.extend_from_slice(&(entry.len() as i32).to_be_bytes());
    out.extend_from_slice(&entry);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_kdc_fails_clearly_and_in_bounded_time() {
    let Some(k) = krb() else { return };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut gone = k.kerberos();
    gone.kdc = Some(closed.clone());
    let started = Instant::now();
    let e = native_refusal(&k, gone).await;
    eprintln!("closed KDC port: {e} ({:?})", started.elapsed());
    assert!(
        e.contains("GSSAPI") && e.contains(&closed) && e.contains("unreachable"),
        "{e}"
    );
    // A KDC that accepts and never answers: the timeout bounds it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut mute = k.kerberos();
    mute.kdc = Some(silent.local_addr().unwrap().to_string());
    mute.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let e = native_refusal(&k, mute).await;
    let took = started.elapsed();
    eprintln!("silent KDC: {e} ({took:?})");
    assert!(e.contains("GSSAPI") && e.contains("did not finish within"), "{e}");
    assert!(took < Duration::from_secs(30), "bounded: {took:?}");
    drop(silent);
}

#[test]
fn gssapi_on_the_rdkafka_backend_is_a_named_refusal() {
    // The security settings are checked at build, before any I/O, so this
    // needs neither the KDC nor the broker.
    let mut p = params("127.0.0.1:9", "t", &[]);
    for (key, value) in [
        ("security_protocol", "sasl_plaintext"),
        ("sasl_mechanism", "GSSAPI"),
        ("sasl_kerberos_principal", "alice@CLINK.TEST"),
        ("sasl_kerberos_keytab", "/alice.keytab"),
        ("sasl_kerberos_kdc", "127.0.0.1:88"),
    ] {
        p.insert(key.into(), value.into());
    }
    p.insert("backend".into(), "rdkafka".into());
    let e = match parse_source(FactoryKind::MessageSource, &p, 0, 1).map(selected::kafka_source) {
        Err(e) | Ok(Err(e)) => e.to_string(),
        Ok(Ok(_)) => panic!("GSSAPI on rdkafka must be refused"),
    };
    eprintln!("rdkafka: {e}");
    if cfg!(feature = "rdkafka") {
        assert!(e.contains("sasl_mechanism") && e.contains("libsasl2"), "{e}");
    } else {
        assert!(e.contains("rdkafka"), "{e}");
    }
}

#[test]
fn the_cli_produces_and_consumes_with_gssapi() {
    let Some(k) = krb() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = rt.block_on(k.topic("gssapi-cli"));
    // The KDC from krb5.conf (no --sasl-kerberos-kdc).
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
        cmd.args(args)
            .args([
                "--brokers",
                &k.bootstrap,
                "--topic",
                &topic,
                "--sasl-mechanism",
                "GSSAPI",
                "--sasl-kerberos-service-name",
                &k.service,
                "--sasl-kerberos-principal",
                &k.principal,
                "--sasl-kerberos-keytab",
                &k.keytab,
            ])
            .env("KRB5_CONFIG", &k.krb5_conf)
            .env_remove("RUST_LOG");
        cmd
    };
    let values: Vec<String> = (0..RECORDS).map(|i| format!("cli-gssapi-{i}")).collect();
    let out = common::process::run(
        &mut cli(&["produce"]),
        &(values.join("\n") + "\n"),
        Duration::from_secs(90),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains(&format!("produced {RECORDS} records")), "{stderr}");
    let out = common::process::run(
        &mut cli(&[
            "consume",
            "--from-beginning",
            "--count",
            &RECORDS.to_string(),
            "--idle-timeout-ms",
            "30000",
        ]),
        "",
        Duration::from_secs(90),
    );
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(got, values);

    // `--backend rdkafka`: the named refusal (no libsasl2 there).
    if cfg!(feature = "rdkafka") {
        let out = common::process::run_to_exit(
            &mut cli(&["consume", "--backend", "rdkafka", "--count", "1"]),
            "",
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("libsasl2"), "{stderr}");
    }

    // Misuse is refused, naming the flag.
    for (args, expected) in [
        (
            vec!["--sasl-kerberos-keytab", k.keytab.as_str()],
            "--sasl-kerberos-keytab needs --sasl-mechanism GSSAPI",
        ),
        (
            vec![
                "--sasl-mechanism",
                "GSSAPI",
                "--sasl-kerberos-keytab",
                k.keytab.as_str(),
            ],
            "needs --sasl-kerberos-principal",
        ),
        (
            vec![
                "--sasl-mechanism",
                "GSSAPI",
                "--sasl-kerberos-principal",
                k.principal.as_str(),
                "--sasl-kerberos-keytab",
                k.keytab.as_str(),
                "--sasl-kerberos-kdc",
                "no-port",
            ],
            "sasl.kerberos.kdc",
        ),
    ] {
        let out = common::process::run_to_exit(
            Command::new(env!("CARGO_BIN_EXE_clink-kafka"))
                .args(["consume", "--brokers", &k.bootstrap, "--topic", &topic])
                .args(&args),
            "",
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
    }
}
