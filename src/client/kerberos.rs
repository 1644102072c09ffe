//! The Kerberos V5 security context behind SASL GSSAPI ([RFC 4752]), pure
//! Rust.
//!
//! The KDC exchanges (AS with pre-authentication from the keytab key, then
//! TGS for `service/host`) and the AP-REQ are Devolutions' `sspi` crate
//! (`default-features = false`, so no HTTP stack; the KDC transport is ours:
//! Kerberos over TCP, `clink_kafka_wire::sasl::kdc_frame`).
//! sspi refuses the AP-REP Kafka's (Java) acceptor returns, which carries no
//! subkey, so the rest is done here:
//!
//! - the initiator subkey and sequence number, which sspi keeps to itself,
//!   are read back from our own AP-REQ's authenticator (ticket session key,
//!   key usage 11);
//! - the broker's AP-REP is decrypted with the session key (usage 12) and
//!   its `ctime`/`cusec` must equal our authenticator's: that is the mutual
//!   authentication ([`KerberosError::MutualAuthentication`] otherwise);
//! - RFC 4121 wrap tokens for the security-layer negotiation use the
//!   acceptor's subkey when the AP-REP has one, else ours (usages 22/24,
//!   `clink_kafka_wire::sasl::krb_wrap`).
//!
//! The KDC I/O is blocking (sspi's network interface is synchronous): it runs
//! on tokio's blocking pool under [`KerberosConfig::timeout`], each socket
//! operation bounded by the time left. Every length read from the KDC or the
//! broker is bounded before allocation. Keys never reach `Debug`, a log line
//! or an error, and are zeroed on drop. There is no credential cache: every
//! authentication (and re-authentication) gets fresh tickets.
//!
//! [RFC 4752]: https://www.rfc-editor.org/rfc/rfc4752

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clink_kafka_wire::sasl::gssapi::{GssContext, GssStep};
use clink_kafka_wire::sasl::keytab::{parse_keytab, MAX_KEYTAB_BYTES};
use clink_kafka_wire::sasl::{kdc_frame, krb_wrap, SaslError};
use picky_krb::crypto::CipherSuite;

/// `sasl.kerberos.service.name`.
pub const OPT_SERVICE_NAME: &str = "sasl.kerberos.service.name";
/// `sasl.kerberos.principal`.
pub const OPT_PRINCIPAL: &str = "sasl.kerberos.principal";
/// `sasl.kerberos.keytab`.
pub const OPT_KEYTAB: &str = "sasl.kerberos.keytab";
/// `sasl.kerberos.kdc`.
pub const OPT_KDC: &str = "sasl.kerberos.kdc";

/// The default bound on the KDC exchanges of one authentication.
pub const DEFAULT_KDC_TIMEOUT: Duration = Duration::from_secs(10);

/// The krb5 mechanism OID, 1.2.840.113554.1.2.2, DER encoded.
const KRB5_OID: [u8; 11] = [0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];
const TOK_AP_REQ: [u8; 2] = [0x01, 0x00];
const TOK_AP_REP: [u8; 2] = [0x02, 0x00];
const TOK_ERROR: [u8; 2] = [0x03, 0x00];
const USAGE_AP_REQ_AUTHENTICATOR: i32 = 11;
const USAGE_AP_REP: i32 = 12;

/// SASL GSSAPI settings: who we are (a keytab key) and whom we talk to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KerberosConfig {
    /// The broker's service name (`sasl.kerberos.service.name`, default
    /// `kafka`): the ticket is for `service_name/<broker host>@REALM`.
    pub service_name: String,
    /// The client principal (`sasl.kerberos.principal`), `name@REALM` or
    /// `name` (the realm is then the keytab entry's).
    pub principal: String,
    /// An MIT keytab holding the principal's key (`sasl.kerberos.keytab`);
    /// read at every authentication, so a rotated keytab is picked up.
    pub keytab: PathBuf,
    /// The KDC, `host:port` (`sasl.kerberos.kdc`); `None`: the realm's first
    /// `kdc` in krb5.conf (`$KRB5_CONFIG`, else `/etc/krb5.conf`).
    pub kdc: Option<String>,
    /// Bound on the KDC exchanges of one authentication.
    pub timeout: Duration,
}

impl KerberosConfig {
    /// Settings for `principal` with its key in `keytab`; service name
    /// `kafka`, KDC from krb5.conf, [`DEFAULT_KDC_TIMEOUT`].
    pub fn new(principal: impl Into<String>, keytab: impl Into<PathBuf>) -> Self {
        KerberosConfig {
            service_name: "kafka".into(),
            principal: principal.into(),
            keytab: keytab.into(),
            kdc: None,
            timeout: DEFAULT_KDC_TIMEOUT,
        }
    }

    /// Checks what can be checked without I/O, naming the option.
    pub fn validate(&self) -> crate::error::Result<()> {
        let bad = |option: &'static str, message: String| Err(crate::error::Error::Config { option, message });
        if self.service_name.trim().is_empty() || self.service_name.contains(['/', '@']) {
            return bad(
                OPT_SERVICE_NAME,
                format!(
                    "{:?}: a non-empty service name without '/' or '@' (e.g. kafka)",
                    self.service_name
                ),
            );
        }
        if let Err(e) = split_principal(&self.principal) {
            return bad(OPT_PRINCIPAL, e.to_string());
        }
        if self.keytab.as_os_str().is_empty() {
            return bad(
                OPT_KEYTAB,
                "required by sasl.mechanism=GSSAPI: the path of an MIT keytab".into(),
            );
        }
        if let Some(kdc) = &self.kdc {
            if split_host_port(kdc).is_none() {
                return bad(OPT_KDC, format!("{kdc:?}: expected host:port, e.g. kdc.example.com:88"));
            }
        }
        if self.timeout.is_zero() {
            return bad(OPT_KDC, "the KDC timeout must be positive".into());
        }
        Ok(())
    }
}

/// Why the Kerberos context could not be established. Never contains a key.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KerberosError {
    /// A setting is unusable (names the option).
    #[error("{option}: {message}")]
    Config {
        /// The option.
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The keytab could not be read or holds no usable key.
    #[error("sasl.kerberos.keytab {path}: {message}")]
    Keytab {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The KDC could not be reached or did not answer in time.
    #[error("KDC {kdc} unreachable: {message}")]
    KdcUnreachable {
        /// The KDC address.
        kdc: String,
        /// What failed.
        message: String,
    },
    /// The KDC exchanges did not finish within the bound.
    #[error("the KDC exchanges did not finish within {0:?}")]
    Timeout(Duration),
    /// The KDC refused (unknown principal, wrong key, no such service...)
    /// or sspi failed.
    #[error("Kerberos: {0}")]
    Kdc(String),
    /// The broker's token is not what RFC 4121 / RFC 4120 allow.
    #[error("malformed Kerberos token from the broker: {0}")]
    Malformed(&'static str),
    /// The broker answered the AP-REQ with a KRB-ERROR.
    #[error("the broker refused the Kerberos ticket (KRB-ERROR {0})")]
    BrokerRefused(u32),
    /// The AP-REP does not echo our authenticator's time: the broker did
    /// not prove it holds the service key (mutual authentication failed).
    #[error("mutual authentication failed: the broker's AP-REP does not echo our authenticator's ctime/cusec")]
    MutualAuthentication,
    /// A key type this client does not implement.
    #[error("unsupported Kerberos encryption type {0} (supported: aes256-cts-hmac-sha1-96 (18), aes128-cts-hmac-sha1-96 (17))")]
    UnsupportedEnctype(i64),
}

impl From<KerberosError> for SaslError {
    fn from(e: KerberosError) -> Self {
        match e {
            KerberosError::MutualAuthentication => SaslError::ServerSignatureMismatch,
            KerberosError::Malformed(message) => SaslError::Malformed { message },
            other => SaslError::ServerError(other.to_string()),
        }
    }
}

/// Key bytes: `Debug` prints `***`, zeroed on drop.
#[derive(Clone, PartialEq, Eq)]
struct Key(Vec<u8>);

impl Key {
    fn new(bytes: &[u8]) -> Self {
        Key(bytes.to_vec())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let capacity = self.0.capacity();
        self.0.clear();
        self.0.resize(capacity, 0);
        std::hint::black_box(&mut self.0);
    }
}

/// Wipes a plaintext buffer that held key material.
fn wipe(mut v: Vec<u8>) {
    v.iter_mut().for_each(|b| *b = 0);
    std::hint::black_box(&mut v);
}

fn cipher_for(enctype: i64) -> Result<CipherSuite, KerberosError> {
    match enctype {
        18 => Ok(CipherSuite::Aes256CtsHmacSha196),
        17 => Ok(CipherSuite::Aes128CtsHmacSha196),
        other => Err(KerberosError::UnsupportedEnctype(other)),
    }
}

/// A non-negative DER INTEGER as u64 (at most 8 significant bytes).
fn der_uint(bytes: &[u8]) -> Result<u64, KerberosError> {
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        return Err(KerberosError::Malformed("negative integer"));
    }
    let significant: &[u8] = match bytes.iter().position(|b| *b != 0) {
        Some(i) => &bytes[i..],
        None => &[],
    };
    if significant.len() > 8 {
        return Err(KerberosError::Malformed("integer longer than 64 bits"));
    }
    Ok(significant.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
}

fn der_int(bytes: &[u8]) -> Result<i64, KerberosError> {
    if bytes.len() > 8 || bytes.is_empty() {
        return Err(KerberosError::Malformed("integer out of range"));
    }
    let negative = bytes[0] & 0x80 != 0;
    let start = if negative { -1i64 } else { 0 };
    Ok(bytes.iter().fold(start, |n, b| (n << 8) | i64::from(*b)))
}

/// Splits a GSS-API initial-context token (`60 len OID tok-id body`,
/// RFC 2743 section 3.1 with RFC 1964's token id) into its token id and body.
fn gss_unframe(token: &[u8]) -> Result<([u8; 2], &[u8]), KerberosError> {
    let malformed = KerberosError::Malformed;
    let Some((&0x60, rest)) = token.split_first() else {
        return Err(malformed("not a GSS-API initial context token"));
    };
    let Some((&first, rest)) = rest.split_first() else {
        return Err(malformed("GSS-API token cut short"));
    };
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(malformed("GSS-API token length is not valid DER"));
        }
        let (bytes, rest) = rest.split_at(n);
        (bytes.iter().fold(0usize, |l, b| (l << 8) | usize::from(*b)), rest)
    };
    if length != rest.len() {
        return Err(malformed("GSS-API token length does not match its bytes"));
    }
    let Some(rest) = rest.strip_prefix(&KRB5_OID[..]) else {
        return Err(malformed("GSS-API token is not for the Kerberos V5 mechanism"));
    };
    let Some((id, body)) = rest.split_first_chunk::<2>() else {
        return Err(malformed("GSS-API token without a token id"));
    };
    Ok((*id, body))
}

/// What our own AP-REQ's authenticator says (the parts sspi keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
struct OurAuthenticator {
    ctime: Vec<u8>,
    cusec: u64,
    /// The initiator subkey and its cipher.
    subkey: Option<(CipherSuite, Key)>,
    seq: u64,
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, KerberosError> {
    picky_asn1_der::to_vec(value).map_err(|_| KerberosError::Malformed("could not re-encode a time"))
}

/// Reads our authenticator back from the AP-REQ token sspi produced.
fn read_authenticator(
    ap_req_token: &[u8],
    session_key: &[u8],
    session_cipher: &CipherSuite,
) -> Result<OurAuthenticator, KerberosError> {
    let (id, body) = gss_unframe(ap_req_token)?;
    if id != TOK_AP_REQ {
        return Err(KerberosError::Malformed("the context's first token is not an AP-REQ"));
    }
    let ap_req: picky_krb::messages::ApReq =
        picky_asn1_der::from_bytes(body).map_err(|_| KerberosError::Malformed("AP-REQ does not decode"))?;
    let plain = session_cipher
        .cipher()
        .decrypt(
            session_key,
            USAGE_AP_REQ_AUTHENTICATOR,
            &ap_req.0.authenticator.0.cipher.0 .0,
        )
        .map_err(|_| KerberosError::Malformed("our authenticator does not decrypt with the session key"))?;
    let decoded: Result<picky_krb::data_types::Authenticator, _> = picky_asn1_der::from_bytes(&plain);
    wipe(plain);
    let auth = decoded.map_err(|_| KerberosError::Malformed("our authenticator does not decode"))?;
    let subkey = match auth.0.subkey.0.as_ref() {
        Some(k) => Some((cipher_for(der_int(&k.0.key_type.0 .0)?)?, Key::new(&k.0.key_value.0 .0))),
        None => None,
    };
    let seq = match auth.0.seq_number.0.as_ref() {
        Some(s) => der_uint(&s.0 .0)?,
        None => 0,
    };
    Ok(OurAuthenticator {
        ctime: encode(&auth.0.ctime.0)?,
        cusec: der_uint(&auth.0.cusec.0 .0)?,
        subkey,
        seq,
    })
}

/// What the broker's AP-REP gave us.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ApRepInfo {
    subkey: Option<(CipherSuite, Key)>,
    seq: Option<u64>,
}

/// Verifies the broker's AP-REP token against our authenticator (mutual
/// authentication) and returns its optional subkey and sequence number.
fn verify_ap_rep(
    token: &[u8],
    session_key: &[u8],
    session_cipher: &CipherSuite,
    ours: &OurAuthenticator,
) -> Result<ApRepInfo, KerberosError> {
    let (id, body) = gss_unframe(token)?;
    if id == TOK_ERROR {
        let error: picky_krb::messages::KrbError =
            picky_asn1_der::from_bytes(body).map_err(|_| KerberosError::Malformed("KRB-ERROR does not decode"))?;
        return Err(KerberosError::BrokerRefused(error.0.error_code.0));
    }
    if id != TOK_AP_REP {
        return Err(KerberosError::Malformed("the broker's token is not an AP-REP"));
    }
    let ap_rep: picky_krb::messages::ApRep =
        picky_asn1_der::from_bytes(body).map_err(|_| KerberosError::Malformed("AP-REP does not decode"))?;
    let plain = session_cipher
        .cipher()
        .decrypt(session_key, USAGE_AP_REP, &ap_rep.0.enc_part.0.cipher.0 .0)
        .map_err(|_| KerberosError::MutualAuthentication)?;
    let decoded: Result<picky_krb::data_types::EncApRepPart, _> = picky_asn1_der::from_bytes(&plain);
    wipe(plain);
    let part = decoded.map_err(|_| KerberosError::Malformed("AP-REP's encrypted part does not decode"))?;
    if encode(&part.0.ctime.0)? != ours.ctime || der_uint(&part.0.cusec.0 .0)? != ours.cusec {
        return Err(KerberosError::MutualAuthentication);
    }
    let subkey = match part.0.subkey.0.as_ref() {
        Some(k) => Some((cipher_for(der_int(&k.0.key_type.0 .0)?)?, Key::new(&k.0.key_value.0 .0))),
        None => None,
    };
    let seq = match part.0.seq_number.0.as_ref() {
        Some(s) => Some(der_uint(&s.0 .0)?),
        None => None,
    };
    Ok(ApRepInfo { subkey, seq })
}

/// `name@REALM` -> (name, Some(REALM)); `name` -> (name, None).
fn split_principal(principal: &str) -> Result<(&str, Option<&str>), KerberosError> {
    let p = principal.trim();
    let bad = |message: &str| KerberosError::Config {
        option: OPT_PRINCIPAL,
        message: format!("{principal:?}: {message}"),
    };
    if p.is_empty() {
        return Err(bad("required by sasl.mechanism=GSSAPI: name@REALM"));
    }
    match p.rsplit_once('@') {
        Some((name, realm)) if !name.is_empty() && !realm.is_empty() && !name.contains('@') => Ok((name, Some(realm))),
        Some(_) => Err(bad("expected name@REALM or name")),
        None => Ok((p, None)),
    }
}

fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.trim().rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    (!host.is_empty()).then_some((host, port))
}

/// The host part of a broker address `host:port` (`[v6]:port`).
pub(crate) fn broker_host(addr: &str) -> &str {
    split_host_port(addr).map_or(addr, |(h, _)| h)
}

/// The first `kdc` of `realm` in a krb5.conf text (`host` alone gets port 88).
pub(crate) fn krb5_conf_kdc(text: &str, realm: &str) -> Option<String> {
    let mut in_realms = false;
    let mut in_realm = false;
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("").trim();
        if line.starts_with('[') {
            in_realms = line == "[realms]";
            in_realm = false;
            continue;
        }
        if !in_realms {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let (key, value) = (key.trim(), value.trim());
            if !in_realm && key == realm && value.starts_with('{') {
                in_realm = true;
            } else if in_realm && key == "kdc" && !value.is_empty() {
                return Some(if split_host_port(value).is_some() {
                    value.to_owned()
                } else {
                    format!("{value}:88")
                });
            }
        } else if line == "}" {
            in_realm = false;
        }
    }
    None
}

/// The key, principal and KDC for one authentication.
struct Identity {
    name: String,
    realm: String,
    key: Key,
    cipher: CipherSuite,
    kdc: String,
}

fn load_identity(config: &KerberosConfig) -> Result<Identity, KerberosError> {
    let (name, realm) = split_principal(&config.principal)?;
    let path = config.keytab.display().to_string();
    let keytab_err = |message: String| KerberosError::Keytab {
        path: path.clone(),
        message,
    };
    let mut file = std::fs::File::open(&config.keytab).map_err(|e| keytab_err(e.to_string()))?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_KEYTAB_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| keytab_err(e.to_string()))?;
    let parsed = parse_keytab(&bytes);
    wipe(bytes);
    let entries = parsed.map_err(|e| keytab_err(e.to_string()))?;
    let components: Vec<&str> = name.split('/').collect();
    let best = entries
        .iter()
        .filter(|e| e.components == components && realm.is_none_or(|r| r == e.realm))
        .filter(|e| cipher_for(i64::from(e.enctype)).is_ok())
        .max_by_key(|e| (e.kvno, e.enctype == 18));
    let Some(entry) = best else {
        let usable = if entries.iter().any(|e| e.components == components) {
            "no aes256/aes128 key for it"
        } else {
            "no entry for it"
        };
        return Err(keytab_err(format!(
            "holds {usable} (principal {:?}, sasl.kerberos.principal)",
            config.principal
        )));
    };
    let realm = entry.realm.clone();
    let kdc = match &config.kdc {
        Some(kdc) => kdc.trim().to_owned(),
        None => {
            let conf = std::env::var_os("KRB5_CONFIG").map_or_else(|| PathBuf::from("/etc/krb5.conf"), PathBuf::from);
            let text = std::fs::read_to_string(&conf).map_err(|e| KerberosError::Config {
                option: OPT_KDC,
                message: format!("not set, and krb5.conf {} is unreadable: {e}", conf.display()),
            })?;
            krb5_conf_kdc(&text, &realm).ok_or_else(|| KerberosError::Config {
                option: OPT_KDC,
                message: format!(
                    "not set, and krb5.conf {} names no kdc for realm {realm}",
                    conf.display()
                ),
            })?
        }
    };
    Ok(Identity {
        name: name.to_owned(),
        realm,
        key: Key::new(entry.key.expose()),
        cipher: cipher_for(i64::from(entry.enctype))?,
        kdc,
    })
}

/// Kerberos over TCP to one KDC, every operation bounded by a deadline.
struct KdcTransport {
    kdc: String,
    deadline: Instant,
    timeout: Duration,
    /// The first transport failure, reported instead of sspi's rewording.
    failure: std::sync::Mutex<Option<KerberosError>>,
}

impl KdcTransport {
    fn left(&self) -> Result<Duration, KerberosError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(KerberosError::Timeout(self.timeout))
        } else {
            Ok(left)
        }
    }

    fn exchange(&self, framed: &[u8]) -> Result<Vec<u8>, KerberosError> {
        let unreachable = |message: String| KerberosError::KdcUnreachable {
            kdc: self.kdc.clone(),
            message,
        };
        let Some((host, port)) = split_host_port(&self.kdc) else {
            return Err(KerberosError::Config {
                option: OPT_KDC,
                message: format!("{:?}: expected host:port", self.kdc),
            });
        };
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| unreachable(format!("cannot resolve: {e}")))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.left()?) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(mut stream) = stream else {
            return Err(unreachable(last.map_or("no address".into(), |e| e.to_string())));
        };
        let io = |e: std::io::Error| {
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
                KerberosError::Timeout(self.timeout)
            } else {
                unreachable(e.to_string())
            }
        };
        // The request sspi hands over is already length-prefixed; check it.
        if framed.len() < 4 || framed.len() > kdc_frame::MAX_KDC_REQUEST + 4 {
            return Err(KerberosError::Kdc("KDC request of an unexpected size".into()));
        }
        stream.set_write_timeout(Some(self.left()?)).map_err(io)?;
        stream.write_all(framed).map_err(io)?;
        let mut prefix = [0u8; 4];
        stream.set_read_timeout(Some(self.left()?)).map_err(io)?;
        stream.read_exact(&mut prefix).map_err(io)?;
        let length = kdc_frame::kdc_reply_length(prefix).map_err(|e| KerberosError::Kdc(format!("KDC reply: {e}")))?;
        let mut reply = vec![0u8; 4 + length];
        reply[..4].copy_from_slice(&prefix);
        stream.set_read_timeout(Some(self.left()?)).map_err(io)?;
        stream.read_exact(&mut reply[4..]).map_err(io)?;
        Ok(reply)
    }
}

impl sspi::network_client::NetworkClient for KdcTransport {
    fn send(&self, request: &sspi::generator::NetworkRequest) -> sspi::Result<Vec<u8>> {
        self.exchange(&request.data).map_err(|e| {
            let message = e.to_string();
            if let Ok(mut slot) = self.failure.lock() {
                slot.get_or_insert(e);
            }
            sspi::Error::new(sspi::ErrorKind::NoAuthenticatingAuthority, message)
        })
    }
}

/// The context after the KDC exchanges: the AP-REQ to send and what is
/// needed to check the AP-REP and to wrap/unwrap.
pub(crate) struct KerberosContext {
    ap_req: Option<Vec<u8>>,
    session_key: Key,
    session_cipher: CipherSuite,
    ours: OurAuthenticator,
    /// The key and cipher for wrap tokens, and whether it is the acceptor's.
    wrap_key: Option<(CipherSuite, Key, bool)>,
    /// The detailed reason of the last failure (the trait's error is coarser).
    pub(crate) last_error: Option<KerberosError>,
}

impl fmt::Debug for KerberosContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KerberosContext")
            .field("established", &self.wrap_key.is_some())
            .finish_non_exhaustive()
    }
}

/// Does the KDC exchanges for `service_name/host` off the async runtime,
/// bounded by `config.timeout`. Cancel-safe: dropping the future abandons
/// the blocking work, which ends within the same bound.
pub(crate) async fn initiate(config: &KerberosConfig, host: &str) -> Result<KerberosContext, KerberosError> {
    let config = config.clone();
    let target = format!("{}/{}", config.service_name.trim(), host);
    let timeout = config.timeout;
    let task = tokio::task::spawn_blocking(move || initiate_blocking(&config, &target));
    match tokio::time::timeout(timeout + Duration::from_millis(500), task).await {
        Err(_) => Err(KerberosError::Timeout(timeout)),
        Ok(Err(e)) => Err(KerberosError::Kdc(format!("the Kerberos task failed: {e}"))),
        Ok(Ok(result)) => result,
    }
}

fn initiate_blocking(config: &KerberosConfig, target: &str) -> Result<KerberosContext, KerberosError> {
    use sspi::{
        BufferType, ClientRequestFlags, CredentialUse, Credentials, DataRepresentation, Kerberos, KeytabIdentity,
        Secret, SecurityBuffer, Sspi, SspiImpl, Username,
    };
    let started = Instant::now();
    let identity = load_identity(config)?;
    // sspi appends the KRB-ERROR's e-data in hex: noise, cut.
    let sspi_err = |e: sspi::Error| {
        let text = e.to_string();
        let cut = text.find(". Additional error data").unwrap_or(text.len());
        KerberosError::Kdc(text[..cut].to_owned())
    };
    let principal = Username::new(&identity.name, Some(&identity.realm)).map_err(|e| KerberosError::Config {
        option: OPT_PRINCIPAL,
        message: format!("{:?}: {e}", config.principal),
    })?;
    let credentials: Credentials = KeytabIdentity {
        principal,
        key: Secret::new(identity.key.0.clone()),
        key_enctype: identity.cipher.clone(),
    }
    .into();
    let transport = KdcTransport {
        kdc: identity.kdc.clone(),
        deadline: started + config.timeout,
        timeout: config.timeout,
        failure: std::sync::Mutex::new(None),
    };
    let mut kerberos = Kerberos::new_client_from_config(sspi::KerberosConfig::new_with_kdc_url(
        &format!("tcp://{}", identity.kdc),
        "clink-kafka".into(),
    ))
    .map_err(sspi_err)?;
    let mut handle = kerberos
        .acquire_credentials_handle()
        .with_credential_use(CredentialUse::Outbound)
        .with_auth_data(&credentials)
        .execute(&mut kerberos)
        .map_err(sspi_err)?
        .credentials_handle;
    let mut input = vec![SecurityBuffer::new(Vec::new(), BufferType::Token)];
    let mut output = vec![SecurityBuffer::new(Vec::new(), BufferType::Token)];
    let mut builder = kerberos
        .initialize_security_context()
        .with_credentials_handle(&mut handle)
        .with_context_requirements(ClientRequestFlags::MUTUAL_AUTH | ClientRequestFlags::INTEGRITY)
        .with_target_data_representation(DataRepresentation::Native)
        .with_target_name(target)
        .with_input(&mut input)
        .with_output(&mut output);
    let result = kerberos
        .initialize_security_context_impl(&mut builder)
        .map_err(sspi_err)?
        .resolve_with_client(&transport);
    if let Err(e) = result {
        let transport_failure = transport.failure.lock().ok().and_then(|mut f| f.take());
        return Err(transport_failure.unwrap_or_else(|| sspi_err(e)));
    }
    let ap_req = std::mem::take(&mut output[0].buffer);
    if ap_req.is_empty() || ap_req.len() > clink_kafka_wire::sasl::gssapi::MAX_GSSAPI_TOKEN {
        return Err(KerberosError::Kdc("sspi produced no usable AP-REQ".into()));
    }
    let keys = kerberos.query_context_session_key().map_err(sspi_err)?;
    let session_key = Key::new(keys.session_key.as_ref());
    drop(keys);
    // The session key's type is the authenticator's encryption type.
    let (_, body) = gss_unframe(&ap_req)?;
    let ap: picky_krb::messages::ApReq =
        picky_asn1_der::from_bytes(body).map_err(|_| KerberosError::Malformed("AP-REQ does not decode"))?;
    let session_cipher = cipher_for(der_int(&ap.0.authenticator.0.etype.0 .0)?)?;
    let ours = read_authenticator(&ap_req, &session_key.0, &session_cipher)?;
    Ok(KerberosContext {
        ap_req: Some(ap_req),
        session_key,
        session_cipher,
        ours,
        wrap_key: None,
        last_error: None,
    })
}

impl KerberosContext {
    fn fail<T>(&mut self, e: KerberosError) -> Result<T, SaslError> {
        self.last_error = Some(e.clone());
        Err(e.into())
    }

    fn checksum(cipher: &CipherSuite, key: &Key, usage: i32, data: &[u8]) -> Result<Vec<u8>, SaslError> {
        cipher
            .cipher()
            .checksum_type()
            .hasher()
            .checksum(&key.0, usage, data)
            .map_err(|_| SaslError::InvalidInput {
                message: "Kerberos checksum failed",
            })
    }
}

impl GssContext for KerberosContext {
    fn step(&mut self, input: Option<&[u8]>) -> Result<GssStep, SaslError> {
        match (input, self.ap_req.take()) {
            (None, Some(token)) => Ok(GssStep { token, complete: false }),
            (Some(reply), None) if self.wrap_key.is_none() => {
                match verify_ap_rep(reply, &self.session_key.0, &self.session_cipher, &self.ours) {
                    Ok(info) => {
                        self.wrap_key = match (info.subkey, &self.ours.subkey) {
                            (Some((c, k)), _) => Some((c, k, true)),
                            (None, Some((c, k))) => Some((c.clone(), k.clone(), false)),
                            (None, None) => Some((self.session_cipher.clone(), self.session_key.clone(), false)),
                        };
                        Ok(GssStep {
                            token: Vec::new(),
                            complete: true,
                        })
                    }
                    Err(e) => self.fail(e),
                }
            }
            _ => Err(SaslError::OutOfOrder),
        }
    }

    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError> {
        let Some((cipher, key, acceptor)) = &self.wrap_key else {
            return Err(SaslError::OutOfOrder);
        };
        krb_wrap::wrap_initiator(message, self.ours.seq, *acceptor, |usage, data| {
            Self::checksum(cipher, key, usage, data)
        })
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, SaslError> {
        let Some((cipher, key, _)) = &self.wrap_key else {
            return Err(SaslError::OutOfOrder);
        };
        match krb_wrap::unwrap_acceptor(token, |usage, data| Self::checksum(cipher, key, usage, data)) {
            Ok((data, _seq)) => Ok(data),
            Err(SaslError::ServerSignatureMismatch) => self.fail(KerberosError::MutualAuthentication),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
