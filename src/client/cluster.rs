//! The cluster as the client sees it: bootstrap, a cached copy of Metadata
//! (brokers, topics, partitions, leaders), and one connection per broker id.
//!
//! Metadata is refreshed on demand: when a topic is not cached, and when a
//! caller reports `NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_OR_PARTITION` or
//! `LEADER_NOT_AVAILABLE` (see [`Cluster::refresh_topics`]). Lookups retry a
//! missing topic or leader with bounded backoff up to
//! [`ClientConfig::metadata_max_wait`](super::ClientConfig::metadata_max_wait).
//! See <https://kafka.apache.org/protocol#The_Messages_Metadata>.
//!
//! Locking: the metadata snapshot sits behind a `std` `RwLock` holding an
//! `Arc` (swapped whole, never held across an await); the connection map is
//! a `std` `Mutex` of per-broker async slots, so connecting to one broker
//! never blocks requests to another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use clink_kafka_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use clink_kafka_wire::kafka_protocol::messages::{MetadataRequest, TopicName};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::KafkaCode;

use super::backoff::Backoff;
use super::connection::BrokerConnection;
use super::ClientConfig;
use crate::error::{BrokerRef, Error, Result};

/// One broker from Metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    /// The broker's node id.
    pub node_id: i32,
    /// The host it advertises.
    pub host: String,
    /// The port it advertises.
    pub port: i32,
    /// Its `broker.rack`, if set.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition from Metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The partition index.
    pub partition: i32,
    /// The leader's node id, -1 when there is none.
    pub leader: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// The partition's error in the answer (`NONE` when it is fine).
    pub error: KafkaCode,
}

/// One topic from Metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic's name.
    pub name: String,
    /// Partitions sorted by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// A snapshot of the cluster's metadata.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    /// The cluster's id, if the broker gave one.
    pub cluster_id: Option<String>,
    /// The controller's node id.
    pub controller_id: i32,
    /// Every live broker, by node id.
    pub brokers: HashMap<i32, BrokerInfo>,
    /// Every topic asked about, by name.
    pub topics: HashMap<String, TopicMetadata>,
}

/// What a connection to a broker carries. Each role has connections of
/// its own, one per broker: a broker answers a connection's requests in
/// order, so a Produce must not queue behind a Fetch long-poll
/// (`max_wait`), nor a coordinator or admin request behind either — also
/// when a consumer and a producer share one [`Cluster`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConnectionRole {
    /// Produce requests (the producer's sender).
    Produce,
    /// Fetch and ListOffsets (the consumer).
    Fetch,
    /// Coordinator (group and transaction) and admin requests to a given
    /// broker.
    Control,
}

/// A handle to the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.inner.config.bootstrap)
            .finish()
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<BrokerConnection>>>;

struct Inner {
    config: ClientConfig,
    /// Built once from `config.tls` for TLS protocols.
    tls: Option<super::tls::TlsConnector>,
    metadata: RwLock<Arc<Metadata>>,
    connections: Mutex<HashMap<(i32, ConnectionRole), Slot>>,
    bootstrap: tokio::sync::Mutex<Option<BrokerConnection>>,
    /// Single-flight metadata refresh: one Metadata request in flight at a
    /// time, its answer shared by every caller that waited for it.
    refresh_gate: tokio::sync::Mutex<RefreshGate>,
    /// Completed refreshes (generation of `RefreshGate::last`).
    refresh_generation: AtomicU64,
    /// Metadata requests sent (see [`Cluster::metadata_refreshes`]).
    refreshes: AtomicU64,
}

/// A completed refresh: its generation, the topics it asked for, whether
/// it allowed auto-creation, and its outcome.
type Refreshed = (u64, Vec<String>, bool, Result<Arc<Metadata>>);

/// The state behind `Inner::refresh_gate`.
struct RefreshGate {
    /// The last completed refresh: its generation, the topics it asked
    /// for, whether it allowed auto-creation, and its outcome.
    last: Option<Refreshed>,
    /// No new refresh starts before this instant: one per backoff step
    /// (`retry_backoff` after a success, growing to `retry_backoff_max`
    /// while refreshes fail).
    next_allowed: Option<Instant>,
    /// Paces failing refreshes.
    backoff: Backoff,
}

/// How long a control request waits on the control connection before it
/// is also sent to another broker (see [`Cluster::control_request`]).
const HEDGE_AFTER: Duration = Duration::from_millis(500);

impl Cluster {
    /// Connects to the first reachable bootstrap broker and loads the broker
    /// list.
    pub async fn connect(config: ClientConfig) -> Result<Cluster> {
        if config.bootstrap.is_empty() {
            return Err(Error::Config {
                option: "bootstrap.servers",
                message: "no brokers given".into(),
            });
        }
        config.validate()?;
        let (retry_backoff, retry_backoff_max) = (config.retry_backoff, config.retry_backoff_max);
        let tls = if config.security_protocol.uses_tls() {
            Some(super::tls::TlsConnector::new(&config.tls)?)
        } else {
            None
        };
        let cluster = Cluster {
            inner: Arc::new(Inner {
                config,
                tls,
                metadata: RwLock::new(Arc::new(Metadata::default())),
                connections: Mutex::new(HashMap::new()),
                bootstrap: tokio::sync::Mutex::new(None),
                refresh_gate: tokio::sync::Mutex::new(RefreshGate {
                    last: None,
                    next_allowed: None,
                    backoff: Backoff::new(retry_backoff, retry_backoff_max),
                }),
                refresh_generation: AtomicU64::new(0),
                refreshes: AtomicU64::new(0),
            }),
        };
        cluster.bootstrap().await?;
        Ok(cluster)
    }

    /// The first metadata load: passes over the bootstrap list (and the
    /// known brokers) with backoff until one answers or
    /// `bootstrap_timeout` runs out (`Duration::ZERO`: one pass).
    /// Authentication and TLS failures end it at once.
    async fn bootstrap(&self) -> Result<()> {
        let deadline = self.inner.config.bootstrap_timeout;
        let started = Instant::now();
        let mut backoff = self.backoff();
        loop {
            match self.refresh_topics(&[]).await {
                Ok(_) => return Ok(()),
                Err(e)
                    if !deadline.is_zero()
                        && (e.is_connection_error() || matches!(e, Error::NoBrokerAvailable { .. })) =>
                {
                    let waited = started.elapsed();
                    let delay = backoff.next_delay();
                    if waited + delay >= deadline {
                        return Err(Error::Timeout {
                            operation: format!(
                                "bootstrap: no broker of {} answered (bootstrap_timeout, \
                                 `default.api.timeout.ms`; zero makes a single pass); last error: {e}",
                                self.inner.config.bootstrap.join(",")
                            ),
                            timeout: deadline,
                        });
                    }
                    tracing::info!(waited = ?waited, error = %e, "no bootstrap broker reachable yet; retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// How many Metadata requests this cluster has sent (each refresh,
    /// shared by every caller waiting on it, counts once).
    pub fn metadata_refreshes(&self) -> u64 {
        self.inner.refreshes.load(Ordering::Relaxed)
    }

    /// The configuration this cluster was opened with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The current metadata snapshot.
    pub fn metadata(&self) -> Arc<Metadata> {
        self.inner.metadata.read().expect("metadata lock").clone()
    }

    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.inner.config.retry_backoff, self.inner.config.retry_backoff_max)
    }

    /// The cluster's control connection, for requests that any broker can
    /// answer: Metadata, CreateTopics, InitProducerId, FindCoordinator. It
    /// is a connection of its own, never one that carries Produce or Fetch:
    /// a broker answers a connection's requests in order, so a Metadata
    /// request queued behind an acks=all Produce waits as long as that
    /// Produce does (until a dead follower leaves the ISR, ~9 s), exactly
    /// when the client needs to learn where a leader went. Reopened to a
    /// known broker (then the bootstrap list) when it closes.
    pub async fn any_broker(&self) -> Result<BrokerConnection> {
        let mut guard = self.inner.bootstrap.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let mut last = None;
        // Known brokers first (they may have moved), then the bootstrap list.
        let mut addrs: Vec<(Option<i32>, String)> = self
            .metadata()
            .brokers
            .values()
            .map(|b| (Some(b.node_id), b.addr()))
            .collect();
        addrs.sort();
        addrs.extend(self.inner.config.bootstrap.iter().map(|a| (None, a.clone())));
        for (node_id, addr) in addrs {
            match BrokerConnection::connect_with(&addr, node_id, &self.inner.config, self.inner.tls.as_ref()).await {
                Ok(c) => {
                    *guard = Some(c.clone());
                    return Ok(c);
                }
                // Authentication failures are not the broker's availability:
                // report them as they are, at once.
                // Nor are TLS failures (trust, names, client certificates).
                Err(e @ (Error::Authentication { .. } | Error::Tls { .. })) => return Err(e),
                Err(e) => {
                    tracing::debug!(broker = %addr, error = %e, "bootstrap broker unreachable");
                    last = Some(e);
                }
            }
        }
        Err(Error::NoBrokerAvailable {
            brokers: self.inner.config.bootstrap.join(","),
            last: Box::new(last.unwrap_or(Error::Config {
                option: "bootstrap.servers",
                message: "no brokers given".into(),
            })),
        })
    }

    /// Runs the control request `call` on the control connection
    /// ([`Cluster::any_broker`]); with no answer after [`HEDGE_AFTER`],
    /// runs it again on a live connection to another broker and takes
    /// whichever answer comes first (a failed hedge leaves the primary to
    /// finish). The control connection may lead to a broker that is cut off
    /// (a request there waits out `request_timeout`, then a reconnect may
    /// wait out `connect_timeout`): Metadata, FindCoordinator, a
    /// non-transactional InitProducerId, DescribeCluster and the admin's
    /// Metadata reads must not wait for it. Only for requests that any
    /// broker answers and that are safe to send twice (not CreateTopics,
    /// DeleteTopics, CreatePartitions, nor anything transactional).
    ///
    /// Returns the connection that answered with its answer.
    ///
    /// Cancel safety: cancel safe (dropping it drops both requests; each
    /// is safe to repeat).
    pub(crate) async fn control_request<T, F, Fut>(&self, call: F) -> Result<(BrokerConnection, T)>
    where
        F: Fn(BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let conn = self.any_broker().await?;
        let (answered, result) = self.hedged(&conn, &call).await;
        result.map(|t| (answered, t))
    }

    async fn hedged<T, F, Fut>(&self, conn: &BrokerConnection, call: &F) -> (BrokerConnection, Result<T>)
    where
        F: Fn(BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let primary = call(conn.clone());
        tokio::pin!(primary);
        tokio::select! {
            r = &mut primary => return (conn.clone(), r),
            _ = tokio::time::sleep(HEDGE_AFTER) => {}
        }
        let other = {
            let slots: Vec<Slot> = self
                .inner
                .connections
                .lock()
                .expect("connections lock")
                .values()
                .cloned()
                .collect();
            slots.into_iter().find_map(|s| {
                s.try_lock().ok().and_then(|guard| {
                    guard
                        .as_ref()
                        .filter(|c| !c.is_closed() && c.broker().addr != conn.broker().addr)
                        .cloned()
                })
            })
        };
        let Some(other) = other else {
            return (conn.clone(), primary.await);
        };
        tracing::debug!(control = %conn.broker(), other = %other.broker(),
            "control request: no answer on the control connection yet; asking another broker too");
        let hedge = call(other.clone());
        tokio::pin!(hedge);
        tokio::select! {
            r = &mut primary => (conn.clone(), r),
            r = &mut hedge => match r {
                Ok(answer) => (other, Ok(answer)),
                Err(_) => (conn.clone(), primary.await),
            },
        }
    }

    /// The [`ConnectionRole::Control`] connection to broker `node_id`
    /// (coordinator and admin requests), opening (or reopening) it as
    /// needed; see [`Cluster::broker_for`].
    pub async fn broker(&self, node_id: i32) -> Result<BrokerConnection> {
        self.broker_for(node_id, ConnectionRole::Control).await
    }

    /// The connection to broker `node_id` for `role`, opening (or
    /// reopening) it as needed. Each role has its own connection per
    /// broker, so requests of one role never wait behind another's.
    ///
    /// Cancel safety: cancel safe (a connection opened by a dropped call
    /// is either stored in its slot or dropped).
    pub async fn broker_for(&self, node_id: i32, role: ConnectionRole) -> Result<BrokerConnection> {
        let slot = self
            .inner
            .connections
            .lock()
            .expect("connections lock")
            .entry((node_id, role))
            .or_default()
            .clone();
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let addr = match self.metadata().brokers.get(&node_id) {
            Some(b) => b.addr(),
            None => {
                self.refresh_topics(&[]).await?;
                self.metadata()
                    .brokers
                    .get(&node_id)
                    .map(BrokerInfo::addr)
                    .ok_or_else(|| Error::Config {
                        option: "metadata",
                        message: format!("broker node {node_id} is not in the cluster metadata"),
                    })?
            }
        };
        let conn =
            BrokerConnection::connect_with(&addr, Some(node_id), &self.inner.config, self.inner.tls.as_ref()).await?;
        *guard = Some(conn.clone());
        Ok(conn)
    }

    /// Fetches metadata for `topics` (none: just the brokers) and merges it
    /// into the cache. Topics the broker does not know are dropped from it.
    /// Never asks the broker to create a topic.
    pub async fn refresh_topics(&self, topics: &[&str]) -> Result<Arc<Metadata>> {
        self.refresh(topics, false).await
    }

    /// [`Cluster::refresh_topics`], with Metadata's
    /// `allow_auto_topic_creation` (v4+) as given: a broker whose
    /// `auto.create.topics.enable` is on then creates a missing topic (and
    /// answers `LEADER_NOT_AVAILABLE` or `UNKNOWN_TOPIC_OR_PARTITION` until
    /// it is ready).
    ///
    /// Single flight: one refresh at a time; a caller that waited while a
    /// refresh covering its topics completed takes that refresh's outcome
    /// instead of sending another. Refreshes are paced: at most one per
    /// backoff step (`retry_backoff`, growing up to `retry_backoff_max`
    /// while they fail), so an outage with many waiters costs one Metadata
    /// request per step, not one per waiter.
    ///
    /// Cancel safety: cancel safe (the gate is released on drop; the cache
    /// is swapped whole).
    async fn refresh(&self, topics: &[&str], allow_auto_create: bool) -> Result<Arc<Metadata>> {
        let ticket = self.inner.refresh_generation.load(Ordering::Acquire);
        let mut gate = self.inner.refresh_gate.lock().await;
        if let Some((generation, asked, auto, outcome)) = &gate.last {
            let covers = topics.iter().all(|t| asked.iter().any(|a| a == t)) && (*auto || !allow_auto_create);
            if *generation > ticket && covers {
                return outcome.clone();
            }
        }
        if let Some(at) = gate.next_allowed {
            tokio::time::sleep_until(at.into()).await;
        }
        let started = Instant::now();
        self.inner.refreshes.fetch_add(1, Ordering::Relaxed);
        let outcome = self.refresh_once(topics, allow_auto_create).await;
        let step = match &outcome {
            Ok(_) => {
                gate.backoff = self.backoff();
                self.inner.config.retry_backoff
            }
            Err(_) => gate.backoff.next_delay(),
        };
        gate.next_allowed = Some(started + step);
        let generation = self.inner.refresh_generation.fetch_add(1, Ordering::AcqRel) + 1;
        gate.last = Some((
            generation,
            topics.iter().map(|t| (*t).to_owned()).collect(),
            allow_auto_create,
            outcome.clone(),
        ));
        outcome
    }

    async fn refresh_once(&self, topics: &[&str], allow_auto_create: bool) -> Result<Arc<Metadata>> {
        let mut request = MetadataRequest::default();
        request.topics = Some(
            topics
                .iter()
                .map(|t| {
                    let mut r = MetadataRequestTopic::default();
                    r.name = Some(TopicName(StrBytes::from_string((*t).to_owned())));
                    r
                })
                .collect(),
        );
        request.allow_auto_topic_creation = allow_auto_create;
        let mut attempt = 0;
        let (broker, response) = loop {
            let conn = self.any_broker().await?;
            let call = |c: BrokerConnection| {
                let request = &request;
                async move { c.request(request).await }
            };
            match self.hedged(&conn, &call).await {
                (answered, Ok(r)) => break (answered.broker().clone(), r),
                // One retry on a fresh connection for a transport failure.
                (_, Err(e)) if e.is_connection_error() && attempt == 0 => {
                    attempt += 1;
                    tracing::debug!(error = %e, "metadata request failed; retrying on a new connection");
                }
                (_, Err(e)) => return Err(e),
            }
        };
        if response.error_code != 0 {
            return Err(Error::kafka("Metadata", &broker, None, None, response.error_code, None));
        }
        let mut lock = self.inner.metadata.write().expect("metadata lock");
        let old = lock.clone();
        let mut md: Metadata = (*old).clone();
        md.cluster_id = response.cluster_id.as_ref().map(|s| s.to_string());
        md.controller_id = response.controller_id.0;
        md.brokers = response
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerInfo {
                        node_id: b.node_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: b.rack.as_ref().map(|r| r.to_string()),
                    },
                )
            })
            .collect();
        // A topic-level error: unknown or retriable (LEADER_NOT_AVAILABLE …)
        // leaves the topic out of the cache, so a lookup waits for it; any
        // other (TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION …) is
        // the caller's error, naming Metadata and the topic, after the rest
        // of the answer is merged.
        let mut refused: Option<(String, i16)> = None;
        for t in &response.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                md.topics.remove(&name);
                let code = KafkaCode(t.error_code);
                if code != KafkaCode::UNKNOWN_TOPIC_OR_PARTITION && !code.is_retriable() && refused.is_none() {
                    refused = Some((name, t.error_code));
                }
                continue;
            }
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    error: KafkaCode(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            if partitions.is_empty() {
                // LEADER_NOT_AVAILABLE right after creation: not usable yet.
                md.topics.remove(&name);
                continue;
            }
            md.topics.insert(name.clone(), TopicMetadata { name, partitions });
        }
        let md = Arc::new(md);
        *lock = md.clone();
        drop(lock);
        if self.inner.config.debug {
            log_metadata_changes(&broker, &old, &md);
        }
        if let Some((topic, code)) = refused {
            return Err(Error::kafka("Metadata", &broker, Some(&topic), None, code, None));
        }
        Ok(md)
    }

    /// The topic's metadata, from the cache or fetched; retries while the
    /// topic is unknown, up to `metadata_max_wait`. Never creates the topic.
    ///
    /// Cancel safety: this method is cancel safe (it only swaps the metadata
    /// cache whole).
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata> {
        self.lookup(topic, false).await
    }

    /// [`Cluster::topic`] for a producer: each Metadata request it sends
    /// sets `allow_auto_topic_creation` to `allow_auto_create`, as the
    /// Java producer does with `allow.auto.create.topics` (default true),
    /// so a broker with `auto.create.topics.enable` creates a missing
    /// topic; retries while it is being created, up to `metadata_max_wait`.
    ///
    /// Cancel safety: this method is cancel safe (a dropped call may have
    /// made the broker create the topic, which a retry finds).
    pub async fn topic_for_produce(&self, topic: &str, allow_auto_create: bool) -> Result<TopicMetadata> {
        self.lookup(topic, allow_auto_create).await
    }

    async fn lookup(&self, topic: &str, allow_auto_create: bool) -> Result<TopicMetadata> {
        if let Some(t) = self.metadata().topics.get(topic) {
            return Ok(t.clone());
        }
        let started = Instant::now();
        let mut backoff = self.backoff();
        loop {
            let md = self.refresh(&[topic], allow_auto_create).await?;
            if let Some(t) = md.topics.get(topic) {
                return Ok(t.clone());
            }
            let waited = started.elapsed();
            if waited >= self.inner.config.metadata_max_wait {
                return Err(Error::UnknownTopic {
                    topic: topic.to_owned(),
                    waited,
                });
            }
            backoff.sleep().await;
        }
    }

    /// The number of partitions of `topic`.
    pub async fn partition_count(&self, topic: &str) -> Result<usize> {
        Ok(self.topic(topic).await?.partitions.len())
    }

    /// The leader of `topic[partition]` and a connection to it. Retries a
    /// missing or unreachable leader (refreshing the metadata, in case
    /// leadership moved) with bounded backoff, up to `metadata_max_wait`.
    ///
    /// Cancel safety: this method is cancel safe: it only refreshes the
    /// metadata cache (swapped whole) and opens connections into their slots.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<(i32, BrokerConnection)> {
        let started = Instant::now();
        let mut backoff = self.backoff();
        let mut refreshed = false;
        let mut leader_rechecked = false;
        loop {
            let t = self.topic(topic).await?;
            let Some(p) = t.partitions.iter().find(|p| p.partition == partition) else {
                if !refreshed {
                    refreshed = true;
                    self.refresh_topics(&[topic]).await?;
                    continue;
                }
                return Err(Error::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    partitions: t.partitions.len(),
                });
            };
            // A leader missing from the broker list (a broker that is down
            // or restarting) counts as no leader yet, as in the Java client.
            let listed = self.metadata().brokers.contains_key(&p.leader);
            if p.leader >= 0 && listed {
                match self.broker_for(p.leader, ConnectionRole::Fetch).await {
                    Ok(conn) => return Ok((p.leader, conn)),
                    // The cached leader is unreachable: leadership may have
                    // moved (failover), or is about to: a killed broker
                    // stays leader in the metadata until the controller
                    // fences it (broker.session.timeout.ms, 9 s by default).
                    // Look again at once, then with backoff, up to
                    // metadata_max_wait, as for a missing leader.
                    Err(e) if e.is_connection_error() => {
                        if started.elapsed() >= self.inner.config.metadata_max_wait {
                            return Err(e);
                        }
                        tracing::debug!(topic, partition, leader = p.leader, error = %e,
                            "leader unreachable; refreshing metadata");
                        if leader_rechecked {
                            backoff.sleep().await;
                        }
                        leader_rechecked = true;
                        self.refresh_topics(&[topic]).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let waited = started.elapsed();
            if waited >= self.inner.config.metadata_max_wait {
                return Err(Error::LeaderNotAvailable {
                    topic: topic.to_owned(),
                    partition,
                    waited,
                    code: if p.error.is_ok() {
                        KafkaCode::LEADER_NOT_AVAILABLE
                    } else {
                        p.error
                    },
                });
            }
            backoff.sleep().await;
            self.refresh_topics(&[topic]).await?;
        }
    }

    /// Waits until `topic` has `partitions` partitions, each with a leader
    /// (used after CreateTopics), or until `timeout`.
    pub async fn wait_for_topic(&self, topic: &str, partitions: usize, timeout: Duration) -> Result<TopicMetadata> {
        let started = Instant::now();
        let mut backoff = self.backoff();
        loop {
            let md = self.refresh_topics(&[topic]).await?;
            if let Some(t) = md.topics.get(topic) {
                if t.partitions.len() >= partitions && t.partitions.iter().all(|p| p.leader >= 0) {
                    return Ok(t.clone());
                }
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    operation: format!("waiting for topic {topic:?} to appear in metadata"),
                    timeout,
                });
            }
            backoff.sleep().await;
        }
    }

    /// Waits until `topic` is gone from metadata, or until `timeout`.
    pub async fn wait_for_topic_gone(&self, topic: &str, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        let mut backoff = self.backoff();
        loop {
            let md = self.refresh_topics(&[topic]).await?;
            if !md.topics.contains_key(topic) {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    operation: format!("waiting for topic {topic:?} to disappear from metadata"),
                    timeout,
                });
            }
            backoff.sleep().await;
        }
    }
}

/// Whether `code` means the cached leadership or topic list is stale.
pub(crate) fn needs_metadata_refresh(code: KafkaCode) -> bool {
    matches!(
        code,
        KafkaCode::NOT_LEADER_OR_FOLLOWER
            | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
            | KafkaCode::LEADER_NOT_AVAILABLE
            | KafkaCode::FENCED_LEADER_EPOCH
            | KafkaCode::UNKNOWN_LEADER_EPOCH
    )
}

/// `ClientConfig::debug`: one line per topic whose partitions, leaders or
/// leader epochs changed, and per topic that left the cache.
fn log_metadata_changes(broker: &BrokerRef, old: &Metadata, new: &Metadata) {
    let leaders = |t: &TopicMetadata| -> Vec<(i32, i32, i32)> {
        t.partitions
            .iter()
            .map(|p| (p.partition, p.leader, p.leader_epoch))
            .collect()
    };
    for (name, t) in &new.topics {
        let now = leaders(t);
        if old.topics.get(name).map(leaders).as_ref() != Some(&now) {
            let described: Vec<String> = now.iter().map(|(p, l, e)| format!("{p}:leader={l}@{e}")).collect();
            tracing::debug!(target: "clink_kafka::protocol", %broker, topic = %name,
                partitions = %described.join(" "), "metadata changed");
        }
    }
    for name in old.topics.keys().filter(|n| !new.topics.contains_key(*n)) {
        tracing::debug!(target: "clink_kafka::protocol", %broker, topic = %name, "metadata: topic no longer usable");
    }
}
