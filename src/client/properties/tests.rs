use super::*;

const BOOT: (&str, &str) = ("bootstrap.servers", "127.0.0.1:9092");

fn parse(pairs: &[(&str, &str)]) -> Result<ClientProperties> {
    ClientProperties::parse(std::iter::once(BOOT).chain(pairs.iter().copied()))
}

/// Everything a configuration holds, secrets as `***`: two parses are
/// compared by it.
fn shape(p: &ClientProperties) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        p.client, p.consumer, p.producer, p.transaction, p.group_id
    )
}

#[test]
fn the_table_has_every_documented_property_once_and_classifies_each() {
    assert_eq!(LIBRDKAFKA.len(), 190, "librdkafka 2.12.1 documents 190 distinct names");
    let mut seen = std::collections::BTreeSet::new();
    for name in known_names() {
        assert!(seen.insert(name), "{name} listed twice");
        assert!(treatment(name).is_some(), "{name} has no treatment");
    }
    // Spot checks of each kind.
    assert_eq!(treatment("client.rack"), Some(Treatment::Applied(Setting::ClientRack)));
    assert!(matches!(
        treatment("statistics.interval.ms"),
        Some(Treatment::Ignored(_))
    ));
    assert!(matches!(treatment("ssl.cipher.suites"), Some(Treatment::Refused(_))));
    assert!(matches!(treatment("ssl.ca.pem"), Some(Treatment::Unsupported(_))));
    assert!(matches!(treatment("enable.auto.commit"), Some(Treatment::Fixed { .. })));
}

/// A self-signed CA certificate (made with openssl for these tests; no key
/// is kept), written once to a temporary file: `https.ca.location` is read
/// when the configuration is built.
fn unit_ca_file() -> &'static str {
    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBkDCCATegAwIBAgIUOVI7GJDRghUDHfpggJqIjKf2KWYwCgYIKoZIzj0EAwIw\nHTEbMBkGA1UEAwwSY2xpbmsgdW5pdCB0ZXN0IENBMCAXDTI2MTIwNjAwMjkyNFoY\nDzIxMjYxMTEyMDAyOTI0WjAdMRswGQYDVQQDDBJjbGluayB1bml0IHRlc3QgQ0Ew\nWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARtpzF3uJ/6GrR7ewMzPWEjY82siL0w\n+u3CLsu6TQc9uA/lWliSglkSBhCTAFhcFtu8azl69JTovkXougpyfFuIo1MwUTAd\nBgNVHQ4EFgQULhrf0N9uZhcvNKsho7YzgxAz1RkwHwYDVR0jBBgwFoAULhrf0N9u\nZhcvNKsho7YzgxAz1RkwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBE\nAiByjyZrgBdgZoUPx0uMuaeGjLV8mbCAG7YRnJXLpLYBhQIgCDQNYS1ouuLlMoub\nWOeZBU+sMrQdfulQ4a8R8oYyIEQ=\n-----END CERTIFICATE-----\n";
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("clink-properties-unit-ca-{}.pem", std::process::id()));
        std::fs::write(&path, PEM).expect("writing the unit CA");
        path.to_str().expect("a UTF-8 temp path").to_owned()
    })
}

/// A value for each applied property that differs from the default, with
/// what it needs alongside.
fn sample(setting: Setting, name: &'static str) -> Vec<(&'static str, &'static str)> {
    use Setting as S;
    let one = |v: &'static str| vec![(name, v)];
    match setting {
        S::Bootstrap => one("a:1,b:2"),
        S::ClientId => one("app-7"),
        S::ConnectTimeout => one("1234"),
        S::SocketTimeout => one("4321"),
        S::MaxResponseSize => one("123456"),
        S::ConnectionsMaxIdle => one("777"),
        S::RetryBackoff => one("17"),
        S::RetryBackoffMax => one("1700"),
        S::MetadataMaxWait => one("999"),
        S::Debug => one("broker,protocol"),
        S::ClientRack => one("rack-b"),
        S::SecurityProtocol => vec![(name, "ssl")],
        S::SaslMechanism => vec![
            ("security.protocol", "sasl_plaintext"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
            (name, "SCRAM-SHA-512"),
        ],
        S::SaslUsername => vec![
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.password", "p"),
            (name, "alice"),
        ],
        S::SaslPassword => vec![
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            (name, "p"),
        ],
        S::SslCaLocation => vec![("security.protocol", "ssl"), (name, "/ca.pem")],
        S::SslCertificateLocation | S::SslKeyLocation => vec![
            ("security.protocol", "ssl"),
            ("ssl.certificate.location", "/c.pem"),
            ("ssl.key.location", "/k.pem"),
        ],
        S::SslKeyPassword => vec![
            ("security.protocol", "ssl"),
            ("ssl.certificate.location", "/c.pem"),
            ("ssl.key.location", "/k.pem"),
            (name, "pw"),
        ],
        S::SslEndpointIdentification => vec![("security.protocol", "ssl"), (name, "none")],
        S::SslCertificateVerification => vec![("security.protocol", "ssl"), (name, "false")],
        S::GroupId => one("g"),
        S::AutoOffsetReset => one("earliest"),
        S::FetchMaxWait => one("55"),
        S::FetchMinBytes => one("7"),
        S::FetchMaxBytes => one("65536"),
        S::PartitionMaxBytes => one("4096"),
        S::CheckCrcs => one("false"),
        S::Isolation => one("read_uncommitted"),
        S::MaxPollRecords => one("3"),
        S::MaxPollBytes => one("3000"),
        S::MaxBatchInflate => one("2048"),
        S::FetchSessions => one("false"),
        S::FetchThrottleMax => one("10"),
        S::Acks => vec![("enable.idempotence", "false"), (name, "1")],
        S::Idempotence => one("false"),
        S::Compression => one("zstd"),
        S::CompressionLevel => vec![("compression.type", "gzip"), (name, "9")],
        S::Linger => one("50"),
        S::BatchSize => one("1000"),
        S::BufferMemoryKbytes => one("2048"),
        S::BufferMemoryBytes => one("3000000"),
        S::MaxRecordSize => one("5000"),
        S::AckTimeout => one("1500"),
        S::DeliveryTimeout => one("9000"),
        S::MaxInFlight => one("2"),
        S::AllowAutoCreateTopics => one("false"),
        S::Retries => one("3"),
        S::TransactionalId => one("tx"),
        S::TransactionTimeout | S::TransactionMaxBlock => vec![("transactional.id", "tx"), (name, "5000")],
        S::OAuthMethod
        | S::OAuthTokenUrl
        | S::OAuthClientId
        | S::OAuthClientSecret
        | S::OAuthScope
        | S::OAuthExtensions
        | S::OAuthCaLocation => {
            let value = match setting {
                S::OAuthMethod => "oidc",
                S::OAuthTokenUrl => "https://idp.example:8443/token",
                S::OAuthClientId => "svc",
                S::OAuthClientSecret => "s3",
                S::OAuthScope => "kafka",
                S::OAuthExtensions => "traceId=1",
                _ => unit_ca_file(),
            };
            let mut v: Vec<(&'static str, &'static str)> = vec![
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "OAUTHBEARER"),
                ("sasl.oauthbearer.token.endpoint.url", "https://idp:1/t"),
                ("sasl.oauthbearer.client.id", "id"),
                ("sasl.oauthbearer.client.secret", "s"),
            ];
            v.retain(|(k, _)| treatment(k) != Some(Treatment::Applied(setting)));
            v.push((name, value));
            v
        }
        S::KrbServiceName | S::KrbPrincipal | S::KrbKeytab | S::KrbKdc => {
            let value = match setting {
                S::KrbServiceName => "kafka2",
                S::KrbPrincipal => "bob@R",
                S::KrbKeytab => "/other.keytab",
                _ => "kdc.example:88",
            };
            let mut v: Vec<(&'static str, &'static str)> = vec![
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "GSSAPI"),
                ("sasl.kerberos.principal", "alice@R"),
                ("sasl.kerberos.keytab", "/alice.keytab"),
            ];
            v.retain(|(k, _)| treatment(k) != Some(Treatment::Applied(setting)));
            v.push((name, value));
            v
        }
    }
}

#[test]
fn every_applied_property_changes_the_configuration() {
    let base = parse(&[]).unwrap();
    for name in known_names() {
        let Some(Treatment::Applied(setting)) = treatment(name) else {
            continue;
        };
        let pairs = sample(setting, name);
        if setting == Setting::Bootstrap {
            let p = ClientProperties::parse(pairs.iter().copied()).unwrap();
            assert_eq!(p.client.bootstrap, vec!["a:1", "b:2"], "{name}");
            continue;
        }
        let p = parse(&pairs).unwrap_or_else(|e| panic!("{name}: {pairs:?}: {e}"));
        if setting == Setting::Retries {
            assert_eq!(p.ignored, vec![name], "{name} is warned about");
            continue;
        }
        if setting == Setting::OAuthMethod {
            // oidc is the one method, and the default: checked below.
            assert!(parse(&[(name, "default")]).is_err(), "{name}=default is refused");
            continue;
        }
        // Without the property itself (where others came with it), the
        // shape differs too: the property is what changed it.
        let without: Vec<_> = pairs.iter().copied().filter(|(k, _)| *k != name).collect();
        let reference = if without.len() == pairs.len() || without.is_empty() {
            shape(&base)
        } else {
            match parse(&without) {
                Ok(w) => shape(&w),
                Err(_) => String::from("(refused without it)"),
            }
        };
        assert_ne!(shape(&p), reference, "{name} = {pairs:?} changed nothing");
    }
}

#[test]
fn applied_values_land_on_the_native_fields() {
    let p = parse(&[
        ("client.rack", "r1"),
        ("linger.ms", "25"),
        ("batch.size", "4096"),
        ("compression.type", "lz4"),
        ("compression.level", "2"),
        ("max.in.flight.requests.per.connection", "3"),
        ("connections.max.idle.ms", "60000"),
        ("queue.buffering.max.kbytes", "1024"),
        ("fetch.message.max.bytes", "1000"),
        ("transactional.id", "t"),
        ("transaction.timeout.ms", "20000"),
        ("debug", "protocol"),
    ])
    .unwrap();
    assert_eq!(p.consumer.client_rack.as_deref(), Some("r1"));
    assert_eq!(
        p.consumer.isolation,
        IsolationLevel::ReadCommitted,
        "librdkafka's default"
    );
    assert_eq!(p.producer.linger, Duration::from_millis(25));
    assert_eq!(p.producer.batch_size, 4096);
    assert_eq!(p.producer.compression, Compression::Lz4);
    assert_eq!(p.producer.compression_level, 2);
    assert_eq!(p.producer.max_in_flight, 3);
    assert_eq!(p.producer.buffer_memory, 1024 * 1024);
    assert_eq!(p.consumer.partition_max_bytes, 1000);
    assert_eq!(p.client.connections_max_idle, Duration::from_secs(60));
    assert!(p.client.debug);
    let txn = p.transaction.unwrap();
    assert_eq!(txn.transaction_timeout, Duration::from_secs(20));
    assert_eq!(
        p.producer.delivery_timeout,
        Duration::from_secs(20),
        "as librdkafka: bounded by the transaction"
    );
}

#[test]
fn ignored_properties_are_accepted_and_listed() {
    for name in known_names() {
        if let Some(Treatment::Ignored(_)) = treatment(name) {
            let p = parse(&[(name, "1")]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.ignored, vec![name]);
            assert_eq!(shape(&p), shape(&parse(&[]).unwrap()), "{name} must change nothing");
        }
    }
}

#[test]
fn refused_unsupported_and_fixed_properties_name_themselves() {
    for name in known_names() {
        match treatment(name).unwrap() {
            Treatment::Refused(why) | Treatment::Unsupported(why) => {
                let e = parse(&[(name, "x")]).unwrap_err();
                let text = e.to_string();
                assert!(text.contains(name) && text.contains(why), "{text}");
            }
            Treatment::Fixed { value, .. } => {
                parse(&[(name, value)]).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
                let e = parse(&[(name, "something-else")]).unwrap_err().to_string();
                assert!(e.contains(name) && e.contains(value), "{e}");
            }
            _ => {}
        }
    }
    let e = parse(&[("sasl.kerberos.anything", "x")]).unwrap_err().to_string();
    assert!(e.contains("sasl.kerberos.anything"), "{e}");
}

#[test]
fn unknown_names_get_a_suggestion() {
    let e = parse(&[("linger.msx", "5")]).unwrap_err().to_string();
    assert!(
        e.contains("\"linger.msx\"") && e.contains("did you mean \"linger.ms\""),
        "{e}"
    );
    let e = parse(&[("no.such.thing.at.all", "5")]).unwrap_err().to_string();
    assert!(!e.contains("did you mean"), "{e}");
    assert_eq!(closest_name("isolation.levl"), Some("isolation.level"));
}

#[test]
fn bad_values_name_the_property_and_the_allowed_values_and_hide_secrets() {
    let e = parse(&[("acks", "2")]).unwrap_err().to_string();
    assert!(e.contains("acks") && e.contains("all (-1), 1, 0"), "{e}");
    let e = parse(&[("linger.ms", "-1")]).unwrap_err().to_string();
    assert!(e.contains("linger.ms") && e.contains("0 to 900000"), "{e}");
    let e = parse(&[("debug", "broker,nonsense")]).unwrap_err().to_string();
    assert!(e.contains("nonsense") && e.contains("protocol"), "{e}");
    let e = parse(&[("ssl.key.password", "")]).unwrap_err().to_string();
    assert!(e.contains("ssl.key.password"), "{e}");
    // A password never appears, in an error or in Debug.
    let e = parse(&[("sasl.username", "u"), ("sasl.password", "hunter2-canary")]).unwrap_err();
    assert!(!format!("{e} {e:?}").contains("hunter2-canary"));
    let p = parse(&[
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "u"),
        ("sasl.password", "hunter2-canary"),
    ])
    .unwrap();
    assert!(!format!("{p:?}").contains("hunter2-canary"));
    // A level the codec lacks, or a level without a codec, names the
    // property and the codec's levels.
    let e = parse(&[("compression.type", "lz4"), ("compression.level", "9")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compression.level") && e.contains("lz4 takes -1, 0, 1 or 2"),
        "{e}"
    );
    let e = parse(&[("compression.level", "5")]).unwrap_err().to_string();
    assert!(e.contains("compression.level") && e.contains("compression.type"), "{e}");
    let e = parse(&[("compression.type", "zstd"), ("compression.level", "13")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("compression.level") && e.contains("-1 to 12"), "{e}");
    // Retries cannot be zero natively.
    let e = parse(&[("retries", "0")]).unwrap_err().to_string();
    assert!(e.contains("delivery.timeout.ms"), "{e}");
}

#[test]
fn weak_or_contradictory_security_is_refused() {
    // Credentials without a SASL protocol.
    let e = parse(&[("sasl.username", "u"), ("sasl.password", "p")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("security.protocol"), "{e}");
    // TLS material on plaintext.
    assert!(parse(&[("ssl.ca.location", "/ca.pem")]).is_err());
    // Two names of one setting must agree.
    let e = parse(&[("linger.ms", "5"), ("queue.buffering.max.ms", "6")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("queue.buffering.max.ms") || e.contains("linger.ms"), "{e}");
    parse(&[("linger.ms", "5"), ("queue.buffering.max.ms", "5")]).unwrap();
    // Idempotence needs acks=all; in-flight at most 5 with it.
    assert!(parse(&[("acks", "1")]).is_err());
    assert!(parse(&[("max.in.flight", "6")]).is_err());
    parse(&[("max.in.flight", "6"), ("enable.idempotence", "false")]).unwrap();
    // Transaction settings need the id; bootstrap is required.
    assert!(parse(&[("transaction.timeout.ms", "5000")]).is_err());
    let e = ClientProperties::parse([("client.id", "x")]).unwrap_err().to_string();
    assert!(e.contains("bootstrap.servers"), "{e}");
}

#[test]
fn the_shortcuts_take_slices_iterators_and_maps() {
    let map: HashMap<String, String> = [("bootstrap.servers", "h:1"), ("fetch.min.bytes", "9")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let (c, con) = ConsumerConfig::from_properties(&map).unwrap();
    assert_eq!((c.bootstrap, con.min_bytes), (vec!["h:1".to_owned()], 9));
    // The client shortcut refuses the consumer's fetch.min.bytes rather
    // than drop it.
    let e = ClientConfig::from_property_map(&map).unwrap_err().to_string();
    assert!(e.contains("fetch.min.bytes") && e.contains("a consumer setting"), "{e}");
    let client_only: HashMap<String, String> = [("bootstrap.servers".to_owned(), "h:1".to_owned())].into();
    assert_eq!(
        ClientConfig::from_property_map(&client_only).unwrap().client_id,
        "clink-kafka"
    );
    let (_, pro) = ProducerConfig::from_properties(&[("bootstrap.servers", "h:1"), ("acks", "all")]).unwrap();
    assert_eq!(pro.acks, Acks::All);
    let v = vec![("bootstrap.servers".to_owned(), "h:1".to_owned())];
    ClientConfig::from_properties(v).unwrap();
}

/// The configuration `target` names, as text (secrets as `***`).
fn part(p: &ClientProperties, target: Target) -> String {
    match target {
        Target::Client => format!("{:?}", p.client),
        Target::Consumer => format!("{:?}", p.consumer),
        Target::Producer => format!("{:?}", p.producer),
        Target::Transaction => format!("{:?}", p.transaction),
        Target::Group => format!("{:?}", p.group_id),
    }
}

/// Every applied property goes to the configuration its setting's target
/// names (that one changes), is listed in `applied` with that target, and
/// each shortcut either returns it (its own role or the client's) or
/// refuses it naming the property and its role: none is dropped.
#[test]
fn every_property_is_routed_to_its_role_or_refused_by_the_shortcuts() {
    let base = parse(&[]).unwrap();
    let mut checked = 0;
    for name in known_names() {
        let Some(Treatment::Applied(setting)) = treatment(name) else {
            continue;
        };
        let target = setting.target();
        let pairs = sample(setting, name);
        let all: Vec<(&str, &str)> = if setting == Setting::Bootstrap {
            pairs.clone()
        } else {
            std::iter::once(BOOT).chain(pairs.iter().copied()).collect()
        };
        let p = ClientProperties::parse(all.iter().copied()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.applied.contains(&(name, target)), "{name}: applied {:?}", p.applied);
        // It lands where its target says (Retries is accepted and warned
        // about; Bootstrap has no default to differ from, nor OAuthMethod).
        if !matches!(setting, Setting::Retries | Setting::Bootstrap | Setting::OAuthMethod) {
            let without: Vec<_> = pairs.iter().copied().filter(|(k, _)| *k != name).collect();
            let reference = if without.len() == pairs.len() || without.is_empty() {
                Some(base.clone())
            } else {
                parse(&without).ok()
            };
            if let Some(reference) = reference {
                assert_ne!(
                    part(&p, target),
                    part(&reference, target),
                    "{name} did not reach the {target}"
                );
            }
        }
        // The targets of everything the sample sets (it may need company).
        let targets: Vec<(&str, Target)> = p.applied.clone();
        for (shortcut, kept) in [
            ("ClientConfig", vec![]),
            ("ConsumerConfig", vec![Target::Consumer]),
            ("ProducerConfig", vec![Target::Producer]),
        ] {
            let result = match shortcut {
                "ClientConfig" => ClientConfig::from_properties(all.iter().copied()).map(|_| ()),
                "ConsumerConfig" => ConsumerConfig::from_properties(all.iter().copied()).map(|_| ()),
                _ => ProducerConfig::from_properties(all.iter().copied()).map(|_| ()),
            };
            let outside: Vec<_> = targets
                .iter()
                .filter(|(_, t)| *t != Target::Client && !kept.contains(t))
                .collect();
            assert_eq!(p.outside(&kept).len(), outside.len(), "{name}: {shortcut}");
            match (outside.first(), result) {
                (None, Ok(())) => {}
                (None, Err(e)) => panic!("{shortcut}::from_properties refused {name}: {e}"),
                (Some((first, role)), Ok(())) => panic!("{shortcut}::from_properties dropped {first} ({role})"),
                (Some((first, role)), Err(Error::Property { property, message })) => {
                    assert_eq!(property, *first, "{shortcut}: {message}");
                    assert!(
                        message.contains(&format!("a {role} setting")) && message.contains("ClientProperties::parse"),
                        "{shortcut} on {name}: {message}"
                    );
                }
                (Some(_), Err(e)) => panic!("{shortcut} on {name}: not a property error: {e}"),
            }
        }
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} applied properties");
}

#[test]
fn the_shortcuts_name_every_dropped_property_with_its_role() {
    let e = ConsumerConfig::from_properties([
        BOOT,
        ("fetch.min.bytes", "5"),
        ("group.id", "g"),
        ("transactional.id", "t"),
        ("transaction.timeout.ms", "60000"),
        ("linger.ms", "5"),
    ])
    .unwrap_err()
    .to_string();
    for part in [
        "\"group.id\"",
        "consumer group setting",
        "transactional.id (transaction)",
        "transaction.timeout.ms (transaction)",
        "linger.ms (producer)",
    ] {
        assert!(e.contains(part), "{part} missing from: {e}");
    }
    assert!(!e.contains("fetch.min.bytes"), "{e}");
    let e = ProducerConfig::from_properties([BOOT, ("linger.ms", "5"), ("max.poll.records", "3")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"max.poll.records\"") && e.contains("a consumer setting"),
        "{e}"
    );
    // ClientProperties::parse routes the lot.
    let p = parse(&[
        ("group.id", "g"),
        ("transactional.id", "t"),
        ("transaction.timeout.ms", "60000"),
        ("linger.ms", "5"),
        ("max.poll.records", "3"),
    ])
    .unwrap();
    assert_eq!(p.group_id.as_deref(), Some("g"));
    assert_eq!(
        p.transaction.as_ref().map(|t| t.transaction_timeout),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        (p.producer.linger, p.consumer.max_poll_records),
        (Duration::from_millis(5), 3)
    );
    assert_eq!(
        p.outside(&[Target::Consumer]),
        vec![
            ("group.id", Target::Group),
            ("transactional.id", Target::Transaction),
            ("transaction.timeout.ms", Target::Transaction),
            ("linger.ms", Target::Producer)
        ]
    );
}
