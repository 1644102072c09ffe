//! Security options (SASL, TLS) and their mapping onto the native client.
//!
//! The spec's aliases (`security_protocol`, `sasl_mechanism`, …) and their
//! librdkafka property names through the `kafka.<property>` passthrough land
//! in one [`SecurityInputs`] map; the checks run on that final map, so the
//! passthrough cannot weaken what the aliases set up.
//!
//! Refused at build time, before a byte reaches a broker:
//! - SASL credentials (or a mechanism) without a SASL protocol: with no
//!   `security_protocol` the transport is plaintext, so the credentials
//!   would never be presented and the connection would run unauthenticated;
//! - a CA, client certificate, key or key password with a plaintext
//!   transport, which would never use them.
//!
//! Deliberate plaintext stays available: it has to be named
//! (`security_protocol = 'plaintext'`) only when nothing contradicts it.
//! There is never a fallback from TLS to plaintext or from SCRAM to PLAIN.
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::security::*` and are
//! not re-exported elsewhere (the validated security options, shared by every factory).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clink_kafka_wire::sasl::SaslMechanism;
use clink_kafka_wire::secret::Secret;

use super::error::{ConnectorError, Result};
use crate::client::{ClientConfig, SaslConfig, TlsConfig};

/// `security_protocol`: the client's own enum (no connector copy).
use crate::client::SecurityProtocol;

const PROTOCOLS_ALLOWED: &str = "one of plaintext, ssl, sasl_plaintext, sasl_ssl";

/// `security_protocol` as written under `option`, case-insensitively.
fn parse_protocol(option: &str, value: &str) -> Result<SecurityProtocol> {
    value
        .parse()
        .map_err(|_| ConnectorError::invalid(option, value, PROTOCOLS_ALLOWED))
}

/// The protocol as the spec's options spell it (`sasl_ssl`).
fn option_name(protocol: SecurityProtocol) -> String {
    protocol.name().to_ascii_lowercase()
}

/// The validated security configuration of one connector.
#[derive(Clone, Debug, Default)]
pub struct SecurityConfig {
    /// `security_protocol`: plaintext, ssl, sasl_plaintext or sasl_ssl.
    pub protocol: SecurityProtocol,
    /// The client's own SASL settings (the password prints as `***`).
    pub sasl: Option<SaslConfig>,
    /// The client's own TLS settings, for `ssl` and `sasl_ssl`.
    pub tls: Option<TlsConfig>,
}

/// The security settings as given: canonical option name → (value, the key
/// the user wrote: the alias or the `kafka.<property>`).
#[derive(Clone, Default)]
pub struct SecurityInputs {
    values: BTreeMap<&'static str, (String, String)>,
}

impl std::fmt::Debug for SecurityInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (k, (v, _)) in &self.values {
            if is_secret_option(k) {
                m.entry(k, &"***");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

/// The canonical security option names (the spec's aliases).
pub const SECURITY_OPTIONS: &[&str] = &[
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
    "ssl_key_password",
    "ssl_endpoint_identification_algorithm",
    "enable_ssl_certificate_verification",
    "sasl_oauthbearer_method",
    "sasl_oauthbearer_token_endpoint_url",
    "sasl_oauthbearer_client_id",
    "sasl_oauthbearer_client_secret",
    "sasl_oauthbearer_scope",
    "sasl_oauthbearer_extensions",
    "https_ca_location",
    "sasl_kerberos_service_name",
    "sasl_kerberos_principal",
    "sasl_kerberos_keytab",
    "sasl_kerberos_kdc",
];

/// The GSSAPI options (refused with any other mechanism).
const KERBEROS_OPTIONS: &[&str] = &[
    "sasl_kerberos_service_name",
    "sasl_kerberos_principal",
    "sasl_kerberos_keytab",
    "sasl_kerberos_kdc",
];

/// The OAUTHBEARER options (refused with any other mechanism).
const OAUTH_OPTIONS: &[&str] = &[
    "sasl_oauthbearer_method",
    "sasl_oauthbearer_token_endpoint_url",
    "sasl_oauthbearer_client_id",
    "sasl_oauthbearer_client_secret",
    "sasl_oauthbearer_scope",
    "sasl_oauthbearer_extensions",
    "https_ca_location",
];

/// librdkafka property → the alias it is the same setting as.
pub fn alias_of_property(property: &str) -> Option<&'static str> {
    Some(match property {
        "security.protocol" => "security_protocol",
        "sasl.mechanism" | "sasl.mechanisms" => "sasl_mechanism",
        "sasl.username" => "sasl_username",
        "sasl.password" => "sasl_password",
        "ssl.ca.location" => "ssl_ca_location",
        "ssl.certificate.location" => "ssl_certificate_location",
        "ssl.key.location" => "ssl_key_location",
        "ssl.key.password" => "ssl_key_password",
        "ssl.endpoint.identification.algorithm" => "ssl_endpoint_identification_algorithm",
        "enable.ssl.certificate.verification" => "enable_ssl_certificate_verification",
        "sasl.oauthbearer.method" => "sasl_oauthbearer_method",
        "sasl.oauthbearer.token.endpoint.url" => "sasl_oauthbearer_token_endpoint_url",
        "sasl.oauthbearer.client.id" | "sasl.oauthbearer.client.credentials.client.id" => "sasl_oauthbearer_client_id",
        "sasl.oauthbearer.client.secret" | "sasl.oauthbearer.client.credentials.client.secret" => {
            "sasl_oauthbearer_client_secret"
        }
        "sasl.oauthbearer.scope" => "sasl_oauthbearer_scope",
        "sasl.oauthbearer.extensions" => "sasl_oauthbearer_extensions",
        "https.ca.location" => "https_ca_location",
        "sasl.kerberos.service.name" => "sasl_kerberos_service_name",
        "sasl.kerberos.principal" => "sasl_kerberos_principal",
        "sasl.kerberos.keytab" => "sasl_kerberos_keytab",
        "sasl.kerberos.kdc" => "sasl_kerberos_kdc",
        _ => return None,
    })
}

/// Whether an option or property holds a secret whose value must never be
/// echoed (errors, logs, Debug).
pub fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("secret")
        || k.contains("jaas")
        || k.contains("token")
        || k.contains("user_info")
        || k.ends_with("key.pem")
}

impl SecurityInputs {
    /// Records `canonical = value`, written by the user as `written`. The
    /// same setting given twice (alias and passthrough) must agree.
    pub fn set(&mut self, canonical: &'static str, value: &str, written: &str) -> Result<()> {
        if let Some((old, old_key)) = self.values.get(canonical) {
            if old != value {
                return Err(ConnectorError::ConflictingOptions {
                    message: format!("{old_key:?} and {written:?} set the same setting to different values"),
                });
            }
            return Ok(());
        }
        self.values.insert(canonical, (value.to_owned(), written.to_owned()));
        Ok(())
    }

    fn get(&self, canonical: &str) -> Option<(&str, &str)> {
        self.values.get(canonical).map(|(v, k)| (v.as_str(), k.as_str()))
    }

    /// Validates the final map.
    pub fn resolve(&self) -> Result<SecurityConfig> {
        let protocol = match self.get("security_protocol") {
            Some((v, k)) => parse_protocol(k, v)?,
            None => SecurityProtocol::Plaintext,
        };
        let protocol_hint = if self.get("security_protocol").is_some() {
            format!("security_protocol is '{}'", option_name(protocol))
        } else {
            "security_protocol is not set (so the transport is plaintext)".to_owned()
        };

        // Credentials without SASL would be configured and never presented.
        if !protocol.uses_sasl() {
            for name in ["sasl_username", "sasl_password", "sasl_mechanism"]
                .iter()
                .chain(OAUTH_OPTIONS)
                .chain(KERBEROS_OPTIONS)
            {
                if let Some((_, written)) = self.get(name) {
                    return Err(ConnectorError::InsecureConfig {
                        option: written.to_owned(),
                        message: format!(
                            "is set but {protocol_hint}: it would never be presented and the connection \
                             would be unauthenticated; set security_protocol to 'sasl_plaintext' or 'sasl_ssl'"
                        ),
                    });
                }
            }
        }
        // TLS material without TLS would never be used.
        if !protocol.uses_tls() {
            for name in [
                "ssl_ca_location",
                "ssl_certificate_location",
                "ssl_key_location",
                "ssl_key_password",
            ] {
                if let Some((_, written)) = self.get(name) {
                    return Err(ConnectorError::InsecureConfig {
                        option: written.to_owned(),
                        message: format!(
                            "is set but {protocol_hint}: a plaintext transport never uses it; set \
                             security_protocol to 'ssl' or 'sasl_ssl'"
                        ),
                    });
                }
            }
        }

        let verify_hostname = match self.get("ssl_endpoint_identification_algorithm") {
            None => true,
            Some((v, k)) => match v.trim().to_ascii_lowercase().as_str() {
                "https" => true,
                "none" => false,
                _ => return Err(ConnectorError::invalid(k, v, "one of https, none")),
            },
        };
        let verify_certificate = match self.get("enable_ssl_certificate_verification") {
            None => true,
            Some((v, k)) => super::options::parse_bool(k, v)?,
        };

        let sasl = if protocol.uses_sasl() {
            let Some((mech, mech_key)) = self.get("sasl_mechanism") else {
                return Err(ConnectorError::InvalidOption {
                    option: "sasl_mechanism".into(),
                    value: String::new(),
                    expected: format!(
                        "a mechanism with security_protocol '{}': one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
                        option_name(protocol)
                    ),
                });
            };
            let mechanism = parse_mechanism(mech_key, mech)?;
            if mechanism != SaslMechanism::Gssapi {
                if let Some((_, written)) = KERBEROS_OPTIONS.iter().find_map(|n| self.get(n)) {
                    return Err(ConnectorError::UnsupportedProperty {
                        property: written.to_owned(),
                        reason: format!("a GSSAPI (Kerberos) setting, but sasl_mechanism is {mech:?}"),
                    });
                }
            }
            if mechanism == SaslMechanism::OAuthBearer {
                Some(self.oauthbearer()?)
            } else if mechanism == SaslMechanism::Gssapi {
                if let Some((_, written)) = OAUTH_OPTIONS.iter().find_map(|n| self.get(n)) {
                    return Err(ConnectorError::UnsupportedProperty {
                        property: written.to_owned(),
                        reason: "an OAUTHBEARER setting, but sasl_mechanism is GSSAPI".into(),
                    });
                }
                Some(self.kerberos()?)
            } else {
                if let Some((_, written)) = OAUTH_OPTIONS.iter().find_map(|n| self.get(n)) {
                    return Err(ConnectorError::UnsupportedProperty {
                        property: written.to_owned(),
                        reason: format!("an OAUTHBEARER setting, but sasl_mechanism is {mech:?}"),
                    });
                }
                let username = match self.get("sasl_username") {
                    Some((v, _)) if !v.is_empty() => v.to_owned(),
                    _ => {
                        return Err(ConnectorError::MissingOption {
                            option: "sasl_username",
                            factory: "a SASL security_protocol",
                        })
                    }
                };
                let password = match self.get("sasl_password") {
                    Some((v, _)) if !v.is_empty() => Secret::new(v),
                    _ => {
                        return Err(ConnectorError::MissingOption {
                            option: "sasl_password",
                            factory: "a SASL security_protocol",
                        })
                    }
                };
                Some(SaslConfig {
                    mechanism,
                    username,
                    password,
                    oauthbearer: None,
                    kerberos: None,
                })
            }
        } else {
            None
        };

        let tls = if protocol.uses_tls() {
            let path = |name: &str| self.get(name).map(|(v, _)| PathBuf::from(v));
            let tls = TlsConfig {
                ca_file: path("ssl_ca_location"),
                cert_file: path("ssl_certificate_location"),
                key_file: path("ssl_key_location"),
                key_password: self.get("ssl_key_password").map(|(v, _)| Secret::new(v)),
                hostname_verification: verify_hostname,
                insecure_skip_verify: !verify_certificate,
                ..TlsConfig::default()
            };
            match (&tls.cert_file, &tls.key_file) {
                (Some(_), None) => {
                    return Err(ConnectorError::ConflictingOptions {
                        message: "ssl_certificate_location is set without ssl_key_location (mTLS needs both)".into(),
                    })
                }
                (None, Some(_)) => {
                    return Err(ConnectorError::ConflictingOptions {
                        message: "ssl_key_location is set without ssl_certificate_location (mTLS needs both)".into(),
                    })
                }
                _ => {}
            }
            if tls.key_password.is_some() && tls.key_file.is_none() {
                return Err(ConnectorError::ConflictingOptions {
                    message: "ssl_key_password is set without ssl_key_location".into(),
                });
            }
            if !verify_certificate {
                tracing::warn!(
                    "enable_ssl_certificate_verification=false: the broker certificate is not verified (testing only)"
                );
            }
            Some(tls)
        } else {
            None
        };

        Ok(SecurityConfig { protocol, sasl, tls })
    }
}

impl SecurityInputs {
    /// The GSSAPI settings: a principal's keytab key, the KDC.
    fn kerberos(&self) -> Result<SaslConfig> {
        for name in ["sasl_username", "sasl_password"] {
            if let Some((_, written)) = self.get(name) {
                return Err(ConnectorError::UnsupportedProperty {
                    property: written.to_owned(),
                    reason: "not used with sasl_mechanism GSSAPI: give sasl_kerberos_principal and \
                             sasl_kerberos_keytab"
                        .into(),
                });
            }
        }
        let need = |option: &'static str| match self.get(option) {
            Some((v, _)) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
            _ => Err(ConnectorError::MissingOption {
                option,
                factory: "sasl_mechanism GSSAPI",
            }),
        };
        let mut krb =
            crate::client::KerberosConfig::new(need("sasl_kerberos_principal")?, need("sasl_kerberos_keytab")?);
        if let Some((v, _)) = self.get("sasl_kerberos_service_name") {
            krb.service_name = v.trim().to_owned();
        }
        krb.kdc = self.get("sasl_kerberos_kdc").map(|(v, _)| v.trim().to_owned());
        krb.validate().map_err(|e| match e {
            crate::error::Error::Config { option, message } => {
                use crate::client::kerberos::{OPT_KDC, OPT_KEYTAB, OPT_PRINCIPAL, OPT_SERVICE_NAME};
                let alias = match option {
                    OPT_SERVICE_NAME => "sasl_kerberos_service_name",
                    OPT_PRINCIPAL => "sasl_kerberos_principal",
                    OPT_KEYTAB => "sasl_kerberos_keytab",
                    OPT_KDC => "sasl_kerberos_kdc",
                    other => other,
                };
                let (value, key) = self.get(alias).unwrap_or(("", alias));
                ConnectorError::invalid(key, value, message)
            }
            e => e.into(),
        })?;
        Ok(SaslConfig {
            mechanism: SaslMechanism::Gssapi,
            username: String::new(),
            password: Secret::default(),
            oauthbearer: None,
            kerberos: Some(krb),
        })
    }

    /// The OAUTHBEARER settings: the OIDC client-credentials grant.
    fn oauthbearer(&self) -> Result<SaslConfig> {
        for name in ["sasl_username", "sasl_password"] {
            if let Some((_, written)) = self.get(name) {
                return Err(ConnectorError::UnsupportedProperty {
                    property: written.to_owned(),
                    reason: "not used with sasl_mechanism OAUTHBEARER: give sasl_oauthbearer_client_id and \
                             sasl_oauthbearer_client_secret"
                        .into(),
                });
            }
        }
        if let Some((v, k)) = self.get("sasl_oauthbearer_method") {
            if !v.trim().eq_ignore_ascii_case("oidc") {
                return Err(ConnectorError::invalid(
                    k,
                    v,
                    "oidc (the client-credentials grant; librdkafka's unsecured 'default' is not supported)",
                ));
            }
        }
        let need = |option: &'static str| match self.get(option) {
            Some((v, _)) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
            _ => Err(ConnectorError::MissingOption {
                option,
                factory: "sasl_mechanism OAUTHBEARER",
            }),
        };
        let url = need("sasl_oauthbearer_token_endpoint_url")?;
        let id = need("sasl_oauthbearer_client_id")?;
        let secret = Secret::new(need("sasl_oauthbearer_client_secret")?);
        let mut oidc = crate::client::OidcConfig::new(url, id, secret);
        oidc.scope = self.get("sasl_oauthbearer_scope").map(|(v, _)| v.trim().to_owned());
        if let Some((ca, _)) = self.get("https_ca_location") {
            oidc.tls = TlsConfig::default().with_ca_file(ca);
        }
        let provider = crate::client::OidcClientCredentials::new(oidc).map_err(|e| match e {
            crate::error::Error::Config { option, message } => ConnectorError::InvalidOption {
                option: match option {
                    "ssl.ca.location" => "https_ca_location",
                    "sasl.oauthbearer.token.endpoint.url" => "sasl_oauthbearer_token_endpoint_url",
                    o => o,
                }
                .into(),
                value: String::new(),
                expected: message,
            },
            e => e.into(),
        })?;
        let extensions = match self.get("sasl_oauthbearer_extensions") {
            None => Vec::new(),
            Some((v, k)) => clink_kafka_wire::sasl::oauthbearer::parse_extensions(v).map_err(|e| {
                ConnectorError::invalid(k, v, format!("key=value,... with keys of ASCII letters ({e})"))
            })?,
        };
        Ok(SaslConfig {
            mechanism: SaslMechanism::OAuthBearer,
            username: String::new(),
            password: Secret::default(),
            oauthbearer: Some(crate::client::OAuthBearerConfig {
                provider: std::sync::Arc::new(provider),
                extensions,
            }),
            kerberos: None,
        })
    }
}

fn parse_mechanism(option: &str, value: &str) -> Result<SaslMechanism> {
    match value.trim().to_ascii_uppercase().as_str() {
        "PLAIN" => Ok(SaslMechanism::Plain),
        "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
        "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
        "OAUTHBEARER" => Ok(SaslMechanism::OAuthBearer),
        "GSSAPI" => Ok(SaslMechanism::Gssapi),
        _ => Err(ConnectorError::invalid(
            option,
            value,
            "one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI",
        )),
    }
}

impl SecurityConfig {
    /// Applies this configuration to the native client's config: the
    /// protocol, the SASL credentials and the TLS material, then the
    /// client's own consistency check (so nothing weaker than configured
    /// can reach a broker).
    pub fn apply_to(&self, config: &mut ClientConfig) -> Result<()> {
        config.security_protocol = self.protocol;
        config.sasl = self.sasl.clone();
        config.tls = self.tls.clone().unwrap_or_default();
        config.validate()?;
        Ok(())
    }
}

/// librdkafka properties of one client, in the order they are set. Debug
/// prints every secret (`sasl.password`, `ssl.key.password`) as `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LibrdkafkaProperties(pub Vec<(&'static str, String)>);

impl std::fmt::Debug for LibrdkafkaProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.0 {
            if is_secret_option(k) {
                m.entry(k, &"***");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

impl LibrdkafkaProperties {
    /// The value set for `property`, if any.
    pub fn get(&self, property: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| *k == property).map(|(_, v)| v.as_str())
    }

    fn set(&mut self, property: &'static str, value: impl Into<String>) {
        self.0.push((property, value.into()));
    }
}

/// A path as a librdkafka property value (a C string: UTF-8 without NUL).
fn path_value(option: &str, path: &std::path::Path) -> Result<String> {
    match path.to_str() {
        Some(s) if !s.is_empty() && !s.contains('\0') => Ok(s.to_owned()),
        _ => Err(ConnectorError::invalid(
            option,
            path.to_string_lossy().into_owned(),
            "a non-empty UTF-8 file path (librdkafka takes paths as C strings)",
        )),
    }
}

impl SecurityConfig {
    /// The same settings as librdkafka properties (the `rdkafka` backend):
    /// - `security.protocol`;
    /// - SASL: `sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: all
    ///   builtin in librdkafka once it links OpenSSL), `sasl.username`,
    ///   `sasl.password`;
    /// - TLS: `ssl.ca.location` when a CA file is given; without one,
    ///   nothing, so librdkafka loads the linked OpenSSL's default verify
    ///   paths: the system trust store (Debian's `ca-certificates` under
    ///   `/etc/ssl/certs`), where the native client uses the Mozilla roots
    ///   of `webpki-roots` (both Mozilla's list; a named difference);
    ///   `ssl.certificate.location` + `ssl.key.location` (+
    ///   `ssl.key.password`) for mTLS;
    ///   `ssl.endpoint.identification.algorithm` always set (`https`
    ///   unless hostname verification was switched off: `none`);
    ///   `enable.ssl.certificate.verification` always set (`false` only for
    ///   an explicit skip-verify, which warns as natively).
    ///
    /// Refused, naming the setting: a `server_name` override (librdkafka
    /// verifies and sends as SNI each broker's own host name and has no
    /// property to change it).
    pub fn librdkafka_properties(&self) -> Result<LibrdkafkaProperties> {
        let mut p = LibrdkafkaProperties::default();
        p.set("security.protocol", option_name(self.protocol));
        if let Some(sasl) = &self.sasl {
            if !self.protocol.uses_sasl() {
                return Err(ConnectorError::ConflictingOptions {
                    message: format!(
                        "SASL credentials with security_protocol '{}': they would never be presented",
                        option_name(self.protocol)
                    ),
                });
            }
            if sasl.mechanism == SaslMechanism::Gssapi {
                return Err(ConnectorError::UnsupportedProperty {
                    property: "sasl_mechanism".into(),
                    reason: "GSSAPI on backend 'rdkafka': its bundled librdkafka is built without Cyrus SASL \
                             (no libsasl2, so no Kerberos); the native backend implements GSSAPI in pure Rust: use \
                             backend = 'native'"
                        .into(),
                });
            }
            p.set("sasl.mechanism", sasl.mechanism.name());
            if sasl.mechanism == SaslMechanism::OAuthBearer {
                // The token comes from our own provider through
                // rust-rdkafka's `generate_oauth_token` callback (the
                // backend's contexts), not librdkafka's OIDC (libcurl).
                // That callback cannot pass SASL extensions.
                if sasl.oauthbearer.as_ref().is_some_and(|o| !o.extensions.is_empty()) {
                    return Err(ConnectorError::UnsupportedProperty {
                        property: "sasl_oauthbearer_extensions".into(),
                        reason: "SASL extensions (KIP-342) on backend 'rdkafka': rust-rdkafka's token callback \
                                 cannot pass them to librdkafka; use backend = 'native'"
                            .into(),
                    });
                }
                p.set("enable.sasl.oauthbearer.unsecure.jwt", "false");
            } else {
                p.set("sasl.username", sasl.username.clone());
                p.set("sasl.password", sasl.password.expose());
            }
        } else if self.protocol.uses_sasl() {
            return Err(ConnectorError::MissingOption {
                option: "sasl_mechanism",
                factory: "a SASL security_protocol",
            });
        }
        if self.protocol.uses_tls() {
            let default = TlsConfig::default();
            let tls = self.tls.as_ref().unwrap_or(&default);
            if let Some(name) = &tls.server_name {
                return Err(ConnectorError::UnsupportedProperty {
                    property: "server_name".into(),
                    reason: format!(
                        "a TLS server name override ({name:?}) on backend 'rdkafka': librdkafka verifies and \
                         sends (SNI) each broker's own host name and has no property to change it; use backend = \
                         'native'"
                    ),
                });
            }
            if let Some(ca) = &tls.ca_file {
                p.set("ssl.ca.location", path_value("ssl_ca_location", ca)?);
            }
            match (&tls.cert_file, &tls.key_file) {
                (Some(cert), Some(key)) => {
                    p.set(
                        "ssl.certificate.location",
                        path_value("ssl_certificate_location", cert)?,
                    );
                    p.set("ssl.key.location", path_value("ssl_key_location", key)?);
                    if let Some(pw) = &tls.key_password {
                        p.set("ssl.key.password", pw.expose());
                    }
                }
                (None, None) if tls.key_password.is_some() => {
                    return Err(ConnectorError::ConflictingOptions {
                        message: "ssl_key_password is set without ssl_key_location".into(),
                    })
                }
                (None, None) => {}
                (Some(_), None) | (None, Some(_)) => {
                    return Err(ConnectorError::ConflictingOptions {
                        message: "ssl_certificate_location and ssl_key_location go together (mTLS needs both)".into(),
                    })
                }
            }
            p.set(
                "ssl.endpoint.identification.algorithm",
                if tls.hostname_verification { "https" } else { "none" },
            );
            p.set(
                "enable.ssl.certificate.verification",
                if tls.insecure_skip_verify { "false" } else { "true" },
            );
        } else if self
            .tls
            .as_ref()
            .is_some_and(|t| t.ca_file.is_some() || t.cert_file.is_some())
        {
            return Err(ConnectorError::ConflictingOptions {
                message: format!(
                    "TLS material with security_protocol '{}': a plaintext transport never uses it",
                    option_name(self.protocol)
                ),
            });
        }
        Ok(p)
    }
}

/// Why a `kafka.<property>` that reaches librdkafka verbatim (the
/// `rdkafka` backend) is refused for security, or `None`. The typed
/// options own the security settings; these would weaken them, or run
/// code that could rewrite them after the checks:
/// - an alias of a typed security setting set behind its back (the
///   options parser maps those onto the alias, so only a programmatic
///   passthrough reaches here);
/// - cipher, curve and signature-algorithm lists, and OpenSSL providers
///   and engines: they can admit algorithms below OpenSSL's default policy
///   (the native client keeps rustls's fixed strong set);
/// - `plugin.library.paths`: loads C code (interceptors) that can change
///   the configuration after these checks;
/// - Kerberos (`sasl.kerberos.*`, whose `kinit.cmd` runs a shell command)
///   and OAUTHBEARER settings: mechanisms neither backend supports.
pub fn librdkafka_passthrough_refusal(property: &str) -> Option<String> {
    if let Some(alias) = alias_of_property(property) {
        return Some(format!(
            "a security setting: set it through the typed option {alias} (or the option parser's \
             kafka.{property}), which runs the weak-configuration checks"
        ));
    }
    match property {
        "ssl.cipher.suites"
        | "ssl.curves.list"
        | "ssl.sigalgs.list"
        | "ssl.providers"
        | "ssl.engine.id"
        | "ssl.engine.location" => Some(
            "could admit TLS algorithms below OpenSSL's default policy (the native client keeps rustls's fixed \
             strong set); the rdkafka backend keeps OpenSSL's defaults"
                .into(),
        ),
        "plugin.library.paths" => {
            Some("loads C plugins that can rewrite the configuration after the security checks".into())
        }
        p if p.starts_with("sasl.kerberos.") => Some(
            "Kerberos is configured through the sasl_kerberos_* options (native backend only; kinit.cmd, a shell \
             command, is never run)"
                .into(),
        ),
        p if p.starts_with("sasl.oauthbearer") || p == "enable.sasl.oauthbearer.unsecure.jwt" => Some(
            "OAUTHBEARER is configured through the sasl_oauthbearer_* options (the token comes from this \
             crate's provider on both backends)"
                .into(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(pairs: &[(&'static str, &str)]) -> SecurityInputs {
        let mut s = SecurityInputs::default();
        for (k, v) in pairs {
            s.set(k, v, k).unwrap();
        }
        s
    }

    #[test]
    fn sasl_maps_onto_the_client_and_hides_the_password() {
        let s = inputs(&[
            ("security_protocol", "SASL_PLAINTEXT"),
            ("sasl_mechanism", "scram-sha-512"),
            ("sasl_username", "alice"),
            ("sasl_password", "canary-pw"),
        ]);
        assert!(!format!("{s:?}").contains("canary-pw"));
        let c = s.resolve().unwrap();
        assert!(!format!("{c:?}").contains("canary-pw"));
        let mut cfg = ClientConfig::new("h:1");
        c.apply_to(&mut cfg).unwrap();
        let sasl = cfg.sasl.unwrap();
        assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(sasl.password.expose(), "canary-pw");
    }

    #[test]
    fn oauthbearer_options_build_the_oidc_provider_with_extensions() {
        let s = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "oauthbearer"),
            ("sasl_oauthbearer_method", "OIDC"),
            ("sasl_oauthbearer_token_endpoint_url", "https://idp.example/token"),
            ("sasl_oauthbearer_client_id", "svc"),
            ("sasl_oauthbearer_client_secret", "canary-secret"),
            ("sasl_oauthbearer_scope", "kafka"),
            ("sasl_oauthbearer_extensions", "traceId=abc,logicalCluster=lkc-1"),
        ]);
        let c = s.resolve().unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("canary-secret"), "{shown}");
        assert!(shown.contains("idp.example"), "{shown}");
        let oauth = c.sasl.as_ref().unwrap().oauthbearer.as_ref().unwrap();
        let ext: Vec<(&str, &str)> = oauth.extensions.iter().map(|e| (e.key(), e.value())).collect();
        assert_eq!(ext, [("traceId", "abc"), ("logicalCluster", "lkc-1")]);
        let mut cfg = ClientConfig::new("h:1");
        c.apply_to(&mut cfg).unwrap();
        assert_eq!(cfg.sasl.unwrap().mechanism, SaslMechanism::OAuthBearer);
        // librdkafka: the mechanism, never a secret; extensions refused.
        let e = c.librdkafka_properties().unwrap_err();
        assert_eq!(e.option(), Some("sasl_oauthbearer_extensions"), "{e}");
        let mut no_ext = s.clone();
        no_ext.values.remove("sasl_oauthbearer_extensions");
        let p = no_ext.resolve().unwrap().librdkafka_properties().unwrap();
        assert_eq!(p.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert!(p.get("sasl.password").is_none() && !format!("{p:?}").contains("canary"));

        for (k, v) in [
            ("sasl_oauthbearer_method", "default"),
            ("sasl_oauthbearer_extensions", "auth=x"),
            ("sasl_username", "u"),
            ("sasl_oauthbearer_token_endpoint_url", "http://idp/token"),
        ] {
            let mut bad = s.clone();
            bad.values.insert(k, (v.to_owned(), k.to_owned()));
            let e = bad.resolve().unwrap_err();
            assert_eq!(e.option(), Some(k), "{e}");
            assert!(!e.to_string().contains("canary-secret"), "{e}");
        }
        let mut missing = s.clone();
        missing.values.remove("sasl_oauthbearer_client_id");
        let e = missing.resolve().unwrap_err();
        assert_eq!(e.option(), Some("sasl_oauthbearer_client_id"), "{e}");
        let e = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "u"),
            ("sasl_password", "p"),
            ("sasl_oauthbearer_scope", "kafka"),
        ])
        .resolve()
        .unwrap_err();
        assert_eq!(e.option(), Some("sasl_oauthbearer_scope"), "{e}");
    }

    #[test]
    fn refusals() {
        let e = inputs(&[("sasl_username", "a"), ("sasl_password", "p")])
            .resolve()
            .unwrap_err();
        assert!(
            matches!(&e, ConnectorError::InsecureConfig { option, .. } if option == "sasl_username"),
            "{e}"
        );
        let e = inputs(&[("security_protocol", "plaintext"), ("ssl_ca_location", "/ca.pem")])
            .resolve()
            .unwrap_err();
        assert!(
            matches!(&e, ConnectorError::InsecureConfig { option, .. } if option == "ssl_ca_location"),
            "{e}"
        );
        let e = inputs(&[("security_protocol", "sasl_plaintext"), ("sasl_mechanism", "GSSAPI")])
            .resolve()
            .unwrap_err();
        assert!(
            matches!(&e, ConnectorError::MissingOption { option, .. } if *option == "sasl_kerberos_principal"),
            "{e}"
        );
        let gssapi = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "GSSAPI"),
            ("sasl_kerberos_principal", "alice@CLINK.TEST"),
            ("sasl_kerberos_keytab", "/alice.keytab"),
            ("sasl_kerberos_kdc", "127.0.0.1:88"),
        ])
        .resolve()
        .unwrap();
        let krb = gssapi.sasl.as_ref().and_then(|s| s.kerberos.as_ref()).unwrap();
        assert_eq!(
            (krb.service_name.as_str(), krb.kdc.as_deref()),
            ("kafka", Some("127.0.0.1:88"))
        );
        // The named difference: refused on rdkafka, naming sasl_mechanism.
        let e = gssapi.librdkafka_properties().unwrap_err().to_string();
        assert!(e.contains("sasl_mechanism") && e.contains("libsasl2"), "{e}");
        let e = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "GSSAPI"),
            ("sasl_kerberos_principal", "alice@CLINK.TEST"),
            ("sasl_kerberos_keytab", "/alice.keytab"),
            ("sasl_kerberos_kdc", "no-port"),
        ])
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("sasl_kerberos_kdc"), "{e}");
        let e = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "u"),
            ("sasl_password", "p"),
            ("sasl_kerberos_keytab", "/alice.keytab"),
        ])
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("sasl_kerberos_keytab"), "{e}");
        let tls = inputs(&[
            ("security_protocol", "ssl"),
            ("ssl_ca_location", "/ca.pem"),
            ("ssl_certificate_location", "/client.pem"),
            ("ssl_key_location", "/client.key"),
            ("ssl_key_password", "key-secret"),
            ("ssl_endpoint_identification_algorithm", "none"),
        ])
        .resolve()
        .unwrap();
        let mut config = ClientConfig::default();
        tls.apply_to(&mut config).unwrap();
        assert_eq!(config.security_protocol, crate::client::SecurityProtocol::Ssl);
        assert_eq!(config.tls.ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(
            config.tls.cert_file.as_deref(),
            Some(std::path::Path::new("/client.pem"))
        );
        assert_eq!(
            config.tls.key_file.as_deref(),
            Some(std::path::Path::new("/client.key"))
        );
        assert!(!config.tls.hostname_verification);
        assert!(!config.tls.insecure_skip_verify);
        assert!(!format!("{config:?}").contains("key-secret"));
    }

    #[test]
    fn librdkafka_properties_map_every_security_setting() {
        let plain = inputs(&[]).resolve().unwrap().librdkafka_properties().unwrap();
        assert_eq!(plain.0, vec![("security.protocol", "plaintext".to_owned())]);

        let scram = inputs(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "scram-sha-256"),
            ("sasl_username", "alice"),
            ("sasl_password", "canary-pw"),
            ("ssl_ca_location", "/ca.pem"),
        ])
        .resolve()
        .unwrap()
        .librdkafka_properties()
        .unwrap();
        assert_eq!(scram.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(scram.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert_eq!(scram.get("sasl.username"), Some("alice"));
        assert_eq!(scram.get("sasl.password"), Some("canary-pw"));
        assert_eq!(scram.get("ssl.ca.location"), Some("/ca.pem"));
        // Verification is set explicitly, on, whatever librdkafka's default.
        assert_eq!(scram.get("ssl.endpoint.identification.algorithm"), Some("https"));
        assert_eq!(scram.get("enable.ssl.certificate.verification"), Some("true"));
        assert_eq!(scram.get("ssl.certificate.location"), None);
        assert!(!format!("{scram:?}").contains("canary-pw"), "{scram:?}");

        let mtls = inputs(&[
            ("security_protocol", "ssl"),
            ("ssl_certificate_location", "/client.pem"),
            ("ssl_key_location", "/client.key"),
            ("ssl_key_password", "key-canary"),
            ("ssl_endpoint_identification_algorithm", "none"),
        ])
        .resolve()
        .unwrap()
        .librdkafka_properties()
        .unwrap();
        assert_eq!(mtls.get("security.protocol"), Some("ssl"));
        // No CA file: nothing, so librdkafka takes OpenSSL's default paths.
        assert_eq!(mtls.get("ssl.ca.location"), None);
        assert_eq!(mtls.get("ssl.certificate.location"), Some("/client.pem"));
        assert_eq!(mtls.get("ssl.key.location"), Some("/client.key"));
        assert_eq!(mtls.get("ssl.key.password"), Some("key-canary"));
        assert_eq!(mtls.get("ssl.endpoint.identification.algorithm"), Some("none"));
        assert_eq!(mtls.get("sasl.mechanism"), None);
        assert!(!format!("{mtls:?}").contains("key-canary"), "{mtls:?}");

        let skip = inputs(&[
            ("security_protocol", "ssl"),
            ("enable_ssl_certificate_verification", "false"),
        ])
        .resolve()
        .unwrap()
        .librdkafka_properties()
        .unwrap();
        assert_eq!(skip.get("enable.ssl.certificate.verification"), Some("false"));
    }

    #[test]
    fn librdkafka_properties_refuse_a_server_name_override_and_inconsistent_configs() {
        let mut c = inputs(&[("security_protocol", "ssl")]).resolve().unwrap();
        c.tls.as_mut().unwrap().server_name = Some("broker.example".into());
        let e = c.librdkafka_properties().unwrap_err();
        assert_eq!(e.option(), Some("server_name"), "{e}");
        assert!(e.to_string().contains("backend = 'native'"), "{e}");
        // Built programmatically, past the option checks: still refused.
        let mut c = inputs(&[("security_protocol", "ssl")]).resolve().unwrap();
        c.tls.as_mut().unwrap().cert_file = Some("/client.pem".into());
        assert!(c.librdkafka_properties().is_err());
        let c = SecurityConfig {
            protocol: SecurityProtocol::SaslSsl,
            sasl: None,
            tls: None,
        };
        assert!(c.librdkafka_properties().is_err(), "SASL without credentials");
        let mut c = inputs(&[
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "u"),
            ("sasl_password", "pw"),
        ])
        .resolve()
        .unwrap();
        c.protocol = SecurityProtocol::Plaintext;
        assert!(c.librdkafka_properties().is_err(), "credentials never presented");
    }

    #[test]
    fn the_passthrough_refusals_name_why() {
        for p in [
            "ssl.cipher.suites",
            "ssl.providers",
            "ssl.engine.location",
            "plugin.library.paths",
            "sasl.kerberos.kinit.cmd",
            "sasl.oauthbearer.config",
            "enable.sasl.oauthbearer.unsecure.jwt",
            // The typed settings, if a programmatic passthrough names them.
            "security.protocol",
            "sasl.mechanisms",
            "enable.ssl.certificate.verification",
        ] {
            assert!(librdkafka_passthrough_refusal(p).is_some(), "{p}");
        }
        for p in ["ssl.crl.location", "ssl.keystore.location", "client.rack", "linger.ms"] {
            assert_eq!(librdkafka_passthrough_refusal(p), None, "{p}");
        }
    }

    #[test]
    fn alias_and_passthrough_must_agree() {
        let mut s = SecurityInputs::default();
        s.set("security_protocol", "sasl_plaintext", "security_protocol")
            .unwrap();
        let e = s
            .set("security_protocol", "plaintext", "kafka.security.protocol")
            .unwrap_err();
        assert!(e.to_string().contains("kafka.security.protocol"), "{e}");
    }
}
