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
//! Cancel safety: the async methods are cancel safe in the sense that a
//! dropped call leaves the caches as they were (an answer is cached only
//! once complete); the request may or may not have reached the registry.

pub mod http;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::tls::{TlsConfig, TlsConnector};
use crate::error::BrokerRef;
use crate::wire::secret::Secret;

/// The largest registry answer read (a schema text and its JSON envelope).
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

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
    /// Bound on one request: connect, TLS, write and read.
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

    /// HTTP requests sent so far (the caches' effect is visible here).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The schema with this id, cached for ever once fetched.
    pub async fn schema_by_id(&mut self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(s) = self.by_id.get(&id) {
            return Ok(s.clone());
        }
        let what = format!("schema id {id}");
        let v = self.call("GET", &format!("/schemas/ids/{id}"), None, &what).await?;
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
        match self.call("GET", &path, None, &what).await {
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
            .call("POST", &path, Some(body.to_string().as_bytes()), &what)
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
            let v = self.call("GET", &path, None, &ref_what).await?;
            let (s, more) = schema_from(&v, Some(0), &self.config.url, &ref_what)?;
            out.push((r.name, s.text));
            refs.extend(more);
        }
        Ok(out)
    }

    /// One request, bounded by the timeout; the answer's JSON on a 2xx.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
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
        let response = match tokio::time::timeout(timeout, self.exchange(method, path, body)).await {
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

    async fn exchange(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<http::Response, String> {
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
        let tcp = TcpStream::connect(&self.endpoint.authority)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.endpoint.authority))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => round_trip(tcp, request.expose().as_bytes()).await,
            Some(tls) => {
                let peer = BrokerRef::addr(format!("{}:0", self.endpoint.host));
                let stream = tls
                    .handshake(&peer, tcp, self.config.timeout)
                    .await
                    .map_err(|e| e.to_string())?;
                round_trip(stream, request.expose().as_bytes()).await
            }
        }
    }
}

async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: &[u8]) -> Result<http::Response, String> {
    s.write_all(request)
        .await
        .map_err(|e| format!("writing the request: {e}"))?;
    s.flush().await.map_err(|e| format!("writing the request: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(n) => n,
            // A TLS peer that closes without close_notify: what arrived counts.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(format!("reading the answer: {e}")),
        };
        buf.extend_from_slice(&chunk[..n]);
        let limit = MAX_RESPONSE_BYTES + http::MAX_HEADER_BYTES + 4;
        match http::parse_response(&buf, n == 0, MAX_RESPONSE_BYTES) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) if buf.len() > limit => return Err(format!("an answer above {limit} bytes")),
            Ok(None) => {}
            Err(e) => return Err(format!("not an HTTP answer: {e}")),
        }
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
