//! TLS for broker connections (`security.protocol` SSL and SASL_SSL):
//! trust anchors, the optional client certificate (mTLS), server
//! verification and the handshake, on rustls through tokio-rustls.
//!
//! The crypto provider is [graviola](https://crates.io/crates/graviola)
//! (`rustls-graviola`): Rust plus Rust-embedded assembly, so the default build
//! stays free of C, `cc`, cmake and `*-sys` crates (ring builds C through
//! `cc`; aws-lc-rs needs cmake). Graviola runs on x86_64 (with AES-NI, AVX2,
//! ADX, BMI1/2, PCLMULQDQ) and aarch64 (AES, SHA2, PMULL, NEON); on a CPU
//! without those [`TlsConnector::new`] returns a typed error instead of the
//! provider's panic. Swapping providers touches only `crypto_provider()`.
//!
//! Verification (after Kafka's `ssl.endpoint.identification.algorithm`):
//! - default: the broker's chain must lead to a CA in `ca_file` (or, without
//!   one, to the Mozilla roots of `webpki-roots`), and the certificate must
//!   name the host we dialled (DNS name or IP address);
//! - `hostname_verification = false`: the chain is still verified, only the
//!   name check is skipped;
//! - `insecure_skip_verify = true`: nothing about the certificate is
//!   checked (handshake signatures still are). Every connection made that way
//!   logs a `WARN`.
//!
//! There is no fallback: a failed handshake is an [`Error::Tls`], and the
//! connection is never retried in plaintext.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clink_kafka_wire::secret::Secret;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::client::TlsStream;

use crate::error::{BrokerRef, Error, Result, TlsFailure};

/// Option names used in errors (librdkafka's names for the same PEM files): the CA.
pub const OPT_CA: &str = "ssl.ca.location";
/// The client certificate's option name.
pub const OPT_CERT: &str = "ssl.certificate.location";
/// The client key's option name.
pub const OPT_KEY: &str = "ssl.key.location";
/// The client key password's option name.
pub const OPT_KEY_PASSWORD: &str = "ssl.key.password";
/// The hostname-verification switch's option name.
pub const OPT_HOSTNAME: &str = "ssl.endpoint.identification.algorithm";
/// The skip-verification switch's option name.
pub const OPT_INSECURE: &str = "tls.insecure.skip.verify";
/// The server-name override's option name.
pub const OPT_SERVER_NAME: &str = "tls.server.name";

/// TLS settings. All empty by default: the broker is verified against the
/// `webpki-roots` Mozilla roots and by the host name dialled.
///
/// Only meaningful with `security.protocol` SSL or SASL_SSL; set on a
/// plaintext protocol, any of it is a configuration error (see
/// [`super::ClientConfig::validate`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsConfig {
    /// PEM file with one or more CA certificates to trust (`ssl.ca.location`).
    /// `None`: the Mozilla roots from `webpki-roots`.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, leaf first (`ssl.certificate.location`),
    /// for listeners that require a client certificate (mTLS).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate (`ssl.key.location`):
    /// PKCS#8, PKCS#1 (RSA) or SEC1 (EC), or an encrypted PKCS#8 key
    /// (`ENCRYPTED PRIVATE KEY`, PBES2) with [`Self::key_password`].
    pub key_file: Option<PathBuf>,
    /// Password of an encrypted key (`ssl.key.password`). Never logged.
    pub key_password: Option<Secret>,
    /// Check that the broker's certificate names the host dialled
    /// (`ssl.endpoint.identification.algorithm=https`, the default). `false`
    /// is Kafka's `ssl.endpoint.identification.algorithm=` (empty): the chain
    /// is still verified.
    pub hostname_verification: bool,
    /// Accept any certificate: no chain, no name, no expiry check. For test
    /// rigs only; every connection made so logs a warning.
    pub insecure_skip_verify: bool,
    /// Verify (and send as SNI) this name instead of the host dialled, for
    /// every broker. `None`: the host of each broker's address.
    pub server_name: Option<String>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_file: None,
            cert_file: None,
            key_file: None,
            key_password: None,
            hostname_verification: true,
            insecure_skip_verify: false,
            server_name: None,
        }
    }
}

/// Builder-style setters: each returns the config with one setting
/// changed (the fields stay public; the config is `#[non_exhaustive]`, so
/// build it from [`Default`] or its constructor, then these).
impl TlsConfig {
    /// Sets `ca_file` (see the field).
    #[must_use]
    pub fn with_ca_file(mut self, value: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(value.into());
        self
    }

    /// Sets `cert_file` (see the field).
    #[must_use]
    pub fn with_cert_file(mut self, value: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(value.into());
        self
    }

    /// Sets `key_file` (see the field).
    #[must_use]
    pub fn with_key_file(mut self, value: impl Into<PathBuf>) -> Self {
        self.key_file = Some(value.into());
        self
    }

    /// Sets `key_password` (see the field).
    #[must_use]
    pub fn with_key_password(mut self, value: impl Into<Secret>) -> Self {
        self.key_password = Some(value.into());
        self
    }

    /// Sets `hostname_verification` (see the field).
    #[must_use]
    pub fn with_hostname_verification(mut self, value: bool) -> Self {
        self.hostname_verification = value;
        self
    }

    /// Sets `insecure_skip_verify` (see the field).
    #[must_use]
    pub fn with_insecure_skip_verify(mut self, value: bool) -> Self {
        self.insecure_skip_verify = value;
        self
    }

    /// Sets `server_name` (see the field).
    #[must_use]
    pub fn with_server_name(mut self, value: impl Into<String>) -> Self {
        self.server_name = Some(value.into());
        self
    }
}

impl TlsConfig {
    /// The first TLS option that differs from the default, by its option
    /// name (used to refuse TLS settings on a plaintext protocol).
    pub fn first_set_option(&self) -> Option<&'static str> {
        if self.ca_file.is_some() {
            Some(OPT_CA)
        } else if self.cert_file.is_some() {
            Some(OPT_CERT)
        } else if self.key_file.is_some() {
            Some(OPT_KEY)
        } else if self.key_password.is_some() {
            Some(OPT_KEY_PASSWORD)
        } else if !self.hostname_verification {
            Some(OPT_HOSTNAME)
        } else if self.insecure_skip_verify {
            Some(OPT_INSECURE)
        } else if self.server_name.is_some() {
            Some(OPT_SERVER_NAME)
        } else {
            None
        }
    }

    /// Checks the combinations that cannot work or that silently ignore a
    /// setting.
    pub fn validate(&self) -> Result<()> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => return Err(config(OPT_KEY, "a client certificate needs its private key".into())),
            (None, Some(_)) => return Err(config(OPT_CERT, "a private key needs its client certificate".into())),
            _ => {}
        }
        if self.key_password.is_some() && self.key_file.is_none() {
            return Err(config(OPT_KEY_PASSWORD, format!("a key password needs {OPT_KEY}")));
        }
        if self.insecure_skip_verify && self.ca_file.is_some() {
            return Err(config(
                OPT_INSECURE,
                format!("skipping verification ignores {OPT_CA}; give one or the other"),
            ));
        }
        if let Some(name) = &self.server_name {
            ServerName::try_from(name.as_str())
                .map_err(|_| config(OPT_SERVER_NAME, format!("{name:?} is not a DNS name or IP address")))?;
        }
        Ok(())
    }
}

fn config(option: &'static str, message: String) -> Error {
    Error::Config { option, message }
}

/// The crypto provider for every TLS connection. See the module docs.
fn crypto_provider() -> Result<Arc<CryptoProvider>> {
    if let Some(missing) = missing_cpu_features() {
        return Err(config(
            "security.protocol",
            format!(
                "TLS is unavailable on this CPU: the TLS provider (graviola) needs {missing}; \
                 use a plaintext protocol or a newer CPU"
            ),
        ));
    }
    Ok(Arc::new(rustls_graviola::default_provider()))
}

/// Graviola asserts its CPU features on first use; checked here first so a
/// missing one is an error, not a panic.
#[cfg(target_arch = "x86_64")]
fn missing_cpu_features() -> Option<String> {
    let mut missing = Vec::new();
    macro_rules! need {
        ($($f:tt),*) => {$(
            if !std::arch::is_x86_feature_detected!($f) {
                missing.push($f);
            }
        )*};
    }
    need!("aes", "avx", "avx2", "adx", "bmi1", "bmi2", "pclmulqdq", "ssse3");
    (!missing.is_empty()).then(|| missing.join(", "))
}

#[cfg(target_arch = "aarch64")]
fn missing_cpu_features() -> Option<String> {
    let mut missing = Vec::new();
    macro_rules! need {
        ($($f:tt),*) => {$(
            if !std::arch::is_aarch64_feature_detected!($f) {
                missing.push($f);
            }
        )*};
    }
    need!("aes", "sha2", "pmull", "neon");
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// Everything needed to open TLS connections, loaded once from a
/// [`TlsConfig`] (files read and parsed, key decrypted).
#[derive(Clone)]
pub struct TlsConnector {
    connector: tokio_rustls::TlsConnector,
    server_name: Option<ServerName<'static>>,
    insecure: bool,
    client_cert: bool,
    trust: Arc<str>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector")
            .field("trust", &self.trust)
            .field("client_cert", &self.client_cert)
            .field("insecure", &self.insecure)
            .finish()
    }
}

impl TlsConnector {
    /// Reads the CA, certificate and key files and builds the rustls client
    /// configuration. Errors name the option and the file.
    pub fn new(tls: &TlsConfig) -> Result<Self> {
        tls.validate()?;
        let provider = crypto_provider()?;
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(rustls::DEFAULT_VERSIONS)
            .map_err(|e| config("security.protocol", format!("TLS provider: {e}")))?;

        let (verifier, trust): (Arc<dyn ServerCertVerifier>, String) = if tls.insecure_skip_verify {
            (
                Arc::new(NoVerification {
                    provider: provider.clone(),
                }),
                "nothing (insecure_skip_verify)".into(),
            )
        } else {
            let (roots, trust) = match &tls.ca_file {
                Some(path) => (load_roots(path)?, format!("the CA in {OPT_CA} {}", path.display())),
                None => (
                    RootCertStore {
                        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                    },
                    format!("the built-in Mozilla roots (no {OPT_CA} given)"),
                ),
            };
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| config(OPT_CA, format!("building the certificate verifier: {e}")))?;
            if tls.hostname_verification {
                (webpki, trust)
            } else {
                (Arc::new(ChainOnly { inner: webpki }), trust)
            }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);

        let client_config = match (&tls.cert_file, &tls.key_file) {
            (Some(cert), Some(key)) => {
                let chain = load_certs(cert, OPT_CERT)?;
                let key_der = load_key(key, tls.key_password.as_ref())?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    config(
                        OPT_KEY,
                        format!(
                            "the key in {} does not fit the certificate in {}: {e}",
                            key.display(),
                            cert.display()
                        ),
                    )
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        let server_name = match &tls.server_name {
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|_| config(OPT_SERVER_NAME, format!("{name:?} is not a DNS name or IP address")))?,
            ),
            None => None,
        };
        Ok(TlsConnector {
            connector: tokio_rustls::TlsConnector::from(Arc::new(client_config)),
            server_name,
            insecure: tls.insecure_skip_verify,
            client_cert: tls.cert_file.is_some(),
            trust: trust.into(),
        })
    }

    /// Whether a client certificate is presented.
    pub fn has_client_cert(&self) -> bool {
        self.client_cert
    }

    /// Runs the TLS handshake over `io` (a connected socket to `broker`),
    /// bounded by `timeout`. The host of `broker.addr` (or the configured
    /// server name) is what the certificate must name.
    pub async fn handshake<IO>(&self, broker: &BrokerRef, io: IO, timeout: Duration) -> Result<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                let host = host_of(&broker.addr);
                ServerName::try_from(host.to_owned()).map_err(|_| Error::Tls {
                    broker: broker.clone(),
                    kind: TlsFailure::HandshakeFailed,
                    reason: format!("{host:?} is not a DNS name or IP address to verify the certificate against"),
                })?
            }
        };
        if self.insecure {
            tracing::warn!(broker = %broker,
                "TLS certificate verification is OFF (insecure_skip_verify): this connection is encrypted \
                 but the broker is not authenticated; anyone on the path can impersonate it");
        }
        match tokio::time::timeout(timeout, self.connector.connect(name, io)).await {
            Err(_) => Err(Error::Tls {
                broker: broker.clone(),
                kind: TlsFailure::HandshakeFailed,
                reason: format!("no TLS handshake within {timeout:?}: is this a TLS listener?"),
            }),
            Ok(Err(e)) => Err(classify(broker, &e, self, true)),
            Ok(Ok(stream)) => Ok(stream),
        }
    }

    /// The typed error for an I/O error on an established TLS connection,
    /// if it is a TLS error (an alert from the broker, say: with TLS 1.3 a
    /// rejected client certificate is reported only after the handshake).
    pub(crate) fn io_error(&self, broker: &BrokerRef, e: &io::Error) -> Option<Error> {
        rustls_error(e).map(|_| classify(broker, e, self, false))
    }
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => addr,
    };
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

fn classify(broker: &BrokerRef, e: &io::Error, tls: &TlsConnector, in_handshake: bool) -> Error {
    let (kind, reason) = match rustls_error(e) {
        Some(rustls::Error::InvalidCertificate(cert)) => certificate_failure(cert, &tls.trust),
        Some(rustls::Error::AlertReceived(alert)) => alert_failure(*alert, tls.client_cert),
        Some(rustls::Error::NoCertificatesPresented) => (
            TlsFailure::HandshakeFailed,
            "the broker presented no certificate".into(),
        ),
        Some(other) => (TlsFailure::HandshakeFailed, other.to_string()),
        None if e.kind() == io::ErrorKind::UnexpectedEof => (
            TlsFailure::HandshakeFailed,
            if tls.client_cert {
                "the broker closed the connection during the TLS handshake: is this port a TLS listener?".into()
            } else {
                "the broker closed the connection during the TLS handshake: is this port a TLS listener, \
                 and does it require a client certificate?"
                    .into()
            },
        ),
        None if in_handshake => (TlsFailure::HandshakeFailed, format!("during the TLS handshake: {e}")),
        None => (TlsFailure::HandshakeFailed, e.to_string()),
    };
    Error::Tls {
        broker: broker.clone(),
        kind,
        reason,
    }
}

fn certificate_failure(cert: &CertificateError, trust: &str) -> (TlsFailure, String) {
    match cert {
        CertificateError::UnknownIssuer => (
            TlsFailure::CertificateNotTrusted,
            format!("the broker's certificate is not signed by {trust}"),
        ),
        CertificateError::BadSignature => (
            TlsFailure::CertificateNotTrusted,
            format!("the broker's certificate chain has a bad signature (trusting {trust})"),
        ),
        CertificateError::NotValidForName => (
            TlsFailure::HostnameMismatch,
            format!("the broker's certificate does not name the host dialled; {HOSTNAME_HINT}"),
        ),
        CertificateError::NotValidForNameContext { expected, presented } => (
            TlsFailure::HostnameMismatch,
            format!(
                "the broker's certificate is for [{}], not {}; {HOSTNAME_HINT}",
                presented
                    .iter()
                    .map(|n| presented_name(n))
                    .collect::<Vec<_>>()
                    .join(", "),
                server_name_text(expected)
            ),
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
            TlsFailure::CertificateInvalid,
            format!("the broker's certificate has expired ({cert})"),
        ),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
            TlsFailure::CertificateInvalid,
            format!("the broker's certificate is not valid yet ({cert})"),
        ),
        other => (
            TlsFailure::CertificateInvalid,
            format!("the broker's certificate: {other}"),
        ),
    }
}

const HOSTNAME_HINT: &str = "connect by a name the certificate covers, or set \
    ssl.endpoint.identification.algorithm to none (hostname_verification = false) to verify the chain only";

/// rustls lists presented names as `DnsName("localhost")` / `IpAddress(127.0.0.1)`.
fn presented_name(n: &str) -> &str {
    n.strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| n.strip_prefix("IpAddress(").and_then(|n| n.strip_suffix(')')))
        .unwrap_or(n)
}

fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

fn alert_failure(alert: AlertDescription, client_cert: bool) -> (TlsFailure, String) {
    let cert_alert = matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied
    );
    if !cert_alert && alert != AlertDescription::HandshakeFailure {
        return (
            TlsFailure::HandshakeFailed,
            format!("the broker sent the TLS alert {alert:?}"),
        );
    }
    if client_cert {
        (
            TlsFailure::ClientCertificateRejected,
            format!(
                "the broker rejected our client certificate (TLS alert {alert:?}): is it signed by a CA \
                 the broker trusts, and still valid?"
            ),
        )
    } else {
        (
            TlsFailure::ClientCertificateRejected,
            format!("the broker requires a client certificate (TLS alert {alert:?}): set {OPT_CERT} and {OPT_KEY}"),
        )
    }
}

fn read_file(path: &Path, option: &'static str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| config(option, format!("reading {}: {e}", path.display())))
}

fn load_certs(path: &Path, option: &'static str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read_file(path, option)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| config(option, format!("{} is not valid PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config(
            option,
            format!(
                "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        ));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for (i, cert) in load_certs(path, OPT_CA)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            config(
                OPT_CA,
                format!("certificate #{} in {} is not a usable CA: {e}", i + 1, path.display()),
            )
        })?;
    }
    Ok(roots)
}

const ENCRYPTED_BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// Loads a PEM private key: plain PKCS#8, PKCS#1, SEC1, or encrypted PKCS#8
/// decrypted with `password`.
pub(crate) fn load_key(path: &Path, password: Option<&Secret>) -> Result<PrivateKeyDer<'static>> {
    let pem = read_file(path, OPT_KEY)?;
    let text = String::from_utf8_lossy(&pem);
    if let Some(start) = text.find(ENCRYPTED_BEGIN) {
        let password = password.ok_or_else(|| {
            config(
                OPT_KEY_PASSWORD,
                format!("the key in {} is encrypted; give its password", path.display()),
            )
        })?;
        let end = text[start..]
            .find(ENCRYPTED_END)
            .map(|e| start + e + ENCRYPTED_END.len())
            .ok_or_else(|| config(OPT_KEY, format!("{}: unterminated {ENCRYPTED_BEGIN}", path.display())))?;
        let (_, der) = pkcs8::der::pem::decode_vec(text[start..end].as_bytes())
            .map_err(|e| config(OPT_KEY, format!("{} is not valid PEM: {e}", path.display())))?;
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
            .map_err(|e| config(OPT_KEY, format!("{}: not an encrypted PKCS#8 key: {e}", path.display())))?;
        let decrypted = info.decrypt(password.expose().as_bytes()).map_err(|e| {
            config(
                OPT_KEY_PASSWORD,
                format!(
                    "cannot decrypt the key in {} (wrong password, or an unsupported scheme: PBES2 with \
                     PBKDF2-HMAC-SHA256 or scrypt and AES-CBC are supported): {e}",
                    path.display()
                ),
            )
        })?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            decrypted.as_bytes().to_vec(),
        )));
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(config(
            OPT_KEY,
            format!(
                "{} is a legacy OpenSSL-encrypted PEM key, which is not supported; convert it with \
                 `openssl pkcs8 -topk8 -v2 aes-256-cbc`",
                path.display()
            ),
        ));
    }
    if password.is_some() {
        return Err(config(
            OPT_KEY_PASSWORD,
            format!(
                "a key password is set but the key in {} is not encrypted",
                path.display()
            ),
        ));
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        config(
            OPT_KEY,
            format!(
                "{} holds no usable PEM private key (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY or \
                 ENCRYPTED PRIVATE KEY): {e}",
                path.display()
            ),
        )
    })
}

/// Full chain verification without the name check
/// (`hostname_verification = false`). WebPKI checks the name last, so a
/// name error means everything else passed.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `insecure_skip_verify`: any certificate is accepted. Handshake signatures
/// are still checked (the peer must hold the key of the certificate it sent).
#[derive(Debug)]
struct NoVerification {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presented_names_are_plain() {
        assert_eq!(presented_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(presented_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(presented_name("other"), "other");
    }

    #[test]
    fn host_is_taken_from_the_address() {
        assert_eq!(host_of("localhost:9093"), "localhost");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("broker"), "broker");
    }

    #[test]
    fn inconsistent_tls_options_are_refused() {
        let cert_only = TlsConfig {
            cert_file: Some("c.pem".into()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            cert_only.validate(),
            Err(Error::Config { option: OPT_KEY, .. })
        ));
        let key_only = TlsConfig {
            key_file: Some("k.pem".into()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            key_only.validate(),
            Err(Error::Config { option: OPT_CERT, .. })
        ));
        let password_only = TlsConfig {
            key_password: Some(Secret::new("pw")),
            ..TlsConfig::default()
        };
        assert!(matches!(
            password_only.validate(),
            Err(Error::Config {
                option: OPT_KEY_PASSWORD,
                ..
            })
        ));
        let insecure_with_ca = TlsConfig {
            ca_file: Some("ca.pem".into()),
            insecure_skip_verify: true,
            ..TlsConfig::default()
        };
        assert!(matches!(
            insecure_with_ca.validate(),
            Err(Error::Config {
                option: OPT_INSECURE,
                ..
            })
        ));
        let bad_name = TlsConfig {
            server_name: Some("not a name!".into()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            bad_name.validate(),
            Err(Error::Config {
                option: OPT_SERVER_NAME,
                ..
            })
        ));
        assert!(TlsConfig::default().validate().is_ok());
        assert_eq!(TlsConfig::default().first_set_option(), None);
    }

    #[test]
    fn missing_and_empty_files_name_the_option_and_path() {
        let missing = TlsConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        let err = TlsConnector::new(&missing).unwrap_err();
        assert!(matches!(err, Error::Config { option: OPT_CA, .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");

        let dir = std::env::temp_dir().join(format!("clink-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not pem at all\n").unwrap();
        let err = TlsConnector::new(&TlsConfig {
            ca_file: Some(empty.clone()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("holds no PEM certificate"), "{err}");
        let err = load_key(&empty, None).unwrap_err();
        assert!(matches!(err, Error::Config { option: OPT_KEY, .. }), "{err}");
        let legacy = dir.join("legacy.key");
        std::fs::write(
            &legacy,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let err = load_key(&legacy, None).unwrap_err();
        assert!(err.to_string().contains("legacy OpenSSL-encrypted"), "{err}");
        let encrypted = dir.join("enc.key");
        std::fs::write(&encrypted, format!("{ENCRYPTED_BEGIN}\nAAAA\n{ENCRYPTED_END}\n")).unwrap();
        let err = load_key(&encrypted, None).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    option: OPT_KEY_PASSWORD,
                    ..
                }
            ),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn default_roots_and_insecure_build() {
        TlsConnector::new(&TlsConfig::default()).expect("webpki roots");
        let c = TlsConnector::new(&TlsConfig {
            insecure_skip_verify: true,
            ..TlsConfig::default()
        })
        .unwrap();
        assert!(c.insecure && !c.has_client_cert());
    }

    #[test]
    fn debug_hides_the_key_password() {
        let c = TlsConfig {
            key_file: Some("k.pem".into()),
            key_password: Some(Secret::new("hunter2-key-pass")),
            ..TlsConfig::default()
        };
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("***"), "{debug}");
    }
}
