//! A Confluent-compatible Schema Registry client (the REST API Confluent's
//! registry serves at its root and Apicurio Registry 3 under
//! `/apis/ccompat/v7`): schemas by id, a subject's latest version, and
//! registration, each cached.
//!
//! - By id: an id names one schema for ever, so an id once fetched is never
//!   asked again; a registry outage after that does not reach the job.
//! - By subject: the latest version is remembered; when a later lookup fails
//!   (outage), the remembered one answers, with a warning.
//! - Registration: `(subject, schema text)` → id, remembered.
//!
//! Transport: HTTP/1.1 over tokio TCP, or TLS with the Kafka client's rustls
//! connector (so a private CA works as for brokers). Basic and bearer
//! credentials are [`Secret`]s: never in `Debug`, never logged; the header
//! value exists only while a request is written.
//!
//! Resending: a request the registry left wholly unanswered (the
//! connection refused, or closed or reset before a single byte of answer)
//! is sent once more on a fresh connection after [`RESEND_PAUSE`], when
//! it is safe to send twice (GETs, and registration: idempotent in the
//! Confluent API; the reasoning is at the private `Resend`). A partial
//! answer is never resent for: the registry may have acted on the request.
//!
//! Cancel safety: the async methods are cancel safe in the sense that a
//! dropped call leaves the caches as they were (an answer is cached only
//! once complete); the request may or may not have reached the registry.

pub mod http;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::client::tls::{TlsConfig, TlsConnector};
use crate::error::BrokerRef;
use crate::wire::secret::Secret;

/// The largest registry answer read (a schema text and its JSON envelope).
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The pause before the one resend of a request the registry left
/// unanswered (a registry restarting, or shedding a burst of connections,
/// may close fresh ones without a word: CI saw Apicurio do so).
pub const RESEND_PAUSE: Duration = Duration::from_millis(50);

/// Whether a request may be sent a second time when the registry closed
/// (or refused, or reset) its connection before answering a single byte.
///
/// Nothing received does not prove nothing was done: the registry may have
/// acted on the request and died before answering. So only requests whose
/// second delivery has the effect of one are resent:
/// - `GET` (a schema by id, a subject version): reads.
/// - `POST /subjects/{subject}/versions` (registration): idempotent in the
///   Confluent API that Confluent's registry and Apicurio's `ccompat` both
///   serve: posting a schema the subject already holds answers that
///   schema's existing id and adds no version (a lookup, not a second
///   registration), and [`SchemaRegistryClient::register`] relies on that
///   already. So a registration the first attempt did make is found by the
///   resend, which answers the same id; one it did not make is made.
///
/// Anything else (a future `DELETE`, a config `PUT`) must say `Never`
/// unless its second delivery is shown harmless. A partial answer, even
/// one header byte, is never resent for: the request was read and may have
/// been acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resend {
    /// Safe to send twice: resent once when left wholly unanswered.
    Once,
    /// Sent once only, whatever happens.
    #[allow(dead_code)] // every request the client makes today is `Once`; kept for the next one
    Never,
}

/// The schema languages of the Confluent API (`schemaType`; absent = Avro).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaType {
    /// Apache Avro (`AVRO`, also when `schemaType` is absent).
    Avro,
    /// Protocol Buffers (`PROTOBUF`).
    Protobuf,
    /// JSON Schema (`JSON`).
    Json,
}

impl SchemaType {
    /// The Confluent API's name: `AVRO`, `PROTOBUF` or `JSON`.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }

    fn parse(v: Option<&str>) -> Option<SchemaType> {
        match v {
            None | Some("AVRO") => Some(SchemaType::Avro),
            Some("PROTOBUF") => Some(SchemaType::Protobuf),
            Some("JSON") => Some(SchemaType::Json),
            Some(_) => None,
        }
    }
}

/// Credentials for the registry.
#[derive(Clone, Debug, Default)]
pub enum RegistryAuth {
    /// No credentials (the default).
    #[default]
    None,
    /// HTTP basic: `user:password` (`schema_registry_basic_auth_user_info`).
    Basic {
        /// The `user:password` pair, sent base64-encoded.
        user_info: Secret,
    },
    /// `Authorization: Bearer <token>` (`schema_registry_bearer_auth_token`).
    Bearer {
        /// The bearer token.
        token: Secret,
    },
}

/// Where the registry is and how to reach it.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// `schema_registry_url`: `http://` or `https://`, with any base path
    /// (e.g. Apicurio's `/apis/ccompat/v7`).
    pub url: String,
    /// Credentials sent with every request (`RegistryAuth::None` by default).
    pub auth: RegistryAuth,
    /// TLS settings for an `https` URL (`ca_file`: a private CA).
    pub tls: TlsConfig,
    /// Bound on one request: connect, TLS, write and read (and the pause
    /// and second attempt when an unanswered request is resent).
    pub timeout: Duration,
}

impl RegistryConfig {
    /// A registry at `url`, without credentials, default TLS settings and a 10-second request bound.
    pub fn new(url: impl Into<String>) -> Self {
        RegistryConfig {
            url: url.into(),
            auth: RegistryAuth::None,
            tls: TlsConfig::default(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// A registry failure. `NotFound` is the registry's own "no such schema /
/// subject"; everything else is the registry or the path to it failing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// An option's value is invalid (the URL, the TLS files).
    #[error("invalid option {option:?}: {reason}")]
    Config {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// Why the value is invalid.
        reason: String,
    },
    /// The registry has no such schema or subject (HTTP 404).
    #[error("schema registry {url}: {what} not found ({detail})")]
    NotFound {
        /// The registry's base URL.
        url: String,
        /// What was asked for (a schema by id, a subject's latest version).
        what: String,
        /// The registry's error message.
        detail: String,
    },
    /// The registry answered with another non-success HTTP status.
    #[error("schema registry {url}: {what}: HTTP {status}: {detail}")]
    Status {
        /// The registry's base URL.
        url: String,
        /// What was asked for.
        what: String,
        /// The HTTP status code.
        status: u16,
        /// The registry's error message or body, shortened.
        detail: String,
    },
    /// The registry could not be reached (connect, TLS, timeout, closed connection).
    #[error("schema registry {url}: {what}: {reason}")]
    Unreachable {
        /// The registry's base URL.
        url: String,
        /// What was asked for.
        what: String,
        /// The connection or TLS failure.
        reason: String,
    },
    /// The registry's answer could not be read (not HTTP, not the JSON expected).
    #[error("schema registry {url}: {what}: unreadable answer: {reason}")]
    Garbage {
        /// The registry's base URL.
        url: String,
        /// What was asked for.
        what: String,
        /// Why the answer could not be read.
        reason: String,
    },
}

/// The most schema references one schema may pull in, transitively.
pub const MAX_REFERENCES: usize = 64;

/// A schema as the registry holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisteredSchema {
    /// The registry's global schema id (what the Confluent framing carries).
    pub id: u32,
    /// The schema language.
    pub schema_type: SchemaType,
    /// The schema text as the registry returned it.
    pub text: String,
    /// The texts of the schemas it references (Confluent `references`:
    /// a Protobuf `import` name, or a JSON/Avro reference name → that
    /// subject version's text), transitively, fetched with it.
    pub resolved_references: Vec<(String, String)>,
}

impl RegisteredSchema {
    /// A schema without references.
    pub fn new(id: u32, schema_type: SchemaType, text: String) -> Self {
        RegisteredSchema {
            id,
            schema_type,
            text,
            resolved_references: Vec::new(),
        }
    }
}

/// One entry of a schema's `references` array.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SchemaReference {
    name: String,
    subject: String,
    version: i64,
}

#[derive(Clone, Debug)]
struct Endpoint {
    tls: bool,
    /// `host:port` to dial and to send as `Host`.
    authority: String,
    host: String,
    base_path: String,
}

fn parse_url(url: &str) -> Result<Endpoint, RegistryError> {
    let err = |reason: &str| RegistryError::Config {
        option: "schema_registry_url",
        reason: format!("{url:?}: {reason} (expected http://host:port[/path] or https://…)"),
    };
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(err("the scheme is not http or https"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(err(
            "no host (credentials go in schema_registry_basic_auth_user_info, not the URL)",
        ));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse::<u16>() {
            Ok(p) if !h.is_empty() => (h.to_owned(), p),
            _ => return Err(err("a bad port")),
        },
        _ => (authority.to_owned(), if tls { 443 } else { 80 }),
    };
    if path.contains(['?', '#']) {
        return Err(err("a query or fragment"));
    }
    Ok(Endpoint {
        tls,
        authority: format!("{host}:{port}"),
        host,
        base_path: path.trim_end_matches('/').to_owned(),
    })
}

/// The client. One per operator; `&mut self` methods, so its caches need no lock.
pub struct SchemaRegistryClient {
    config: RegistryConfig,
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
    by_id: HashMap<u32, Arc<RegisteredSchema>>,
    latest: HashMap<String, Arc<RegisteredSchema>>,
    registered: HashMap<(String, SchemaType, String), u32>,
    requests: u64,
}

impl fmt::Debug for SchemaRegistryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistryClient")
            .field("url", &self.config.url)
            .field("auth", &self.config.auth)
            .field("cached_ids", &self.by_id.len())
            .finish_non_exhaustive()
    }
}

impl SchemaRegistryClient {
    /// Checks the URL and loads the TLS files; no I/O to the registry.
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        let endpoint = parse_url(&config.url)?;
        let tls = if endpoint.tls {
            Some(TlsConnector::new(&config.tls).map_err(|e| RegistryError::Config {
                option: "schema_registry_ssl_ca_location",
                reason: e.to_string(),
            })?)
        } else {
            if config.tls.ca_file.is_some() {
                return Err(RegistryError::Config {
                    option: "schema_registry_ssl_ca_location",
                    reason: format!("set, but {} is not an https URL", config.url),
                });
            }
            None
        };
        if !matches!(config.auth, RegistryAuth::None) && !endpoint.tls {
            tracing::warn!(url = %config.url, "schema registry credentials are sent over plain http");
        }
        Ok(SchemaRegistryClient {
            config,
            endpoint,
            tls,
            by_id: HashMap::new(),
            latest: HashMap::new(),
            registered: HashMap::new(),
            requests: 0,
        })
    }

    /// The registry's base URL, as configured.
    pub fn url(&self) -> &str {
        &self.config.url
    }

    /// Requests made so far (the caches' effect is visible here); a resend
    /// of a request the registry left unanswered is not counted again.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The schema with this id, cached for ever once fetched.
    pub async fn schema_by_id(&mut self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(s) = self.by_id.get(&id) {
            return Ok(s.clone());
        }
        let what = format!("schema id {id}");
        let v = self
            .call("GET", &format!("/schemas/ids/{id}"), None, Resend::Once, &what)
            .await?;
        let (mut s, refs) = schema_from(&v, Some(id), &self.config.url, &what)?;
        s.resolved_references = self.resolve_references(refs, &what).await?;
        let s = Arc::new(s);
        self.by_id.insert(id, s.clone());
        Ok(s)
    }

    /// The latest version of `subject`. When the registry fails and the
    /// subject was seen before, the remembered version answers.
    pub async fn latest(&mut self, subject: &str) -> Result<Arc<RegisteredSchema>, RegistryError> {
        let what = format!("subject {subject:?}");
        let path = format!("/subjects/{}/versions/latest", http::encode_segment(subject));
        match self.call("GET", &path, None, Resend::Once, &what).await {
            Ok(v) => {
                let (mut s, refs) = schema_from(&v, None, &self.config.url, &what)?;
                s.resolved_references = self.resolve_references(refs, &what).await?;
                let s = Arc::new(s);
                self.by_id.entry(s.id).or_insert_with(|| s.clone());
                self.latest.insert(subject.to_owned(), s.clone());
                Ok(s)
            }
            Err(e @ RegistryError::NotFound { .. }) => Err(e),
            Err(e) => match self.latest.get(subject) {
                Some(s) => {
                    tracing::warn!(subject, error = %e, id = s.id, "schema registry lookup failed; using the cached version");
                    Ok(s.clone())
                }
                None => Err(e),
            },
        }
    }

    /// Registers `text` under `subject` (the registry answers the existing
    /// id when it already holds it); remembered per (subject, type, text).
    pub async fn register(&mut self, subject: &str, schema_type: SchemaType, text: &str) -> Result<u32, RegistryError> {
        let key = (subject.to_owned(), schema_type, text.to_owned());
        if let Some(id) = self.registered.get(&key) {
            return Ok(*id);
        }
        let what = format!("registering under subject {subject:?}");
        let mut body = serde_json::json!({ "schema": text });
        if schema_type != SchemaType::Avro {
            body["schemaType"] = Value::from(schema_type.name());
        }
        let path = format!("/subjects/{}/versions", http::encode_segment(subject));
        let v = self
            // Resend::Once: registration is idempotent (see `Resend`).
            .call("POST", &path, Some(body.to_string().as_bytes()), Resend::Once, &what)
            .await?;
        let id = json_id(&v).ok_or_else(|| RegistryError::Garbage {
            url: self.config.url.clone(),
            what: what.clone(),
            reason: "no \"id\" in the answer".into(),
        })?;
        let s = Arc::new(RegisteredSchema::new(id, schema_type, text.to_owned()));
        self.by_id.entry(id).or_insert(s);
        self.registered.insert(key, id);
        Ok(id)
    }

    /// Fetches the texts of `refs` and of theirs (each subject version
    /// once), at most [`MAX_REFERENCES`] in all.
    async fn resolve_references(
        &mut self,
        mut refs: Vec<SchemaReference>,
        what: &str,
    ) -> Result<Vec<(String, String)>, RegistryError> {
        let mut out: Vec<(String, String)> = Vec::new();
        while let Some(r) = refs.pop() {
            if out.iter().any(|(name, _)| *name == r.name) {
                continue;
            }
            if out.len() >= MAX_REFERENCES {
                return Err(RegistryError::Garbage {
                    url: self.config.url.clone(),
                    what: what.to_owned(),
                    reason: format!("more than {MAX_REFERENCES} schema references"),
                });
            }
            let ref_what = format!(
                "{what}: reference {:?} (subject {:?} version {})",
                r.name, r.subject, r.version
            );
            let version = if r.version < 0 {
                "latest".to_owned()
            } else {
                r.version.to_string()
            };
            let path = format!("/subjects/{}/versions/{version}", http::encode_segment(&r.subject));
            let v = self.call("GET", &path, None, Resend::Once, &ref_what).await?;
            let (s, more) = schema_from(&v, Some(0), &self.config.url, &ref_what)?;
            out.push((r.name, s.text));
            refs.extend(more);
        }
        Ok(out)
    }

    /// One request, bounded by the timeout (its resend included); the
    /// answer's JSON on a 2xx.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        resend: Resend,
        what: &str,
    ) -> Result<Value, RegistryError> {
        self.requests += 1;
        let url = self.config.url.clone();
        let unreachable = |reason: String| RegistryError::Unreachable {
            url: url.clone(),
            what: what.to_owned(),
            reason,
        };
        let timeout = self.config.timeout;
        let response = match tokio::time::timeout(timeout, self.exchange(method, path, body, resend)).await {
            Err(_) => return Err(unreachable(format!("no answer within {timeout:?}"))),
            Ok(Err(reason)) => return Err(unreachable(reason)),
            Ok(Ok(r)) => r,
        };
        let detail = || registry_message(&response.body);
        match response.status {
            200..=299 => serde_json::from_slice(&response.body).map_err(|e| RegistryError::Garbage {
                url: url.clone(),
                what: what.to_owned(),
                reason: format!("not JSON: {e}"),
            }),
            404 => Err(RegistryError::NotFound {
                url: url.clone(),
                what: what.to_owned(),
                detail: detail(),
            }),
            status => Err(RegistryError::Status {
                url: url.clone(),
                what: what.to_owned(),
                status,
                detail: detail(),
            }),
        }
    }

    /// Sends the request; once more, on a fresh connection after
    /// [`RESEND_PAUSE`], when `resend` allows and the registry left the
    /// first attempt wholly unanswered. The reasons never hold the request
    /// (its `Authorization` header stays in the [`Secret`]).
    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        resend: Resend,
    ) -> Result<http::Response, String> {
        let full_path = format!("{}{path}", self.endpoint.base_path);
        let authorization = match &self.config.auth {
            RegistryAuth::None => None,
            RegistryAuth::Basic { user_info } => Some(Secret::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(user_info.expose())
            ))),
            RegistryAuth::Bearer { token } => Some(Secret::new(format!("Bearer {}", token.expose()))),
        };
        let request = Secret::new(
            String::from_utf8(http::encode_request(
                method,
                &self.endpoint.authority,
                &full_path,
                authorization.as_ref().map(Secret::expose),
                body,
            ))
            .map_err(|_| "a request body that is not UTF-8".to_owned())?,
        );
        drop(authorization);
        match self.attempt(request.expose().as_bytes()).await {
            Err(first) if first.unanswered && resend == Resend::Once => {
                tracing::debug!(url = %self.config.url, method, path, reason = %first.reason,
                    "schema registry left the request unanswered; resending it once on a fresh connection");
                tokio::time::sleep(RESEND_PAUSE).await;
                self.attempt(request.expose().as_bytes()).await.map_err(|second| {
                    if second.unanswered && second.reason == first.reason {
                        format!(
                            "{} (tried twice, on fresh connections {RESEND_PAUSE:?} apart)",
                            second.reason
                        )
                    } else if second.unanswered {
                        format!(
                            "{} (tried twice, on fresh connections {RESEND_PAUSE:?} apart; the first: {})",
                            second.reason, first.reason
                        )
                    } else {
                        second.reason
                    }
                })
            }
            r => r.map_err(|f| f.reason),
        }
    }

    /// One connection, one request, one answer.
    async fn attempt(&self, request: &[u8]) -> Result<http::Response, Failed> {
        let tcp = TcpStream::connect(&self.endpoint.authority).await.map_err(|e| Failed {
            unanswered: peer_closed(&e),
            reason: format!("connecting to {}: {e}", self.endpoint.authority),
        })?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => round_trip(tcp, request).await,
            Some(tls) => {
                let peer = BrokerRef::addr(format!("{}:0", self.endpoint.host));
                let seen = Arc::new(Seen::default());
                let watched = Watched {
                    inner: tcp,
                    seen: seen.clone(),
                };
                let stream = tls
                    .handshake(&peer, watched, self.config.timeout)
                    .await
                    .map_err(|e| Failed {
                        // Closed or reset before the registry sent one handshake byte.
                        unanswered: seen.closed.load(Ordering::Relaxed) && !seen.received.load(Ordering::Relaxed),
                        reason: e.to_string(),
                    })?;
                round_trip(stream, request).await
            }
        }
    }
}

/// Why one attempt failed.
struct Failed {
    reason: String,
    /// The registry refused, closed or reset the connection without a
    /// single byte of answer (of the TLS handshake, or of the HTTP answer).
    unanswered: bool,
}

/// An I/O error that means the peer refused, closed or reset the connection.
fn peer_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: &[u8]) -> Result<http::Response, Failed> {
    // Nothing has been received while writing.
    let write_failed = |e: io::Error| Failed {
        unanswered: peer_closed(&e),
        reason: format!("writing the request: {e}"),
    };
    s.write_all(request).await.map_err(write_failed)?;
    s.flush().await.map_err(write_failed)?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(n) => n,
            // A TLS peer that closes without close_notify: what arrived counts.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => {
                return Err(Failed {
                    unanswered: buf.is_empty() && peer_closed(&e),
                    reason: format!("reading the answer: {e}"),
                })
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        let limit = MAX_RESPONSE_BYTES + http::MAX_HEADER_BYTES + 4;
        match http::parse_response(&buf, n == 0, MAX_RESPONSE_BYTES) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) if buf.len() > limit => {
                return Err(Failed {
                    unanswered: false,
                    reason: format!("an answer above {limit} bytes"),
                })
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Failed {
                    // Closed before the first byte of an answer.
                    unanswered: buf.is_empty() && n == 0,
                    reason: format!("not an HTTP answer: {e}"),
                });
            }
        }
    }
}

/// What a [`Watched`] connection has seen of its peer.
#[derive(Default)]
struct Seen {
    /// At least one byte arrived.
    received: AtomicBool,
    /// The peer closed or reset the connection.
    closed: AtomicBool,
}

/// A connection that notes whether the peer sent anything and whether it
/// closed or reset it, so that a TLS handshake the registry cut off before
/// its first byte counts as unanswered (the handshake error alone does not
/// tell). Reads and writes pass through unchanged.
struct Watched<S> {
    inner: S,
    seen: Arc<Seen>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let (before, room) = (buf.filled().len(), buf.remaining());
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.seen.received.store(true, Ordering::Relaxed),
            Poll::Ready(Ok(())) if room > 0 => self.seen.closed.store(true, Ordering::Relaxed),
            Poll::Ready(Err(e)) if peer_closed(e) => self.seen.closed.store(true, Ordering::Relaxed),
            _ => {}
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Err(e)) = &polled {
            if peer_closed(e) {
                self.seen.closed.store(true, Ordering::Relaxed);
            }
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The registry's error message (`{"error_code":…, "message":…}`), or the
/// start of the body.
fn registry_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            let code = v.get("error_code").and_then(Value::as_i64);
            return match code {
                Some(c) => format!("{m} (error_code {c})"),
                None => m.to_owned(),
            };
        }
    }
    let s = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if s.is_empty() {
        "empty body".into()
    } else {
        s
    }
}

fn json_id(v: &Value) -> Option<u32> {
    v.get("id").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok())
}

fn schema_from(
    v: &Value,
    id: Option<u32>,
    url: &str,
    what: &str,
) -> Result<(RegisteredSchema, Vec<SchemaReference>), RegistryError> {
    let garbage = |reason: &str| RegistryError::Garbage {
        url: url.to_owned(),
        what: what.to_owned(),
        reason: reason.to_owned(),
    };
    let text = v
        .get("schema")
        .and_then(Value::as_str)
        .ok_or_else(|| garbage("no \"schema\" text"))?;
    let schema_type = SchemaType::parse(v.get("schemaType").and_then(Value::as_str))
        .ok_or_else(|| garbage("an unknown \"schemaType\""))?;
    let mut references = Vec::new();
    match v.get("references") {
        None | Some(Value::Null) => {}
        Some(Value::Array(refs)) => {
            if refs.len() > MAX_REFERENCES {
                return Err(garbage("too many schema references"));
            }
            for r in refs {
                let field = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
                let (Some(name), Some(subject), Some(version)) = (
                    field("name"),
                    field("subject"),
                    r.get("version").and_then(Value::as_i64),
                ) else {
                    return Err(garbage("a schema reference without name, subject and version"));
                };
                references.push(SchemaReference { name, subject, version });
            }
        }
        Some(_) => return Err(garbage("\"references\" is not an array")),
    }
    let id = match id {
        Some(id) => id,
        None => json_id(v).ok_or_else(|| garbage("no \"id\""))?,
    };
    Ok((RegisteredSchema::new(id, schema_type, text.to_owned()), references))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;

    /// What the scripted registry does with one connection.
    #[derive(Clone, Copy)]
    enum Peer {
        /// Reads the request, then closes without a byte of answer.
        Close,
        /// Reads the request, sends these bytes (not a whole answer), closes.
        Partial(&'static [u8]),
        /// Reads the request and answers 200 with this JSON body.
        Answer(&'static str),
    }

    /// A scripted registry on 127.0.0.1: connection `n` (from 0) gets
    /// `script(n)` once it has read the request's head (or, when the first
    /// bytes are not an HTTP request but a TLS ClientHello, those). Its URL
    /// and the count of connections accepted.
    async fn scripted_registry(script: fn(usize) -> Peer) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let peer = script(counted.fetch_add(1, Ordering::SeqCst));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    if !buf[0].is_ascii_uppercase() || buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                match peer {
                    Peer::Close => {}
                    Peer::Partial(bytes) => {
                        let _ = s.write_all(bytes).await;
                    }
                    Peer::Answer(body) => {
                        let r = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = s.write_all(r.as_bytes()).await;
                    }
                }
                drop(s);
            }
        });
        (format!("http://{addr}/apis/ccompat/v7"), accepted)
    }

    const SCHEMA_43: &str = r#"{"id":43,"schema":"\"string\""}"#;

    fn client(url: &str) -> SchemaRegistryClient {
        let mut c = RegistryConfig::new(url);
        c.timeout = Duration::from_secs(5);
        c.auth = RegistryAuth::Basic {
            user_info: Secret::new("user:canary-pw"),
        };
        SchemaRegistryClient::new(c).unwrap()
    }

    #[tokio::test]
    async fn a_connection_closed_before_any_answer_is_resent_once_on_a_fresh_one() {
        // Even connections close unanswered, odd ones answer.
        let (url, accepted) = scripted_registry(|n| {
            if n % 2 == 0 {
                Peer::Close
            } else {
                Peer::Answer(SCHEMA_43)
            }
        })
        .await;
        let mut c = client(&url);
        let started = tokio::time::Instant::now();
        let s = c.schema_by_id(43).await.unwrap();
        assert!(started.elapsed() >= RESEND_PAUSE);
        assert_eq!((s.id, s.text.as_str()), (43, "\"string\""));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(c.requests(), 1, "a resend is not a second request");
        // A registration is idempotent, so it is resent too.
        assert_eq!(c.register("s-value", SchemaType::Avro, "\"int\"").await.unwrap(), 43);
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_registry_that_never_answers_is_tried_exactly_twice() {
        let (url, accepted) = scripted_registry(|_| Peer::Close).await;
        let mut c = client(&url);
        let e = c.schema_by_id(43).await.unwrap_err();
        assert!(matches!(e, RegistryError::Unreachable { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("schema id 43") && msg.contains("tried twice"), "{msg}");
        assert!(!msg.contains("canary") && !msg.contains("dXNlcjpjYW5hcnktcHc"), "{msg}");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_partial_answer_is_never_resent_for() {
        let (url, accepted) = scripted_registry(|n| {
            if n == 0 {
                Peer::Partial(b"HTTP/1.1 200 OK\r\nContent-Ty")
            } else {
                Peer::Answer(SCHEMA_43)
            }
        })
        .await;
        let mut c = client(&url);
        let e = c.schema_by_id(43).await.unwrap_err();
        assert!(matches!(e, RegistryError::Unreachable { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("closed after 27 bytes") && !msg.contains("tried twice"),
            "{msg}"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_tls_handshake_cut_off_before_any_byte_is_resent_once_and_a_non_tls_answer_is_not() {
        // The registry reads the ClientHello and closes: resent once.
        let (url, accepted) = scripted_registry(|_| Peer::Close).await;
        let mut c = client(&url.replacen("http://", "https://", 1));
        let e = c.schema_by_id(43).await.unwrap_err();
        assert!(e.to_string().contains("tried twice"), "{e}");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        // A plain-HTTP listener answers the ClientHello with bytes: not resent.
        let (url, accepted) = scripted_registry(|_| Peer::Partial(b"HTTP/1.1 400 Bad Request\r\n\r\n")).await;
        let mut c = client(&url.replacen("http://", "https://", 1));
        let e = c.schema_by_id(43).await.unwrap_err();
        assert!(!e.to_string().contains("tried twice"), "{e}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn urls() {
        let e = parse_url("http://127.0.0.1:18081/apis/ccompat/v7/").unwrap();
        assert_eq!(
            (e.tls, e.authority.as_str(), e.base_path.as_str()),
            (false, "127.0.0.1:18081", "/apis/ccompat/v7")
        );
        let e = parse_url("https://reg.example").unwrap();
        assert_eq!(
            (e.tls, e.authority.as_str(), e.base_path.as_str()),
            (true, "reg.example:443", "")
        );
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@h:1",
            "http://h:99999",
            "http://h:1/a?b",
            "h:1",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(e.to_string().contains("schema_registry_url"), "{bad}: {e}");
        }
    }

    #[test]
    fn debug_never_shows_credentials() {
        let mut c = RegistryConfig::new("http://h:1");
        c.auth = RegistryAuth::Basic {
            user_info: Secret::new("user:canary-pw"),
        };
        let client = SchemaRegistryClient::new(c).unwrap();
        assert!(!format!("{client:?}").contains("canary"), "{client:?}");
        let mut c = RegistryConfig::new("http://h:1");
        c.auth = RegistryAuth::Bearer {
            token: Secret::new("canary-token"),
        };
        assert!(!format!("{c:?}").contains("canary"));
    }

    #[test]
    fn answers_are_read_into_schemas() {
        let v = serde_json::json!({"schema": "{\"type\":\"string\"}"});
        let (s, _) = schema_from(&v, Some(3), "u", "w").unwrap();
        assert_eq!((s.id, s.schema_type), (3, SchemaType::Avro));
        let v = serde_json::json!({"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF", "id": 9});
        assert_eq!(
            schema_from(&v, None, "u", "w").unwrap().0.schema_type,
            SchemaType::Protobuf
        );
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"schema": 1}),
            serde_json::json!({"schema": "x", "schemaType": "XML"}),
            serde_json::json!({"schema": "x"}),
            serde_json::json!({"schema": "x", "id": 1, "references": [{"name": "a.proto"}]}),
            serde_json::json!({"schema": "x", "id": 1, "references": 5}),
        ] {
            assert!(schema_from(&bad, None, "u", "w").is_err(), "{bad}");
        }
        let v = serde_json::json!({"schema": "x", "id": 1, "references": [
            {"name": "a.proto", "subject": "a", "version": 2}]});
        assert_eq!(
            schema_from(&v, None, "u", "w").unwrap().1,
            [SchemaReference {
                name: "a.proto".into(),
                subject: "a".into(),
                version: 2
            }]
        );
        assert_eq!(
            registry_message(br#"{"error_code":40403,"message":"Schema not found"}"#),
            "Schema not found (error_code 40403)"
        );
    }
}
