//! One connection to one broker (TCP, or TLS over TCP through
//! [`super::tls`]): the driver task that owns the stream, request pipelining
//! by correlation id, the ApiVersions handshake, the per-request timeout and
//! the idle close (`connections_max_idle`: no request in flight for that
//! long closes the connection; the cluster opens a new one on next use).
//!
//! Shape (after rskafka's `messenger.rs` and quinn's `ConnectionDriver`): a
//! [`BrokerConnection`] is a cheap handle; the socket lives in one spawned
//! driver task that runs a read loop and a write loop on the two halves of
//! the stream (any `AsyncRead`/`AsyncWrite` pair: TCP or TLS). A caller
//! encodes its request frame itself (so the same bytes go out on every
//! retry), hands it to the driver with a oneshot sender, and the driver
//! routes the response frame back by correlation id. Decoding happens in the
//! caller, so big responses decode in parallel.
//!
//! On connect we send ApiVersions v3; a broker that answers
//! `UNSUPPORTED_VERSION` lists its own ApiVersions range in that answer
//! (KIP-511), and we retry at the highest version it allows (v0 when it lists
//! none; see `api_versions_retry_version` in the wire crate). Then we keep the
//! broker's ranges to choose each request's version.
//! See <https://kafka.apache.org/protocol#api_versions>.
//!
//! Failure is sticky (as in rustls): the first fatal error — I/O, EOF, a bad
//! frame, a request timeout, failed authentication — is stored, the driver
//! stops, every waiting request gets that error, and every later call
//! returns it again without doing any work. The cluster layer then opens a
//! new connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use clink_kafka_wire::codec::DecodeResponse;
use clink_kafka_wire::frame::{self, FrameDecoder, ResponseFrame};
use clink_kafka_wire::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::messages::FrameParts;
use clink_kafka_wire::protocol::{api_versions_retry_version, ApiRequest, BrokerVersions};
use clink_kafka_wire::KafkaCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

use super::metrics::RequestMetrics;
use super::tls::TlsConnector;
use super::{ClientConfig, SaslConfig};
use crate::error::{BrokerRef, Error, Result};

/// The ApiVersions version we try first (flexible, with client software name).
const API_VERSIONS_FIRST: i16 = 3;
/// Read buffer growth step; a frame larger than this reserves its own size.
const READ_CHUNK: usize = 64 * 1024;
/// Most frames the writer takes off the queue before writing.
const WRITE_BATCH: usize = 64;

/// Makes `buf` able to hold `needed` bytes, reusing an earlier buffer whose
/// frames have all been dropped before allocating a new one; true when it
/// allocated.
///
/// Frames are cut from the read buffer without a copy, so a buffer stays in
/// use until the consumer drops the last record read from it. A fresh
/// allocation per fetch response costs its pages' faults and clearing in the
/// kernel (measured: 8,000 minor faults and ~25% of the CPU consuming 100 MB
/// of uncompressed JSON-like records); the last `SPARES` buffers are kept
/// (the oldest dropped first) and used again once they are free. Memory: at most `SPARES` + 1 buffers
/// per connection, each the size of the largest frame it held (bounded by
/// `max_frame_size`).
fn room(buf: &mut BytesMut, spares: &mut Vec<BytesMut>, needed: usize) -> bool {
    const SPARES: usize = 2;
    if buf.capacity() >= needed || buf.try_reclaim(needed - buf.len()) {
        return false;
    }
    let (mut next, allocated) = match spares.iter_mut().position(|s| s.try_reclaim(needed)) {
        Some(i) => (spares.remove(i), false),
        None => (BytesMut::with_capacity(needed.max(READ_CHUNK)), true),
    };
    next.extend_from_slice(buf);
    let mut old = std::mem::replace(buf, next);
    old.clear();
    spares.push(old);
    if spares.len() > SPARES {
        spares.remove(0);
    }
    allocated
}

/// A handle to one broker connection. Cloning shares the connection.
#[derive(Clone)]
pub struct BrokerConnection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("broker", &self.shared.broker)
            .field("closed", &self.is_closed())
            .finish()
    }
}

struct Shared {
    /// Unique among this process's connections (see [`BrokerConnection::id`]).
    id: u64,
    broker: BrokerRef,
    client_id: String,
    request_timeout: Duration,
    versions: OnceLock<BrokerVersions>,
    next_correlation_id: AtomicI32,
    commands: mpsc::UnboundedSender<Command>,
    fatal: Arc<OnceLock<Error>>,
    shutdown: Arc<Notify>,
    /// When a request was last queued or a response last arrived (for the
    /// idle close).
    last_activity: Arc<Mutex<Instant>>,
    /// Frames of the SASL re-authentication and the resume signal: the
    /// writer takes these even while it holds back `commands`.
    control: mpsc::UnboundedSender<Control>,
    /// Completed re-authentications (KIP-368) on this connection.
    reauthentications: Arc<AtomicU64>,
    /// KIP-219: until when the writer holds back requests, after an answer
    /// that carried `throttle_time_ms` (bounded by `max_throttle`).
    muted_until: Arc<Mutex<Option<Instant>>>,
    /// The bound on a throttle, in ms: `max_throttle`, lowered by
    /// [`BrokerConnection::cap_throttle`].
    max_throttle_ms: AtomicU64,
}

/// What the re-authentication sends the writer, ahead of `commands`.
enum Control {
    /// A SaslHandshake / SaslAuthenticate frame of the re-authentication.
    Frame(Command),
    /// Authentication done: write the held request and take `commands`
    /// again; re-authenticate before the first request at or after this
    /// instant (`None`: the session does not expire).
    Resume(Option<Instant>),
}

/// Whether a request goes through the ordinary queue or (during a
/// re-authentication) through the control queue ahead of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The ordinary request queue.
    Normal,
    /// The control queue, while the ordinary one is held back.
    Control,
}

/// A frame for the driver to write; `reply` is `None` when the broker sends
/// no answer (Produce with acks=0).
struct Command {
    correlation_id: i32,
    api: &'static str,
    version: i16,
    frame: Frame,
    reply: Option<oneshot::Sender<Result<Bytes>>>,
    /// For a request without an answer: told once the frame is written, so
    /// the caller can bound what is queued (acks=0 produce).
    written: Option<oneshot::Sender<Result<Bytes>>>,
}

/// The bytes of one request frame: one buffer, or parts written with
/// vectored writes (a Produce request's batches, uncopied).
enum Frame {
    Whole(Bytes),
    Parts(FrameParts),
}

impl Frame {
    fn len(&self) -> usize {
        match self {
            Frame::Whole(b) => b.len(),
            Frame::Parts(p) => p.len(),
        }
    }
}

/// Writes every byte of `parts`, in order, with as few (vectored) writes as
/// the writer takes.
async fn write_all_parts<W: AsyncWrite + Unpin>(wr: &mut W, parts: &[Bytes]) -> std::io::Result<()> {
    let mut slices: Vec<std::io::IoSlice<'_>> = parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
    let mut rest: &mut [std::io::IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let n = wr.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// A request written and waiting for its response.
struct InFlight {
    api: &'static str,
    version: i16,
    reply: oneshot::Sender<Result<Bytes>>,
    /// When it was handed to the writer (for the latency series).
    sent_at: Instant,
}

type InFlightMap = Mutex<HashMap<i32, InFlight>>;

impl BrokerConnection {
    /// Dials `addr`, runs the TLS handshake if `config.security_protocol`
    /// says so, negotiates API versions and, if `config.sasl` is set,
    /// authenticates. `node_id` is the broker's id when known (for errors and
    /// logs). Reads the TLS files on every call: for many connections build
    /// a [`TlsConnector`] once and use [`BrokerConnection::connect_with`].
    pub async fn connect(addr: &str, node_id: Option<i32>, config: &ClientConfig) -> Result<Self> {
        config.validate()?;
        let tls = if config.security_protocol.uses_tls() {
            Some(TlsConnector::new(&config.tls)?)
        } else {
            None
        };
        Self::connect_with(addr, node_id, config, tls.as_ref()).await
    }

    /// [`BrokerConnection::connect`] with a prepared TLS connector, which
    /// must be given exactly when `config.security_protocol` uses TLS (the
    /// cluster builds it once for all its connections).
    pub async fn connect_with(
        addr: &str,
        node_id: Option<i32>,
        config: &ClientConfig,
        tls: Option<&TlsConnector>,
    ) -> Result<Self> {
        let broker = BrokerRef {
            addr: addr.to_owned(),
            node_id,
        };
        if tls.is_some() != config.security_protocol.uses_tls() {
            return Err(Error::Config {
                option: "security.protocol",
                message: format!(
                    "{} {} a TLS connector",
                    config.security_protocol,
                    if tls.is_some() { "was given" } else { "needs" }
                ),
            });
        }
        // One deadline for TCP and TLS together.
        let started = tokio::time::Instant::now();
        let stream = match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await {
            Err(_) => {
                return Err(Error::ConnectTimeout {
                    broker,
                    timeout: config.connect_timeout,
                })
            }
            Ok(Err(e)) => {
                return Err(Error::Connect {
                    broker,
                    source: Arc::new(e),
                })
            }
            Ok(Ok(s)) => s,
        };
        // Requests are whole frames written at once; Nagle only adds latency.
        let _ = stream.set_nodelay(true);
        let conn = match tls {
            None => {
                let (rd, wr) = stream.into_split();
                Self::start(rd, wr, broker, config, None)
            }
            Some(tls) => {
                let remaining = config.connect_timeout.saturating_sub(started.elapsed());
                let stream = tls.handshake(&broker, stream, remaining).await?;
                let (rd, wr) = tokio::io::split(stream);
                Self::start(rd, wr, broker, config, Some(tls.clone()))
            }
        };
        let setup = async {
            // The ApiVersions exchange is part of connecting: a broker that
            // accepts and then stays mute (a network partition behind a
            // proxy or load balancer) is a connect timeout, not a
            // `request_timeout` wait.
            let remaining = config.connect_timeout.saturating_sub(started.elapsed());
            let versions = match tokio::time::timeout(remaining, conn.negotiate_versions()).await {
                Ok(versions) => versions?,
                Err(_) => {
                    return Err(Error::ConnectTimeout {
                        broker: conn.shared.broker.clone(),
                        timeout: config.connect_timeout,
                    })
                }
            };
            let _ = conn.shared.versions.set(versions);
            if let Some(sasl) = &config.sasl {
                let lifetime = super::sasl::authenticate(&conn, sasl, Route::Normal).await?;
                conn.schedule_reauthentication(lifetime)?;
            }
            Ok::<_, Error>(())
        };
        if let Err(e) = setup.await {
            // Whatever failed, this connection is done (the broker closes an
            // unauthenticated connection anyway). Return the cause itself: the
            // broker's close right after a refusal may have become the sticky
            // error first, and "closed the connection" would hide the refusal.
            // A TLS alert that arrived meanwhile (TLS 1.3 reports a refused
            // client certificate only after the handshake) is the better cause.
            let e = match conn.fatal_error() {
                Some(tls @ Error::Tls { .. }) => tls,
                _ => e,
            };
            conn.fail(e.clone());
            return Err(e);
        }
        tracing::debug!(broker = %conn.shared.broker, protocol = %config.security_protocol, "connected");
        if config.debug {
            // The mechanism and user only: never the password.
            tracing::debug!(target: "clink_kafka::protocol", broker = %conn.shared.broker,
                protocol = %config.security_protocol,
                sasl_mechanism = config.sasl.as_ref().map(|s| s.mechanism.name()),
                sasl_username = config.sasl.as_ref().map(|s| s.username.as_str()), "connected");
        }
        Ok(conn)
    }

    /// Spawns the driver for an established stream (no Kafka handshake yet).
    fn start<R, W>(rd: R, wr: W, broker: BrokerRef, config: &ClientConfig, tls: Option<TlsConnector>) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let fatal = Arc::new(OnceLock::new());
        let shutdown = Arc::new(Notify::new());
        let last_activity = Arc::new(Mutex::new(Instant::now()));
        let reauthentications = Arc::new(AtomicU64::new(0));
        let muted_until = Arc::new(Mutex::new(None));
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            broker: broker.clone(),
            client_id: config.client_id.clone(),
            request_timeout: config.request_timeout,
            versions: OnceLock::new(),
            next_correlation_id: AtomicI32::new(1),
            commands: tx,
            fatal: fatal.clone(),
            shutdown: shutdown.clone(),
            last_activity: last_activity.clone(),
            control: control_tx,
            reauthentications: reauthentications.clone(),
            muted_until: muted_until.clone(),
            max_throttle_ms: AtomicU64::new(config.max_throttle.as_millis().min(u64::MAX as u128) as u64),
        });
        let driver = Driver {
            broker,
            decoder: FrameDecoder::new(config.max_frame_size),
            in_flight: Mutex::new(HashMap::new()),
            fatal,
            shutdown,
            sasl: config.sasl.is_some(),
            tls,
            max_idle: config.connections_max_idle,
            last_activity,
            metrics: RequestMetrics::new(config),
            debug: config.debug,
            muted_until,
            reauth: Reauth {
                sasl: config.sasl.clone(),
                due: Notify::new(),
                handle: Arc::downgrade(&shared),
                count: reauthentications,
                metric: super::metrics::reauth_counter(config),
            },
        };
        tokio::spawn(driver.run(rd, wr, rx, control_rx));
        BrokerConnection { shared }
    }

    /// Which broker this connects to.
    pub fn broker(&self) -> &BrokerRef {
        &self.shared.broker
    }

    /// Whether the connection has failed or been closed. A closed connection
    /// never recovers; open a new one.
    pub fn is_closed(&self) -> bool {
        self.shared.fatal.get().is_some()
    }

    /// This connection's number, unique within the process (never reused,
    /// unlike an address): tells whether two handles are one connection
    /// after either may have been dropped.
    pub(crate) fn id(&self) -> u64 {
        self.shared.id
    }

    /// How many times this connection has re-authenticated (KIP-368: a
    /// broker with `connections.max.reauth.ms` gives each SASL session a
    /// lifetime, and the connection authenticates again before it ends).
    pub fn reauthentications(&self) -> u64 {
        self.shared.reauthentications.load(Ordering::Relaxed)
    }

    /// Whether `self` and `other` are handles to the same connection.
    pub fn same_connection(&self, other: &BrokerConnection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The sticky error that closed the connection, if any.
    pub fn fatal_error(&self) -> Option<Error> {
        self.shared.fatal.get().cloned()
    }

    /// What the broker speaks, from its ApiVersions answer.
    pub fn versions(&self) -> Option<&BrokerVersions> {
        self.shared.versions.get()
    }

    /// The version to use for `R`: the highest both sides speak, at most
    /// `cap` when given (e.g. Fetch and Produce v13+ need topic ids, which
    /// this client does not use yet).
    pub fn version_for<R: ApiRequest>(&self, cap: Option<i16>) -> Result<i16> {
        let mut ours = R::VERSIONS;
        if let Some(cap) = cap {
            ours.max = ours.max.min(cap);
        }
        let versions = self.shared.versions.get().ok_or_else(|| Error::Protocol {
            broker: self.shared.broker.clone(),
            api: R::NAME,
            source: Arc::new(clink_kafka_wire::Error::Invalid {
                context: "API versions",
                message: "not negotiated yet".into(),
            }),
        })?;
        versions
            .choose(R::KEY, R::NAME, ours)
            .map_err(|e| self.protocol_error(R::NAME, e))
    }

    /// Sends `body` at the highest common version and waits for the answer.
    pub async fn request<R: ApiRequest>(&self, body: &R) -> Result<R::Response> {
        let version = self.version_for::<R>(None)?;
        self.request_at(version, body).await
    }

    /// Sends `body` at `version` and waits for the answer (bounded by the
    /// request timeout).
    pub async fn request_at<R: ApiRequest>(&self, version: i16, body: &R) -> Result<R::Response> {
        let (correlation_id, frame) = self.encode(version, body)?;
        let response = self.round_trip(R::NAME, version, correlation_id, frame).await?;
        let answer = frame::decode_response::<R>(response, version, correlation_id)
            .map_err(|e| self.protocol_error(R::NAME, e))?;
        self.note_throttle(answer.throttle_time_ms());
        Ok(answer)
    }

    /// KIP-219: an answer's `throttle_time_ms` mutes this connection for
    /// that long (bounded by `max_throttle`): the writer holds back every
    /// request queued after it until then (a SASL re-authentication's
    /// frames excepted).
    fn note_throttle(&self, throttle_time_ms: i32) {
        let max = Duration::from_millis(self.shared.max_throttle_ms.load(Ordering::Relaxed));
        let delay = clink_kafka_wire::protocol::throttle_delay(throttle_time_ms, max);
        if delay.is_zero() {
            return;
        }
        tracing::debug!(broker = %self.shared.broker, ?delay, "broker throttled this connection (KIP-219)");
        let until = Instant::now() + delay;
        let mut muted = self.shared.muted_until.lock().expect("mute lock");
        if muted.is_none_or(|m| m < until) {
            *muted = Some(until);
        }
    }

    /// Lowers this connection's bound on a throttle to `max` (the
    /// consumer's own `max_throttle` on its Fetch connections); the lowest
    /// bound asked for wins.
    pub(crate) fn cap_throttle(&self, max: Duration) {
        let ms = max.as_millis().min(u64::MAX as u128) as u64;
        self.shared.max_throttle_ms.fetch_min(ms, Ordering::Relaxed);
    }

    /// How much longer this connection is muted by a broker's throttle
    /// (KIP-219), if it is.
    pub fn throttled_for(&self) -> Option<Duration> {
        let muted = *self.shared.muted_until.lock().expect("mute lock");
        muted
            .and_then(|m| m.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// [`BrokerConnection::request_at`] through `route`: the control queue
    /// is how the re-authentication reaches the socket while ordinary
    /// requests are held back.
    pub(crate) async fn request_routed<R: ApiRequest>(
        &self,
        version: i16,
        body: &R,
        route: Route,
    ) -> Result<R::Response> {
        if route == Route::Normal {
            return self.request_at(version, body).await;
        }
        let (correlation_id, frame) = self.encode(version, body)?;
        let (tx, rx) = oneshot::channel();
        let command = Command {
            correlation_id,
            api: R::NAME,
            version,
            frame,
            reply: Some(tx),
            written: None,
        };
        self.shared
            .control
            .send(Control::Frame(command))
            .map_err(|_| self.closed_error())?;
        let response = self.wait_response(R::NAME, version, correlation_id, rx).await?;
        let answer = frame::decode_response::<R>(response, version, correlation_id)
            .map_err(|e| self.protocol_error(R::NAME, e))?;
        self.note_throttle(answer.throttle_time_ms());
        Ok(answer)
    }

    /// After an authentication that gave the session `lifetime`: tells the
    /// writer when to re-authenticate (and, after a re-authentication, to
    /// take ordinary requests again).
    pub(crate) fn schedule_reauthentication(&self, lifetime: Option<Duration>) -> Result<()> {
        let at = lifetime.map(|l| Instant::now() + reauth_delay(l, random_u32()));
        self.shared
            .control
            .send(Control::Resume(at))
            .map_err(|_| self.closed_error())
    }

    /// Queues `body` at `version` for a request the broker never answers
    /// (Produce with acks=0). Returns once the frame is queued for writing.
    pub fn send_without_response<R: ApiRequest>(&self, version: i16, body: &R) -> Result<()> {
        let (correlation_id, frame) = self.encode(version, body)?;
        self.enqueue(Command {
            correlation_id,
            api: R::NAME,
            version,
            frame,
            reply: None,
            written: None,
        })
    }

    /// Queues `body` at `version` now, in call order, and returns the wait
    /// for its answer. Requests started one after another on a connection
    /// reach the broker in that order (the producer relies on it for the
    /// order of a partition's batches).
    #[cfg(test)]
    pub(crate) fn start_request<R: ApiRequest>(&self, version: i16, body: &R) -> Result<PendingResponse<R>> {
        let (correlation_id, frame) = self.encode(version, body)?;
        let (tx, rx) = oneshot::channel();
        self.enqueue(Command {
            correlation_id,
            api: R::NAME,
            version,
            frame,
            reply: Some(tx),
            written: None,
        })?;
        Ok(PendingResponse {
            conn: self.clone(),
            rx,
            correlation_id,
            version,
            _r: std::marker::PhantomData,
        })
    }

    fn encode<R: ApiRequest>(&self, version: i16, body: &R) -> Result<(i32, Frame)> {
        self.encode_with(R::NAME, |correlation_id, client_id| {
            let mut buf = BytesMut::with_capacity(256);
            frame::encode_request(&mut buf, correlation_id, client_id, version, body)?;
            Ok(Frame::Whole(buf.freeze()))
        })
    }

    /// Gives `encode` the next correlation id and the client id.
    fn encode_with(
        &self,
        api: &'static str,
        encode: impl FnOnce(i32, Option<&str>) -> clink_kafka_wire::Result<Frame>,
    ) -> Result<(i32, Frame)> {
        if let Some(e) = self.shared.fatal.get() {
            return Err(e.clone());
        }
        let correlation_id = self.shared.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode(correlation_id, Some(&self.shared.client_id)).map_err(|e| self.protocol_error(api, e))?;
        Ok((correlation_id, frame))
    }

    /// Queues the request frame `encode` writes (given the correlation id
    /// and client id) in parts, and returns the wait for its answer; when
    /// the broker sends none (`answered` false: Produce with acks=0), a
    /// receiver that resolves once the frame is written to the socket (or
    /// the connection fails). Requests started one after another on a
    /// connection reach the broker in that order (the producer relies on it
    /// for the order of a partition's batches).
    pub(crate) fn start_request_parts<R: ApiRequest>(
        &self,
        version: i16,
        answered: bool,
        encode: impl FnOnce(i32, Option<&str>) -> clink_kafka_wire::Result<FrameParts>,
    ) -> Result<StartedParts<R>> {
        let (correlation_id, frame) = self.encode_with(R::NAME, |c, id| encode(c, id).map(Frame::Parts))?;
        let (tx, rx) = oneshot::channel();
        let (reply, written) = if answered { (Some(tx), None) } else { (None, Some(tx)) };
        self.enqueue(Command {
            correlation_id,
            api: R::NAME,
            version,
            frame,
            reply,
            written,
        })?;
        Ok(if answered {
            StartedParts::Answered(PendingResponse {
                conn: self.clone(),
                rx,
                correlation_id,
                version,
                _r: std::marker::PhantomData,
            })
        } else {
            StartedParts::Unanswered(rx)
        })
    }

    fn enqueue(&self, command: Command) -> Result<()> {
        if let Some(e) = self.shared.fatal.get() {
            return Err(e.clone());
        }
        // Before sending, so the idle check never closes under a request
        // that is queued but not yet written.
        *self.shared.last_activity.lock().expect("activity lock") = Instant::now();
        self.shared.commands.send(command).map_err(|_| self.closed_error())
    }

    async fn round_trip(&self, api: &'static str, version: i16, correlation_id: i32, frame: Frame) -> Result<Bytes> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Command {
            correlation_id,
            api,
            version,
            frame,
            reply: Some(tx),
            written: None,
        })?;
        self.wait_response(api, version, correlation_id, rx).await
    }

    async fn wait_response(
        &self,
        api: &'static str,
        version: i16,
        correlation_id: i32,
        rx: oneshot::Receiver<Result<Bytes>>,
    ) -> Result<Bytes> {
        match tokio::time::timeout(self.shared.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => {
                tracing::warn!(broker = %self.shared.broker, api, version, correlation_id,
                    timeout = ?self.shared.request_timeout, "request timed out; closing the connection");
                Err(self.fail(Error::RequestTimeout {
                    broker: self.shared.broker.clone(),
                    api,
                    timeout: self.shared.request_timeout,
                }))
            }
        }
    }

    /// Records `error` as the connection's sticky error (unless another came
    /// first), stops the driver, and returns the sticky error.
    pub(crate) fn fail(&self, error: Error) -> Error {
        let _ = self.shared.fatal.set(error);
        self.shared.shutdown.notify_one();
        self.closed_error()
    }

    fn closed_error(&self) -> Error {
        self.shared
            .fatal
            .get()
            .cloned()
            .unwrap_or_else(|| Error::ConnectionClosed {
                broker: self.shared.broker.clone(),
            })
    }

    fn protocol_error(&self, api: &'static str, e: clink_kafka_wire::Error) -> Error {
        Error::Protocol {
            broker: self.shared.broker.clone(),
            api,
            source: Arc::new(e),
        }
    }

    /// ApiVersions v3; after an `UNSUPPORTED_VERSION` answer, again at the
    /// highest version that answer allows (KIP-511: it lists the broker's
    /// ApiVersions range; without one, v0). Each retry is at a lower
    /// version than the last, so this ends.
    async fn negotiate_versions(&self) -> Result<BrokerVersions> {
        let mut version = API_VERSIONS_FIRST;
        loop {
            let request = if version >= 3 {
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("clink-kafka"))
                    .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")))
            } else {
                ApiVersionsRequest::default()
            };
            let (correlation_id, frame) = self.encode(version, &request)?;
            let raw = self.round_trip("ApiVersions", version, correlation_id, frame).await?;
            let parsed = ResponseFrame::parse(raw, ApiKey::ApiVersions, version)
                .map_err(|e| self.protocol_error("ApiVersions", e))?;
            if parsed.correlation_id != correlation_id {
                return Err(self.protocol_error(
                    "ApiVersions",
                    clink_kafka_wire::Error::CorrelationMismatch {
                        expected: correlation_id,
                        actual: parsed.correlation_id,
                    },
                ));
            }
            // Every ApiVersions body starts with its error code; an
            // UNSUPPORTED_VERSION answer is not in the shape we asked for.
            let body = parsed.body();
            let code = body.get(..2).map(|b| i16::from_be_bytes([b[0], b[1]]));
            let unsupported = code == Some(KafkaCode::UNSUPPORTED_VERSION.0);
            if unsupported {
                if let Some(retry) = api_versions_retry_version(&body, version) {
                    tracing::debug!(broker = %self.shared.broker, version, retry,
                        "ApiVersions version unsupported; retrying at the version the broker lists");
                    version = retry;
                    continue;
                }
            }
            let response: Option<ApiVersionsResponse> = if unsupported {
                // Nothing lower to try; the body need not be in our shape.
                None
            } else {
                Some(
                    parsed
                        .decode(version, "ApiVersions")
                        .map_err(|e| self.protocol_error("ApiVersions", e))?,
                )
            };
            match response {
                Some(response) if response.error_code == 0 => return Ok(BrokerVersions::from_response(&response)),
                _ => {
                    return Err(Error::kafka(
                        "ApiVersions",
                        &self.shared.broker,
                        None,
                        None,
                        response.map_or(KafkaCode::UNSUPPORTED_VERSION.0, |r| r.error_code),
                        None,
                    ))
                }
            }
        }
    }
}

/// A request queued by [`BrokerConnection::start_request_parts`]; [`wait`]
/// its answer (bounded by the request timeout, as `request_at`).
///
/// [`wait`]: PendingResponse::wait
/// What [`BrokerConnection::start_request_parts`] started: the wait for an
/// answer, or (no answer coming) the news that the frame is written.
pub(crate) enum StartedParts<R: ApiRequest> {
    Answered(PendingResponse<R>),
    Unanswered(oneshot::Receiver<Result<Bytes>>),
}

pub(crate) struct PendingResponse<R: ApiRequest> {
    conn: BrokerConnection,
    rx: oneshot::Receiver<Result<Bytes>>,
    correlation_id: i32,
    version: i16,
    _r: std::marker::PhantomData<fn() -> R>,
}

impl<R: ApiRequest> PendingResponse<R> {
    /// Waits for and decodes the answer. Dropping this future drops only the
    /// wait: the request stays written and its answer is discarded.
    pub(crate) async fn wait(self) -> Result<R::Response> {
        let conn = self.conn;
        let raw = conn
            .wait_response(R::NAME, self.version, self.correlation_id, self.rx)
            .await?;
        let answer = frame::decode_response::<R>(raw, self.version, self.correlation_id)
            .map_err(|e| conn.protocol_error(R::NAME, e))?;
        conn.note_throttle(answer.throttle_time_ms());
        Ok(answer)
    }
}

/// The task that owns the socket.
struct Driver {
    broker: BrokerRef,
    decoder: FrameDecoder,
    in_flight: InFlightMap,
    fatal: Arc<OnceLock<Error>>,
    shutdown: Arc<Notify>,
    /// Whether this connection authenticates (for the EOF hint).
    sasl: bool,
    /// See `Shared::muted_until`.
    muted_until: Arc<Mutex<Option<Instant>>>,
    /// The TLS connector, for TLS connections (to type TLS errors).
    tls: Option<TlsConnector>,
    /// `connections_max_idle` (zero: never).
    max_idle: Duration,
    last_activity: Arc<Mutex<Instant>>,
    metrics: RequestMetrics,
    /// `ClientConfig::debug`: log each request and answer.
    debug: bool,
    /// KIP-368 re-authentication.
    reauth: Reauth,
}

/// The re-authentication side of the driver. The writer decides when (the
/// first ordinary request at or after the deadline, like Java's client: an
/// idle connection is not kept busy), holds that request and every later one
/// back, and wakes `due`; the exchange then runs through the control queue
/// on a handle upgraded from `handle`. Requests already written are answered
/// first (the broker serves a connection's requests one at a time, in
/// order), so nothing is lost, reordered or sent twice.
struct Reauth {
    sasl: Option<SaslConfig>,
    due: Notify,
    handle: Weak<Shared>,
    count: Arc<AtomicU64>,
    metric: metrics::Counter,
}

/// When to re-authenticate a session of `lifetime`: at a random 85–95 % of
/// it (as Java's client does), `random` choosing the point.
pub(crate) fn reauth_delay(lifetime: Duration, random: u32) -> Duration {
    let fraction = 0.85 + 0.10 * (f64::from(random) / f64::from(u32::MAX));
    lifetime.mul_f64(fraction)
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // Without OS randomness, the middle of the range.
    match getrandom::fill(&mut b) {
        Ok(()) => u32::from_le_bytes(b),
        Err(_) => u32::MAX / 2,
    }
}

impl Driver {
    async fn run<R, W>(
        self,
        rd: R,
        wr: W,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let result = tokio::select! {
            r = self.read_loop(rd) => r,
            r = self.write_loop(wr, &mut commands, &mut control) => r,
            r = self.reauth_loop() => r,
            r = self.idle_watch() => r,
            _ = self.shutdown.notified() => Ok(()),
        };
        let error = match result {
            Err(e) => e,
            Ok(()) => Error::ConnectionClosed {
                broker: self.broker.clone(),
            },
        };
        if self.fatal.set(error).is_ok() {
            let e = self.fatal.get().expect("just set");
            if matches!(e, Error::ConnectionClosed { .. }) {
                tracing::debug!(broker = %self.broker, "connection closed");
            } else {
                tracing::warn!(broker = %self.broker, error = %e, "connection failed");
            }
        }
        let error = self.fatal.get().cloned().expect("set above");
        // Fail everything waiting, then everything still queued.
        let waiting: Vec<InFlight> = self
            .in_flight
            .lock()
            .expect("in-flight lock")
            .drain()
            .map(|(_, v)| v)
            .collect();
        self.metrics.abandoned(waiting.len());
        for w in waiting {
            let _ = w.reply.send(Err(error.clone()));
        }
        commands.close();
        while let Ok(c) = commands.try_recv() {
            if let Some(reply) = c.reply.or(c.written) {
                let _ = reply.send(Err(error.clone()));
            }
        }
        control.close();
        while let Ok(c) = control.try_recv() {
            if let Control::Frame(c) = c {
                if let Some(reply) = c.reply.or(c.written) {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }

    /// Runs each re-authentication the writer asks for; a failed one is the
    /// connection's fatal error.
    async fn reauth_loop(&self) -> Result<()> {
        let Some(sasl) = &self.reauth.sasl else {
            return std::future::pending().await;
        };
        loop {
            self.reauth.due.notified().await;
            let Some(shared) = self.reauth.handle.upgrade() else {
                // Every handle is gone: nobody waits for the held request.
                return Ok(());
            };
            let conn = BrokerConnection { shared };
            let started = Instant::now();
            let lifetime = super::sasl::authenticate(&conn, sasl, Route::Control).await?;
            self.reauth.count.fetch_add(1, Ordering::Relaxed);
            self.reauth.metric.increment(1);
            tracing::debug!(broker = %self.broker, mechanism = sasl.mechanism.name(), took = ?started.elapsed(),
                ?lifetime, "re-authenticated");
            conn.schedule_reauthentication(lifetime)?;
        }
    }

    /// Returns (closing the connection) once nothing has been in flight for
    /// `max_idle`.
    async fn idle_watch(&self) -> Result<()> {
        if self.max_idle.is_zero() {
            return std::future::pending().await;
        }
        loop {
            let last = *self.last_activity.lock().expect("activity lock");
            match last.checked_add(self.max_idle) {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => return std::future::pending().await,
            }
            let busy = !self.in_flight.lock().expect("in-flight lock").is_empty();
            let mut last = self.last_activity.lock().expect("activity lock");
            if busy {
                // A long request is activity: count idleness from now on.
                *last = Instant::now();
            } else if last.elapsed() >= self.max_idle {
                tracing::debug!(broker = %self.broker, idle = ?self.max_idle, "closing idle connection");
                return Ok(());
            }
        }
    }

    fn io_error(&self, e: std::io::Error) -> Error {
        if let Some(tls) = self.tls.as_ref().and_then(|t| t.io_error(&self.broker, &e)) {
            return tls;
        }
        Error::Io {
            broker: self.broker.clone(),
            source: Arc::new(e),
        }
    }

    async fn read_loop<R: AsyncRead + Unpin>(&self, mut rd: R) -> Result<()> {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let mut spares: Vec<BytesMut> = Vec::new();
        loop {
            loop {
                if let Ok(Some(len)) = self.decoder.frame_len(&buf) {
                    room(&mut buf, &mut spares, len.saturating_add(4));
                }
                let Some(frame) = self.decoder.decode_bytes(&mut buf).map_err(|e| {
                    if self.tls.is_none() && looks_like_tls_record(&buf) {
                        Error::Tls {
                            broker: self.broker.clone(),
                            kind: crate::error::TlsFailure::ProtocolMismatch,
                            reason: "the broker answered in TLS (it sent a TLS record, not a Kafka frame): this is \
                                 a TLS listener; set security.protocol to SSL or SASL_SSL"
                                .into(),
                        }
                    } else {
                        self.protocol("response frame", e)
                    }
                })?
                else {
                    break;
                };
                let correlation_id =
                    ResponseFrame::peek_correlation_id(&frame).map_err(|e| self.protocol("response header", e))?;
                let waiter = self.in_flight.lock().expect("in-flight lock").remove(&correlation_id);
                *self.last_activity.lock().expect("activity lock") = Instant::now();
                match waiter {
                    Some(w) => {
                        let latency = w.sent_at.elapsed();
                        self.metrics.answered(w.api, latency, frame.len());
                        if self.debug {
                            tracing::debug!(target: "clink_kafka::protocol", broker = %self.broker, api = w.api,
                                version = w.version, correlation_id, bytes = frame.len(), ?latency, "response");
                        }
                        let _ = w.reply.send(Ok(frame));
                    }
                    None => {
                        return Err(self.protocol(
                            "response header",
                            clink_kafka_wire::Error::Invalid {
                                context: "response correlation id",
                                message: format!("{correlation_id} matches no request in flight"),
                            },
                        ))
                    }
                }
            }
            if buf.capacity() - buf.len() < READ_CHUNK / 8 {
                let needed = buf.len() + READ_CHUNK;
                room(&mut buf, &mut spares, needed);
            }
            let n = rd.read_buf(&mut buf).await.map_err(|e| self.io_error(e))?;
            if n == 0 {
                return Err(self.disconnected());
            }
        }
    }

    async fn write_loop<W: AsyncWrite + Unpin>(
        &self,
        mut wr: W,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        control: &mut mpsc::UnboundedReceiver<Control>,
    ) -> Result<()> {
        let mut batch = Vec::with_capacity(WRITE_BATCH);
        let mut pending_written = Vec::new();
        // Re-authentication state: when it is due, whether ordinary
        // requests are held back, and the request that found it due.
        let mut reauth_at: Option<Instant> = None;
        let mut paused = false;
        let mut held: Option<Command> = None;
        loop {
            let first = tokio::select! {
                biased;
                c = control.recv() => match c {
                    None => break,
                    Some(Control::Frame(c)) => c,
                    Some(Control::Resume(at)) => {
                        paused = false;
                        reauth_at = at;
                        match held.take() {
                            Some(c) => c,
                            None => continue,
                        }
                    }
                },
                c = commands.recv(), if !paused => match c {
                    None => break,
                    Some(c) => {
                        if reauth_at.is_some_and(|at| Instant::now() >= at) {
                            reauth_at = None;
                            paused = true;
                            held = Some(c);
                            self.reauth.due.notify_one();
                            continue;
                        }
                        // KIP-219: held back while a throttle mutes the
                        // connection.
                        let muted = *self.muted_until.lock().expect("mute lock");
                        if let Some(until) = muted.filter(|u| *u > Instant::now()) {
                            tokio::time::sleep_until(until).await;
                        }
                        c
                    }
                },
            };
            batch.push(first);
            while !paused && batch.len() < WRITE_BATCH {
                match commands.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            // Register before writing, so a fast answer always finds its waiter.
            {
                let mut in_flight = self.in_flight.lock().expect("in-flight lock");
                let now = Instant::now();
                for c in batch.iter_mut() {
                    let answered = c.reply.is_some();
                    self.metrics.sent(c.api, c.frame.len(), answered);
                    if let Some(reply) = c.reply.take() {
                        in_flight.insert(
                            c.correlation_id,
                            InFlight {
                                api: c.api,
                                version: c.version,
                                reply,
                                sent_at: now,
                            },
                        );
                    }
                }
            }
            for c in batch.drain(..) {
                if self.debug {
                    tracing::debug!(target: "clink_kafka::protocol", broker = %self.broker, api = c.api,
                        version = c.version, correlation_id = c.correlation_id, bytes = c.frame.len(), "request");
                } else {
                    tracing::trace!(broker = %self.broker, api = c.api, version = c.version,
                        correlation_id = c.correlation_id, bytes = c.frame.len(), "write");
                }
                match &c.frame {
                    Frame::Whole(b) => wr.write_all(b).await,
                    Frame::Parts(p) => write_all_parts(&mut wr, p.parts()).await,
                }
                .map_err(|e| self.io_error(e))?;
                if let Some(written) = c.written {
                    pending_written.push(written);
                }
            }
            // A TLS stream buffers records until flushed (a no-op for TCP).
            wr.flush().await.map_err(|e| self.io_error(e))?;
            for w in pending_written.drain(..) {
                let _ = w.send(Ok(Bytes::new()));
            }
        }
        // Every handle is gone.
        let _ = wr.shutdown().await;
        Ok(())
    }

    fn protocol(&self, api: &'static str, e: clink_kafka_wire::Error) -> Error {
        Error::Protocol {
            broker: self.broker.clone(),
            api,
            source: Arc::new(e),
        }
    }

    fn disconnected(&self) -> Error {
        let in_flight = self.in_flight.lock().expect("in-flight lock");
        let hint = in_flight.iter().min_by_key(|(id, _)| **id).map(|(id, w)| {
            let mut h = format!(
                "while waiting for the {} v{} response (correlation id {id})",
                w.api, w.version
            );
            match &self.tls {
                None if !self.sasl => h.push_str(
                    "; if this is a SASL or TLS listener, configure SASL/TLS: such listeners close \
                         plaintext clients that do not authenticate",
                ),
                Some(tls) if !tls.has_client_cert() && !self.sasl => h.push_str(
                    "; if this listener requires a client certificate (mTLS), set \
                         ssl.certificate.location and ssl.key.location",
                ),
                _ => {}
            }
            h
        });
        Error::Disconnected {
            broker: self.broker.clone(),
            hint,
        }
    }
}

/// Whether `buf` starts with a TLS record header (alert or handshake,
/// version 3.x): what a TLS listener sends a plaintext client. As a Kafka
/// size prefix it would be over 350 MB, beyond any sane frame cap.
fn looks_like_tls_record(buf: &[u8]) -> bool {
    matches!(buf, [0x15 | 0x16, 0x03, 0x00..=0x04, ..])
}

#[cfg(test)]
mod tests {
    //! Scripted-peer tests: a local listener that answers with exact bytes.

    use bytes::BufMut;
    use clink_kafka_wire::kafka_protocol::messages::MetadataRequest;
    use tokio::net::TcpListener;

    use super::*;

    /// Reads one request frame; returns (api key, version, correlation id).
    async fn read_request(s: &mut TcpStream) -> (i16, i16, i32) {
        let len = s.read_i32().await.unwrap() as usize;
        let mut buf = vec![0u8; len];
        s.read_exact(&mut buf).await.unwrap();
        let key = i16::from_be_bytes([buf[0], buf[1]]);
        let version = i16::from_be_bytes([buf[2], buf[3]]);
        let corr = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        (key, version, corr)
    }

    async fn write_frame(s: &mut TcpStream, corr: i32, body: &[u8]) {
        let mut out = BytesMut::new();
        out.put_i32(4 + body.len() as i32);
        out.put_i32(corr);
        out.put_slice(body);
        s.write_all(&out).await.unwrap();
    }

    /// An ApiVersions v0 body listing `apis` with the given error code.
    fn api_versions_v0(code: i16, apis: &[(i16, i16, i16)]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(code);
        b.put_i32(apis.len() as i32);
        for (k, min, max) in apis {
            b.put_i16(*k);
            b.put_i16(*min);
            b.put_i16(*max);
        }
        b.to_vec()
    }

    /// An ApiVersions v3 body (flexible).
    fn api_versions_v3(apis: &[(i16, i16, i16)]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_u8(apis.len() as u8 + 1);
        for (k, min, max) in apis {
            b.put_i16(*k);
            b.put_i16(*min);
            b.put_i16(*max);
            b.put_u8(0);
        }
        b.put_i32(0); // throttle
        b.put_u8(0); // tagged fields
        b.to_vec()
    }

    /// The read loop's buffers: a frame still held keeps its buffer out of
    /// use; once every frame cut from a buffer is dropped, a later frame is
    /// read into that buffer again (no fresh allocation, so no fresh pages
    /// to fault in), and at most two spares are kept.
    #[test]
    fn receive_buffers_are_reused_once_their_frames_are_dropped() {
        let decoder = FrameDecoder::default();
        let big = 1 << 20;
        let frame: Vec<u8> = (big as i32)
            .to_be_bytes()
            .into_iter()
            .chain(std::iter::repeat_n(7, big))
            .collect();
        let (head, rest) = frame.split_at(16);
        let mut spares = Vec::new();
        let mut buf = BytesMut::new();
        // As the read loop: room for what arrives, then room for the whole
        // frame once its length is known; true when that allocated.
        let read = |buf: &mut BytesMut, spares: &mut Vec<BytesMut>| {
            let mut allocated = room(buf, spares, buf.len() + head.len());
            buf.extend_from_slice(head);
            let len = decoder.frame_len(buf).unwrap().unwrap();
            allocated |= room(buf, spares, len + 4);
            let at = buf.as_ptr();
            buf.extend_from_slice(rest);
            assert!(spares.len() <= 2, "{} spares", spares.len());
            (decoder.decode_bytes(buf).unwrap().unwrap(), at, allocated)
        };
        let (first, first_at, allocated) = read(&mut buf, &mut spares);
        assert!(allocated);
        let (second, second_at, allocated) = read(&mut buf, &mut spares);
        assert!(allocated, "the first frame is held: its buffer is not free");
        assert_ne!(second_at, first_at);
        // The first dropped, the second still held: the third frame lands
        // in the first's buffer.
        drop(first);
        let (third, third_at, allocated) = read(&mut buf, &mut spares);
        assert!(!allocated, "a free spare is used, nothing allocated");
        assert_eq!(third_at, first_at, "the first frame's buffer is reused");
        assert_eq!(&third[..], &second[..]);
        // Many frames held at once: still at most two spares (checked in
        // `read`), and every frame intact.
        let held: Vec<Bytes> = (0..6).map(|_| read(&mut buf, &mut spares).0).collect();
        assert!(held
            .iter()
            .chain([&second, &third])
            .all(|f| f.len() == big && f.iter().all(|&b| b == 7)));
    }

    fn config(timeout_ms: u64) -> ClientConfig {
        ClientConfig {
            request_timeout: Duration::from_millis(timeout_ms),
            ..ClientConfig::default()
        }
    }

    /// An ApiVersions v1/v2 body (throttle time after the list).
    fn api_versions_v2(apis: &[(i16, i16, i16)]) -> Vec<u8> {
        let mut b = api_versions_v0(0, apis);
        b.extend_from_slice(&0i32.to_be_bytes());
        b
    }

    /// A peer that answers each ApiVersions request in `script` with its
    /// body, asserting the version asked, then holds the connection open.
    fn api_versions_peer(listener: TcpListener, script: Vec<(i16, Vec<u8>)>) -> tokio::task::JoinHandle<TcpStream> {
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for (expected_version, body) in script {
                let (key, version, corr) = read_request(&mut s).await;
                assert_eq!((key, version), (18, expected_version), "ApiVersions version asked");
                write_frame(&mut s, corr, &body).await;
            }
            s
        })
    }

    #[tokio::test]
    async fn api_versions_retries_at_the_version_the_broker_lists() {
        // Kafka's answer to a too-new ApiVersions: a v0 body with its range.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = api_versions_peer(
            listener,
            vec![
                (3, api_versions_v0(35, &[(18, 0, 2)])),
                (2, api_versions_v2(&[(18, 0, 2), (3, 4, 9)])),
            ],
        );
        let conn = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap();
        let _s = peer.await.unwrap();
        assert_eq!(conn.version_for::<MetadataRequest>(None).unwrap(), 9);
        assert_eq!(conn.version_for::<MetadataRequest>(Some(7)).unwrap(), 7);
    }

    #[tokio::test]
    async fn api_versions_retries_after_librdkafka_mock_answer() {
        // librdkafka 2.12's mock cluster: error 35, a one-byte raw count,
        // untagged entries, a throttle time (bytes as it writes them).
        let mock_answer = vec![0, 35, 1, 0, 18, 0, 0, 0, 2, 0, 0, 0, 0];
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = api_versions_peer(
            listener,
            vec![(3, mock_answer), (2, api_versions_v2(&[(18, 0, 2), (0, 0, 10)]))],
        );
        let conn = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap();
        let _s = peer.await.unwrap();
        assert_eq!(
            conn.version_for::<clink_kafka_wire::kafka_protocol::messages::ProduceRequest>(None)
                .unwrap(),
            10
        );
    }

    #[tokio::test]
    async fn api_versions_falls_back_to_v0_without_a_listed_range() {
        // A pre-KIP-511 broker lists nothing with its error.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = api_versions_peer(
            listener,
            vec![
                (3, api_versions_v0(35, &[])),
                (0, api_versions_v0(0, &[(18, 0, 0), (3, 4, 9)])),
            ],
        );
        let conn = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap();
        let _s = peer.await.unwrap();
        assert_eq!(conn.version_for::<MetadataRequest>(None).unwrap(), 9);
    }

    #[tokio::test]
    async fn api_versions_unsupported_at_v0_is_an_error_naming_the_api() {
        // Refused at every version: two requests (v3, then v0), then an
        // error that names ApiVersions and the code; no third request.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = api_versions_peer(
            listener,
            vec![
                (3, api_versions_v0(35, &[(18, 0, 0)])),
                (0, api_versions_v0(35, &[(18, 0, 0)])),
            ],
        );
        let err = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap_err();
        let mut s = peer.await.unwrap();
        let text = err.to_string();
        assert!(matches!(err, Error::Kafka { api: "ApiVersions", .. }), "{text}");
        assert!(text.contains("UNSUPPORTED_VERSION"), "{text}");
        // The client hung up without asking again.
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
            .await
            .expect("the client did not close within 10 s")
            .unwrap();
        assert_eq!(n, 0, "no third ApiVersions request");
    }

    #[tokio::test]
    async fn api_versions_range_above_ours_is_an_error_naming_the_api() {
        // The broker lists only ApiVersions v3..: nothing below our v3 to retry.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = api_versions_peer(listener, vec![(3, api_versions_v0(35, &[(18, 3, 9)]))]);
        let err = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap_err();
        let _s = peer.await.unwrap();
        assert!(matches!(err, Error::Kafka { api: "ApiVersions", .. }), "{err}");
    }

    #[tokio::test]
    async fn timeout_is_typed_and_sticky() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (_, _, corr) = read_request(&mut s).await;
            write_frame(&mut s, corr, &api_versions_v3(&[(18, 0, 4), (3, 4, 13)])).await;
            // Read the Metadata request and never answer it.
            let _ = read_request(&mut s).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let conn = BrokerConnection::connect(&addr, Some(7), &config(300)).await.unwrap();
        let err = conn.request(&MetadataRequest::default()).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::RequestTimeout { api: "Metadata", .. }), "{text}");
        assert!(
            text.contains(&addr) && text.contains("node 7") && text.contains("Metadata"),
            "{text}"
        );
        assert!(conn.is_closed());
        // Sticky: the same error again, at once.
        let started = std::time::Instant::now();
        let again = conn.request(&MetadataRequest::default()).await.unwrap_err();
        assert_eq!(again.to_string(), text);
        assert!(started.elapsed() < Duration::from_millis(200));
        peer.abort();
    }

    #[tokio::test]
    async fn oversized_frame_and_eof_are_fatal() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (_, _, _) = read_request(&mut s).await;
            s.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let cfg = ClientConfig {
            max_frame_size: 1024,
            ..config(5000)
        };
        let err = BrokerConnection::connect(&addr, None, &cfg).await.unwrap_err();
        assert!(matches!(err, Error::Protocol { .. }), "{err}");
        assert!(err.to_string().contains("exceeds the maximum frame size"), "{err}");
        peer.abort();

        // A peer that closes while a request is in flight.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (_, _, corr) = read_request(&mut s).await;
            write_frame(&mut s, corr, &api_versions_v3(&[(18, 0, 4), (3, 4, 13)])).await;
            let _ = read_request(&mut s).await;
            drop(s);
        });
        let conn = BrokerConnection::connect(&addr, None, &config(5000)).await.unwrap();
        let err = conn.request(&MetadataRequest::default()).await.unwrap_err();
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        assert!(err.to_string().contains("Metadata v13"), "{err}");
        assert!(err.to_string().contains("SASL"), "{err}");
    }

    #[tokio::test]
    async fn idle_connection_is_closed_but_not_under_a_slow_request() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (_, _, corr) = read_request(&mut s).await;
            write_frame(&mut s, corr, &api_versions_v3(&[(18, 0, 4), (3, 4, 13)])).await;
            // A request answered long after the idle limit.
            let (key, _, corr) = read_request(&mut s).await;
            assert_eq!(key, 3);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let mut body = BytesMut::new();
            body.put_u8(0); // response header tagged fields
            body.put_i32(0); // throttle
            body.put_u8(1); // brokers: none
            body.put_u8(0); // cluster id: null
            body.put_i32(-1); // controller
            body.put_u8(1); // topics: none
            body.put_u8(0); // tagged fields
            write_frame(&mut s, corr, &body).await;
            // Then the client must hang up on its own.
            let mut rest = Vec::new();
            let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
                .await
                .expect("the idle connection was not closed within 10 s")
                .unwrap();
            assert_eq!(n, 0, "no further request expected");
        });
        let cfg = ClientConfig {
            connections_max_idle: Duration::from_millis(150),
            ..config(5000)
        };
        let conn = BrokerConnection::connect(&addr, None, &cfg).await.unwrap();
        conn.request_at(12, &MetadataRequest::default())
            .await
            .expect("a request slower than the idle limit still completes");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !conn.is_closed() {
            assert!(std::time::Instant::now() < deadline, "not closed within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(matches!(conn.fatal_error(), Some(Error::ConnectionClosed { .. })));
        peer.await.unwrap();
    }

    /// A SASL PLAIN peer whose sessions last `lifetime_ms`: it answers
    /// ApiVersions, the handshake and SaslAuthenticate v1, then Metadata v0
    /// requests (v4), checking what KIP-368 asks of a client: after a
    /// SaslHandshake comes SaslAuthenticate and nothing else, no ordinary
    /// request arrives after the session has ended, and (one client task
    /// queueing in order) correlation ids only grow. Returns the number of
    /// re-authentications and of Metadata requests answered.
    fn reauth_peer(listener: TcpListener, lifetime_ms: i64) -> tokio::task::JoinHandle<(u32, u32)> {
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (key, _, corr) = read_request(&mut s).await;
            assert_eq!(key, 18);
            write_frame(
                &mut s,
                corr,
                &api_versions_v3(&[(18, 0, 3), (17, 1, 1), (36, 1, 1), (3, 4, 4)]),
            )
            .await;
            let lifetime = Duration::from_millis(lifetime_ms as u64);
            let slack = Duration::from_millis(150);
            let mut session_end = None;
            let mut reauths = 0u32;
            let mut answered = 0u32;
            let mut last_metadata = 0i32;
            let handshake = {
                let mut b = BytesMut::new();
                b.put_i16(0);
                b.put_i32(1);
                b.put_i16(5);
                b.put_slice(b"PLAIN");
                b.to_vec()
            };
            let authenticated = {
                let mut b = BytesMut::new();
                b.put_i16(0);
                b.put_i16(-1); // no error message
                b.put_i32(0); // no auth bytes
                b.put_i64(lifetime_ms);
                b.to_vec()
            };
            loop {
                let len = match s.read_i32().await {
                    Ok(len) => len as usize,
                    Err(_) => return (reauths, answered),
                };
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).await.unwrap();
                let key = i16::from_be_bytes([buf[0], buf[1]]);
                let corr = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
                match key {
                    17 => {
                        write_frame(&mut s, corr, &handshake).await;
                        let (key, _, corr) = read_request(&mut s).await;
                        assert_eq!(key, 36, "SaslAuthenticate must follow SaslHandshake");
                        if session_end.is_some() {
                            reauths += 1;
                        }
                        session_end = Some(Instant::now() + lifetime);
                        write_frame(&mut s, corr, &authenticated).await;
                    }
                    3 => {
                        let end = session_end.expect("a request before authentication");
                        assert!(Instant::now() < end + slack, "a request after the session ended");
                        assert!(corr > last_metadata, "requests reordered: {corr} after {last_metadata}");
                        last_metadata = corr;
                        let mut body = BytesMut::new();
                        body.put_i32(0); // throttle
                        body.put_i32(0); // brokers
                        body.put_i16(-1); // cluster id
                        body.put_i32(-1); // controller
                        body.put_i32(0); // topics
                        write_frame(&mut s, corr, &body).await;
                        answered += 1;
                    }
                    other => panic!("unexpected API key {other}"),
                }
            }
        })
    }

    #[tokio::test]
    async fn reauthenticates_between_requests_without_losing_any() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = reauth_peer(listener, 400);
        let cfg = config(5000).with_sasl(
            clink_kafka_wire::sasl::SaslMechanism::Plain,
            "alice",
            clink_kafka_wire::secret::Secret::new("alice-secret"),
        );
        let conn = BrokerConnection::connect(&addr, None, &cfg).await.unwrap();
        let started = std::time::Instant::now();
        let mut sent = 0u32;
        while started.elapsed() < Duration::from_millis(2500) {
            // A burst queued in order, then its answers.
            let pending: Vec<_> = (0..20)
                .map(|_| conn.start_request(4, &MetadataRequest::default()).unwrap())
                .collect();
            sent += pending.len() as u32;
            for p in pending {
                p.wait().await.expect("no request may fail across a re-authentication");
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        let reauths = conn.reauthentications();
        drop(conn);
        let (peer_reauths, answered) = peer.await.unwrap();
        assert_eq!(answered, sent, "every request answered once");
        assert_eq!(u64::from(peer_reauths), reauths);
        assert!(reauths >= 4, "{reauths} re-authentications in 2.5 s of 400 ms sessions");
    }

    #[tokio::test]
    async fn idle_connection_reauthenticates_on_its_next_request() {
        // Java's rule: an idle connection is not kept busy; the first
        // request after the deadline re-authenticates first.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = reauth_peer(listener, 600);
        let cfg = config(5000).with_sasl(
            clink_kafka_wire::sasl::SaslMechanism::Plain,
            "alice",
            clink_kafka_wire::secret::Secret::new("alice-secret"),
        );
        let conn = BrokerConnection::connect(&addr, None, &cfg).await.unwrap();
        // Idle past the deadline but within the session (>= 95 % of 600 ms
        // would be too tight on a busy machine: wait 580 ms, under the slack).
        tokio::time::sleep(Duration::from_millis(580)).await;
        assert_eq!(conn.reauthentications(), 0, "no re-authentication while idle");
        conn.request_at(4, &MetadataRequest::default()).await.unwrap();
        assert_eq!(conn.reauthentications(), 1);
        drop(conn);
        let (reauths, answered) = peer.await.unwrap();
        assert_eq!((reauths, answered), (1, 1));
    }

    #[test]
    fn reauth_delay_is_85_to_95_percent_of_the_lifetime() {
        let l = Duration::from_secs(10);
        assert_eq!(reauth_delay(l, 0), Duration::from_millis(8500));
        assert_eq!(reauth_delay(l, u32::MAX), Duration::from_millis(9500));
        let mid = reauth_delay(l, u32::MAX / 2);
        assert!(
            mid > Duration::from_millis(8990) && mid < Duration::from_millis(9010),
            "{mid:?}"
        );
    }

    #[test]
    fn tls_records_are_recognised() {
        assert!(looks_like_tls_record(&[0x15, 0x03, 0x03, 0x00, 0x02]));
        assert!(looks_like_tls_record(&[0x16, 0x03, 0x01]));
        assert!(!looks_like_tls_record(&[0x00, 0x00, 0x01, 0x00]));
        assert!(!looks_like_tls_record(&[0x15]));
    }
}
