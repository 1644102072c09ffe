//! SASL against the broker's SASL_PLAINTEXT listener: SCRAM-SHA-256,
//! SCRAM-SHA-512 and PLAIN round trips; a wrong password is a typed
//! authentication error naming the mechanism, quickly; a plaintext client on
//! the SASL port gets a clear error, not a hang.

mod common;

use std::time::{Duration, Instant};

use clink_kafka::client::{Cluster, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::Error;

async fn round_trip(mechanism: SaslMechanism) {
    let Some(sasl) = common::sasl() else { return };
    let mut config = sasl.config(mechanism, &sasl.password);
    config.request_timeout = Duration::from_secs(15);
    let cluster = common::cluster(config).await;
    let topic = common::unique_topic(&format!("sasl-{}", mechanism.name().to_ascii_lowercase()));
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..10 {
        futures.push(
            producer
                .send(ProducerRecord::new(&topic, format!("{mechanism} {i}")))
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 0, Offset::Earliest, 10).await;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.record.value.as_deref(), Some(format!("{mechanism} {i}").as_bytes()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_round_trip() {
    round_trip(SaslMechanism::ScramSha256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_512_round_trip() {
    round_trip(SaslMechanism::ScramSha512).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_round_trip() {
    round_trip(SaslMechanism::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_an_auth_error_naming_the_mechanism() {
    let Some(sasl) = common::sasl() else { return };
    let wrong = "not-the-password-0xdeadbeef";
    for mechanism in [
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::Plain,
    ] {
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(20), Cluster::connect(sasl.config(mechanism, wrong)))
            .await
            .unwrap_or_else(|_| panic!("{mechanism}: authentication did not fail within 20 s"));
        let err = result.expect_err("a wrong password must not authenticate");
        let text = err.to_string();
        match &err {
            Error::Authentication {
                mechanism: m, message, ..
            } => {
                assert_eq!(*m, mechanism.name());
                assert!(!message.is_empty());
            }
            other => panic!("{mechanism}: expected an authentication error, got {other:?}"),
        }
        assert!(text.contains(mechanism.name()), "{text}");
        assert!(
            !text.contains(wrong) && !format!("{err:?}").contains(wrong),
            "the password leaked: {text}"
        );
        eprintln!("{mechanism}: failed in {:?}: {text}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_client_on_sasl_port_fails_clearly() {
    let Some(sasl) = common::sasl() else { return };
    // One pass over the bootstrap list: with the default `bootstrap_timeout`
    // (60 s) the closed connection is retried until then, and the error is
    // the deadline's, carrying this one as its last error.
    let mut config = common::config(&sasl.brokers);
    config.bootstrap_timeout = Duration::ZERO;
    let result = tokio::time::timeout(Duration::from_secs(20), Cluster::connect(config))
        .await
        .expect("a plaintext client on the SASL port must fail, not hang");
    let err = result.expect_err("the SASL listener must not serve an unauthenticated client");
    let text = err.to_string();
    assert!(matches!(err, Error::Disconnected { .. }), "{err:?}");
    assert!(
        text.contains("closed the connection") && text.contains("SASL"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mechanism_the_listener_lacks_is_refused_without_fallback() {
    let Some(brokers) = common::brokers() else { return };
    // The plaintext listener has no SASL at all.
    let config = common::config(&brokers).with_sasl(
        SaslMechanism::ScramSha256,
        "alice",
        clink_kafka::wire::secret::Secret::new("alice-secret"),
    );
    let result = tokio::time::timeout(Duration::from_secs(20), Cluster::connect(config))
        .await
        .expect("must fail, not hang");
    let err = result.expect_err("SASL on a plaintext listener must fail");
    eprintln!("{err}");
    assert!(
        err.to_string().contains("SCRAM-SHA-256") || err.is_connection_error(),
        "{err}"
    );
}
