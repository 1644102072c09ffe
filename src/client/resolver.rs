//! In-doubt resolution: finishing a transaction whose producer died between
//! "checkpoint complete" and "commit", over the wire, from another process.
//!
//! A [`ResumeHandle`] is what a transactional sink stages at each barrier:
//! the transactional id and the producer id/epoch the open transaction runs
//! under ([`super::txn::TransactionalProducer::identity`]), plus the
//! transaction protocol. It never holds a credential; it prints as one short
//! line and parses back.
//!
//! [`Resolver::resolve`] runs FindCoordinator(transaction) then EndTxn with
//! the handle's identity — EndTxn v5 for a transaction.version 2 handle
//! (KIP-890), v≤4 for version 1 — and never InitProducerId (that would fence
//! the very transaction it is asked to finish). Its [`Verdict`]:
//!
//! - `Committed`: the broker acknowledged the commit, including the
//!   idempotent answer to a commit that had already landed (TV1: NONE in
//!   CompleteCommit with the same epoch; TV2 v5: NONE for the epoch one below
//!   the stored one). A fenced, epoch or state answer is disambiguated with
//!   DescribeTransactions (KIP-664): CompleteCommit or PrepareCommit under the
//!   handle's producer id (and the epoch the commit leaves) means it landed.
//! - `NotCommitted(reason)`: a definite answer that the records are not
//!   (and will not be) committed by this handle.
//! - `Unreachable`: transport failures only, after bounded retries in place.
//!   Never reported as NotCommitted: a caller must not fall back on it.
//!
//! The coordinator's memory is short: a fence, the transaction timeout's
//! epoch bump or a successor overwrites the transaction, and a commit that
//! had landed then reads as fenced. [`Resolver::resolve_proven`] asks the
//! log before it lets a commit be judged not committed: the transaction's
//! COMMIT or ABORT marker in the partitions it wrote, from the first
//! offsets its delivery reports gave ([`super::log_proof`]). A log that
//! proves neither is `Unreachable` (hold), never a guess.
//!
//! Credentials come from the resolving process's environment
//! ([`Resolver::from_env`]); an unknown SASL mechanism or an unusable CA is
//! refused before any connection, and there is no fallback to plaintext or
//! to another mechanism: with a CA set, every connection is TLS.

use std::time::{Duration, Instant};

use clink_kafka_wire::kafka_protocol::messages::EndTxnRequest;
use clink_kafka_wire::sasl::SaslMechanism;
use clink_kafka_wire::secret::Secret;
use clink_kafka_wire::KafkaCode;

use super::admin::Admin;
use super::cluster::Cluster;
use super::producer::ProducerIdentity;
use super::tls::{TlsConfig, TlsConnector};
use super::txn::{broker_transaction_version, end_txn, TransactionVersion, TxnCoordinator};
use super::txn_admin::{describe_at, is_not_found, TransactionDescription, TransactionState};
use super::ClientConfig;
use crate::error::{Error, Result, TlsFailure};

/// The identity of one (possibly orphaned) transaction. Holds no secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResumeHandle {
    /// The transactional id.
    pub transactional_id: String,
    /// -1 when no identity was captured.
    pub producer_id: i64,
    /// -1 when no identity was captured.
    pub producer_epoch: i16,
    /// The transaction protocol it ran under.
    pub transaction_version: TransactionVersion,
}

const HANDLE_PREFIX: &str = "clink-txn-handle/1";

impl ResumeHandle {
    /// Whether a producer identity was captured at all.
    pub fn has_identity(&self) -> bool {
        self.producer_id >= 0 && self.producer_epoch >= 0
    }

    /// The handle as a small JSON object.
    pub fn to_json(&self) -> String {
        let mut id = String::with_capacity(self.transactional_id.len() + 2);
        for c in self.transactional_id.chars() {
            match c {
                '"' => id.push_str("\\\""),
                '\\' => id.push_str("\\\\"),
                c if (c as u32) < 0x20 => id.push_str(&format!("\\u{:04x}", c as u32)),
                c => id.push(c),
            }
        }
        format!(
            r#"{{"transactional_id":"{id}","producer_id":{},"producer_epoch":{},"transaction_version":{}}}"#,
            self.producer_id,
            self.producer_epoch,
            self.transaction_version.number()
        )
    }
}

/// `clink-txn-handle/1 tv=2 pid=4001 epoch=7 id=<percent-encoded id>`: one
/// line, no spaces inside a field.
impl std::fmt::Display for ResumeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{HANDLE_PREFIX} tv={} pid={} epoch={} id=",
            self.transaction_version.number(),
            self.producer_id,
            self.producer_epoch
        )?;
        for b in self.transactional_id.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for ResumeHandle {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |message: String| Error::Config {
            option: "resume handle",
            message,
        };
        let mut fields = s.split_whitespace();
        if fields.next() != Some(HANDLE_PREFIX) {
            return Err(bad(format!("does not start with {HANDLE_PREFIX:?}")));
        }
        let (mut tv, mut pid, mut epoch, mut id) = (None, None, None, None);
        for field in fields {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| bad(format!("field {field:?} is not key=value")))?;
            match k {
                "tv" => tv = Some(v.parse::<TransactionVersion>()?),
                "pid" => pid = Some(v.parse::<i64>().map_err(|e| bad(format!("pid {v:?}: {e}")))?),
                "epoch" => epoch = Some(v.parse::<i16>().map_err(|e| bad(format!("epoch {v:?}: {e}")))?),
                "id" => {
                    id = Some(percent_decode(v).ok_or_else(|| bad(format!("id {v:?} is not percent-encoded UTF-8")))?)
                }
                other => return Err(bad(format!("unknown field {other:?}"))),
            }
        }
        Ok(ResumeHandle {
            transaction_version: tv.ok_or_else(|| bad("no tv= field".into()))?,
            producer_id: pid.ok_or_else(|| bad("no pid= field".into()))?,
            producer_epoch: epoch.ok_or_else(|| bad("no epoch= field".into()))?,
            transactional_id: id.ok_or_else(|| bad("no id= field".into()))?,
        })
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What to do with the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Commit the transaction (EndTxn commit).
    Commit,
    /// Abort it (EndTxn abort).
    Abort,
}

/// Why a transaction is not committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCommittedReason {
    /// A newer producer of the id bumped the epoch (InitProducerId) or the
    /// id now runs under another producer id.
    Fenced,
    /// The coordinator aborted it after `transaction.timeout.ms`.
    TimedOut,
    /// It was aborted (by this resolver when asked to, or before).
    Aborted,
    /// The coordinator does not know the transactional id (or the producer
    /// id mapping).
    UnknownId,
    /// The broker cannot speak what the handle needs (e.g. EndTxn v5 for a
    /// transaction.version 2 handle).
    UnsupportedBroker,
    /// SASL authentication or transactional-id authorization was refused.
    AuthenticationRefused,
    /// The handle carries no producer identity.
    NoIdentity,
    /// Any other definite refusal from the broker (its code).
    Refused(String),
}

impl NotCommittedReason {
    /// A short stable name, for logs and the CLI.
    pub fn name(&self) -> &str {
        match self {
            NotCommittedReason::Fenced => "fenced",
            NotCommittedReason::TimedOut => "timed-out",
            NotCommittedReason::Aborted => "aborted",
            NotCommittedReason::UnknownId => "unknown-id",
            NotCommittedReason::UnsupportedBroker => "unsupported-broker",
            NotCommittedReason::AuthenticationRefused => "authentication-refused",
            NotCommittedReason::NoIdentity => "no-identity",
            NotCommittedReason::Refused(_) => "refused",
        }
    }
}

/// How a commit was proven.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitProof {
    /// EndTxn answered NONE.
    Acknowledged,
    /// EndTxn answered this code, and DescribeTransactions then showed the
    /// commit under the handle's producer id.
    Described {
        /// What EndTxn answered.
        answer: KafkaCode,
        /// The state DescribeTransactions showed.
        state: TransactionState,
    },
    /// The coordinator no longer knew (fenced, timed out, …), and the log
    /// showed the transaction's COMMIT marker ([`Resolver::resolve_proven`]).
    LogMarker {
        /// What the coordinator's answer was judged.
        answer: String,
        /// The partition whose log proved it.
        partition: i32,
        /// The marker's offset.
        offset: i64,
    },
}

/// The outcome of [`Resolver::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The transaction is committed (by this call or before it).
    Committed {
        /// How the commit was proven.
        proof: CommitProof,
    },
    /// A definite answer: these records are not, and will not be,
    /// committed by this handle.
    NotCommitted {
        /// Why.
        reason: NotCommittedReason,
        /// The coordinator's answer, for the log.
        detail: String,
    },
    /// Every attempt failed in transport, or (from
    /// [`Resolver::resolve_proven`]) the coordinator no longer knew and the
    /// log proved neither end; nothing is known.
    Unreachable {
        /// The last transport failure.
        detail: String,
    },
}

impl Verdict {
    /// Whether the transaction is committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, Verdict::Committed { .. })
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Committed {
                proof: CommitProof::Acknowledged,
            } => write!(f, "committed (EndTxn acknowledged)"),
            Verdict::Committed {
                proof: CommitProof::Described { answer, state },
            } => write!(
                f,
                "committed (EndTxn answered {answer}; DescribeTransactions shows {state})"
            ),
            Verdict::Committed {
                proof:
                    CommitProof::LogMarker {
                        answer,
                        partition,
                        offset,
                    },
            } => write!(
                f,
                "committed (the coordinator answered {answer}; partition {partition}'s log holds its COMMIT marker at \
                 offset {offset})"
            ),
            Verdict::NotCommitted { reason, detail } => write!(f, "not committed: {} ({detail})", reason.name()),
            Verdict::Unreachable { detail } => write!(f, "unreachable: {detail}"),
        }
    }
}

/// Finishes transactions named by [`ResumeHandle`]s.
#[derive(Clone, Debug)]
pub struct Resolver {
    config: ClientConfig,
    /// Bound on retrying transport failures before answering Unreachable.
    unreachable_after: Duration,
    /// Bound on retrying the coordinator's transient answers.
    coordinator_bound: Duration,
}

/// Environment variables [`Resolver::from_env`] reads: the SASL mechanism.
pub const ENV_SASL_MECHANISM: &str = "CLINK_KAFKA_RESUME_SASL_MECHANISM";
/// The SASL username.
pub const ENV_SASL_USERNAME: &str = "CLINK_KAFKA_RESUME_SASL_USERNAME";
/// The SASL password (never logged).
pub const ENV_SASL_PASSWORD: &str = "CLINK_KAFKA_RESUME_SASL_PASSWORD";
/// A PEM CA file: with it every connection is TLS.
pub const ENV_TLS_CA: &str = "CLINK_KAFKA_RESUME_TLS_CA";
/// A PEM client certificate (mTLS).
pub const ENV_TLS_CERT: &str = "CLINK_KAFKA_RESUME_TLS_CERT";
/// The client certificate's PEM key.
pub const ENV_TLS_KEY: &str = "CLINK_KAFKA_RESUME_TLS_KEY";

/// The TLS part of the resume environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumeTlsEnv {
    /// `CLINK_KAFKA_RESUME_TLS_CA`.
    pub ca: Option<String>,
    /// `CLINK_KAFKA_RESUME_TLS_CERT`.
    pub cert: Option<String>,
    /// `CLINK_KAFKA_RESUME_TLS_KEY`.
    pub key: Option<String>,
}

impl ResumeTlsEnv {
    fn is_requested(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// Fills the client's TLS settings from the resume environment: the CA
/// (required whenever TLS is requested), plus certificate and key for mTLS.
/// The files are read and checked here, before any connection; an unusable
/// CA, certificate or key is refused, naming its variable. Never a
/// plaintext fallback.
pub fn apply_resume_tls(config: &mut ClientConfig, tls: &ResumeTlsEnv) -> Result<()> {
    if !tls.is_requested() {
        return Ok(());
    }
    let Some(ca) = &tls.ca else {
        return Err(Error::Config {
            option: ENV_TLS_CA,
            message: format!(
                "{ENV_TLS_CERT}/{ENV_TLS_KEY} are set but {ENV_TLS_CA} is not; TLS needs the CA to verify the broker"
            ),
        });
    };
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(Error::Config {
            option: if tls.cert.is_some() { ENV_TLS_KEY } else { ENV_TLS_CERT },
            message: format!("{ENV_TLS_CERT} and {ENV_TLS_KEY} go together (mTLS)"),
        });
    }
    let settings = TlsConfig {
        ca_file: Some(ca.into()),
        cert_file: tls.cert.as_ref().map(Into::into),
        key_file: tls.key.as_ref().map(Into::into),
        ..TlsConfig::default()
    };
    // Reads and parses the files now: an unusable CA is refused before a byte is sent.
    TlsConnector::new(&settings).map_err(|e| match e {
        Error::Config { option, message } => Error::Config {
            option: match option {
                super::tls::OPT_CERT => ENV_TLS_CERT,
                super::tls::OPT_KEY | super::tls::OPT_KEY_PASSWORD => ENV_TLS_KEY,
                _ => ENV_TLS_CA,
            },
            message: format!("{option}: {message}"),
        },
        other => other,
    })?;
    *config = config.clone().with_tls(settings);
    Ok(())
}

impl Resolver {
    /// A resolver that connects with `config` as it is.
    pub fn new(config: ClientConfig) -> Self {
        Resolver {
            config,
            unreachable_after: Duration::from_secs(30),
            coordinator_bound: Duration::from_secs(30),
        }
    }

    /// A resolver for `bootstrap` with credentials from the process
    /// environment: [`ENV_SASL_MECHANISM`] (PLAIN, SCRAM-SHA-256 or
    /// SCRAM-SHA-512) with [`ENV_SASL_USERNAME`] and [`ENV_SASL_PASSWORD`];
    /// [`ENV_TLS_CA`], [`ENV_TLS_CERT`], [`ENV_TLS_KEY`]. Refuses, before any
    /// connection, a mechanism it does not know or incomplete credentials.
    pub fn from_env(bootstrap: &str) -> Result<Self> {
        Self::from_vars(bootstrap, |k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`Resolver::from_env`] with the variables read through `var`.
    pub fn from_vars(bootstrap: &str, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut config = ClientConfig::new(bootstrap);
        config.client_id = "clink-kafka-resolver".into();
        let mechanism = var(ENV_SASL_MECHANISM);
        let username = var(ENV_SASL_USERNAME);
        let password = var(ENV_SASL_PASSWORD).map(Secret::new);
        match (mechanism, username, password) {
            (None, None, None) => {}
            (Some(m), Some(user), Some(password)) => {
                let mechanism = match m.trim() {
                    "PLAIN" => SaslMechanism::Plain,
                    "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                    "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                    other => {
                        return Err(Error::Config {
                            option: ENV_SASL_MECHANISM,
                            message: format!("{other:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
                        })
                    }
                };
                config = config.with_sasl(mechanism, user, password);
            }
            (None, _, _) => {
                return Err(Error::Config {
                    option: ENV_SASL_MECHANISM,
                    message: format!("{ENV_SASL_USERNAME}/{ENV_SASL_PASSWORD} are set but no mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
                })
            }
            (Some(_), None, _) => {
                return Err(Error::Config {
                    option: ENV_SASL_USERNAME,
                    message: format!("{ENV_SASL_MECHANISM} is set; the user name is missing"),
                })
            }
            (Some(_), Some(_), None) => {
                return Err(Error::Config {
                    option: ENV_SASL_PASSWORD,
                    message: format!("{ENV_SASL_MECHANISM} is set; the password is missing"),
                })
            }
        }
        let tls = ResumeTlsEnv {
            ca: var(ENV_TLS_CA),
            cert: var(ENV_TLS_CERT),
            key: var(ENV_TLS_KEY),
        };
        apply_resume_tls(&mut config, &tls)?;
        Ok(Resolver::new(config))
    }

    /// Sets how long transport failures are retried before `Unreachable`.
    pub fn with_unreachable_after(mut self, bound: Duration) -> Self {
        self.unreachable_after = bound;
        self
    }

    /// The client configuration it connects with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Finishes the transaction of `handle` as `decision` says; counts the
    /// verdict (`in_doubt_resolutions{verdict}`, see [`crate::metrics`]).
    pub async fn resolve(&self, handle: &ResumeHandle, decision: Decision) -> Verdict {
        self.resolve_proven(handle, decision, None).await
    }

    /// [`resolve`](Self::resolve), and before a commit is judged not
    /// committed, the log is asked (`written`: the output topic and each
    /// partition's first offset of the transaction, from its delivery
    /// reports): a NotCommitted answer (fenced, timed out, aborted, unknown
    /// id, refused) means only that the coordinator no longer knows, so
    /// [`super::prove_from_log`] reads the partitions for the transaction's
    /// marker. A COMMIT marker turns it into `Committed`
    /// ([`CommitProof::LogMarker`]), an ABORT marker confirms it; a log
    /// that proves neither (unreadable, deleted past the first offset, the
    /// marker not written within the bound) makes it `Unreachable`: no
    /// verdict, so a caller holds rather than publish again what may be
    /// committed (or drop what may not be). Without `written` (or empty),
    /// or for a refusal the log cannot overturn (no identity, unsupported
    /// broker, authentication), the answer stands.
    ///
    /// Cancel safety: cancel safe (nothing is decided before the verdict
    /// is returned; an EndTxn commit already sent stays sent).
    pub async fn resolve_proven(
        &self,
        handle: &ResumeHandle,
        decision: Decision,
        written: Option<(&str, &[super::PartitionOffset])>,
    ) -> Verdict {
        let mut verdict = self.reach_verdict(handle, decision).await;
        if let (Decision::Commit, Some((topic, written)), Verdict::NotCommitted { reason, detail }) =
            (decision, written, &verdict)
        {
            let overturnable = !matches!(
                reason,
                NotCommittedReason::NoIdentity
                    | NotCommittedReason::UnsupportedBroker
                    | NotCommittedReason::AuthenticationRefused
            );
            if overturnable && !written.is_empty() {
                let limits = super::LogProofLimits {
                    timeout: self.unreachable_after,
                    ..super::LogProofLimits::default()
                };
                let answer = format!("{} ({detail})", reason.name());
                verdict = match super::prove_from_log(&self.config, handle, topic, written, limits).await {
                    super::LogProof::Committed { partition, offset, .. } => Verdict::Committed {
                        proof: CommitProof::LogMarker {
                            answer,
                            partition,
                            offset,
                        },
                    },
                    super::LogProof::Aborted { partition, offset, .. } => Verdict::NotCommitted {
                        reason: reason.clone(),
                        detail: format!(
                            "{detail}; partition {partition}'s log holds its ABORT marker at offset {offset}"
                        ),
                    },
                    super::LogProof::Undecided { detail: why } => Verdict::Unreachable {
                        detail: format!(
                            "the coordinator answered {answer}, but the log proves neither commit nor abort: {why}"
                        ),
                    },
                };
            }
        }
        let name = match &verdict {
            Verdict::Committed { .. } => "committed",
            Verdict::NotCommitted { .. } => "not_committed",
            Verdict::Unreachable { .. } => "unreachable",
        };
        super::metrics::resolution(&self.config, name);
        verdict
    }

    async fn reach_verdict(&self, handle: &ResumeHandle, decision: Decision) -> Verdict {
        if !handle.has_identity() {
            return Verdict::NotCommitted {
                reason: NotCommittedReason::NoIdentity,
                detail: "the handle was staged without a producer id/epoch; refusing to guess".into(),
            };
        }
        if handle.transactional_id.is_empty() {
            return Verdict::NotCommitted {
                reason: NotCommittedReason::UnknownId,
                detail: "the handle has an empty transactional id".into(),
            };
        }
        let started = Instant::now();
        let mut backoff = super::backoff::Backoff::new(
            self.config.retry_backoff,
            self.config.retry_backoff_max.max(Duration::from_secs(2)),
        );
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let err = match self.attempt(handle, decision).await {
                Ok(v) => return v,
                Err(e) => e,
            };
            let delay = backoff.next_delay();
            if started.elapsed() + delay >= self.unreachable_after {
                return Verdict::Unreachable {
                    detail: format!("{attempts} attempts over {:?}; last: {err}", started.elapsed()),
                };
            }
            tracing::info!(transactional_id = %handle.transactional_id, error = %err, ?delay, "resolver: broker unreachable; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: `Err` only for transport failures (to retry).
    async fn attempt(&self, handle: &ResumeHandle, decision: Decision) -> Result<Verdict> {
        // One pass over the bootstrap list: this loop's own backoff and
        // `unreachable_after` bound the retries.
        let mut config = self.config.clone();
        config.bootstrap_timeout = Duration::ZERO;
        let cluster = match Cluster::connect(config).await {
            Ok(c) => c,
            Err(e) => return self.classify(handle, decision, e, None).await,
        };
        let coordinator = TxnCoordinator::new(cluster.clone(), &handle.transactional_id);
        let identity = ProducerIdentity {
            producer_id: handle.producer_id,
            producer_epoch: handle.producer_epoch,
        };
        let version = handle.transaction_version;
        let id = handle.transactional_id.as_str();
        let commit = decision == Decision::Commit;
        let ended = coordinator
            .call("EndTxn", self.coordinator_bound, |conn| async move {
                // A broker without the version the handle needs is a
                // definite answer, not a retry.
                let cap = version.end_txn_version_cap();
                let v = conn.version_for::<EndTxnRequest>(Some(cap))?;
                if version == TransactionVersion::V2 && v < 5 {
                    return Err(Error::Config {
                        option: "transaction.version",
                        message: format!(
                            "the handle needs EndTxn v5 (KIP-890); broker {} speaks up to v{v}",
                            conn.broker()
                        ),
                    });
                }
                // A transaction.version 2 handle on a cluster finalized at 1:
                // EndTxn v5 would finish it under a protocol its coordinator
                // does not run. (A version 1 handle on a version 2 cluster is
                // an older client's transaction, finished with EndTxn v4.)
                if version == TransactionVersion::V2
                    && broker_transaction_version(&conn).await? != TransactionVersion::V2
                {
                    return Err(Error::Config {
                        option: "transaction.version",
                        message: format!(
                            "the handle is transaction.version 2 but broker {} runs transaction.version 1",
                            conn.broker()
                        ),
                    });
                }
                end_txn(&conn, version, id, identity, commit).await
            })
            .await;
        match ended {
            Ok(_) => Ok(match decision {
                Decision::Commit => Verdict::Committed {
                    proof: CommitProof::Acknowledged,
                },
                Decision::Abort => Verdict::NotCommitted {
                    reason: NotCommittedReason::Aborted,
                    detail: "EndTxn(abort) acknowledged".into(),
                },
            }),
            Err(e) => self.classify(handle, decision, e, Some(&coordinator)).await,
        }
    }

    /// Turns a failed EndTxn (or connect) into a verdict, asking
    /// DescribeTransactions where the answer is ambiguous. `Err` for
    /// transport failures.
    async fn classify(
        &self,
        handle: &ResumeHandle,
        decision: Decision,
        err: Error,
        coordinator: Option<&TxnCoordinator>,
    ) -> Result<Verdict> {
        let not = |reason: NotCommittedReason, detail: String| Ok(Verdict::NotCommitted { reason, detail });
        let root = match &err {
            Error::NoBrokerAvailable { last, .. } => last.as_ref(),
            other => other,
        };
        match root {
            Error::Authentication { .. } => return not(NotCommittedReason::AuthenticationRefused, err.to_string()),
            // No TLS answer, a dropped connection: transport. Anything the
            // certificates decided (ours refused, theirs not trusted) is
            // authentication, and retrying will not change it.
            Error::Tls {
                kind: TlsFailure::HandshakeFailed | TlsFailure::ProtocolMismatch,
                ..
            } => return Err(err),
            Error::Tls { .. } => return not(NotCommittedReason::AuthenticationRefused, err.to_string()),
            _ => {}
        }
        if err.is_connection_error() || matches!(err, Error::NoBrokerAvailable { .. }) {
            return Err(err);
        }
        if matches!(
            err,
            Error::Protocol { .. }
                | Error::Config {
                    option: "transaction.version",
                    ..
                }
        ) {
            return not(NotCommittedReason::UnsupportedBroker, err.to_string());
        }
        let code = err.kafka_code();
        match code {
            Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED) => {
                return not(NotCommittedReason::AuthenticationRefused, err.to_string())
            }
            Some(KafkaCode::UNSUPPORTED_VERSION) => return not(NotCommittedReason::UnsupportedBroker, err.to_string()),
            _ => {}
        }
        let ambiguous = matches!(
            code,
            Some(
                KafkaCode::PRODUCER_FENCED
                    | KafkaCode::INVALID_PRODUCER_EPOCH
                    | KafkaCode::INVALID_TXN_STATE
                    | KafkaCode::INVALID_PRODUCER_ID_MAPPING
            )
        ) || matches!(err, Error::InvalidTxnState { .. });
        let (Some(coordinator), true) = (coordinator, ambiguous) else {
            let name = code.map_or_else(|| err.to_string(), |c| c.to_string());
            return not(NotCommittedReason::Refused(name), err.to_string());
        };
        let answer = code.unwrap_or(KafkaCode::INVALID_TXN_STATE);
        let described = match describe_at(coordinator, &handle.transactional_id, self.coordinator_bound).await {
            Ok(d) => d,
            Err(e) if is_not_found(&e) => {
                return not(
                    NotCommittedReason::UnknownId,
                    format!("EndTxn answered {answer}; DescribeTransactions: {e}"),
                )
            }
            Err(e) if e.is_connection_error() => return Err(e),
            Err(e) => {
                // No way to tell: a broker without DescribeTransactions
                // keeps the fenced answer.
                return not(
                    reason_for_answer(answer),
                    format!("EndTxn answered {answer}; DescribeTransactions failed: {e}"),
                );
            }
        };
        Ok(judge(handle, decision, answer, &described))
    }
}

/// The reason a bare answer gives, without a description.
fn reason_for_answer(answer: KafkaCode) -> NotCommittedReason {
    match answer {
        KafkaCode::PRODUCER_FENCED | KafkaCode::INVALID_PRODUCER_EPOCH => NotCommittedReason::Fenced,
        KafkaCode::INVALID_PRODUCER_ID_MAPPING => NotCommittedReason::UnknownId,
        other => NotCommittedReason::Refused(other.to_string()),
    }
}

/// The verdict from an ambiguous EndTxn answer and the id's description.
///
/// Committed needs CompleteCommit/PrepareCommit under the handle's producer
/// id at the epoch the commit leaves: the handle's (TV1, no bump) or one
/// above (TV2 bumps at the end; the handle's own epoch is accepted too). A
/// later transaction of a successor would sit at a higher epoch.
pub(crate) fn judge(
    handle: &ResumeHandle,
    _decision: Decision,
    answer: KafkaCode,
    d: &TransactionDescription,
) -> Verdict {
    let detail = format!(
        "EndTxn answered {answer}; DescribeTransactions: {} under producer id {} epoch {} (handle: producer id {} epoch {})",
        d.state, d.producer_id, d.producer_epoch, handle.producer_id, handle.producer_epoch
    );
    let same_pid = d.producer_id == handle.producer_id;
    let e = handle.producer_epoch as i32;
    let de = d.producer_epoch as i32;
    let commit_epoch = match handle.transaction_version {
        TransactionVersion::V1 => de == e,
        TransactionVersion::V2 => de == e || de == e + 1,
    };
    let not = |reason| Verdict::NotCommitted {
        reason,
        detail: detail.clone(),
    };
    match d.state {
        TransactionState::CompleteCommit | TransactionState::PrepareCommit if same_pid && commit_epoch => {
            Verdict::Committed {
                proof: CommitProof::Described {
                    answer,
                    state: d.state.clone(),
                },
            }
        }
        _ if !same_pid => not(NotCommittedReason::Fenced),
        TransactionState::CompleteAbort | TransactionState::PrepareAbort | TransactionState::PrepareEpochFence => {
            // The coordinator's own abort of an expired transaction bumps
            // the epoch once; an abort past the timeout is the expiry.
            let expired = d
                .start_time_ms
                .is_some_and(|start| super::now_ms().saturating_sub(start) >= d.transaction_timeout.as_millis() as i64);
            if expired && de == e + 1 {
                not(NotCommittedReason::TimedOut)
            } else if de > e + 1 || (handle.transaction_version == TransactionVersion::V1 && de > e && !expired) {
                not(NotCommittedReason::Fenced)
            } else {
                not(NotCommittedReason::Aborted)
            }
        }
        TransactionState::Dead => not(NotCommittedReason::UnknownId),
        _ => not(NotCommittedReason::Fenced),
    }
}

/// Describes `transactional_id` and returns the handle a resolver needs to
/// finish its open transaction (e.g. one the Java client left behind). The
/// transaction version is the cluster's.
pub async fn handle_from_description(
    admin: &Admin,
    transactional_id: &str,
) -> Result<(ResumeHandle, TransactionDescription)> {
    let d = super::txn_admin::describe_transaction(admin, transactional_id).await?;
    let version = super::txn::transaction_version(admin.cluster()).await?;
    Ok((
        ResumeHandle {
            transactional_id: transactional_id.to_owned(),
            producer_id: d.producer_id,
            producer_epoch: d.producer_epoch,
            transaction_version: version,
        },
        d,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn handle(tv: TransactionVersion) -> ResumeHandle {
        ResumeHandle {
            transactional_id: "sink 3/\"é\"".into(),
            producer_id: 4001,
            producer_epoch: 7,
            transaction_version: tv,
        }
    }

    #[test]
    fn handle_round_trips_as_one_line() {
        for tv in [TransactionVersion::V1, TransactionVersion::V2] {
            let h = handle(tv);
            let line = h.to_string();
            assert!(!line.contains(' ') || line.split(' ').count() == 5, "{line}");
            assert!(!line.contains('\n'));
            assert_eq!(line.parse::<ResumeHandle>().unwrap(), h);
        }
        let json = handle(TransactionVersion::V2).to_json();
        assert_eq!(
            json,
            r#"{"transactional_id":"sink 3/\"é\"","producer_id":4001,"producer_epoch":7,"transaction_version":2}"#
        );
    }

    #[test]
    fn bad_handles_are_typed_errors() {
        for bad in [
            "",
            "clink-txn-handle/1",
            "clink-txn-handle/1 tv=3 pid=1 epoch=0 id=a",
            "clink-txn-handle/1 tv=2 pid=x epoch=0 id=a",
            "clink-txn-handle/1 tv=2 pid=1 epoch=99999 id=a",
            "clink-txn-handle/1 tv=2 pid=1 epoch=0 id=%Z1",
            "clink-txn-handle/1 tv=2 pid=1 epoch=0 id=a secret=x",
        ] {
            assert!(
                matches!(bad.parse::<ResumeHandle>(), Err(Error::Config { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn env_refuses_unknown_mechanisms_and_tls_without_fallback() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        let err = Resolver::from_vars(
            "127.0.0.1:1",
            vars(&[
                (ENV_SASL_MECHANISM, "GSSAPI"),
                (ENV_SASL_USERNAME, "u"),
                (ENV_SASL_PASSWORD, "hunter2"),
            ]),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(ENV_SASL_MECHANISM) && text.contains("SCRAM-SHA-512"),
            "{text}"
        );
        assert!(!text.contains("hunter2"));
        let err = Resolver::from_vars("127.0.0.1:1", vars(&[(ENV_SASL_MECHANISM, "PLAIN")])).unwrap_err();
        assert!(err.to_string().contains(ENV_SASL_USERNAME), "{err}");
        let err = Resolver::from_vars("127.0.0.1:1", vars(&[(ENV_TLS_CA, "/nonexistent/ca.pem")])).unwrap_err();
        assert!(matches!(err, Error::Config { option: ENV_TLS_CA, .. }), "{err}");
        let err = Resolver::from_vars(
            "127.0.0.1:1",
            vars(&[(ENV_TLS_CERT, "/c.pem"), (ENV_TLS_KEY, "/k.pem")]),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Config { option: ENV_TLS_CA, .. }), "{err}");
        let err = Resolver::from_vars(
            "127.0.0.1:1",
            vars(&[(ENV_TLS_CA, "/ca.pem"), (ENV_TLS_CERT, "/c.pem")]),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    option: ENV_TLS_KEY,
                    ..
                }
            ),
            "{err}"
        );
        let ok = Resolver::from_vars(
            "127.0.0.1:1",
            vars(&[
                (ENV_SASL_MECHANISM, "SCRAM-SHA-256"),
                (ENV_SASL_USERNAME, "alice"),
                (ENV_SASL_PASSWORD, "alice-secret"),
            ]),
        )
        .unwrap();
        let debug = format!("{ok:?}");
        assert!(!debug.contains("alice-secret"), "{debug}");
    }

    fn described(
        state: TransactionState,
        pid: i64,
        epoch: i16,
        start_ago_ms: i64,
        timeout_ms: u64,
    ) -> TransactionDescription {
        TransactionDescription {
            transactional_id: "t".into(),
            state,
            producer_id: pid,
            producer_epoch: epoch,
            transaction_timeout: Duration::from_millis(timeout_ms),
            start_time_ms: Some(crate::client::now_ms() - start_ago_ms),
            partitions: BTreeMap::new(),
        }
    }

    #[test]
    fn fenced_answers_are_disambiguated() {
        let fenced = KafkaCode::PRODUCER_FENCED;
        let h2 = handle(TransactionVersion::V2);
        let h1 = handle(TransactionVersion::V1);
        // The commit landed: bumped once (TV2), same epoch (TV1).
        let v = judge(
            &h2,
            Decision::Commit,
            fenced,
            &described(TransactionState::CompleteCommit, 4001, 8, 10, 60_000),
        );
        assert!(v.is_committed(), "{v}");
        let v = judge(
            &h1,
            Decision::Commit,
            fenced,
            &described(TransactionState::CompleteCommit, 4001, 7, 10, 60_000),
        );
        assert!(v.is_committed(), "{v}");
        // A successor's later commit is not ours.
        let v = judge(
            &h1,
            Decision::Commit,
            fenced,
            &described(TransactionState::CompleteCommit, 4001, 8, 10, 60_000),
        );
        assert!(!v.is_committed(), "{v}");
        let v = judge(
            &h2,
            Decision::Commit,
            fenced,
            &described(TransactionState::CompleteCommit, 9999, 0, 10, 60_000),
        );
        assert!(
            matches!(
                v,
                Verdict::NotCommitted {
                    reason: NotCommittedReason::Fenced,
                    ..
                }
            ),
            "{v}"
        );
        // Expired: the coordinator's abort bumped once, past the timeout.
        let v = judge(
            &h1,
            Decision::Commit,
            fenced,
            &described(TransactionState::CompleteAbort, 4001, 8, 20_000, 3_000),
        );
        assert!(
            matches!(
                v,
                Verdict::NotCommitted {
                    reason: NotCommittedReason::TimedOut,
                    ..
                }
            ),
            "{v}"
        );
        // A successor re-initialized: Empty at a higher epoch.
        let v = judge(
            &h2,
            Decision::Commit,
            fenced,
            &described(TransactionState::Empty, 4001, 9, 10, 60_000),
        );
        assert!(
            matches!(
                v,
                Verdict::NotCommitted {
                    reason: NotCommittedReason::Fenced,
                    ..
                }
            ),
            "{v}"
        );
    }

    #[tokio::test]
    async fn no_identity_is_refused_without_a_connection() {
        // Port 9 on 127.0.0.1 (discard) is not a Kafka broker; nothing may be dialled anyway.
        let r = Resolver::new(ClientConfig::new("127.0.0.1:9"));
        let mut h = handle(TransactionVersion::V2);
        h.producer_id = -1;
        let v = r.resolve(&h, Decision::Commit).await;
        assert!(
            matches!(
                v,
                Verdict::NotCommitted {
                    reason: NotCommittedReason::NoIdentity,
                    ..
                }
            ),
            "{v}"
        );
    }
}
