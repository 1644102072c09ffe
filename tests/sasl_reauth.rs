//! KIP-368 re-authentication against the sasl broker's REAUTH listener
//! (`scripts/kafka-local up --sasl`: `connections.max.reauth.ms=10000`).
//!
//! OAUTHBEARER runs the same on the OAUTH listener (same 10 s sessions)
//! with 15 s Keycloak tokens, renewed by the OIDC provider meanwhile, and
//! GSSAPI on the KRB listener (same 10 s sessions), each re-authentication
//! a fresh AS/TGS exchange with the MIT KDC (no ticket cache).
//!
//! For every mechanism, concurrently in one test (so the binary takes about
//! one run's time): a producer and a consumer share one cluster handle for
//! `CLINK_KAFKA_REAUTH_TEST_SECS` (default 60) seconds. The broker connection
//! that carries Produce and Fetch must stay the same connection all along,
//! re-authenticate at least 4 times (a 10 s session, renewed at 85-95 % of
//! it), answer every request (no send fails) and every record must be read
//! back exactly once, in order.
//!
//! Native client only: the test reads the connection's re-authentication
//! count, which the connector's backend traits do not expose (librdkafka
//! re-authenticates by itself since 2.2).

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    ClientConfig, ConnectionRole, Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::wire::secret::Secret;

fn in_ci() -> bool {
    common::broker_required()
}

/// The REAUTH listener and the main broker's SASL credentials, or `None`
/// (outside CI) when the sasl broker does not run.
fn reauth_env() -> Option<(String, String, String)> {
    let get = |var: &str| match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if in_ci() => panic!("CI=true but {var} is not set: run scripts/kafka-local up --sasl and eval its env"),
        _ => {
            eprintln!("note: {var} is not set; skipping (run scripts/kafka-local up --sasl and eval its env)");
            None
        }
    };
    Some((
        get("CLINK_KAFKA_REAUTH_BOOTSTRAP")?,
        get("CLINK_KAFKA_SASL_USERNAME")?,
        get("CLINK_KAFKA_SASL_PASSWORD")?,
    ))
}

fn run_secs() -> u64 {
    std::env::var("CLINK_KAFKA_REAUTH_TEST_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

async fn produce_consume_across_reauthentications(mechanism: SaslMechanism) {
    let Some((bootstrap, user, password)) = reauth_env() else {
        return;
    };
    let config = ClientConfig::new(&bootstrap).with_sasl(mechanism, user, Secret::new(password));
    run_across_reauthentications(config, mechanism).await;
}

/// The run itself on `config` (whose mechanism is `mechanism`); returns
/// the Produce/Fetch connection's re-authentication count.
async fn run_across_reauthentications(mut config: ClientConfig, mechanism: SaslMechanism) -> u64 {
    config.client_id = format!("clink-reauth-{}", mechanism.name().to_ascii_lowercase());
    config.request_timeout = Duration::from_secs(15);
    let cluster = common::cluster(config).await;
    let topic = common::unique_topic(&format!("reauth-{}", mechanism.name().to_ascii_lowercase()));
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let leader = cluster
        .wait_for_topic(&topic, 1, Duration::from_secs(30))
        .await
        .expect("topic metadata")
        .partitions[0]
        .leader;
    // Connections by role (issue 24): the Produce and the Fetch connection
    // to the leader are separate, and each must re-authenticate.
    let produce_conn = cluster
        .broker_for(leader, ConnectionRole::Produce)
        .await
        .expect("leader connection");
    let fetch_conn = cluster
        .broker_for(leader, ConnectionRole::Fetch)
        .await
        .expect("leader connection");

    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer.seek(&topic, 0, Offset::Earliest).await.expect("seek");

    let run = Duration::from_secs(run_secs());
    let started = Instant::now();
    // How many records the producer sent, once it is done.
    let total = AtomicU64::new(u64::MAX);
    let produce = async {
        let mut sent = 0u64;
        let mut acks = Vec::new();
        while started.elapsed() < run {
            for _ in 0..10 {
                let record = ProducerRecord::new(&topic, format!("{mechanism}-{sent}"));
                acks.push(producer.send(record).await.expect("send"));
                sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        producer.flush(Duration::from_secs(30)).await.expect("flush");
        for (i, ack) in acks.into_iter().enumerate() {
            ack.await.unwrap_or_else(|e| panic!("record {i} failed: {e}"));
        }
        total.store(sent, Ordering::SeqCst);
        sent
    };
    let consume = async {
        let mut seen = Vec::new();
        while (seen.len() as u64) < total.load(Ordering::SeqCst) {
            assert!(
                started.elapsed() < run + Duration::from_secs(60),
                "only {} records read back 60 s after the run",
                seen.len()
            );
            let batch = consumer.poll(Duration::from_millis(500)).await.expect("poll");
            seen.extend(batch.into_iter().map(|r| r.record.value.expect("a value")));
        }
        seen
    };
    let (sent, seen) = tokio::join!(produce, consume);
    let extra = consumer.poll(Duration::from_millis(300)).await.expect("poll");
    assert!(extra.is_empty(), "{} records beyond those sent", extra.len());
    let elapsed = started.elapsed();

    assert_eq!(seen.len() as u64, sent, "records read back");
    let distinct: HashSet<_> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "a record was read twice");
    for (i, v) in seen.iter().enumerate() {
        assert_eq!(
            v.as_ref(),
            format!("{mechanism}-{i}").as_bytes(),
            "record {i} out of order"
        );
    }
    for (role, conn) in [
        (ConnectionRole::Produce, &produce_conn),
        (ConnectionRole::Fetch, &fetch_conn),
    ] {
        let now_conn = cluster.broker_for(leader, role).await.expect("leader connection");
        assert!(
            now_conn.same_connection(conn),
            "the {role:?} connection was replaced: {:?}",
            conn.fatal_error()
        );
    }
    let reauths = produce_conn.reauthentications().min(fetch_conn.reauthentications());
    let control = cluster
        .any_broker()
        .await
        .expect("control connection")
        .reauthentications();
    eprintln!(
        "{mechanism}: {sent} records in {elapsed:?}; the Produce and Fetch connections re-authenticated at least {reauths} times each, \
         the control connection {control} times"
    );
    assert!(
        reauths >= 4,
        "{mechanism}: only {reauths} re-authentications in {elapsed:?}"
    );
    reauths
}

async fn scram_sha_512_reauthenticates_without_failed_requests() {
    produce_consume_across_reauthentications(SaslMechanism::ScramSha512).await;
}

async fn plain_reauthenticates_without_failed_requests() {
    produce_consume_across_reauthentications(SaslMechanism::Plain).await;
}

/// OAUTHBEARER on the OAUTH listener (also `connections.max.reauth.ms`
/// = 10 s) with the Keycloak client whose tokens live 15 s: each session
/// ends at the earlier of the two, and the shared OIDC provider fetches a
/// new token at half of each 15 s token's life (10 s margin), so the run both
/// re-authenticates and renews its token several times.
async fn oauthbearer_reauthenticates_with_fresh_tokens_without_failed_requests() {
    use clink_kafka::client::{OAuthBearerConfig, OidcClientCredentials, OidcConfig, TlsConfig, TokenProvider};
    let vars = [
        "CLINK_KAFKA_OAUTH_BOOTSTRAP",
        "CLINK_KAFKA_OIDC_TOKEN_URL",
        "CLINK_KAFKA_OIDC_SHORT_CLIENT_ID",
        "CLINK_KAFKA_OIDC_SHORT_CLIENT_SECRET",
        "CLINK_KAFKA_OIDC_SCOPE",
        "CLINK_KAFKA_OIDC_CA",
    ];
    let mut v = Vec::new();
    for var in vars {
        let Some(value) = common::required_env(var) else { return };
        v.push(value);
    }
    let oidc = OidcConfig::new(v[1].clone(), v[2].clone(), Secret::new(v[3].clone()))
        .with_scope(v[4].clone())
        .with_tls(TlsConfig::default().with_ca_file(&v[5]));
    let provider: std::sync::Arc<dyn TokenProvider> =
        std::sync::Arc::new(OidcClientCredentials::new(oidc).expect("the OIDC provider"));
    let config = ClientConfig::new(&v[0]).with_oauthbearer(OAuthBearerConfig::new(provider.clone()));
    let reauths = run_across_reauthentications(config, SaslMechanism::OAuthBearer).await;
    let fetches = provider.fetches();
    eprintln!("OAUTHBEARER: {fetches} token fetches for {reauths} re-authentications of the data connection");
    assert!(fetches >= 3, "only {fetches} token fetches: tokens live 15 s");
}

/// GSSAPI on the KRB listener (`connections.max.reauth.ms` = 10 s too):
/// every re-authentication is a new Kerberos context (AS and TGS exchanges
/// with scripts/kdc-local's KDC, AP-REQ, the RFC 4752 security-layer step).
async fn gssapi_reauthenticates_without_failed_requests() {
    use clink_kafka::client::KerberosConfig;
    let vars = [
        "CLINK_KAFKA_GSSAPI_BOOTSTRAP",
        "CLINK_KAFKA_KRB5_KDC",
        "CLINK_KAFKA_KRB5_CLIENT_KEYTAB",
        "CLINK_KAFKA_KRB5_CLIENT_PRINCIPAL",
        "CLINK_KAFKA_KRB5_SERVICE_NAME",
    ];
    let mut v = Vec::new();
    for var in vars {
        let Some(value) = common::required_env(var) else { return };
        v.push(value);
    }
    let mut kerberos = KerberosConfig::new(&v[3], &v[2]);
    kerberos.service_name = v[4].clone();
    kerberos.kdc = Some(v[1].clone());
    let config = ClientConfig::new(&v[0]).with_kerberos(kerberos);
    run_across_reauthentications(config, SaslMechanism::Gssapi).await;
}

/// The four runs at once, in one test: each is a minute of mostly waiting,
/// and libtest runs only as many tests at a time as there are cores, so
/// four separate tests would take two minutes on the 2-core CI machine.
/// A failure names its mechanism in its panic message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mechanism_reauthenticates_without_failed_requests() {
    tokio::join!(
        scram_sha_512_reauthenticates_without_failed_requests(),
        plain_reauthenticates_without_failed_requests(),
        oauthbearer_reauthenticates_with_fresh_tokens_without_failed_requests(),
        gssapi_reauthenticates_without_failed_requests(),
    );
}
