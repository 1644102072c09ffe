//! Option validation: each bad value gets its own error naming the option;
//! unknown options get a suggestion; each security refusal (also through
//! the `kafka.<property>` passthrough); unsupported passthrough properties
//! are named. The passthrough's SASL mapping is shown against the real
//! SASL listener.

mod common;

use std::collections::BTreeMap;

use clink_kafka::client::NewTopic;
use clink_kafka::connector::options::{parse_sink, parse_source, parse_upsert, FactoryKind};
use clink_kafka::connector::{install, BuildContext, ConnectorError, Registry};

const ALL: [FactoryKind; 5] = [
    FactoryKind::MessageSource,
    FactoryKind::TextSource,
    FactoryKind::MessageSink,
    FactoryKind::TextSink,
    FactoryKind::UpsertSink,
];

fn params(kind: FactoryKind, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut p: BTreeMap<String, String> = [("brokers", "127.0.0.1:9092"), ("topic", "t")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if kind == FactoryKind::UpsertSink {
        p.insert("primary_key".into(), "id".into());
    }
    for (k, v) in extra {
        p.insert(k.to_string(), v.to_string());
    }
    p
}

/// Parses (and maps onto the native client, as a build does).
fn check(kind: FactoryKind, extra: &[(&str, &str)]) -> Result<(), ConnectorError> {
    let p = params(kind, extra);
    match kind {
        FactoryKind::MessageSource | FactoryKind::TextSource => parse_source(kind, &p, 0, 1)?.client_config().map(drop),
        FactoryKind::UpsertSink => parse_upsert(&p)?.sink.client_config().map(drop),
        _ => parse_sink(kind, &p)?.client_config().map(drop),
    }
}

#[test]
fn each_bad_value_gives_its_own_named_error() {
    use FactoryKind::*;
    let sasl = [("security_protocol", "sasl_plaintext")];
    /// (factory, option, bad value, other options it needs).
    type Case<'a> = (FactoryKind, &'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (MessageSource, "auto_offset_reset", "sometimes", &[]),
        (MessageSource, "batch_max_wait_ms", "-1", &[]),
        (TextSource, "batch_max_wait_ms", "five", &[]),
        (MessageSource, "poll_timeout", "0", &[]),
        (MessageSource, "max_batch_size", "0", &[]),
        (MessageSource, "partition_discovery_interval", "soon", &[]),
        (MessageSource, "commit_mode", "auto", &[]),
        (MessageSource, "enable_debug", "yes", &[]),
        (TextSource, "decode_error", "ignore", &[]),
        (MessageSource, "group_id", " ", &[]),
        (MessageSink, "client_id", "", &[]),
        (MessageSource, "brokers", "no-port-here", &[]),
        (MessageSink, "topic", "bad topic!", &[]),
        (MessageSink, "acks", "2", &[]),
        (TextSink, "compression", "brotli", &[]),
        (MessageSink, "linger_ms", "-5", &[]),
        (UpsertSink, "linger_ms", "1.5", &[]),
        (MessageSink, "produce_timeout", "0", &[]),
        (MessageSink, "flush_timeout", "later", &[]),
        (MessageSink, "fixed_partition", "-1", &[]),
        (TextSink, "format", "xml", &[]),
        (MessageSink, "metric_prefix", "", &[]),
        (UpsertSink, "primary_key", "a,,b", &[]),
        (MessageSource, "security_protocol", "tls", &[]),
        (MessageSource, "sasl_mechanism", "MD5", &sasl),
        (MessageSink, "ssl_endpoint_identification_algorithm", "dns", &[]),
        (MessageSink, "enable_ssl_certificate_verification", "maybe", &[]),
        (MessageSource, "kafka.fetch.wait.max.ms", "soon", &[]),
        (MessageSource, "kafka.isolation.level", "dirty", &[]),
        (MessageSource, "kafka.enable.auto.commit", "true", &[]),
        (MessageSource, "kafka.auto.offset.reset", "whenever", &[]),
        (MessageSink, "kafka.linger.ms", "x", &[]),
        (MessageSink, "kafka.compression.codec", "brotli", &[]),
        (MessageSink, "kafka.message.timeout.ms", "-1", &[]),
    ];
    let mut named = std::collections::BTreeSet::new();
    for (kind, option, value, extra) in cases {
        let mut all = extra.to_vec();
        all.push((option, value));
        let e = check(*kind, &all).expect_err(&format!("{option}={value:?} must be refused"));
        match &e {
            ConnectorError::InvalidOption {
                option: o, expected, ..
            } => {
                assert_eq!(o, option, "{e}");
                assert!(!expected.is_empty(), "{e}");
            }
            other => panic!("{option}={value:?}: expected InvalidOption, got {other:?}"),
        }
        assert!(e.to_string().contains(option), "the message names {option}: {e}");
        named.insert(*option);
    }
    assert_eq!(named.len(), cases.len() - 2, "distinct options (two are tried twice)");
    // linger_ms says what it wants.
    let e = check(FactoryKind::MessageSink, &[("linger_ms", "-5")]).unwrap_err();
    assert!(e.to_string().contains("non-negative integer"), "{e}");
}

#[test]
fn unknown_options_are_refused_with_a_suggestion() {
    let e = check(FactoryKind::MessageSource, &[("borkers", "x")]).unwrap_err();
    match e {
        ConnectorError::UnknownOption {
            option,
            suggestion,
            factory,
        } => {
            assert_eq!(
                (option.as_str(), suggestion, factory),
                ("borkers", Some("brokers"), "kafka_message_source")
            );
        }
        other => panic!("{other}"),
    }
    let e = check(FactoryKind::MessageSink, &[("linger_mss", "5")]).unwrap_err();
    assert!(e.to_string().contains("did you mean \"linger_ms\""), "{e}");
    let e = check(FactoryKind::TextSource, &[("auto_offset_rest", "earliest")]).unwrap_err();
    assert!(e.to_string().contains("\"auto_offset_reset\""), "{e}");
    let e = check(FactoryKind::MessageSink, &[("qwertyuiop", "1")]).unwrap_err();
    assert!(
        matches!(e, ConnectorError::UnknownOption { suggestion: None, .. }),
        "{e}"
    );
    // Another factory's option is unknown here.
    let e = check(FactoryKind::MessageSink, &[("group_id", "g")]).unwrap_err();
    assert!(matches!(e, ConnectorError::UnknownOption { .. }), "{e}");
    let e = check(FactoryKind::TextSink, &[("primary_key", "id")]).unwrap_err();
    assert!(matches!(e, ConnectorError::UnknownOption { .. }), "{e}");
    let e = check(FactoryKind::MessageSource, &[("format", "json")]).unwrap_err();
    assert!(
        matches!(e, ConnectorError::UnknownOption { .. }),
        "format is a string-channel option: {e}"
    );
    // The registry suggests factory names the same way.
    let mut r = Registry::new();
    install(&mut r).unwrap();
    let e = r.build("kafka_sink_strng", &BuildContext::default()).unwrap_err();
    assert!(e.to_string().contains("kafka_sink_string"), "{e}");
}

#[test]
fn required_options() {
    for (kind, missing) in [
        (FactoryKind::MessageSource, "brokers"),
        (FactoryKind::TextSink, "topic"),
        (FactoryKind::UpsertSink, "primary_key"),
    ] {
        let mut p = params(kind, &[]);
        p.remove(missing);
        let e = match kind {
            FactoryKind::MessageSource => parse_source(kind, &p, 0, 1).map(drop),
            FactoryKind::UpsertSink => parse_upsert(&p).map(drop),
            _ => parse_sink(kind, &p).map(drop),
        }
        .unwrap_err();
        assert!(
            matches!(&e, ConnectorError::MissingOption { option, .. } if *option == missing),
            "{e}"
        );
    }
    let e = parse_source(
        FactoryKind::MessageSource,
        &params(FactoryKind::MessageSource, &[]),
        3,
        3,
    )
    .unwrap_err();
    assert!(e.to_string().contains("subtask_index"), "{e}");
}

fn refused_option(e: &ConnectorError) -> &str {
    match e {
        ConnectorError::InsecureConfig { option, .. } => option,
        other => panic!("expected InsecureConfig, got {other:?}: {other}"),
    }
}

#[test]
fn credentials_without_a_sasl_protocol_are_refused() {
    for kind in ALL {
        let e = check(kind, &[("sasl_username", "alice"), ("sasl_password", "pw-1")]).unwrap_err();
        assert_eq!(refused_option(&e), "sasl_username");
        assert!(e.to_string().contains("sasl_plaintext"), "names the fix: {e}");
        assert!(!e.to_string().contains("pw-1"));
        // Named plaintext is no better.
        let e = check(kind, &[("security_protocol", "plaintext"), ("sasl_password", "pw-1")]).unwrap_err();
        assert_eq!(refused_option(&e), "sasl_password");
        // Through the passthrough.
        let e = check(
            kind,
            &[("kafka.sasl.username", "alice"), ("kafka.sasl.password", "pw-1")],
        )
        .unwrap_err();
        assert_eq!(refused_option(&e), "kafka.sasl.username");
        let e = check(kind, &[("security_protocol", "ssl"), ("kafka.sasl.password", "pw-1")]).unwrap_err();
        assert_eq!(refused_option(&e), "kafka.sasl.password");
        let e = check(kind, &[("sasl_mechanism", "PLAIN")]).unwrap_err();
        assert_eq!(refused_option(&e), "sasl_mechanism");
    }
    // The passthrough cannot weaken what the alias set up.
    let e = check(
        FactoryKind::MessageSink,
        &[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "alice"),
            ("sasl_password", "pw-1"),
            ("kafka.security.protocol", "plaintext"),
        ],
    )
    .unwrap_err();
    assert!(matches!(e, ConnectorError::ConflictingOptions { .. }), "{e}");
    assert!(e.to_string().contains("kafka.security.protocol"), "{e}");
    // Two passwords that differ: named by key, never by value.
    let e = check(
        FactoryKind::MessageSink,
        &[("sasl_password", "pw-1"), ("kafka.sasl.password", "pw-2")],
    )
    .unwrap_err();
    assert!(
        !e.to_string().contains("pw-1") && !e.to_string().contains("pw-2"),
        "{e}"
    );
}

#[test]
fn tls_material_on_a_plaintext_transport_is_refused() {
    for kind in ALL {
        for (option, value) in [
            ("ssl_ca_location", "/ca.pem"),
            ("ssl_certificate_location", "/client.pem"),
            ("ssl_key_location", "/client.key"),
            ("ssl_key_password", "kpw"),
            ("kafka.ssl.ca.location", "/ca.pem"),
            ("kafka.ssl.certificate.location", "/client.pem"),
        ] {
            let e = check(kind, &[(option, value)]).unwrap_err();
            assert_eq!(refused_option(&e), option);
            assert!(e.to_string().contains("'ssl' or 'sasl_ssl'"), "{e}");
            let e = check(
                kind,
                &[
                    ("security_protocol", "sasl_plaintext"),
                    ("sasl_mechanism", "PLAIN"),
                    ("sasl_username", "u"),
                    ("sasl_password", "p"),
                    (option, value),
                ],
            )
            .unwrap_err();
            assert_eq!(refused_option(&e), option);
        }
    }
}

#[test]
fn tls_options_are_validated_and_mapped() {
    for protocol in ["ssl", "sasl_ssl", "SSL"] {
        let mut extra = vec![("security_protocol", protocol), ("ssl_ca_location", "/ca.pem")];
        if protocol == "sasl_ssl" {
            extra.extend([
                ("sasl_mechanism", "SCRAM-SHA-256"),
                ("sasl_username", "u"),
                ("sasl_password", "p"),
            ]);
        }
        check(FactoryKind::MessageSource, &extra).unwrap_or_else(|e| panic!("{protocol}: {e}"));
    }
    // mTLS needs both halves; checked before the native mapping.
    let e = check(
        FactoryKind::MessageSink,
        &[("security_protocol", "ssl"), ("ssl_certificate_location", "/c.pem")],
    )
    .unwrap_err();
    assert!(matches!(e, ConnectorError::ConflictingOptions { .. }), "{e}");
    // A bad hostname-verification value names the option.
    let e = check(
        FactoryKind::TextSource,
        &[
            ("security_protocol", "ssl"),
            ("ssl_endpoint_identification_algorithm", "dns"),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(&e, ConnectorError::InvalidOption { option, .. } if option == "ssl_endpoint_identification_algorithm"),
        "{e}"
    );
}

/// Reads `topic` through a `kafka_message_source` built from `params` and
/// checks the one record written beforehand arrives.
async fn read_one_through(registry: &Registry, params: &[(&str, &str)], what: &str) {
    let ctx = BuildContext::new(params.iter().copied());
    let mut s = registry
        .build("kafka_message_source", &ctx)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_message_source("kafka_message_source")
        .unwrap();
    s.open().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut got = Vec::new();
    for _ in 0..100 {
        let mut batches = Vec::new();
        s.produce(&mut batches).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        got.extend(batches.into_iter().flatten());
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "{what}: {got:?}");
    assert_eq!(got[0].payload.as_deref(), Some(&b"over tls"[..]), "{what}");
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_reach_the_ssl_mtls_and_sasl_ssl_listeners() {
    let (Some(brokers), Some(sasl), Some(tls)) = (common::brokers(), common::sasl(), common::tls()) else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-tls");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    common::connector::produce_values(&cluster, &topic, Some(0), &["over tls".to_owned()]).await;
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    let ca = tls.ca.to_str().unwrap();
    let (cert, key, key_enc) = (
        tls.cert.to_str().unwrap(),
        tls.key.to_str().unwrap(),
        tls.key_encrypted.to_str().unwrap(),
    );
    let common_params = [("topic", topic.as_str()), ("auto_offset_reset", "earliest")];
    let with = |extra: &[(&'static str, &str)]| -> Vec<(String, String)> {
        common_params
            .iter()
            .chain(extra.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let cases: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "ssl",
            with(&[
                ("brokers", &tls.ssl_brokers),
                ("security_protocol", "ssl"),
                ("ssl_ca_location", ca),
            ]),
        ),
        (
            "mtls (encrypted key, via passthrough)",
            with(&[
                ("brokers", &tls.mtls_brokers),
                ("kafka.security.protocol", "SSL"),
                ("kafka.ssl.ca.location", ca),
                ("kafka.ssl.certificate.location", cert),
                ("kafka.ssl.key.location", key_enc),
                ("kafka.ssl.key.password", &tls.key_password),
            ]),
        ),
        (
            "mtls",
            with(&[
                ("brokers", &tls.mtls_brokers),
                ("security_protocol", "ssl"),
                ("ssl_ca_location", ca),
                ("ssl_certificate_location", cert),
                ("ssl_key_location", key),
            ]),
        ),
        (
            "sasl_ssl",
            with(&[
                ("brokers", &tls.sasl_ssl_brokers),
                ("security_protocol", "sasl_ssl"),
                ("sasl_mechanism", "SCRAM-SHA-512"),
                ("sasl_username", &sasl.username),
                ("sasl_password", &sasl.password),
                ("ssl_ca_location", ca),
            ]),
        ),
    ];
    for (what, params) in &cases {
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        read_one_through(&registry, &params, what).await;
    }
    // Without the CA the broker's certificate is not trusted: a TLS error, not a downgrade.
    let ctx = BuildContext::new([
        ("brokers", tls.ssl_brokers.as_str()),
        ("topic", topic.as_str()),
        ("security_protocol", "ssl"),
    ]);
    let mut s = registry
        .build("kafka_message_source", &ctx)
        .unwrap()
        .into_message_source("kafka_message_source")
        .unwrap();
    let e = s.open().await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}

#[test]
fn sasl_needs_a_mechanism_and_credentials() {
    let e = check(FactoryKind::MessageSource, &[("security_protocol", "sasl_plaintext")]).unwrap_err();
    assert_eq!(e.option(), Some("sasl_mechanism"), "{e}");
    let e = check(
        FactoryKind::MessageSource,
        &[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "u"),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            ConnectorError::MissingOption {
                option: "sasl_password",
                ..
            }
        ),
        "{e}"
    );
    // GSSAPI and OAUTHBEARER take no username/password.
    for (mechanism, option) in [("GSSAPI", "sasl_username"), ("OAUTHBEARER", "sasl_username")] {
        let e = check(
            FactoryKind::MessageSource,
            &[
                ("security_protocol", "sasl_plaintext"),
                ("sasl_mechanism", mechanism),
                ("sasl_username", "u"),
                ("sasl_password", "p"),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, ConnectorError::UnsupportedProperty { .. }), "{e}");
        assert_eq!(e.option(), Some(option), "{e}");
    }
    // OAUTHBEARER needs its token endpoint.
    let e = check(
        FactoryKind::MessageSource,
        &[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "OAUTHBEARER"),
        ],
    )
    .unwrap_err();
    assert_eq!(e.option(), Some("sasl_oauthbearer_token_endpoint_url"), "{e}");
}

#[test]
fn unsupported_passthrough_properties_are_named() {
    for (kind, property) in [
        (FactoryKind::MessageSink, "kafka.client.rack"),
        (FactoryKind::MessageSource, "kafka.ssl.keystore.location"),
        (FactoryKind::MessageSource, "kafka.sasl.kerberos.kinit.cmd"),
        (FactoryKind::MessageSource, "kafka.session.timeout.ms"),
        (FactoryKind::MessageSink, "kafka.transactional.id"),
        (FactoryKind::MessageSink, "kafka.no.such.property"),
        (FactoryKind::MessageSink, "kafka.fetch.wait.max.ms"),
        (FactoryKind::MessageSource, "kafka.linger.ms"),
    ] {
        let e = check(kind, &[(property, "1")]).unwrap_err();
        assert!(
            matches!(&e, ConnectorError::UnsupportedProperty { property: p, .. } if p == property),
            "{property}: {e}"
        );
        assert!(e.to_string().contains(property), "{e}");
    }
    // Supported ones map onto the native client.
    let p = params(
        FactoryKind::MessageSource,
        &[
            ("kafka.fetch.wait.max.ms", "50"),
            // Not the default (read_committed), so the mapping shows.
            ("kafka.isolation.level", "read_uncommitted"),
            ("kafka.socket.timeout.ms", "12000"),
            ("kafka.client.id", "from-passthrough"),
            ("kafka.enable.auto.commit", "false"),
        ],
    );
    let o = parse_source(FactoryKind::MessageSource, &p, 0, 1).unwrap();
    let c = o.consumer_config();
    assert_eq!(c.max_wait, std::time::Duration::from_millis(50));
    assert_eq!(c.isolation, clink_kafka::client::IsolationLevel::ReadUncommitted);
    let cc = o.client_config().unwrap();
    assert_eq!(cc.request_timeout, std::time::Duration::from_millis(12000));
    assert_eq!(cc.client_id, "from-passthrough");
    let p = params(
        FactoryKind::MessageSink,
        &[
            ("kafka.compression.type", "zstd"),
            ("kafka.acks", "1"),
            ("kafka.batch.size", "1000"),
        ],
    );
    let o = parse_sink(FactoryKind::MessageSink, &p).unwrap();
    let pc = o.producer_config().unwrap();
    assert_eq!(pc.compression, clink_kafka::wire::compression::Compression::Zstd);
    assert_eq!(pc.acks, clink_kafka::client::Acks::Leader);
    assert!(!pc.idempotent, "acks=1 turns idempotence off");
    assert_eq!(pc.batch_size, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_through_the_passthrough_authenticates() {
    let (Some(brokers), Some(sasl)) = (common::brokers(), common::sasl()) else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sasl-pass");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let ctx = BuildContext::new([
            ("brokers", sasl.brokers.as_str()),
            ("topic", topic.as_str()),
            ("kafka.security.protocol", "SASL_PLAINTEXT"),
            ("kafka.sasl.mechanisms", mechanism),
            ("kafka.sasl.username", sasl.username.as_str()),
            ("kafka.sasl.password", sasl.password.as_str()),
        ]);
        let mut s = registry
            .build("kafka_message_source", &ctx)
            .unwrap()
            .into_message_source("kafka_message_source")
            .unwrap();
        s.open().await.unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        assert_eq!(s.snapshot().len(), 1);
        s.close().await.unwrap();
    }
    // A wrong password is refused by the broker, not worked around.
    let ctx = BuildContext::new([
        ("brokers", sasl.brokers.as_str()),
        ("topic", topic.as_str()),
        ("security_protocol", "sasl_plaintext"),
        ("sasl_mechanism", "SCRAM-SHA-256"),
        ("sasl_username", sasl.username.as_str()),
        ("sasl_password", "not-the-password"),
    ]);
    let mut s = registry
        .build("kafka_message_source", &ctx)
        .unwrap()
        .into_message_source("kafka_message_source")
        .unwrap();
    let e = s.open().await.unwrap_err();
    assert!(e.to_string().contains("SCRAM-SHA-256"), "{e}");
}

// ---------------------------------------------------------------------------
// `backend`: every refusal holds on both backends (the tests above run the
// native parse; these build through the registry as an engine does).

const BACKENDS: [&str; 2] = ["native", "rdkafka"];

fn factory_name(kind: FactoryKind) -> &'static str {
    kind.name()
}

/// Builds `kind` through the registry on `backend`.
fn build_on(backend: &str, kind: FactoryKind, extra: &[(&str, &str)]) -> Result<(), ConnectorError> {
    let mut p = params(kind, extra);
    p.insert("backend".into(), backend.into());
    let mut r = Registry::new();
    install(&mut r).unwrap();
    r.build(factory_name(kind), &BuildContext::new(p)).map(drop)
}

#[test]
fn each_refused_configuration_is_refused_on_both_backends() {
    let sasl_ok: &[(&str, &str)] = &[
        ("security_protocol", "sasl_plaintext"),
        ("sasl_mechanism", "PLAIN"),
        ("sasl_username", "u"),
        ("sasl_password", "pw-canary"),
    ];
    // (extra options, the option the refusal names, whether it is InsecureConfig)
    type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, bool);
    let mut cases: Vec<Case> = vec![
        (
            vec![("sasl_username", "alice"), ("sasl_password", "pw-canary")],
            "sasl_username",
            true,
        ),
        (
            vec![("security_protocol", "plaintext"), ("sasl_password", "pw-canary")],
            "sasl_password",
            true,
        ),
        (
            vec![("kafka.sasl.username", "a"), ("kafka.sasl.password", "pw-canary")],
            "kafka.sasl.username",
            true,
        ),
        (
            vec![("security_protocol", "ssl"), ("kafka.sasl.password", "pw-canary")],
            "kafka.sasl.password",
            true,
        ),
        (vec![("sasl_mechanism", "PLAIN")], "sasl_mechanism", true),
        (vec![("ssl_ca_location", "/ca.pem")], "ssl_ca_location", true),
        (vec![("ssl_key_password", "pw-canary")], "ssl_key_password", true),
        (
            vec![("kafka.ssl.ca.location", "/ca.pem")],
            "kafka.ssl.ca.location",
            true,
        ),
        (
            vec![("kafka.ssl.key.password", "pw-canary")],
            "kafka.ssl.key.password",
            true,
        ),
        // A security property neither table maps: refused by name either way.
        (
            vec![("kafka.ssl.cipher.suites", "ALL")],
            "kafka.ssl.cipher.suites",
            false,
        ),
        (
            vec![("kafka.sasl.oauthbearer.config", "x")],
            "kafka.sasl.oauthbearer.config",
            false,
        ),
        (
            vec![("sasl_mechanism", "GSSAPI"), ("security_protocol", "sasl_plaintext")],
            "sasl_kerberos_principal",
            false,
        ),
        (
            vec![("kafka.session.timeout.ms", "1000")],
            "kafka.session.timeout.ms",
            false,
        ),
        (
            vec![("kafka.enable.auto.offset.store", "true")],
            "kafka.enable.auto.offset.store",
            false,
        ),
    ];
    let mut tls_on_sasl: Vec<(&str, &str)> = sasl_ok.to_vec();
    tls_on_sasl.push(("ssl_certificate_location", "/client.pem"));
    cases.push((tls_on_sasl, "ssl_certificate_location", true));
    // Over TLS: settings that could weaken it or run code that rewrites it
    // (librdkafka would take them verbatim; the native table has none).
    for property in [
        "kafka.ssl.cipher.suites",
        "kafka.ssl.curves.list",
        "kafka.ssl.sigalgs.list",
        "kafka.ssl.providers",
        "kafka.ssl.engine.id",
        "kafka.plugin.library.paths",
    ] {
        cases.push((
            vec![("security_protocol", "ssl"), (property, "legacy")],
            property,
            false,
        ));
    }
    for property in [
        "kafka.sasl.kerberos.kinit.cmd",
        "kafka.sasl.oauthbearer.client.secret",
        "kafka.enable.sasl.oauthbearer.unsecure.jwt",
    ] {
        let mut over_sasl: Vec<(&str, &str)> = sasl_ok.to_vec();
        over_sasl.push((property, "true"));
        cases.push((over_sasl, property, false));
    }
    // GSSAPI takes no password, whichever key names the mechanism.
    cases.push((
        vec![
            ("security_protocol", "sasl_ssl"),
            ("kafka.sasl.mechanisms", "GSSAPI"),
            ("sasl_username", "u"),
            ("sasl_password", "pw-canary"),
        ],
        "sasl_username",
        false,
    ));
    // TLS material in the passthrough over a plaintext transport.
    cases.push((
        vec![
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "SCRAM-SHA-256"),
            ("sasl_username", "u"),
            ("sasl_password", "pw-canary"),
            ("kafka.ssl.key.password", "pw-canary"),
        ],
        "kafka.ssl.key.password",
        true,
    ));
    for backend in BACKENDS {
        for kind in ALL {
            for (extra, option, insecure) in &cases {
                let source_only = option.contains("session.timeout") || option.contains("auto.offset.store");
                if source_only && !kind.is_source() {
                    continue;
                }
                let e = build_on(backend, kind, extra).expect_err("refused");
                assert_eq!(e.option(), Some(*option), "{backend} {kind:?} {extra:?}: {e}");
                if *insecure {
                    assert!(
                        matches!(e, ConnectorError::InsecureConfig { .. }),
                        "{backend} {kind:?}: {e}"
                    );
                }
                assert!(!e.to_string().contains("pw-canary"), "{e}");
                assert!(!format!("{e:?}").contains("pw-canary"), "{e:?}");
            }
        }
        // The passthrough cannot weaken what the typed options set up.
        let sasl_ssl: &[(&str, &str)] = &[
            ("security_protocol", "sasl_ssl"),
            ("sasl_mechanism", "SCRAM-SHA-512"),
            ("sasl_username", "u"),
            ("sasl_password", "pw-canary"),
            ("ssl_endpoint_identification_algorithm", "https"),
            ("enable_ssl_certificate_verification", "true"),
        ];
        // (the strong base, the passthrough property, the weaker value)
        type Weakening<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let weakenings: [Weakening; 7] = [
            (sasl_ok, "kafka.security.protocol", "plaintext"),
            (sasl_ssl, "kafka.security.protocol", "sasl_plaintext"),
            (sasl_ssl, "kafka.security.protocol", "ssl"),
            (sasl_ssl, "kafka.sasl.mechanism", "PLAIN"),
            (sasl_ssl, "kafka.sasl.mechanisms", "SCRAM-SHA-256"),
            (sasl_ssl, "kafka.enable.ssl.certificate.verification", "false"),
            (sasl_ssl, "kafka.ssl.endpoint.identification.algorithm", "none"),
        ];
        if backend == "native" || cfg!(feature = "rdkafka") {
            build_on(backend, FactoryKind::MessageSink, sasl_ssl).expect("the strong configuration builds");
        }
        for (base, property, value) in weakenings {
            let mut weaker = base.to_vec();
            weaker.push((property, value));
            for kind in ALL {
                let e = build_on(backend, kind, &weaker).unwrap_err();
                assert!(
                    matches!(e, ConnectorError::ConflictingOptions { .. }),
                    "{backend} {kind:?} {property}={value}: {e}"
                );
                assert!(e.to_string().contains(property), "{backend}: {e}");
                assert!(!e.to_string().contains("pw-canary"), "{e}");
            }
        }
        // The transactional sink keeps idempotence and acks=all on both.
        let mut two_pc = params(
            FactoryKind::MessageSink,
            &[("transactional_id", "tx"), ("backend", backend)],
        );
        let mut r = Registry::new();
        install(&mut r).unwrap();
        for (k, v) in [("kafka.enable.idempotence", "false"), ("acks", "1")] {
            two_pc.insert(k.into(), v.into());
            let e = r
                .build("kafka_2pc_sink_string", &BuildContext::new(two_pc.clone()))
                .map(drop)
                .unwrap_err();
            assert_eq!(e.option(), Some(k), "{backend}: {e}");
            two_pc.remove(k);
        }
    }
}

#[test]
fn an_unknown_backend_names_the_allowed_values() {
    for kind in ALL {
        let e = build_on("librdkafka", kind, &[]).unwrap_err();
        assert_eq!(e.option(), Some("backend"), "{e}");
        assert!(e.to_string().contains("one of native, rdkafka"), "{e}");
    }
    build_on("Native", FactoryKind::MessageSink, &[]).expect("case-insensitive");
}

#[cfg(not(feature = "rdkafka"))]
#[test]
fn rdkafka_without_the_feature_is_a_build_error_naming_the_feature() {
    for kind in ALL {
        let e = build_on("rdkafka", kind, &[]).unwrap_err();
        assert!(
            matches!(&e, ConnectorError::MissingFeature { feature: "rdkafka", .. }),
            "{e:?}"
        );
        assert_eq!(e.option(), Some("backend"));
        assert!(e.to_string().contains("--features rdkafka"), "{e}");
    }
}

/// The rdkafka backend builds every security configuration and codec the
/// native one does (its librdkafka links OpenSSL, zlib and zstd);
/// `kafka.<property>` reaches librdkafka verbatim, validated by librdkafka
/// when the operator is built (a named difference: natively it is refused).
/// `two_phase_commit = 'kip939'` needs the native client (librdkafka has
/// no KIP-939): the rdkafka backend refuses it when the sink is built,
/// naming the option; `resume` builds on both.
#[cfg(feature = "rdkafka")]
#[test]
fn kip939_is_refused_on_rdkafka_naming_the_option() {
    let base = [("transactional_id", "tx"), ("receipts_in_memory", "true")];
    let with = |mode| {
        let mut v = base.to_vec();
        v.push(("two_phase_commit", mode));
        v
    };
    let e = build_on("rdkafka", FactoryKind::TwoPhaseCommitSink, &with("kip939")).unwrap_err();
    assert_eq!(e.option(), Some("two_phase_commit"), "{e}");
    assert!(e.to_string().contains("native backend"), "{e}");
    build_on("native", FactoryKind::TwoPhaseCommitSink, &with("kip939")).expect("native builds kip939");
    for backend in ["native", "rdkafka"] {
        build_on(backend, FactoryKind::TwoPhaseCommitSink, &with("resume")).expect(backend);
    }
}

#[cfg(feature = "rdkafka")]
#[test]
fn rdkafka_builds_what_native_builds_and_validates_the_passthrough() {
    let rd = |kind, extra: &[(&str, &str)]| build_on("rdkafka", kind, extra);
    for kind in ALL {
        let mut configurations: Vec<Vec<(&str, &str)>> = vec![
            vec![("security_protocol", "ssl")],
            vec![("security_protocol", "ssl"), ("ssl_ca_location", "/ca.pem")],
            vec![
                ("security_protocol", "ssl"),
                ("ssl_ca_location", "/ca.pem"),
                ("ssl_certificate_location", "/client.pem"),
                ("ssl_key_location", "/client.key"),
                ("ssl_key_password", "pw-canary"),
                ("ssl_endpoint_identification_algorithm", "none"),
            ],
            vec![
                ("security_protocol", "ssl"),
                ("enable_ssl_certificate_verification", "false"),
            ],
            vec![("security_protocol", "ssl"), ("kafka.ssl.ca.location", "/ca.pem")],
        ];
        for (protocol, mechanism) in [
            ("sasl_plaintext", "PLAIN"),
            ("sasl_plaintext", "SCRAM-SHA-256"),
            ("sasl_ssl", "SCRAM-SHA-512"),
            ("sasl_ssl", "PLAIN"),
        ] {
            configurations.push(vec![
                ("security_protocol", protocol),
                ("sasl_mechanism", mechanism),
                ("sasl_username", "u"),
                ("sasl_password", "pw-canary"),
            ]);
        }
        for extra in &configurations {
            rd(kind, extra).unwrap_or_else(|e| panic!("rdkafka {kind:?} {extra:?}: {e}"));
            build_on("native", kind, extra).unwrap_or_else(|e| panic!("native {kind:?} {extra:?}: {e}"));
        }
        let e = rd(kind, &[("kafka.no.such.property", "1")]).unwrap_err();
        assert_eq!(e.option(), Some("kafka.no.such.property"), "{e}");
        // Verbatim: a librdkafka property the native table does not know.
        rd(kind, &[("kafka.socket.keepalive.enable", "true")]).expect("librdkafka takes socket.keepalive.enable");
        // The native client accepts it with a warning (the OS default stays).
        build_on("native", kind, &[("kafka.socket.keepalive.enable", "true")])
            .expect("native accepts socket.keepalive.enable, warned about");
        // client.rack (KIP-392) is a consumer setting on both backends.
        if kind.is_source() {
            rd(kind, &[("kafka.client.rack", "r1")]).expect("librdkafka takes client.rack");
            build_on("native", kind, &[("kafka.client.rack", "r1")]).expect("the native consumer takes client.rack");
        }
        // Alternative TLS material librdkafka takes verbatim over TLS.
        rd(
            kind,
            &[("security_protocol", "ssl"), ("kafka.ssl.crl.location", "/crl.pem")],
        )
        .expect("librdkafka takes ssl.crl.location over TLS");
    }
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        rd(FactoryKind::MessageSink, &[("compression", codec)]).expect(codec);
    }
    // A bad verbatim value is librdkafka's refusal, naming the property;
    // a secret's value is never echoed.
    let e = rd(
        FactoryKind::MessageSink,
        &[("kafka.queue.buffering.max.messages", "lots")],
    )
    .unwrap_err();
    assert_eq!(e.option(), Some("kafka.queue.buffering.max.messages"), "{e}");
}

/// Every property of librdkafka's CONFIGURATION.md (and the Java names the
/// client's table adds) through the connector on the native backend: each
/// is refused naming it and why, accepted with one warning line naming it,
/// accepted only at its fixed value, or read (a bad value is refused naming
/// it; its effect on the configurations is
/// `client::properties::tests::every_applied_property_changes_the_configuration`
/// and, for the connector's own mapping, the tests above).
#[test]
fn every_librdkafka_property_is_applied_warned_about_or_refused_by_name() {
    use clink_kafka::client::properties::{known_names, treatment, Setting, Treatment};
    let logs = common::connector::capture_logs();
    // The connector maps these through its own options or security aliases,
    // or takes free text: a bad value is not a thing.
    let free_text = |s: Setting| {
        matches!(
            s,
            Setting::ClientId
                | Setting::GroupId
                | Setting::ClientRack
                | Setting::TransactionalId
                | Setting::SaslUsername
                | Setting::SaslPassword
                | Setting::SslCaLocation
                | Setting::SslCertificateLocation
                | Setting::SslKeyLocation
                | Setting::SslKeyPassword
        )
    };
    let kinds = [
        FactoryKind::MessageSource,
        FactoryKind::MessageSink,
        FactoryKind::TwoPhaseCommitSink,
    ];
    let build = |kind: FactoryKind, key: &str, value: &str| {
        let mut p = params(kind, &[(key, value)]);
        if kind == FactoryKind::TwoPhaseCommitSink {
            p.insert("transactional_id".into(), "tx".into());
            p.insert("receipts_in_memory".into(), "true".into());
            return clink_kafka::connector::options::parse_two_phase_commit(&p, 0, 1).map(drop);
        }
        check(kind, &[(key, value)])
    };
    let mut counts = BTreeMap::<&str, usize>::new();
    for name in known_names() {
        let key = format!("kafka.{name}");
        let t = treatment(name).unwrap();
        match t {
            Treatment::Refused(_) => {
                for kind in kinds {
                    let e = build(kind, &key, "x").unwrap_err();
                    assert_eq!(e.option(), Some(key.as_str()), "{kind:?}: {e}");
                }
                *counts.entry("refused").or_default() += 1;
            }
            Treatment::Unsupported(_) => {
                for kind in kinds {
                    let e = build(kind, &key, "x").unwrap_err();
                    assert_eq!(e.option(), Some(key.as_str()), "{kind:?}: {e}");
                }
                *counts.entry("unsupported").or_default() += 1;
            }
            Treatment::Ignored(_) => {
                let accepted = kinds.iter().filter(|k| build(**k, &key, "1").is_ok()).count();
                assert!(accepted > 0, "{key} accepted by no factory");
                let line = format!("property=\"{name}\"");
                assert!(
                    logs.contents().lines().any(|l| l.contains("WARN") && l.contains(&line)),
                    "no warning line names {name}"
                );
                *counts.entry("ignored").or_default() += 1;
            }
            Treatment::Fixed { value, .. } => {
                assert!(
                    kinds.iter().any(|k| build(*k, &key, value).is_ok()),
                    "{key}={value} refused"
                );
                for kind in kinds {
                    let e = build(kind, &key, "something-else").unwrap_err();
                    assert_eq!(e.option(), Some(key.as_str()), "{kind:?}: {e}");
                }
                *counts.entry("fixed").or_default() += 1;
            }
            Treatment::Applied(setting) => {
                let outcomes: Vec<_> = kinds.iter().map(|k| build(*k, &key, "bogus-value")).collect();
                if free_text(setting) {
                    continue;
                }
                // Read by at least one factory: its bad value is refused
                // naming it; wherever it is not read, the refusal names it too.
                for (kind, r) in kinds.iter().zip(&outcomes) {
                    let e = r.as_ref().expect_err(&format!("{kind:?} {key}=bogus-value accepted"));
                    assert!(
                        e.option() == Some(key.as_str()) || e.to_string().contains(name),
                        "{kind:?}: {e}"
                    );
                }
                *counts.entry("applied").or_default() += 1;
            }
            _ => {}
        }
    }
    eprintln!("{counts:?}");
    assert!(counts.values().sum::<usize>() > 150, "{counts:?}");
}

/// Table-mapped properties the connector's own options do not name reach
/// the native configurations.
#[test]
fn table_mapped_properties_reach_the_native_configurations() {
    let o = parse_sink(
        FactoryKind::MessageSink,
        &params(
            FactoryKind::MessageSink,
            &[
                ("kafka.max.in.flight.requests.per.connection", "2"),
                ("kafka.allow.auto.create.topics", "false"),
                ("kafka.connections.max.idle.ms", "1234"),
                ("kafka.debug", "protocol"),
                ("kafka.buffer.memory", "2000000"),
            ],
        ),
    )
    .unwrap();
    let pc = o.producer_config().unwrap();
    assert_eq!(pc.max_in_flight, 2);
    assert!(!pc.allow_auto_create_topics);
    assert_eq!(pc.buffer_memory, 2_000_000);
    let cc = o.client_config().unwrap();
    assert_eq!(cc.connections_max_idle, std::time::Duration::from_millis(1234));
    assert!(cc.debug, "kafka.debug turns on the protocol log");
    // Above 5 in flight needs idempotence off.
    let e = parse_sink(
        FactoryKind::MessageSink,
        &params(FactoryKind::MessageSink, &[("kafka.max.in.flight", "6")]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("max.in.flight"), "{e}");
    let o = parse_source(
        FactoryKind::MessageSource,
        &params(FactoryKind::MessageSource, &[("kafka.fetch.max.wait.ms", "77")]),
        0,
        1,
    )
    .unwrap();
    assert_eq!(o.consumer_config().max_wait, std::time::Duration::from_millis(77));
    // A consumer property on a sink, an unknown one with a suggestion.
    let e = check(FactoryKind::MessageSink, &[("kafka.queued.min.messages", "5")]).unwrap_err();
    assert!(e.to_string().contains("consumer property"), "{e}");
    let e = check(FactoryKind::MessageSource, &[("kafka.fetch.wait.max.mss", "5")]).unwrap_err();
    assert!(
        e.to_string().contains("did you mean \"kafka.fetch.wait.max.ms\""),
        "{e}"
    );
}

/// Issue 15's "no inert option": every option each factory accepts (the
/// lists in `connector/options.rs`) and the test that shows it acting —
/// against the broker where the effect is on the wire, on the built
/// configuration where the effect is a client setting whose own behaviour
/// the client tests cover. This test fails when a factory grows an option
/// without an entry here, when an entry names an option no factory
/// accepts, or when a named test no longer exists. The `kafka.<property>`
/// passthrough is walked by
/// `every_librdkafka_property_is_applied_warned_about_or_refused_by_name`.
#[test]
fn every_option_of_every_factory_is_shown_to_act() {
    const SHOWN: &[(&str, &[&str])] = &[
        ("brokers", &["tests/connector_sink.rs::text_sink_delivers_and_flushes_on_barrier"]),
        ("topic", &["tests/connector_sink.rs::text_sink_delivers_and_flushes_on_barrier"]),
        ("client_id", &["tests/observability.rs::metric_prefix_names_the_connector_and_client_series"]),
        ("metric_prefix", &["tests/observability.rs::metric_prefix_names_the_connector_and_client_series"]),
        ("backend", &["tests/connector_sql.rs::backend_in_with_reaches_the_factory", "tests/cross_backend.rs::gzip_and_zstd_batches_cross_backends_both_ways"]),
        ("security_protocol", &["tests/connector_security.rs::source_and_sink_over_tls", "tests/connector_options.rs::tls_options_reach_the_ssl_mtls_and_sasl_ssl_listeners"]),
        ("sasl_mechanism", &["tests/connector_security.rs::source_and_sink_over_sasl_ssl_with_scram_sha_256_and_512"]),
        ("sasl_username", &["tests/connector_security.rs::source_and_sink_over_sasl_ssl_with_scram_sha_256_and_512"]),
        ("sasl_password", &["tests/connector_security.rs::a_wrong_scram_password_is_an_authentication_error_that_never_echoes_it"]),
        ("sasl_oauthbearer_method", &["tests/sasl_oauth.rs::sink_and_source_with_keycloak_client_credentials", "src/connector/security.rs::oauthbearer_options_build_the_oidc_provider_with_extensions"]),
        ("sasl_oauthbearer_token_endpoint_url", &["tests/sasl_oauth.rs::sink_and_source_with_keycloak_client_credentials"]),
        ("sasl_oauthbearer_client_id", &["tests/sasl_oauth.rs::sink_and_source_with_keycloak_client_credentials"]),
        ("sasl_oauthbearer_client_secret", &["tests/sasl_oauth.rs::a_wrong_client_secret_is_refused_by_the_endpoint"]),
        ("sasl_oauthbearer_scope", &["tests/sasl_oauth.rs::a_token_without_the_kafka_audience_is_refused_by_the_broker"]),
        ("sasl_oauthbearer_extensions", &["src/connector/security.rs::oauthbearer_options_build_the_oidc_provider_with_extensions"]),
        ("sasl_kerberos_service_name", &["tests/sasl_gssapi.rs::sink_and_source_with_the_sasl_kerberos_options"]),
        ("sasl_kerberos_principal", &["tests/sasl_gssapi.rs::sink_and_source_with_the_sasl_kerberos_options", "src/connector/security.rs::refusals"]),
        ("sasl_kerberos_keytab", &["tests/sasl_gssapi.rs::sink_and_source_with_the_sasl_kerberos_options"]),
        ("sasl_kerberos_kdc", &["tests/sasl_gssapi.rs::sink_and_source_with_the_sasl_kerberos_options", "src/connector/security.rs::refusals"]),
        ("https_ca_location", &["tests/sasl_oauth.rs::an_untrusted_endpoint_certificate_is_refused", "tests/sasl_oauth.rs::sink_and_source_with_keycloak_client_credentials"]),
        ("ssl_ca_location", &["tests/connector_security.rs::an_untrusted_ca_is_a_certificate_error", "tests/connector_security.rs::source_and_sink_over_tls"]),
        ("ssl_certificate_location", &["tests/connector_security.rs::source_and_sink_over_mtls_with_an_encrypted_key"]),
        ("ssl_key_location", &["tests/connector_security.rs::source_and_sink_over_mtls_with_an_encrypted_key"]),
        ("ssl_key_password", &["tests/connector_security.rs::source_and_sink_over_mtls_with_an_encrypted_key"]),
        ("ssl_endpoint_identification_algorithm", &["tests/connector_options.rs::tls_options_are_validated_and_mapped"]),
        ("enable_ssl_certificate_verification", &["tests/connector_options.rs::tls_options_are_validated_and_mapped", "tests/connector_options.rs::rdkafka_builds_what_native_builds_and_validates_the_passthrough"]),
        ("group_id", &["tests/connector_source.rs::fresh_group_starts_by_policy_and_a_committed_offset_is_used"]),
        ("auto_offset_reset", &["tests/connector_source.rs::fresh_group_starts_by_policy_and_a_committed_offset_is_used"]),
        ("batch_max_wait_ms", &["tests/connector_source.rs::batch_max_wait_bounds_batches_on_a_trickle"]),
        ("poll_timeout", &["tests/connector_source.rs::batch_max_wait_bounds_batches_on_a_trickle"]),
        ("max_batch_size", &["tests/connector_source.rs::batch_shapes_in_virtual_time"]),
        ("partition_discovery_interval", &["tests/connector_source.rs::a_partition_added_while_running_is_picked_up"]),
        // Only `manual` is accepted, which is what the source does: it never commits.
        ("commit_mode", &["tests/connector_options.rs::each_bad_value_gives_its_own_named_error", "tests/connector_source.rs::fresh_group_starts_by_policy_and_a_committed_offset_is_used"]),
        ("enable_debug", &["tests/observability.rs::enable_debug_logs_the_protocol_and_never_the_password"]),
        ("decode_error", &["tests/connector_registry.rs::decode_error_on_text_fails_with_where_or_skips_counts_and_moves_the_checkpoint"]),
        ("acks", &["src/connector/options.rs::sink_options_reach_the_producer_and_registry_configs"]),
        ("compression", &["tests/cross_backend.rs::gzip_and_zstd_batches_cross_backends_both_ways", "src/connector/options.rs::sink_options_reach_the_producer_and_registry_configs"]),
        ("linger_ms", &["src/connector/options.rs::sink_options_reach_the_producer_and_registry_configs"]),
        ("produce_timeout", &["tests/connector_sink.rs::produce_timeout_and_flush_timeout_bound_their_waits_and_name_themselves"]),
        ("flush_timeout", &["tests/connector_sink.rs::produce_timeout_and_flush_timeout_bound_their_waits_and_name_themselves"]),
        ("fixed_partition", &["tests/connector_sink.rs::message_sink_keeps_keys_and_headers_at_the_fixed_partition"]),
        ("primary_key", &["tests/connector_sink.rs::upsert_tombstones_delete_keys_on_a_compacted_topic"]),
        ("transactional_id", &["tests/connector_2pc.rs::a_committed_checkpoint_is_visible_and_an_aborted_one_never_is"]),
        ("transaction_timeout_ms", &["tests/connector_2pc.rs::an_expired_prepared_transaction_is_an_unresolved_orphan"]),
        ("commit_group", &["tests/connector_2pc.rs::a_commit_group_member_does_not_commit_a_checkpoint_another_member_aborted"]),
        ("replay_suppression", &["tests/connector_2pc.rs::receipts_confirm_commits_and_arm_replay_suppression"]),
        ("receipt_dir", &["tests/connector_2pc.rs::a_committed_checkpoint_is_visible_and_an_aborted_one_never_is"]),
        ("receipts_in_memory", &["src/connector/registry.rs::a_2pc_sink_needs_a_place_for_receipts_or_an_explicit_opt_in"]),
        ("two_phase_commit", &["tests/kip939.rs::kip939_prepared_transactions_outlive_the_transaction_timeout", "tests/connector_options.rs::kip939_is_refused_on_rdkafka_naming_the_option", "tests/kip939.rs::a_broker_without_kip939_refuses_it_naming_the_option", "src/connector/options.rs::two_phase_commit_takes_resume_or_kip939_and_names_itself_otherwise"]),
        ("format", &["tests/connector_registry.rs::avro_round_trips_through_the_text_sink_the_broker_the_registry_and_the_text_source", "tests/connector_registry.rs::json_schema_round_trips_and_interoperates_both_ways_with_an_independent_peer"]),
        ("schema_registry_url", &["tests/connector_registry.rs::avro_round_trips_through_the_text_sink_the_broker_the_registry_and_the_text_source"]),
        ("schema_registry_subject", &["src/connector/options.rs::sink_options_reach_the_producer_and_registry_configs"]),
        ("schema_registry_auto_register", &["tests/connector_registry.rs::a_sink_without_auto_register_needs_the_subject_and_options_are_checked"]),
        ("schema_registry_value_schema", &["tests/connector_registry.rs::avro_round_trips_through_the_text_sink_the_broker_the_registry_and_the_text_source"]),
        ("schema_registry_basic_auth_user_info", &["tests/connector_registry.rs::registry_failures_take_the_decode_error_path_and_a_warm_cache_outlives_an_outage"]),
        ("schema_registry_bearer_auth_token", &["src/connector/options.rs::sink_options_reach_the_producer_and_registry_configs", "tests/connector_registry.rs::registry_failures_take_the_decode_error_path_and_a_warm_cache_outlives_an_outage"]),
        ("schema_registry_ssl_ca_location", &["tests/connector_registry.rs::tls_to_the_registry_with_a_private_ca"]),
        ("schema_registry_timeout_ms", &["tests/connector_registry.rs::registry_failures_take_the_decode_error_path_and_a_warm_cache_outlives_an_outage"]),
    ];
    let mut accepted = std::collections::BTreeSet::new();
    for kind in ALL.into_iter().chain([FactoryKind::TwoPhaseCommitSink]) {
        accepted.extend(kind.options());
    }
    let shown: std::collections::BTreeSet<&str> = SHOWN.iter().map(|(o, _)| *o).collect();
    let missing: Vec<_> = accepted.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "options accepted with no test showing their effect: {missing:?}"
    );
    let stale: Vec<_> = shown.difference(&accepted).collect();
    assert!(stale.is_empty(), "entries for options no factory accepts: {stale:?}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (option, tests) in SHOWN {
        assert!(!tests.is_empty(), "{option}");
        for t in *tests {
            let (file, name) = t.split_once("::").unwrap();
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(
                text.contains(&format!("fn {name}(")),
                "{option}: {file} has no test {name}"
            );
        }
    }
}
