//! Tokens for SASL/OAUTHBEARER ([KIP-255], [KIP-768]).
//!
//! A [`TokenProvider`] hands out bearer tokens; the SASL layer asks it for
//! one at every authentication and re-authentication (KIP-368), so a
//! provider that refreshes before expiry keeps long-lived connections
//! authenticated. Two providers come with the crate:
//!
//! - [`StaticTokenProvider`]: one fixed token (tests, or a token obtained
//!   elsewhere);
//! - [`OidcClientCredentials`]: the OAuth 2 client-credentials grant
//!   (RFC 6749 §4.4) against an OIDC token endpoint, as Java's and
//!   librdkafka's `sasl.oauthbearer.method=oidc` do. The client id and
//!   secret go by HTTP basic auth over HTTPS (the same rustls configuration
//!   as the broker connections, [`TlsConfig`]); the token is cached and
//!   fetched again once 80 % of its lifetime has passed (and at least 10 s
//!   before it expires, never before half of it). The response is
//!   bounded (64 KiB) and the whole exchange by a timeout.
//!
//! A library user can implement [`TokenProvider`] to supply tokens from
//! anywhere. Secrets (the client secret, the token) are
//! [`Secret`]s: never in `Debug`, never in an error or a log line.
//!
//! [KIP-255]: https://cwiki.apache.org/confluence/pages/viewpage.action?pageId=75968876
//! [KIP-768]: https://cwiki.apache.org/confluence/pages/viewpage.action?pageId=186877575

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use clink_kafka_wire::sasl::oauthbearer::SaslExtension;
use clink_kafka_wire::secret::Secret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tls::TlsConnector;
use super::TlsConfig;
use crate::error::{BrokerRef, Error, Result};

/// The option naming the token endpoint (Java's and librdkafka's name).
pub const OPT_TOKEN_URL: &str = "sasl.oauthbearer.token.endpoint.url";
/// The option naming the client id.
pub const OPT_CLIENT_ID: &str = "sasl.oauthbearer.client.id";
/// The option naming the client secret.
pub const OPT_CLIENT_SECRET: &str = "sasl.oauthbearer.client.secret";

/// Largest token endpoint response read.
const MAX_RESPONSE: usize = 64 * 1024;
/// Longest text kept from an endpoint's error fields.
const MAX_ERROR_TEXT: usize = 300;

/// A bearer token and what is known about it.
#[derive(Clone)]
pub struct OAuthToken {
    /// The token sent to the broker (a JWT for OIDC providers).
    pub token: Secret,
    /// When it stops being valid.
    pub expires_at: SystemTime,
    /// The principal it names (the JWT's `sub`, read without verification:
    /// for logs only), if known.
    pub principal: Option<String>,
}

impl fmt::Debug for OAuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthToken")
            .field("token", &self.token)
            .field("expires_at", &self.expires_at)
            .field("principal", &self.principal)
            .finish()
    }
}

impl OAuthToken {
    /// A token valid until `expires_at`; the principal is read from the
    /// token's JWT `sub` claim when it is a JWT.
    pub fn new(token: Secret, expires_at: SystemTime) -> Self {
        let principal = jwt_claims(token.expose()).and_then(|c| {
            c.get("sub")
                .and_then(|s| s.as_str())
                .map(|s| s.chars().take(200).collect())
        });
        OAuthToken {
            token,
            expires_at,
            principal,
        }
    }
}

/// Why no token could be had. Never contains a secret or a token.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// The endpoint could not be reached or answered something that is not
    /// a token response.
    #[error("token endpoint {url}: {message}")]
    Endpoint {
        /// The endpoint.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// TLS to the endpoint failed (e.g. its certificate is not trusted).
    #[error("token endpoint {url}: TLS {kind}: {reason}")]
    Tls {
        /// The endpoint.
        url: String,
        /// Which kind of TLS failure.
        kind: crate::error::TlsFailure,
        /// The TLS library's description.
        reason: String,
    },
    /// The endpoint refused the request (RFC 6749 §5.2 error response).
    #[error("token endpoint {url} refused the client credentials: HTTP {status}, {error}{}",
        .description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code (e.g. `unauthorized_client`).
        error: String,
        /// The `error_description`, if any.
        description: Option<String>,
    },
    /// A custom provider's failure.
    #[error("token provider: {0}")]
    Provider(String),
}

/// The future a [`TokenProvider`] returns.
pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = std::result::Result<OAuthToken, TokenError>> + Send + 'a>>;

/// A source of OAUTHBEARER tokens.
///
/// [`token`](TokenProvider::token) is called at every SASL authentication,
/// including each re-authentication, and must return a token valid for a
/// while: a provider refreshes before expiry (and may cache). Calls may
/// come from several connections at once. Implementations should make the
/// future cancel-safe (a dropped call must leave the provider usable).
pub trait TokenProvider: Send + Sync + 'static {
    /// A current token.
    fn token(&self) -> TokenFuture<'_>;

    /// How many tokens this provider obtained from its source so far (for
    /// metrics and tests; `0` when unknown).
    fn fetches(&self) -> u64 {
        0
    }

    /// A description for `Debug` output: never a secret.
    fn describe(&self) -> String {
        "a custom token provider".into()
    }
}

/// One fixed token, handed out as is (even once expired: the broker then
/// refuses it, which is what a test of expiry wants).
#[derive(Debug, Clone)]
pub struct StaticTokenProvider {
    token: OAuthToken,
}

impl StaticTokenProvider {
    /// A provider of `token`.
    pub fn new(token: OAuthToken) -> Self {
        StaticTokenProvider { token }
    }
}

impl TokenProvider for StaticTokenProvider {
    fn token(&self) -> TokenFuture<'_> {
        let token = self.token.clone();
        Box::pin(async move { Ok(token) })
    }

    fn describe(&self) -> String {
        format!("{:?}", self.token)
    }
}

/// Settings of the client-credentials grant ([`OidcClientCredentials`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OidcConfig {
    /// `sasl.oauthbearer.token.endpoint.url`: an `https://` URL.
    pub token_endpoint_url: String,
    /// `sasl.oauthbearer.client.id`.
    pub client_id: String,
    /// `sasl.oauthbearer.client.secret` (Debug prints `***`).
    pub client_secret: Secret,
    /// `sasl.oauthbearer.scope`, if any.
    pub scope: Option<String>,
    /// TLS to the endpoint: the CA (`https.ca.location` /
    /// `sasl.oauthbearer.ssl.ca.location`) or, by default, the built-in
    /// Mozilla roots.
    pub tls: TlsConfig,
    /// Bound on one token request (connect, TLS, request, response).
    pub timeout: Duration,
    /// Fraction of a token's lifetime after which a new one is fetched.
    pub refresh_fraction: f64,
}

impl OidcConfig {
    /// The client-credentials grant at `token_endpoint_url` for this client.
    pub fn new(token_endpoint_url: impl Into<String>, client_id: impl Into<String>, client_secret: Secret) -> Self {
        OidcConfig {
            token_endpoint_url: token_endpoint_url.into(),
            client_id: client_id.into(),
            client_secret,
            scope: None,
            tls: TlsConfig::default(),
            timeout: Duration::from_secs(30),
            refresh_fraction: 0.8,
        }
    }

    /// The same with a scope.
    pub fn with_scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The same with the endpoint's TLS settings (usually just a CA file).
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self
    }
}

/// The parts of an `https://host[:port]/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Result<Endpoint> {
    let bad = |message: String| Error::Config {
        option: OPT_TOKEN_URL,
        message,
    };
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => {
            return Err(bad(format!(
                "{url:?} is plain http: the client secret would cross the network in the clear; use https"
            )))
        }
        _ => return Err(bad(format!("{url:?} is not an https:// URL"))),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(bad(
            "credentials in the URL are not supported; use the client id and secret options".into(),
        ));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6
            .split_once(']')
            .ok_or_else(|| bad(format!("{url:?}: unclosed '['")))?;
        (h, tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad(format!("{url:?}: bad port {p:?}")))?,
        None => 443,
    };
    if host.is_empty() || path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(bad(format!("{url:?} is not a valid https URL")));
    }
    Ok(Endpoint {
        host: host.to_owned(),
        port,
        path: path.to_owned(),
    })
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

struct Cached {
    token: OAuthToken,
    refresh_at: Instant,
}

/// The OAuth 2 client-credentials grant against an OIDC token endpoint,
/// with a shared cache: one token serves every connection until 80 % of its
/// lifetime has passed.
pub struct OidcClientCredentials {
    config: OidcConfig,
    endpoint: Endpoint,
    tls: TlsConnector,
    cache: tokio::sync::Mutex<Option<Cached>>,
    fetches: AtomicU64,
}

impl fmt::Debug for OidcClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcClientCredentials")
            .field("config", &self.config)
            .field("fetches", &self.fetches.load(Ordering::Relaxed))
            .finish()
    }
}

impl OidcClientCredentials {
    /// Checks the settings and loads the endpoint's TLS material. Errors
    /// name the option.
    pub fn new(config: OidcConfig) -> Result<Self> {
        let endpoint = parse_url(&config.token_endpoint_url)?;
        if config.client_id.is_empty() {
            return Err(Error::Config {
                option: OPT_CLIENT_ID,
                message: "empty: the client-credentials grant needs a client id".into(),
            });
        }
        if config.client_secret.is_empty() {
            return Err(Error::Config {
                option: OPT_CLIENT_SECRET,
                message: "empty: the client-credentials grant needs a client secret".into(),
            });
        }
        if !(config.refresh_fraction > 0.0 && config.refresh_fraction < 1.0) {
            return Err(Error::Config {
                option: "sasl.oauthbearer.refresh.fraction",
                message: "must be between 0 and 1 (exclusive)".into(),
            });
        }
        let tls = TlsConnector::new(&config.tls)?;
        Ok(OidcClientCredentials {
            config,
            endpoint,
            tls,
            cache: tokio::sync::Mutex::new(None),
            fetches: AtomicU64::new(0),
        })
    }

    /// The provider as an `Arc<dyn TokenProvider>`, ready for
    /// [`OAuthBearerConfig`](super::OAuthBearerConfig).
    pub fn into_provider(self) -> Arc<dyn TokenProvider> {
        Arc::new(self)
    }

    fn endpoint_error(&self, message: impl Into<String>) -> TokenError {
        TokenError::Endpoint {
            url: self.config.token_endpoint_url.clone(),
            message: message.into(),
        }
    }

    /// One token request, bounded by the configured timeout.
    async fn fetch(&self) -> std::result::Result<OAuthToken, TokenError> {
        let timeout = self.config.timeout;
        match tokio::time::timeout(timeout, self.fetch_unbounded()).await {
            Ok(r) => r,
            Err(_) => Err(self.endpoint_error(format!("no answer within {timeout:?}"))),
        }
    }

    async fn fetch_unbounded(&self) -> std::result::Result<OAuthToken, TokenError> {
        let e = &self.endpoint;
        let addr = format!("{}:{}", e.host, e.port);
        let tcp = TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|err| self.endpoint_error(format!("connecting to {addr}: {err}")))?;
        let _ = tcp.set_nodelay(true);
        let broker = BrokerRef::addr(if e.host.contains(':') {
            format!("[{}]:{}", e.host, e.port)
        } else {
            addr.clone()
        });
        let mut tls = match self.tls.handshake(&broker, tcp, self.config.timeout).await {
            Ok(s) => s,
            Err(Error::Tls { kind, reason, .. }) => {
                // The TLS layer speaks of brokers and their CA option.
                let reason = reason
                    .replace("the broker's", "the endpoint's")
                    .replace("the broker", "the endpoint")
                    .replace(super::tls::OPT_CA, "https.ca.location");
                return Err(TokenError::Tls {
                    url: self.config.token_endpoint_url.clone(),
                    kind,
                    reason,
                });
            }
            Err(other) => return Err(self.endpoint_error(other.to_string())),
        };
        let started = SystemTime::now();
        let (status, body) = self.exchange(&mut tls).await?;
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.read_token(status, &body, started)
    }

    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        io: &mut S,
    ) -> std::result::Result<(u16, Vec<u8>), TokenError> {
        let c = &self.config;
        let mut form = String::from("grant_type=client_credentials");
        if let Some(scope) = c.scope.as_deref().filter(|s| !s.is_empty()) {
            form.push_str("&scope=");
            form.push_str(&form_encode(scope));
        }
        // RFC 6749 §2.3.1: the id and secret are form-encoded, then basic.
        let basic = {
            let mut pair = form_encode(&c.client_id);
            pair.push(':');
            pair.push_str(&form_encode(c.client_secret.expose()));
            Secret::new(base64::engine::general_purpose::STANDARD.encode(pair.as_bytes()))
        };
        let host_header = if self.endpoint.port == 443 {
            self.endpoint.host.clone()
        } else if self.endpoint.host.contains(':') {
            format!("[{}]:{}", self.endpoint.host, self.endpoint.port)
        } else {
            format!("{}:{}", self.endpoint.host, self.endpoint.port)
        };
        let request = Secret::new(format!(
            "POST {} HTTP/1.1\r\nHost: {host_header}\r\nAuthorization: Basic {}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n\
             User-Agent: clink-kafka\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            self.endpoint.path,
            basic.expose(),
            form.len()
        ));
        io.write_all(request.expose().as_bytes())
            .await
            .map_err(|err| self.endpoint_error(format!("sending the request: {err}")))?;
        io.flush()
            .await
            .map_err(|err| self.endpoint_error(format!("sending the request: {err}")))?;
        let mut raw = Vec::new();
        let mut limited = io.take(MAX_RESPONSE as u64 + 1);
        match limited.read_to_end(&mut raw).await {
            Ok(_) => {}
            // Servers that close without a TLS close_notify: the body is
            // checked against its length below.
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(err) => return Err(self.endpoint_error(format!("reading the response: {err}"))),
        }
        if raw.len() > MAX_RESPONSE {
            return Err(self.endpoint_error(format!("response larger than {MAX_RESPONSE} bytes")));
        }
        parse_http_response(&raw).map_err(|m| self.endpoint_error(m))
    }

    fn read_token(&self, status: u16, body: &[u8], started: SystemTime) -> std::result::Result<OAuthToken, TokenError> {
        let json: Option<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(body).ok();
        let text = |key: &str| {
            json.as_ref()
                .and_then(|m| m.get(key))
                .and_then(|v| v.as_str())
                .map(|s| clean(s, MAX_ERROR_TEXT))
        };
        if !(200..300).contains(&status) {
            return Err(TokenError::Refused {
                url: self.config.token_endpoint_url.clone(),
                status,
                error: text("error").unwrap_or_else(|| "no OAuth error code".into()),
                description: text("error_description"),
            });
        }
        let Some(map) = json.as_ref() else {
            return Err(self.endpoint_error(format!("HTTP {status} but the body is not a JSON object")));
        };
        let Some(token) = map.get("access_token").and_then(|v| v.as_str()) else {
            return Err(self.endpoint_error(format!("HTTP {status} but no access_token in the answer")));
        };
        if let Some(kind) = text("token_type") {
            if !kind.eq_ignore_ascii_case("bearer") {
                return Err(self.endpoint_error(format!("token_type {kind:?}, not Bearer")));
            }
        }
        let token = Secret::new(token);
        let expires_at = match map.get("expires_in").and_then(|v| v.as_u64()) {
            Some(secs) => started + Duration::from_secs(secs.min(10 * 365 * 24 * 3600)),
            None => match jwt_claims(token.expose()).and_then(|c| c.get("exp").and_then(|e| e.as_u64())) {
                Some(exp) => SystemTime::UNIX_EPOCH + Duration::from_secs(exp.min(u64::from(u32::MAX))),
                None => {
                    return Err(self.endpoint_error("the answer gives no expires_in and the token no exp claim"));
                }
            },
        };
        Ok(OAuthToken::new(token, expires_at))
    }
}

impl TokenProvider for OidcClientCredentials {
    /// The cached token, or a new one once 80 % of its lifetime has passed.
    /// Cancel-safe: a dropped call leaves the cache as it was.
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move {
            let mut cache = self.cache.lock().await;
            if let Some(c) = cache.as_ref() {
                if Instant::now() < c.refresh_at {
                    return Ok(c.token.clone());
                }
            }
            let token = self.fetch().await?;
            let lifetime = token
                .expires_at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            let refresh_at = Instant::now() + refresh_after(lifetime, self.config.refresh_fraction);
            tracing::debug!(endpoint = %self.config.token_endpoint_url, principal = ?token.principal,
                ?lifetime, "OAUTHBEARER token fetched");
            *cache = Some(Cached {
                token: token.clone(),
                refresh_at,
            });
            Ok(token)
        })
    }

    fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    fn describe(&self) -> String {
        format!("{:?}", self.config)
    }
}

/// When a token of `lifetime` is renewed: at `fraction` of it, but at
/// least [`REFRESH_MARGIN`] before it expires (never before half of it). A
/// connection that re-authenticates with a cached token gets a session
/// only as long as the token's remaining life; the margin keeps that
/// session long enough to be renewed in time even behind a long-poll Fetch.
fn refresh_after(lifetime: Duration, fraction: f64) -> Duration {
    let at_fraction = lifetime.mul_f64(fraction);
    let with_margin = lifetime.saturating_sub(REFRESH_MARGIN);
    at_fraction.min(with_margin).max(lifetime / 2)
}

/// See [`refresh_after`].
const REFRESH_MARGIN: Duration = Duration::from_secs(10);

fn clean(s: &str, max: usize) -> String {
    s.chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The claims of a JWT, decoded without verification (for `sub` and `exp`).
fn jwt_claims(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let payload = token.split('.').nth(1)?;
    if payload.len() > 64 * 1024 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Splits a complete HTTP/1.1 response into its status and body
/// (`Content-Length`, chunked, or read to the close).
fn parse_http_response(raw: &[u8]) -> std::result::Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the response has no complete header")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "the response header is not UTF-8")?;
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x response: {:?}", clean(status_line, 80)));
    }
    let status: u16 = code
        .parse()
        .map_err(|_| format!("bad HTTP status line {:?}", clean(status_line, 80)))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") && value.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
    }
    if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let line_end = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("truncated chunked body")?;
            let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| "bad chunk size")?;
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return Ok((status, out));
            }
            if size > rest.len() {
                return Err("truncated chunked body".into());
            }
            out.extend_from_slice(&rest[..size]);
            rest = rest.get(size + 2..).ok_or("truncated chunked body")?;
        }
    }
    match length {
        Some(n) if n > body.len() => Err(format!("the body is {} of {n} bytes: truncated", body.len())),
        Some(n) => Ok((status, body[..n].to_vec())),
        None => Ok((status, body.to_vec())),
    }
}

/// The KIP-342 extensions of a `key=value,…` option, errors naming `option`.
pub(crate) fn extensions_from(list: Option<&str>, option: &'static str) -> Result<Vec<SaslExtension>> {
    match list {
        None => Ok(Vec::new()),
        Some(l) => clink_kafka_wire::sasl::oauthbearer::parse_extensions(l).map_err(|e| Error::Config {
            option,
            message: format!("{e}; expected key=value,key=value with keys of ASCII letters"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("https://127.0.0.1:18443/realms/x/token").unwrap(),
            Endpoint {
                host: "127.0.0.1".into(),
                port: 18443,
                path: "/realms/x/token".into()
            }
        );
        assert_eq!(parse_url("HTTPS://idp.example").unwrap().port, 443);
        assert_eq!(parse_url("https://[::1]:8443/t").unwrap().host, "::1");
        for bad in [
            "http://idp/token",
            "ftp://x",
            "idp/token",
            "https://:1/",
            "https://u:p@idp/",
            "https://h:x/",
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains(OPT_TOKEN_URL), "{e}");
        }
    }

    #[test]
    fn refresh_points() {
        let s = Duration::from_secs;
        assert_eq!(refresh_after(s(3600), 0.8), s(2880));
        assert_eq!(refresh_after(s(60), 0.8), s(48));
        assert_eq!(refresh_after(s(15), 0.8), Duration::from_millis(7500));
        assert_eq!(refresh_after(s(0), 0.8), s(0));
    }

    #[test]
    fn form_encoding() {
        assert_eq!(form_encode("a b+c/d:é"), "a+b%2Bc%2Fd%3A%C3%A9");
    }

    #[test]
    fn http_responses() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{}xx";
        assert_eq!(parse_http_response(ok).unwrap(), (200, b"{}xx".to_vec()));
        let chunked =
            b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(parse_http_response(chunked).unwrap(), (401, b"{\"a\":1}".to_vec()));
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(parse_http_response(bad).is_err(), "{bad:?}");
        }
    }

    fn provider() -> OidcClientCredentials {
        OidcClientCredentials::new(OidcConfig::new("https://idp:1/t", "id", Secret::new("s3cret-value"))).unwrap()
    }

    #[test]
    fn token_answers() {
        let p = provider();
        let now = SystemTime::now();
        let t = p
            .read_token(
                200,
                br#"{"access_token":"abc.def.ghi","expires_in":60,"token_type":"Bearer"}"#,
                now,
            )
            .unwrap();
        assert_eq!(t.expires_at, now + Duration::from_secs(60));
        assert!(!format!("{t:?}").contains("abc.def"));
        let refused = p
            .read_token(
                401,
                br#"{"error":"unauthorized_client","error_description":"Invalid client or Invalid client credentials"}"#,
                now,
            )
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "token endpoint https://idp:1/t refused the client credentials: HTTP 401, unauthorized_client \
             (Invalid client or Invalid client credentials)"
        );
        assert!(p.read_token(500, b"<html>", now).is_err());
        assert!(p.read_token(200, br#"{"access_token":"a"}"#, now).is_err(), "no expiry");
        assert!(p
            .read_token(200, br#"{"access_token":"a","expires_in":5,"token_type":"mac"}"#, now)
            .is_err());
        assert!(!format!("{p:?}").contains("s3cret"));
    }

    #[test]
    fn jwt_subject_and_expiry() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!(
            "{}.{}.sig",
            b64(r#"{"alg":"none"}"#),
            b64(r#"{"sub":"svc","exp":2000000000}"#)
        );
        let t = OAuthToken::new(Secret::new(jwt.clone()), SystemTime::now());
        assert_eq!(t.principal.as_deref(), Some("svc"));
        let p = provider();
        let body = format!(r#"{{"access_token":"{jwt}"}}"#);
        let t = p.read_token(200, body.as_bytes(), SystemTime::now()).unwrap();
        assert_eq!(
            t.expires_at,
            SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000)
        );
    }

    #[test]
    fn config_errors_name_options() {
        let e = OidcClientCredentials::new(OidcConfig::new("https://idp/t", "", Secret::new("x"))).unwrap_err();
        assert!(e.to_string().contains(OPT_CLIENT_ID), "{e}");
        let e = OidcClientCredentials::new(OidcConfig::new("https://idp/t", "id", Secret::new(""))).unwrap_err();
        assert!(e.to_string().contains(OPT_CLIENT_SECRET), "{e}");
    }
}
