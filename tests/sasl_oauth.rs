//! SASL/OAUTHBEARER (issue 25) against the sasl broker's OAUTH listener
//! (`CLINK_KAFKA_OAUTH_BOOTSTRAP`), which validates tokens against
//! Keycloak's JWKS (`scripts/keycloak-local`: the client-credentials
//! clients, HTTPS with its own CA).
//!
//! On the backend the run selects (`CLINK_KAFKA_TEST_BACKEND`), through the
//! connector's options (`sasl_oauthbearer_*`):
//! - a sink writes and a source reads back through the listener, with a
//!   token from Keycloak by the client-credentials grant;
//! - refusals with errors that say what failed and never contain the
//!   client secret (nor does any log line): a wrong client secret, a token
//!   without the `kafka` audience (scope `other`), and an endpoint whose
//!   certificate is not trusted (no `https_ca_location`: the Mozilla roots
//!   do not know Keycloak's local CA).
//!
//! With the native client (whichever backend the run selects):
//! - a custom `TokenProvider` (a library user's own) wrapping the OIDC
//!   provider and counting its calls;
//! - an expired Keycloak token (the 15 s client's, used once it expired
//!   and the broker's 30 s clock-skew allowance passed) and a
//!   forged JWT from a `StaticTokenProvider`: refused, saying so.
//!
//! And the CLI: `produce` and `consume` with `--sasl-mechanism OAUTHBEARER`
//! and the `--sasl-oauthbearer-*` flags (natively with
//! `--sasl-oauthbearer-extensions`), the secret from an environment
//! variable.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clink_kafka::client::{
    ClientConfig, Consumer, ConsumerConfig, NewTopic, OAuthBearerConfig, OAuthToken, Offset, OidcClientCredentials,
    OidcConfig, Producer, ProducerConfig, ProducerRecord, StaticTokenProvider, TlsConfig, TokenFuture, TokenProvider,
    TopicPartition,
};
use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
use clink_kafka::connector::selected;
use clink_kafka::connector::{ConnectorError, KafkaMessage, Sink, Source};
use clink_kafka::wire::secret::Secret;

const RECORDS: usize = 20;

/// The OAUTH listener and Keycloak's settings.
struct Oidc {
    bootstrap: String,
    plaintext: String,
    token_url: String,
    client_id: String,
    secret: String,
    scope: String,
    other_scope: String,
    short_id: String,
    short_secret: String,
    ca: String,
}

fn oidc() -> Option<Oidc> {
    let get = common::required_env;
    Some(Oidc {
        bootstrap: get("CLINK_KAFKA_OAUTH_BOOTSTRAP")?,
        plaintext: get("CLINK_KAFKA_SASL_PLAINTEXT_BROKER")?,
        token_url: get("CLINK_KAFKA_OIDC_TOKEN_URL")?,
        client_id: get("CLINK_KAFKA_OIDC_CLIENT_ID")?,
        secret: get("CLINK_KAFKA_OIDC_CLIENT_SECRET")?,
        scope: get("CLINK_KAFKA_OIDC_SCOPE")?,
        other_scope: get("CLINK_KAFKA_OIDC_OTHER_SCOPE")?,
        short_id: get("CLINK_KAFKA_OIDC_SHORT_CLIENT_ID")?,
        short_secret: get("CLINK_KAFKA_OIDC_SHORT_CLIENT_SECRET")?,
        ca: get("CLINK_KAFKA_OIDC_CA")?,
    })
}

impl Oidc {
    /// The connector's OAUTHBEARER options, with `secret` and `scope`.
    fn options<'a>(&'a self, secret: &'a str, scope: &'a str, ca: bool) -> Vec<(&'a str, &'a str)> {
        let mut v = vec![
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "OAUTHBEARER"),
            ("sasl_oauthbearer_method", "oidc"),
            ("sasl_oauthbearer_token_endpoint_url", self.token_url.as_str()),
            ("sasl_oauthbearer_client_id", self.client_id.as_str()),
            ("sasl_oauthbearer_client_secret", secret),
            ("sasl_oauthbearer_scope", scope),
        ];
        if ca {
            v.push(("https_ca_location", self.ca.as_str()));
        }
        v
    }

    fn oidc_config(&self, id: &str, secret: &str) -> OidcConfig {
        OidcConfig::new(self.token_url.clone(), id, Secret::new(secret))
            .with_scope(self.scope.clone())
            .with_tls(TlsConfig::default().with_ca_file(&self.ca))
    }

    /// A fresh one-partition topic, created over the sasl broker's
    /// PLAINTEXT listener.
    async fn topic(&self, prefix: &str) -> String {
        let cluster = common::cluster(common::config(&self.plaintext)).await;
        let topic = common::unique_topic(prefix);
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        topic
    }

    /// The native client through the OAUTH listener with `oauth`.
    fn client(&self, oauth: OAuthBearerConfig) -> ClientConfig {
        let mut c = ClientConfig::new(&self.bootstrap).with_oauthbearer(oauth);
        c.request_timeout = Duration::from_secs(15);
        c.metadata_max_wait = Duration::from_secs(10);
        c
    }
}

fn params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect()
}

/// Opens a source with `security` and polls it until it fails (bounded:
/// 60 s): the error.
async fn source_error(o: &Oidc, security: &[(&str, &str)], prefix: &str) -> ConnectorError {
    let topic = o.topic(prefix).await;
    let extra = [
        security,
        &[
            ("kafka.topic.metadata.propagation.max.ms", "10000"),
            ("kafka.socket.timeout.ms", "5000"),
        ],
    ]
    .concat();
    let options = parse_source(FactoryKind::MessageSource, &params(&o.bootstrap, &topic, &extra), 0, 1).unwrap();
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
    let _ = source.close().await;
    eprintln!("{prefix} on {}: {e}", common::connector::backend());
    e
}

fn assert_no_secret(text: &str, secrets: &[&str], what: &str) {
    for s in secrets {
        assert!(!text.contains(s), "{what} contains a secret:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_and_source_with_keycloak_client_credentials() {
    let logs = common::connector::capture_logs();
    let Some(o) = oidc() else { return };
    let topic = o.topic("oauth-conn").await;
    let want: Vec<String> = (0..RECORDS).map(|i| format!("oauth-{i}")).collect();
    let security = o.options(&o.secret, &o.scope, true);

    let mut extra = security.clone();
    extra.push(("linger_ms", "0"));
    let mut sink =
        selected::kafka_sink(parse_sink(FactoryKind::MessageSink, &params(&o.bootstrap, &topic, &extra)).unwrap())
            .unwrap();
    sink.open().await.unwrap();
    sink.on_data(want.iter().map(|v| KafkaMessage::new(v.clone())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(
        (sink.counters().delivered(), sink.counters().delivery_errors()),
        (RECORDS as u64, 0),
        "on {}",
        common::connector::backend()
    );
    sink.close().await.unwrap();

    let options = parse_source(
        FactoryKind::MessageSource,
        &params(&o.bootstrap, &topic, &security),
        0,
        1,
    )
    .unwrap();
    assert_no_secret(&format!("{options:?}"), &[&o.secret], "the source options' Debug");
    let got = common::connector::read_values(options, RECORDS).await;
    assert_eq!(got, want, "on {}", common::connector::backend());
    assert_no_secret(&logs.contents(), &[&o.secret], "the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_is_refused_by_the_endpoint() {
    let logs = common::connector::capture_logs();
    let Some(o) = oidc() else { return };
    let wrong = "not-the-client-secret-7f3a";
    let e = source_error(&o, &o.options(wrong, &o.scope, true), "oauth-wrong-secret").await;
    let text = e.to_string();
    assert!(
        text.contains("refused the client credentials") && text.contains("401"),
        "on {}: {text}",
        common::connector::backend()
    );
    assert_no_secret(&text, &[wrong, &o.secret], "the error");
    assert_no_secret(&logs.contents(), &[wrong, &o.secret], "the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_kafka_audience_is_refused_by_the_broker() {
    let logs = common::connector::capture_logs();
    let Some(o) = oidc() else { return };
    let e = source_error(&o, &o.options(&o.secret, &o.other_scope, true), "oauth-audience").await;
    let text = e.to_string();
    assert!(
        text.contains("OAUTHBEARER") || text.to_ascii_lowercase().contains("authentication"),
        "on {}: {text}",
        common::connector::backend()
    );
    if !common::connector::on_rdkafka() {
        assert!(text.contains("invalid_token"), "{text}");
    }
    assert_no_secret(&text, &[&o.secret], "the error");
    assert_no_secret(&logs.contents(), &[&o.secret], "the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_endpoint_certificate_is_refused() {
    let logs = common::connector::capture_logs();
    let Some(o) = oidc() else { return };
    // No https_ca_location: the built-in Mozilla roots, which do not know
    // Keycloak's local CA.
    let e = source_error(&o, &o.options(&o.secret, &o.scope, false), "oauth-untrusted").await;
    let text = e.to_string();
    assert!(
        text.contains("certificate not trusted"),
        "on {}: {text}",
        common::connector::backend()
    );
    assert_no_secret(&text, &[&o.secret], "the error");
    assert_no_secret(&logs.contents(), &[&o.secret], "the logs");
}

/// A library user's provider: the OIDC provider, counting the calls.
struct Counting {
    inner: OidcClientCredentials,
    calls: AtomicU64,
}

impl TokenProvider for Counting {
    fn token(&self) -> TokenFuture<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.token()
    }

    fn fetches(&self) -> u64 {
        self.inner.fetches()
    }
}

/// Produces `RECORDS` records and reads them back with the native client.
async fn native_roundtrip(o: &Oidc, config: ClientConfig, prefix: &str) {
    let topic = o.topic(prefix).await;
    let cluster = common::cluster(config).await;
    cluster
        .wait_for_topic(&topic, 1, Duration::from_secs(30))
        .await
        .expect("topic metadata through the OAUTH listener");
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let values: Vec<String> = (0..RECORDS).map(|i| format!("{prefix}-{i}")).collect();
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
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < RECORDS {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} records read back",
            seen.len()
        );
        for r in consumer.poll(Duration::from_millis(500)).await.expect("poll") {
            seen.push(String::from_utf8(r.record.value.expect("a value").to_vec()).unwrap());
        }
    }
    assert_eq!(seen, values);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_token_provider_supplies_the_tokens() {
    let Some(o) = oidc() else { return };
    let provider = Arc::new(Counting {
        inner: OidcClientCredentials::new(o.oidc_config(&o.client_id, &o.secret)).expect("provider"),
        calls: AtomicU64::new(0),
    });
    let mut oauth = OAuthBearerConfig::new(provider.clone());
    oauth.extensions = clink_kafka::wire::sasl::oauthbearer::parse_extensions("traceId=clink1").unwrap();
    native_roundtrip(&o, o.client(oauth), "oauth-custom").await;
    let (calls, fetches) = (provider.calls.load(Ordering::Relaxed), provider.fetches());
    eprintln!("custom provider: {calls} calls, {fetches} token fetches");
    assert!(calls >= 1, "the provider was never asked");
    assert!(
        fetches >= 1 && fetches <= calls,
        "{fetches} fetches for {calls} calls: the token is cached"
    );
}

/// The native client's authentication error through `provider`.
async fn native_refusal(o: &Oidc, provider: Arc<dyn TokenProvider>) -> String {
    let config = o.client(OAuthBearerConfig::new(provider));
    let cluster = clink_kafka::client::Cluster::connect(config).await;
    let e = match cluster {
        Err(e) => e,
        Ok(c) => match c.any_broker().await {
            Err(e) => e,
            Ok(_) => panic!("expected an authentication failure"),
        },
    };
    e.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_forged_token_is_refused() {
    use base64::Engine;
    let Some(o) = oidc() else { return };
    // A real Keycloak token of the 15 s client, presented once expired.
    let short = OidcClientCredentials::new(o.oidc_config(&o.short_id, &o.short_secret)).expect("provider");
    let token = short.token().await.expect("a token from the 15 s client");
    let left = token
        .expires_at
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    assert!(
        left <= Duration::from_secs(16),
        "the short client's token lives {left:?}"
    );
    // Kafka's validator allows 30 s of clock skew
    // (sasl.oauthbearer.clock.skew.seconds): past that, the token is dead.
    tokio::time::sleep(left + Duration::from_secs(32)).await;
    let jwt = token.token.expose().to_owned();
    let text = native_refusal(&o, Arc::new(StaticTokenProvider::new(token))).await;
    eprintln!("expired: {text}");
    assert!(
        text.contains("OAUTHBEARER") && text.contains("invalid_token") && text.contains("had expired"),
        "{text}"
    );
    assert_no_secret(&text, &[&jwt, &o.short_secret], "the error");

    // A forged JWT: right shape, no valid signature.
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let forged = format!(
        "{}.{}.{}",
        b64(r#"{"alg":"RS256","typ":"JWT","kid":"forged"}"#),
        b64(r#"{"sub":"mallory","aud":"kafka","exp":4102444800}"#),
        b64("not a signature")
    );
    let provider = StaticTokenProvider::new(OAuthToken::new(
        Secret::new(forged.clone()),
        SystemTime::now() + Duration::from_secs(3600),
    ));
    let text = native_refusal(&o, Arc::new(provider)).await;
    eprintln!("forged: {text}");
    assert!(
        text.contains("invalid_token") && !text.contains("had expired"),
        "{text}"
    );
    assert_no_secret(&text, &[&forged], "the error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_produces_and_consumes_with_oauthbearer() {
    let Some(o) = oidc() else { return };
    let topic = o.topic("oauth-cli").await;
    let backend = common::connector::backend();
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
        cmd.args(args)
            .args([
                "--backend",
                backend,
                "--brokers",
                &o.bootstrap,
                "--topic",
                &topic,
                "--sasl-mechanism",
                "OAUTHBEARER",
                "--sasl-oauthbearer-token-endpoint-url",
                &o.token_url,
                "--sasl-oauthbearer-client-id",
                &o.client_id,
                "--sasl-oauthbearer-client-secret-env",
                "CLINK_TEST_OIDC_SECRET",
                "--sasl-oauthbearer-scope",
                &o.scope,
                "--sasl-oauthbearer-ca",
                &o.ca,
            ])
            .env("CLINK_TEST_OIDC_SECRET", &o.secret)
            .env_remove("RUST_LOG");
        if backend == "native" {
            // KIP-342 extensions reach the broker (refused on rdkafka: a
            // named difference).
            cmd.args(["--sasl-oauthbearer-extensions", "traceId=cli1"]);
        }
        cmd
    };
    let values: Vec<String> = (0..RECORDS).map(|i| format!("cli-oauth-{i}")).collect();
    let out = common::process::run(
        &mut cli(&["produce"]),
        &(values.join("\n") + "\n"),
        Duration::from_secs(90),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains(&format!("produced {RECORDS} records")), "{stderr}");
    assert_no_secret(&stderr, &[&o.secret], "produce's stderr");
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
    assert_eq!(got, values, "on --backend {backend}");
    assert_no_secret(&String::from_utf8_lossy(&out.stderr), &[&o.secret], "consume's stderr");

    // The secret is never a flag; a flag without OAUTHBEARER is refused.
    let out = common::process::run_to_exit(
        Command::new(env!("CARGO_BIN_EXE_clink-kafka")).args([
            "consume",
            "--brokers",
            &o.bootstrap,
            "--topic",
            &topic,
            "--sasl-oauthbearer-client-id",
            "x",
        ]),
        "",
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("needs --sasl-mechanism OAUTHBEARER"),
        "{stderr}"
    );
}
