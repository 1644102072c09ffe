//! TLS against the broker's SSL, mTLS and SASL_SSL listeners: round trips
//! (server auth, client certificate with a plain and an encrypted key, SCRAM
//! inside TLS), the failures that must be typed and must not hang (untrusted
//! CA, missing or foreign client certificate, hostname mismatch, wrong key
//! password, a TLS client on a plaintext port and the reverse), the
//! hostname-verification off switch, the CLI over mTLS, and idle connections
//! being closed and reopened.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use clink_kafka::client::raw::BrokerConnection;
use clink_kafka::client::{
    ClientConfig, Cluster, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
    SecurityProtocol, TlsConfig,
};
use clink_kafka::wire::kafka_protocol::messages::MetadataRequest;
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::wire::secret::Secret;
use clink_kafka::Error;
use clink_kafka::TlsFailure;

/// Bound on any connect attempt that is expected to fail.
const FAIL_WITHIN: Duration = Duration::from_secs(20);

fn tls_config(brokers: &str, tls: TlsConfig) -> ClientConfig {
    common::config(brokers).with_tls(tls)
}

/// Creates a topic through `config`, produces `n` records, consumes them back.
async fn round_trip(config: ClientConfig, label: &str, n: usize) {
    let cluster = common::cluster(config).await;
    let topic = common::unique_topic(label);
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..n {
        futures.push(
            producer
                .send(ProducerRecord::new(&topic, format!("{label} {i}")))
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 0, Offset::Earliest, n).await;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.record.value.as_deref(), Some(format!("{label} {i}").as_bytes()));
    }
}

/// Connecting must fail, within [`FAIL_WITHIN`].
async fn connect_error(config: ClientConfig) -> Error {
    let started = Instant::now();
    let result = tokio::time::timeout(FAIL_WITHIN, Cluster::connect(config))
        .await
        .unwrap_or_else(|_| panic!("connecting did not fail within {FAIL_WITHIN:?}"));
    let err = result.expect_err("the connection must be refused");
    eprintln!("refused after {:?}: {err}", started.elapsed());
    err
}

fn tls_kind(err: &Error) -> TlsFailure {
    match err {
        Error::Tls { kind, .. } => *kind,
        other => panic!("expected Error::Tls, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_round_trip() {
    let Some(tls) = common::tls() else { return };
    let config = tls_config(&tls.ssl_brokers, tls.server_auth());
    assert_eq!(config.security_protocol, SecurityProtocol::Ssl);
    round_trip(config, "ssl", 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_round_trip_with_plain_key() {
    let Some(tls) = common::tls() else { return };
    round_trip(tls_config(&tls.mtls_brokers, tls.mutual()), "mtls-plain", 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_round_trip_with_encrypted_key() {
    let Some(tls) = common::tls() else { return };
    let config = tls
        .mutual()
        .with_key_file(tls.key_encrypted.clone())
        .with_key_password(Secret::new(tls.key_password.clone()));
    let debug = format!("{:?}", tls_config(&tls.mtls_brokers, config.clone()));
    assert!(!debug.contains(&tls.key_password), "{debug}");
    round_trip(tls_config(&tls.mtls_brokers, config), "mtls-encrypted", 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_scram_sha_512_round_trip() {
    let Some(tls) = common::tls() else { return };
    let Some(sasl) = common::sasl() else { return };
    let config = tls_config(&tls.sasl_ssl_brokers, tls.server_auth()).with_sasl(
        SaslMechanism::ScramSha512,
        sasl.username.clone(),
        Secret::new(sasl.password.clone()),
    );
    assert_eq!(config.security_protocol, SecurityProtocol::SaslSsl);
    round_trip(config, "sasl-ssl-scram512", 20).await;

    // The wrong password inside TLS is still an authentication error.
    let wrong = tls_config(&tls.sasl_ssl_brokers, tls.server_auth()).with_sasl(
        SaslMechanism::ScramSha512,
        sasl.username.clone(),
        Secret::new("not-the-password"),
    );
    let err = connect_error(wrong).await;
    assert!(
        matches!(
            err,
            Error::Authentication {
                mechanism: "SCRAM-SHA-512",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_ca_is_a_typed_tls_error() {
    let Some(tls) = common::tls() else { return };
    let config = tls_config(
        &tls.ssl_brokers,
        TlsConfig::default().with_ca_file(tls.other_ca.clone()),
    );
    let err = connect_error(config).await;
    assert_eq!(tls_kind(&err), TlsFailure::CertificateNotTrusted, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("certificate not trusted") && text.contains(&tls.ssl_brokers),
        "{text}"
    );
    assert!(text.contains(&tls.other_ca.display().to_string()), "{text}");

    // Turning hostname verification off does not turn chain verification off.
    let config = tls_config(
        &tls.ssl_brokers,
        TlsConfig::default()
            .with_ca_file(tls.other_ca.clone())
            .with_hostname_verification(false),
    );
    assert_eq!(
        tls_kind(&connect_error(config).await),
        TlsFailure::CertificateNotTrusted
    );

    // Nor do the built-in roots trust a private CA.
    let err = connect_error(tls_config(&tls.ssl_brokers, TlsConfig::default())).await;
    assert_eq!(tls_kind(&err), TlsFailure::CertificateNotTrusted, "{err}");
    assert!(err.to_string().contains("Mozilla roots"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_without_a_client_certificate_is_a_clear_error() {
    let Some(tls) = common::tls() else { return };
    let err = connect_error(tls_config(&tls.mtls_brokers, tls.server_auth())).await;
    assert_eq!(tls_kind(&err), TlsFailure::ClientCertificateRejected, "{err}");
    let text = err.to_string();
    assert!(text.contains("requires a client certificate"), "{text}");
    assert!(text.contains("ssl.certificate.location"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_with_a_certificate_from_another_ca_is_rejected() {
    let Some(tls) = common::tls() else { return };
    let config = tls
        .server_auth()
        .with_cert_file(tls.other_cert.clone())
        .with_key_file(tls.other_key.clone());
    let err = connect_error(tls_config(&tls.mtls_brokers, config)).await;
    assert_eq!(tls_kind(&err), TlsFailure::ClientCertificateRejected, "{err}");
    assert!(err.to_string().contains("rejected our client certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostname_mismatch_is_refused_unless_verification_is_off() {
    let Some(tls) = common::tls() else { return };
    // The broker's certificate covers localhost and 127.0.0.1 only.
    let mismatched = tls.server_auth().with_server_name("broker.clink.invalid");
    let err = connect_error(tls_config(&tls.ssl_brokers, mismatched.clone())).await;
    assert_eq!(tls_kind(&err), TlsFailure::HostnameMismatch, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("hostname mismatch") && text.contains("broker.clink.invalid") && text.contains("localhost"),
        "{text}"
    );

    // The same with the name check off (chain still verified): works.
    let chain_only = mismatched.with_hostname_verification(false);
    round_trip(tls_config(&tls.ssl_brokers, chain_only), "ssl-no-hostname", 5).await;

    // Dialling by a name the certificate covers works as is.
    let port = tls.ssl_brokers.rsplit_once(':').expect("host:port").1;
    let conn = tokio::time::timeout(
        FAIL_WITHIN,
        BrokerConnection::connect(
            &format!("localhost:{port}"),
            None,
            &tls_config(&tls.ssl_brokers, tls.server_auth()),
        ),
    )
    .await
    .expect("bounded")
    .expect("localhost is in the certificate");
    conn.request(&MetadataRequest::default())
        .await
        .expect("metadata over TLS");
}

/// Log output captured by a test's own subscriber.
#[derive(Clone, Default)]
struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Single-threaded, so the thread-local subscriber sees every handshake.
#[tokio::test(flavor = "current_thread")]
async fn insecure_skip_verify_connects_to_an_untrusted_broker_and_warns() {
    let Some(tls) = common::tls() else { return };
    let log = CapturedLog::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let config = tls_config(
        &tls.ssl_brokers,
        TlsConfig::default()
            .with_insecure_skip_verify(true)
            .with_server_name("broker.clink.invalid"),
    );
    let cluster = common::cluster(config).await;
    assert!(!cluster.metadata().brokers.is_empty());
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("WARN") && text.contains("certificate verification is OFF"),
        "no warning logged:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_password_and_missing_files_are_config_errors() {
    let Some(tls) = common::tls() else { return };
    let config = tls
        .mutual()
        .with_key_file(tls.key_encrypted.clone())
        .with_key_password(Secret::new("wrong-password-0xfeed"));
    let err = connect_error(tls_config(&tls.mtls_brokers, config)).await;
    assert!(
        matches!(
            err,
            Error::Config {
                option: "ssl.key.password",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("wrong-password-0xfeed"), "{err}");

    let config = tls.mutual().with_key_file(tls.key_encrypted.clone());
    let err = connect_error(tls_config(&tls.mtls_brokers, config)).await;
    assert!(
        matches!(
            err,
            Error::Config {
                option: "ssl.key.password",
                ..
            }
        ),
        "{err:?}"
    );

    // A key that does not belong to the certificate.
    let config = tls.mutual().with_key_file(tls.other_key.clone());
    let err = connect_error(tls_config(&tls.mtls_brokers, config)).await;
    assert!(
        matches!(
            err,
            Error::Config {
                option: "ssl.key.location",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_for_the_port_fails_clearly_and_never_downgrades() {
    let Some(tls) = common::tls() else { return };
    let Some(plain) = common::brokers() else { return };
    // TLS client on the plaintext port: a handshake failure, not a plaintext session.
    let mut config = tls_config(&plain, tls.server_auth());
    config.connect_timeout = Duration::from_secs(3);
    let err = connect_error(config).await;
    assert_eq!(tls_kind(&err), TlsFailure::HandshakeFailed, "{err}");

    // Plaintext client on the SSL port: the broker drops it; the error says why.
    let err = connect_error(common::config(&tls.ssl_brokers)).await;
    assert_eq!(tls_kind(&err), TlsFailure::ProtocolMismatch, "{err}");
    let text = err.to_string();
    assert!(text.contains("set security.protocol to SSL"), "{text}");
}

#[test]
fn config_refuses_weaker_than_it_looks() {
    let tls = TlsConfig::default().with_ca_file("/ca.pem");
    // TLS files with a plaintext protocol.
    let mut c = ClientConfig::new("h:1");
    c.tls = tls.clone();
    let err = c.validate().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                option: "security.protocol",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("ssl.ca.location"), "{err}");
    c.security_protocol = SecurityProtocol::SaslPlaintext;
    c.sasl = ClientConfig::new("h:1")
        .with_sasl(SaslMechanism::ScramSha256, "u", Secret::new("pw-1"))
        .sasl;
    assert!(c.validate().unwrap_err().to_string().contains("SASL_SSL"));
    // SASL credentials with SSL.
    let mut c = ClientConfig::new("h:1")
        .with_sasl(SaslMechanism::Plain, "u", Secret::new("pw-2"))
        .with_tls(tls.clone());
    assert_eq!(c.security_protocol, SecurityProtocol::SaslSsl);
    assert!(c.validate().is_ok());
    c.security_protocol = SecurityProtocol::Ssl;
    let err = c.validate().unwrap_err();
    assert!(err.to_string().contains("does not authenticate"), "{err}");
    assert!(!err.to_string().contains("pw-2"), "{err}");
    // A SASL protocol without credentials.
    let mut c = ClientConfig::new("h:1");
    c.security_protocol = SecurityProtocol::SaslSsl;
    assert!(c.validate().unwrap_err().to_string().contains("needs SASL credentials"));
    // Parsing.
    assert_eq!(
        "Sasl_Ssl".parse::<SecurityProtocol>().unwrap(),
        SecurityProtocol::SaslSsl
    );
    let err = "TLS".parse::<SecurityProtocol>().unwrap_err().to_string();
    assert!(
        err.contains("security.protocol") && err.contains("plaintext, ssl, sasl_plaintext, sasl_ssl"),
        "{err}"
    );
    // Debug never shows the key password.
    let c = ClientConfig::new("h:1").with_tls(
        tls.with_cert_file("/c.pem")
            .with_key_file("/k.pem")
            .with_key_password(Secret::new("key-password-xyzzy")),
    );
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("key-password-xyzzy") && debug.contains("***"),
        "{debug}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_reopened() {
    let Some(brokers) = common::brokers() else { return };
    let mut config = common::config(&brokers);
    config.connections_max_idle = Duration::from_millis(300);
    let cluster = common::cluster(config).await;
    let node = *cluster.metadata().brokers.keys().next().expect("a broker");
    let first = cluster.broker(node).await.unwrap();
    first.request(&MetadataRequest::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !first.is_closed() {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not closed within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(first.fatal_error(), Some(Error::ConnectionClosed { .. })));
    let second = cluster.broker(node).await.unwrap();
    assert!(!second.is_closed(), "the cluster handed out the closed connection");
    second
        .request(&MetadataRequest::default())
        .await
        .expect("a new connection works");
}

fn run_cli(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> std::process::Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
    cmd.args(args)
        .env_remove("CLINK_KAFKA_BROKERS")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("starting clink-kafka");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).expect("writing stdin");
        }
    }
    let started = Instant::now();
    loop {
        if child.try_wait().expect("waiting").is_some() {
            return child.wait_with_output().expect("collecting output");
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting output");
            panic!(
                "clink-kafka {args:?} did not finish within 90 s\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_produce_and_consume_over_mtls() {
    let Some(tls) = common::tls() else { return };
    let cluster = common::cluster(tls_config(&tls.mtls_brokers, tls.mutual())).await;
    let topic = common::unique_topic("cli-mtls");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let ca = tls.ca.display().to_string();
    let cert = tls.cert.display().to_string();
    let key = tls.key_encrypted.display().to_string();
    let env = [("CLINK_TEST_TLS_KEY_PASSWORD", tls.key_password.as_str())];
    let security = [
        "--brokers",
        &tls.mtls_brokers,
        "--security-protocol",
        "ssl",
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-key-password-env",
        "CLINK_TEST_TLS_KEY_PASSWORD",
    ];
    let lines: Vec<String> = (0..50).map(|i| format!("cli-mtls-{i}")).collect();
    let input = lines.join("\n") + "\n";
    let mut produce = vec!["produce", "--topic", &topic];
    produce.extend_from_slice(&security);
    let out = tokio::task::block_in_place(|| run_cli(&produce, Some(&input), &env));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "produce failed: {stderr}");
    assert!(stderr.contains("produced 50 records"), "{stderr}");
    assert!(!stderr.contains(&tls.key_password), "{stderr}");

    let mut consume = vec!["consume", "--topic", &topic, "--from-beginning", "--count", "50"];
    consume.extend_from_slice(&security);
    let out = tokio::task::block_in_place(|| run_cli(&consume, None, &env));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "consume failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got, lines.iter().map(String::as_str).collect::<Vec<_>>());

    // Without the client certificate the CLI fails with the TLS reason.
    let mut no_cert = vec!["consume", "--topic", &topic, "--from-beginning", "--count", "1"];
    no_cert.extend_from_slice(&security[..6]);
    let out = tokio::task::block_in_place(|| run_cli(&no_cert, None, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "consuming without a certificate succeeded");
    assert!(stderr.contains("client certificate"), "{stderr}");
    // And plaintext with TLS files is refused before connecting.
    let mut mixed = vec!["consume", "--topic", &topic, "--count", "1"];
    mixed.extend_from_slice(&[
        "--brokers",
        &tls.mtls_brokers,
        "--security-protocol",
        "plaintext",
        "--tls-ca",
        &ca,
    ]);
    let out = tokio::task::block_in_place(|| run_cli(&mixed, None, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--tls-ca needs --security-protocol ssl"),
        "{stderr}"
    );
}
