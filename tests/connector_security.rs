//! The source and the sink over the broker's TLS, mTLS and SASL_SSL
//! listeners, on the backend the run selects (`CLINK_KAFKA_TEST_BACKEND`:
//! native in the main pass, rdkafka in the parity pass of `scripts/test`):
//! - server-authenticated TLS trusting our CA;
//! - mTLS with the encrypted client key and its password;
//! - SASL_SSL with SCRAM-SHA-256 and SCRAM-SHA-512;
//! - a wrong SASL password, an untrusted CA and a missing client
//!   certificate are errors that say what failed, never a hang, and never
//!   echo a secret.
//!
//! Each success is a sink writing records through the listener and a source
//! reading exactly those records back through it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clink_kafka::client::NewTopic;
use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
use clink_kafka::connector::selected;
use clink_kafka::connector::{ConnectorError, KafkaMessage, Sink, Source};

const RECORDS: usize = 20;

fn params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test path")
}

/// A fresh one-partition topic (created over the plaintext listener).
async fn topic(prefix: &str) -> String {
    let brokers = common::brokers().expect("the plaintext listener");
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic(prefix);
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    topic
}

/// Writes [`RECORDS`] records through the message sink on `brokers` with
/// `security`, then reads exactly them back through the message source
/// with the same settings.
async fn sink_then_source(brokers: &str, security: &[(&str, &str)], prefix: &str) {
    let topic = topic(prefix).await;
    let want: Vec<String> = (0..RECORDS).map(|i| format!("{prefix}-{i}")).collect();

    let mut extra = security.to_vec();
    extra.push(("linger_ms", "0"));
    let mut sink =
        selected::kafka_sink(parse_sink(FactoryKind::MessageSink, &params(brokers, &topic, &extra)).unwrap()).unwrap();
    sink.open().await.unwrap();
    sink.on_data(want.iter().map(|v| KafkaMessage::new(v.clone())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(
        (sink.counters().delivered(), sink.counters().delivery_errors()),
        (RECORDS as u64, 0),
        "{prefix} on {}",
        common::connector::backend()
    );
    sink.close().await.unwrap();

    let options = parse_source(FactoryKind::MessageSource, &params(brokers, &topic, security), 0, 1).unwrap();
    let got = common::connector::read_values(options, RECORDS).await;
    assert_eq!(got, want, "{prefix} on {}", common::connector::backend());
}

/// Opens a source with `security` on `brokers` and polls it until it
/// fails (bounded: 60 s): the error, which must not be a success.
async fn source_error(brokers: &str, security: &[(&str, &str)], prefix: &str) -> ConnectorError {
    let topic = topic(prefix).await;
    let options = parse_source(
        FactoryKind::MessageSource,
        &params(
            brokers,
            &topic,
            &[
                security,
                &[
                    ("kafka.topic.metadata.propagation.max.ms", "10000"),
                    ("kafka.socket.timeout.ms", "5000"),
                ],
            ]
            .concat(),
        ),
        0,
        1,
    )
    .unwrap();
    let mut source = selected::kafka_source(options).unwrap();
    let e = match source.open().await {
        Err(e) => e,
        Ok(()) => {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{prefix}: no error within 60 s on {}",
                    common::connector::backend()
                );
                let mut got = Vec::new();
                match source.produce(&mut got).await {
                    Ok(n) => assert_eq!(n, 0, "{prefix}: records arrived over a connection that must fail"),
                    Err(e) => break e,
                }
            }
        }
    };
    eprintln!("{prefix} on {}: {e}", common::connector::backend());
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_and_sink_over_tls() {
    let Some(tls) = common::tls() else { return };
    sink_then_source(
        &tls.ssl_brokers,
        &[("security_protocol", "ssl"), ("ssl_ca_location", path(&tls.ca))],
        "sec-tls",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_and_sink_over_mtls_with_an_encrypted_key() {
    let Some(tls) = common::tls() else { return };
    sink_then_source(
        &tls.mtls_brokers,
        &[
            ("security_protocol", "ssl"),
            ("ssl_ca_location", path(&tls.ca)),
            ("ssl_certificate_location", path(&tls.cert)),
            ("ssl_key_location", path(&tls.key_encrypted)),
            ("ssl_key_password", &tls.key_password),
        ],
        "sec-mtls",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_and_sink_over_sasl_ssl_with_scram_sha_256_and_512() {
    let (Some(tls), Some(sasl)) = (common::tls(), common::sasl()) else {
        return;
    };
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        sink_then_source(
            &tls.sasl_ssl_brokers,
            &[
                ("security_protocol", "sasl_ssl"),
                ("ssl_ca_location", path(&tls.ca)),
                ("sasl_mechanism", mechanism),
                ("sasl_username", &sasl.username),
                ("sasl_password", &sasl.password),
            ],
            &format!("sec-{}", mechanism.to_ascii_lowercase()),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_scram_password_is_an_authentication_error_that_never_echoes_it() {
    let (Some(tls), Some(sasl)) = (common::tls(), common::sasl()) else {
        return;
    };
    let wrong = "canary-3c1e-wrong-scram-pw";
    let e = source_error(
        &tls.sasl_ssl_brokers,
        &[
            ("security_protocol", "sasl_ssl"),
            ("ssl_ca_location", path(&tls.ca)),
            ("sasl_mechanism", "SCRAM-SHA-512"),
            ("sasl_username", &sasl.username),
            ("sasl_password", wrong),
        ],
        "sec-wrong-pw",
    )
    .await;
    let text = e.to_string();
    assert!(!text.contains(wrong) && !format!("{e:?}").contains(wrong), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("authentication"),
        "the error says authentication failed: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_ca_is_a_certificate_error() {
    let Some(tls) = common::tls() else { return };
    let e = source_error(
        &tls.ssl_brokers,
        &[("security_protocol", "ssl"), ("ssl_ca_location", path(&tls.other_ca))],
        "sec-untrusted",
    )
    .await;
    let text = e.to_string().to_ascii_lowercase();
    assert!(
        text.contains("certificate") || text.contains("unknownissuer") || text.contains("unknown issuer"),
        "the error says the certificate was not trusted: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_roots_do_not_trust_the_test_ca() {
    // No CA given: the default roots (webpki-roots natively, the system
    // store on rdkafka) must not accept a certificate our private CA signed.
    let Some(tls) = common::tls() else { return };
    let e = source_error(&tls.ssl_brokers, &[("security_protocol", "ssl")], "sec-default-roots").await;
    let text = e.to_string().to_ascii_lowercase();
    assert!(
        text.contains("certificate") || text.contains("unknownissuer") || text.contains("unknown issuer"),
        "the error says the certificate was not trusted: {e}"
    );
}
