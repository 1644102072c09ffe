//! The CLI's commands, and the options they share: which brokers, and how to
//! authenticate. Library errors are wrapped with `anyhow` context here.

use anyhow::{bail, Context};
use clap::Args;
use clink_kafka::client::{ClientConfig, SecurityProtocol, TlsConfig};
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::wire::secret::Secret;

pub mod backend;
pub mod consume;
pub mod copy;
pub mod copy_group;
pub mod exit;
#[cfg(feature = "failpoints")]
pub mod fault;
pub mod groups;
pub mod logs;
pub mod produce;
pub mod progress;
pub mod roundtrip;
pub mod sink2pc;
mod stdin_lines;
pub mod topics;
pub mod txn;
pub mod value_format;

/// Broker used when neither --brokers nor $CLINK_KAFKA_BROKERS is given
/// (the plaintext listener of `scripts/kafka-local`).
pub const DEFAULT_BROKERS: &str = "127.0.0.1:19092";

/// `--metrics-addr` of the long-running commands.
#[derive(Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (text format, GET /metrics) on this
    /// loopback IP:PORT while the command runs, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<String>,
}

impl MetricsArgs {
    /// Starts the endpoint when asked; it serves until dropped. A
    /// non-loopback or busy address is an error naming `--metrics-addr`.
    pub async fn start(&self) -> anyhow::Result<Option<clink_kafka::metrics::MetricsEndpoint>> {
        let Some(addr) = &self.metrics_addr else {
            return Ok(None);
        };
        let endpoint = clink_kafka::metrics::serve("--metrics-addr", addr).await?;
        eprintln!("metrics: http://{}/metrics", endpoint.local_addr());
        Ok(Some(endpoint))
    }
}

/// How to reach and authenticate to the cluster.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Bootstrap brokers, comma-separated host:port.
    #[arg(long, env = "CLINK_KAFKA_BROKERS", default_value = DEFAULT_BROKERS)]
    pub brokers: String,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or
    /// GSSAPI (SASL_PLAINTEXT listener; OAUTHBEARER takes the
    /// --sasl-oauthbearer-* flags, GSSAPI the --sasl-kerberos-* flags).
    #[arg(long)]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long)]
    pub sasl_username: Option<String>,
    /// Name of the environment variable holding the SASL password (preferred).
    #[arg(long, value_name = "VAR")]
    pub sasl_password_env: Option<String>,
    /// The SASL password itself. Visible to other users in the process list:
    /// prefer --sasl-password-env.
    #[arg(long)]
    pub sasl_password: Option<String>,
    /// OAUTHBEARER: the OIDC token endpoint (https://), for the
    /// client-credentials grant (sasl.oauthbearer.token.endpoint.url).
    #[arg(long, value_name = "URL")]
    pub sasl_oauthbearer_token_endpoint_url: Option<String>,
    /// OAUTHBEARER: the OAuth client id (sasl.oauthbearer.client.id).
    #[arg(long, value_name = "ID")]
    pub sasl_oauthbearer_client_id: Option<String>,
    /// OAUTHBEARER: name of the environment variable holding the client
    /// secret (never on the command line).
    #[arg(long, value_name = "VAR")]
    pub sasl_oauthbearer_client_secret_env: Option<String>,
    /// OAUTHBEARER: the scope to request (sasl.oauthbearer.scope).
    #[arg(long, value_name = "SCOPE")]
    pub sasl_oauthbearer_scope: Option<String>,
    /// OAUTHBEARER: SASL extensions, key=value,... (KIP-342).
    #[arg(long, value_name = "LIST")]
    pub sasl_oauthbearer_extensions: Option<String>,
    /// OAUTHBEARER: PEM CA file to trust for the token endpoint
    /// (https.ca.location; default: the built-in Mozilla roots).
    #[arg(long, value_name = "FILE")]
    pub sasl_oauthbearer_ca: Option<std::path::PathBuf>,
    /// GSSAPI: the broker's Kerberos service name
    /// (sasl.kerberos.service.name; default kafka).
    #[arg(long, value_name = "NAME")]
    pub sasl_kerberos_service_name: Option<String>,
    /// GSSAPI: the client principal, name@REALM (sasl.kerberos.principal).
    #[arg(long, value_name = "PRINCIPAL")]
    pub sasl_kerberos_principal: Option<String>,
    /// GSSAPI: MIT keytab holding the principal's key (sasl.kerberos.keytab).
    #[arg(long, value_name = "FILE")]
    pub sasl_kerberos_keytab: Option<std::path::PathBuf>,
    /// GSSAPI: the KDC, host:port (sasl.kerberos.kdc; default: the realm's
    /// kdc in krb5.conf, $KRB5_CONFIG or /etc/krb5.conf).
    #[arg(long, value_name = "HOST:PORT")]
    pub sasl_kerberos_kdc: Option<String>,
    /// security.protocol: plaintext, ssl, sasl_plaintext or sasl_ssl
    /// (case-insensitive). Default: plaintext, or what the --sasl-* and
    /// --tls-* options given imply (never less than they ask for).
    #[arg(long, value_name = "PROTOCOL")]
    pub security_protocol: Option<String>,
    /// PEM file of the CA certificate(s) to trust (default: the built-in Mozilla roots).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate chain, for listeners that require one (mTLS).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert: PKCS#8, PKCS#1, SEC1, or encrypted PKCS#8.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Name of the environment variable holding the password of an encrypted --tls-key.
    #[arg(long, value_name = "VAR")]
    pub tls_key_password_env: Option<String>,
    /// Verify the broker's certificate chain but not that it names the host
    /// (Kafka's ssl.endpoint.identification.algorithm= empty).
    #[arg(long)]
    pub tls_no_hostname_verification: bool,
    /// Accept any broker certificate. INSECURE: for test rigs only; every
    /// connection made so logs a warning.
    #[arg(long)]
    pub tls_insecure_skip_verify: bool,
    /// client.id sent to the brokers.
    #[arg(long, default_value = "clink-kafka-cli")]
    pub client_id: String,
    /// Bound on each request, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: u64,
}

impl ConnectArgs {
    /// The client configuration these options describe.
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(&self.brokers);
        config.client_id = self.client_id.clone();
        config.request_timeout = std::time::Duration::from_millis(self.request_timeout_ms);
        // A missing topic should fail an interactive command soon.
        config.metadata_max_wait = std::time::Duration::from_secs(10);
        // A one-shot command makes one pass over the bootstrap list: an
        // unreachable cluster fails it at once instead of after 60 s.
        config.bootstrap_timeout = std::time::Duration::ZERO;
        let password = match (&self.sasl_password_env, &self.sasl_password) {
            (Some(_), Some(_)) => bail!("give either --sasl-password-env or --sasl-password, not both"),
            (Some(var), None) => Some(Secret::new(
                std::env::var(var).with_context(|| format!("reading the SASL password from ${var}"))?,
            )),
            (None, Some(p)) => Some(Secret::new(p.clone())),
            (None, None) => None,
        };
        let oauth = self
            .sasl_mechanism
            .as_deref()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("OAUTHBEARER"));
        if let Some(flag) = self.first_oauth_flag().filter(|_| !oauth) {
            bail!("{flag} needs --sasl-mechanism OAUTHBEARER");
        }
        let gssapi = self
            .sasl_mechanism
            .as_deref()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("GSSAPI"));
        if let Some(flag) = self.first_kerberos_flag().filter(|_| !gssapi) {
            bail!("{flag} needs --sasl-mechanism GSSAPI");
        }
        if gssapi {
            if self.sasl_username.is_some() || password.is_some() {
                bail!(
                    "--sasl-mechanism GSSAPI takes no --sasl-username/--sasl-password: give \
                     --sasl-kerberos-principal and --sasl-kerberos-keytab"
                );
            }
            let Some(principal) = &self.sasl_kerberos_principal else {
                bail!("--sasl-mechanism GSSAPI needs --sasl-kerberos-principal NAME@REALM");
            };
            let Some(keytab) = &self.sasl_kerberos_keytab else {
                bail!("--sasl-mechanism GSSAPI needs --sasl-kerberos-keytab FILE");
            };
            let mut krb = clink_kafka::client::KerberosConfig::new(principal.clone(), keytab.clone());
            if let Some(name) = &self.sasl_kerberos_service_name {
                krb.service_name = name.clone();
            }
            krb.kdc = self.sasl_kerberos_kdc.clone();
            config = config.with_kerberos(krb);
        } else if oauth {
            if self.sasl_username.is_some() || password.is_some() {
                bail!(
                    "--sasl-mechanism OAUTHBEARER takes no --sasl-username/--sasl-password: give \
                     --sasl-oauthbearer-client-id and --sasl-oauthbearer-client-secret-env"
                );
            }
            config = config.with_oauthbearer(self.oauthbearer()?);
        } else {
            match (&self.sasl_mechanism, &self.sasl_username, password) {
                (None, None, None) => {}
                (Some(m), Some(user), Some(password)) => {
                    let mechanism: SaslMechanism = m.parse().context("--sasl-mechanism")?;
                    config = config.with_sasl(mechanism, user.clone(), password);
                }
                (None, _, _) => bail!("--sasl-username/--sasl-password need --sasl-mechanism"),
                (Some(_), None, _) => bail!("--sasl-mechanism needs --sasl-username"),
                (Some(_), Some(_), None) => {
                    bail!("--sasl-mechanism needs --sasl-password-env VAR (or --sasl-password)")
                }
            }
        }
        let tls = self.tls_config()?;
        let tls_option = self.first_tls_flag();
        if tls_option.is_some() {
            config = config.with_tls(tls);
        }
        if let Some(p) = &self.security_protocol {
            let protocol: SecurityProtocol = p.parse().context("--security-protocol")?;
            if let (false, Some(flag)) = (protocol.uses_tls(), tls_option) {
                bail!(
                    "{flag} needs --security-protocol ssl or sasl_ssl (got {}): TLS options are never ignored",
                    protocol.name().to_ascii_lowercase()
                );
            }
            match (protocol.uses_sasl(), config.sasl.is_some()) {
                (false, true) => bail!(
                    "--sasl-mechanism needs --security-protocol sasl_plaintext or sasl_ssl (got {}): \
                     credentials are never silently dropped",
                    protocol.name().to_ascii_lowercase()
                ),
                (true, false) => bail!(
                    "--security-protocol {} needs --sasl-mechanism, --sasl-username and --sasl-password-env",
                    protocol.name().to_ascii_lowercase()
                ),
                _ => {}
            }
            config.security_protocol = protocol;
        }
        config.validate().context("checking the security options")?;
        Ok(config)
    }

    /// The first --sasl-kerberos-* flag given.
    fn first_kerberos_flag(&self) -> Option<&'static str> {
        [
            (
                self.sasl_kerberos_service_name.is_some(),
                "--sasl-kerberos-service-name",
            ),
            (self.sasl_kerberos_principal.is_some(), "--sasl-kerberos-principal"),
            (self.sasl_kerberos_keytab.is_some(), "--sasl-kerberos-keytab"),
            (self.sasl_kerberos_kdc.is_some(), "--sasl-kerberos-kdc"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    /// The first --sasl-oauthbearer-* flag given.
    fn first_oauth_flag(&self) -> Option<&'static str> {
        [
            (
                self.sasl_oauthbearer_token_endpoint_url.is_some(),
                "--sasl-oauthbearer-token-endpoint-url",
            ),
            (
                self.sasl_oauthbearer_client_id.is_some(),
                "--sasl-oauthbearer-client-id",
            ),
            (
                self.sasl_oauthbearer_client_secret_env.is_some(),
                "--sasl-oauthbearer-client-secret-env",
            ),
            (self.sasl_oauthbearer_scope.is_some(), "--sasl-oauthbearer-scope"),
            (
                self.sasl_oauthbearer_extensions.is_some(),
                "--sasl-oauthbearer-extensions",
            ),
            (self.sasl_oauthbearer_ca.is_some(), "--sasl-oauthbearer-ca"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    /// The OAUTHBEARER token source: the OIDC client-credentials grant.
    fn oauthbearer(&self) -> anyhow::Result<clink_kafka::client::OAuthBearerConfig> {
        use clink_kafka::client::{OidcClientCredentials, OidcConfig, TlsConfig};
        let Some(url) = &self.sasl_oauthbearer_token_endpoint_url else {
            bail!("--sasl-mechanism OAUTHBEARER needs --sasl-oauthbearer-token-endpoint-url URL");
        };
        let Some(id) = &self.sasl_oauthbearer_client_id else {
            bail!("--sasl-mechanism OAUTHBEARER needs --sasl-oauthbearer-client-id ID");
        };
        let Some(var) = &self.sasl_oauthbearer_client_secret_env else {
            bail!("--sasl-mechanism OAUTHBEARER needs --sasl-oauthbearer-client-secret-env VAR");
        };
        let secret = Secret::new(
            std::env::var(var).with_context(|| format!("reading the OAUTHBEARER client secret from ${var}"))?,
        );
        let mut oidc = OidcConfig::new(url.clone(), id.clone(), secret);
        oidc.scope = self.sasl_oauthbearer_scope.clone();
        if let Some(ca) = &self.sasl_oauthbearer_ca {
            oidc.tls = TlsConfig::default().with_ca_file(ca);
        }
        let provider = OidcClientCredentials::new(oidc).context("the --sasl-oauthbearer-* options")?;
        let extensions = match &self.sasl_oauthbearer_extensions {
            None => Vec::new(),
            Some(list) => clink_kafka::wire::sasl::oauthbearer::parse_extensions(list)
                .context("--sasl-oauthbearer-extensions (key=value,... with keys of ASCII letters)")?,
        };
        let mut oauth = clink_kafka::client::OAuthBearerConfig::new(provider.into_provider());
        oauth.extensions = extensions;
        Ok(oauth)
    }

    /// The first --tls-* option given, by its flag.
    fn first_tls_flag(&self) -> Option<&'static str> {
        [
            (self.tls_ca.is_some(), "--tls-ca"),
            (self.tls_cert.is_some(), "--tls-cert"),
            (self.tls_key.is_some(), "--tls-key"),
            (self.tls_key_password_env.is_some(), "--tls-key-password-env"),
            (self.tls_no_hostname_verification, "--tls-no-hostname-verification"),
            (self.tls_insecure_skip_verify, "--tls-insecure-skip-verify"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    fn tls_config(&self) -> anyhow::Result<TlsConfig> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => bail!("--tls-cert needs --tls-key"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert"),
            _ => {}
        }
        if self.tls_key_password_env.is_some() && self.tls_key.is_none() {
            bail!("--tls-key-password-env needs --tls-key");
        }
        if self.tls_insecure_skip_verify && self.tls_ca.is_some() {
            bail!("--tls-insecure-skip-verify ignores --tls-ca; give one or the other");
        }
        let key_password = match &self.tls_key_password_env {
            Some(var) => Some(Secret::new(
                std::env::var(var).with_context(|| format!("reading the TLS key password from ${var}"))?,
            )),
            None => None,
        };
        let mut tls = TlsConfig::default()
            .with_hostname_verification(!self.tls_no_hostname_verification)
            .with_insecure_skip_verify(self.tls_insecure_skip_verify);
        tls.ca_file = self.tls_ca.clone();
        tls.cert_file = self.tls_cert.clone();
        tls.key_file = self.tls_key.clone();
        tls.key_password = key_password;
        Ok(tls)
    }
}

/// Parses `k=v` for --header.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    // Digits before the first comma: 1..=3.
    let mut until_comma = (s.len() + 2) % 3 + 1;
    for c in s.chars() {
        if until_comma == 0 {
            out.push(',');
            until_comma = 3;
        }
        out.push(c);
        until_comma -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clink_kafka::client::SecurityProtocol;

    use super::ConnectArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn config(args: &[&str]) -> anyhow::Result<clink_kafka::client::ClientConfig> {
        let mut argv = vec!["test", "--brokers", "127.0.0.1:1"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("parses").connect.client_config()
    }

    fn error(args: &[&str]) -> String {
        format!("{:#}", config(args).expect_err("must be refused"))
    }

    #[test]
    fn security_protocol_is_inferred_never_weaker() {
        assert_eq!(config(&[]).unwrap().security_protocol, SecurityProtocol::Plaintext);
        let tls = config(&["--tls-ca", "ca.pem"]).unwrap();
        assert_eq!(tls.security_protocol, SecurityProtocol::Ssl);
        assert_eq!(tls.tls.ca_file.as_deref(), Some(std::path::Path::new("ca.pem")));
        std::env::set_var("CLINK_CLI_TEST_PW", "pw-value-1");
        let both = config(&[
            "--tls-ca",
            "ca.pem",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "u",
            "--sasl-password-env",
            "CLINK_CLI_TEST_PW",
        ])
        .unwrap();
        assert_eq!(both.security_protocol, SecurityProtocol::SaslSsl);
        let explicit = config(&["--security-protocol", "SSL", "--tls-no-hostname-verification"]).unwrap();
        assert!(!explicit.tls.hostname_verification);
        assert_eq!(
            config(&[
                "--security-protocol",
                "Sasl_Plaintext",
                "--sasl-mechanism",
                "PLAIN",
                "--sasl-username",
                "u",
                "--sasl-password-env",
                "CLINK_CLI_TEST_PW"
            ])
            .unwrap()
            .security_protocol,
            SecurityProtocol::SaslPlaintext
        );
    }

    #[test]
    fn inconsistent_security_options_are_refused() {
        let e = error(&["--security-protocol", "tls"]);
        assert!(e.contains("--security-protocol") && e.contains("sasl_plaintext"), "{e}");
        let e = error(&["--security-protocol", "plaintext", "--tls-ca", "ca.pem"]);
        assert!(e.contains("--tls-ca needs --security-protocol ssl"), "{e}");
        let e = error(&["--security-protocol", "sasl_plaintext", "--tls-insecure-skip-verify"]);
        assert!(e.contains("--tls-insecure-skip-verify needs"), "{e}");
        let e = error(&["--security-protocol", "sasl_ssl"]);
        assert!(e.contains("needs --sasl-mechanism"), "{e}");
        std::env::set_var("CLINK_CLI_TEST_PW2", "pw-value-2");
        let e = error(&[
            "--security-protocol",
            "ssl",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "u",
            "--sasl-password-env",
            "CLINK_CLI_TEST_PW2",
        ]);
        assert!(e.contains("sasl_plaintext or sasl_ssl"), "{e}");
        assert!(!e.contains("pw-value-2"), "{e}");
        let e = error(&["--tls-cert", "c.pem"]);
        assert!(e.contains("--tls-cert needs --tls-key"), "{e}");
        let e = error(&["--tls-key", "k.pem"]);
        assert!(e.contains("--tls-key needs --tls-cert"), "{e}");
        let e = error(&["--tls-ca", "ca.pem", "--tls-insecure-skip-verify"]);
        assert!(e.contains("one or the other"), "{e}");
        let e = error(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-key-password-env",
            "CLINK_CLI_NO_SUCH_VAR",
        ]);
        assert!(e.contains("$CLINK_CLI_NO_SUCH_VAR"), "{e}");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(20_000), "20,000");
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn oauthbearer_extensions_flag_reaches_the_config_and_bad_lists_are_refused() {
        std::env::set_var("CLINK_CLI_TEST_OIDC", "oidc-secret-1");
        let base = [
            "--sasl-mechanism",
            "OAUTHBEARER",
            "--sasl-oauthbearer-token-endpoint-url",
            "https://idp.example:8443/token",
            "--sasl-oauthbearer-client-id",
            "svc",
            "--sasl-oauthbearer-client-secret-env",
            "CLINK_CLI_TEST_OIDC",
        ];
        let with = |list: &'static str| {
            let mut v = base.to_vec();
            v.extend(["--sasl-oauthbearer-extensions", list]);
            v
        };
        let c = config(&with("traceId=cli1,logicalCluster=lc-7")).unwrap();
        let oauth = c
            .sasl
            .as_ref()
            .and_then(|s| s.oauthbearer.as_ref())
            .expect("OAUTHBEARER");
        let got: Vec<(&str, &str)> = oauth.extensions.iter().map(|e| (e.key(), e.value())).collect();
        assert_eq!(got, [("traceId", "cli1"), ("logicalCluster", "lc-7")]);
        assert!(config(&base)
            .unwrap()
            .sasl
            .unwrap()
            .oauthbearer
            .unwrap()
            .extensions
            .is_empty());
        for bad in ["auth=x", "trace-id=1", "a=1,a=2", "novalue"] {
            let e = error(&with(bad));
            assert!(e.contains("--sasl-oauthbearer-extensions"), "{bad}: {e}");
            assert!(!e.contains("oidc-secret-1"), "{e}");
        }
        let e = error(&["--sasl-oauthbearer-extensions", "traceId=1"]);
        assert!(
            e.contains("--sasl-oauthbearer-extensions needs --sasl-mechanism OAUTHBEARER"),
            "{e}"
        );
    }

    #[test]
    fn kerberos_flags_build_the_gssapi_config_and_misuse_is_refused() {
        let c = config(&[
            "--sasl-mechanism",
            "gssapi",
            "--sasl-kerberos-principal",
            "alice@CLINK.TEST",
            "--sasl-kerberos-keytab",
            "/alice.keytab",
            "--sasl-kerberos-service-name",
            "kafka2",
            "--sasl-kerberos-kdc",
            "kdc:88",
        ])
        .unwrap();
        assert_eq!(c.security_protocol, SecurityProtocol::SaslPlaintext);
        let k = c.sasl.as_ref().and_then(|s| s.kerberos.as_ref()).expect("GSSAPI");
        assert_eq!(
            (k.principal.as_str(), k.service_name.as_str(), k.kdc.as_deref()),
            ("alice@CLINK.TEST", "kafka2", Some("kdc:88"))
        );
        let e = error(&["--sasl-kerberos-principal", "alice@R"]);
        assert!(
            e.contains("--sasl-kerberos-principal needs --sasl-mechanism GSSAPI"),
            "{e}"
        );
        let e = error(&["--sasl-mechanism", "GSSAPI", "--sasl-kerberos-principal", "a@R"]);
        assert!(e.contains("needs --sasl-kerberos-keytab"), "{e}");
        let e = error(&[
            "--sasl-mechanism",
            "GSSAPI",
            "--sasl-username",
            "u",
            "--sasl-kerberos-principal",
            "a@R",
            "--sasl-kerberos-keytab",
            "/k",
        ]);
        assert!(e.contains("takes no --sasl-username"), "{e}");
        let e = error(&[
            "--sasl-mechanism",
            "GSSAPI",
            "--sasl-kerberos-principal",
            "a@R",
            "--sasl-kerberos-keytab",
            "/k",
            "--sasl-kerberos-service-name",
            "kafka/host",
        ]);
        assert!(e.contains("sasl.kerberos.service.name"), "{e}");
    }
}
