//! The producer's sender: one background task that seals batches, picks
//! every ready batch per leader broker into one Produce request (at most
//! one batch per partition per request, as Java's `Sender.sendProduceRequests`
//! and franz-go's `sink.go` do), keeps at most `max_in_flight` requests
//! outstanding per broker connection, and applies each answer through the
//! sans-IO [`clink_kafka_wire::produce_state`].
//!
//! Ordering: requests are queued on a connection in the order they are
//! built, and a connection delivers them in that order, so several batches
//! of one partition may be in flight at once. After any failure of one of a
//! partition's batches the partition sends nothing until all of its batches
//! in flight have returned; then its queue (the failed batches first, in
//! sequence order) goes out again with the same bytes. A batch refused for
//! good gives its sequence numbers back: the batches queued behind it are
//! renumbered (only their base sequence and CRC change).
//!
//! Connections are opened in the background, one task per broker: a
//! broker that does not answer (a network partition: the connect waits out
//! `connect_timeout`) holds back only the batches led by it, never the
//! loop that sends to the others. Its batches wait in their queues until
//! the connect ends; a failed connect fails the attempt exactly as a failed
//! request does (retried with backoff after a metadata refresh, or the
//! error itself when it is not retriable).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clink_kafka_wire::kafka_protocol::messages::ProduceRequest;
use clink_kafka_wire::messages::{encode_produce_request, ProduceTopic};
use clink_kafka_wire::produce_state::{self, BatchOutcome, SentBatch};
use clink_kafka_wire::record::{BatchMeta, HeaderOut, RecordBatchEncoder, RecordOut};
use clink_kafka_wire::KafkaCode;

use super::cluster::{ConnectionRole, Metadata};
use super::connection::{BrokerConnection, StartedParts};
use super::producer::{
    increment_sequence, Acks, Batch, Body, PartitionQueue, PendingRecord, Shared, PRODUCE_MAX_VERSION,
};
use crate::error::{BrokerRef, Error};

/// How a batch's attempt ended.
enum Outcome {
    /// The broker's answer for it.
    Answer(BatchOutcome),
    /// No answer: the request failed (or could not be sent).
    Failed { error: Error, maybe_written: bool },
    /// Written to the socket under acks=0.
    Written,
}

/// The resolution of tokio's timer: a deadline is rounded up to the next
/// millisecond, and the driver parks in whole milliseconds.
const LINGER_TICK: Duration = Duration::from_millis(1);

/// How early a linger deadline is slept to, and how far ahead of its
/// deadline a batch is sealed on a timer wake: just under one tick, so the
/// batch whose deadline set the timer is always sealed by its wake (no
/// spin) and `linger` holds a batch `linger` on average, 1-3 ms more no
/// longer. As in Java, whose accumulator compares millisecond clocks, a
/// batch may go up to a millisecond before its linger has passed.
const LINGER_SLACK: Duration = LINGER_TICK.saturating_sub(Duration::from_nanos(1));

/// The background task; ends once the producer is closed and idle.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut conns: HashMap<i32, BrokerConnection> = HashMap::new();
    // Background connects (see the module docs), and the failures they
    // ended with, each consumed by the next attempt to that broker.
    let mut connecting: tokio::task::JoinSet<(i32, Result<BrokerConnection, Error>)> = tokio::task::JoinSet::new();
    let mut connecting_to: HashSet<i32> = HashSet::new();
    let mut connect_failed: HashMap<i32, Error> = HashMap::new();
    // Whether the last wake came from the deadline timer: then a batch due
    // within the next timer tick is sealed now (see [`LINGER_TICK`]).
    let mut timer_fired = false;
    loop {
        let linger_slack = if std::mem::take(&mut timer_fired) {
            LINGER_SLACK
        } else {
            Duration::ZERO
        };
        while let Some(joined) = connecting.try_join_next() {
            connected(joined, &mut conns, &mut connecting_to, &mut connect_failed);
        }
        let mut to_connect: Vec<i32> = Vec::new();
        let closing = shared.closed.load(Ordering::Acquire);
        let flushing = closing || shared.flushing.load(Ordering::Acquire) > 0;
        let now = Instant::now();
        let mut next_deadline: Option<Instant> = None;
        // The earliest open batch's linger deadline, slept to a tick early.
        let mut linger_deadline: Option<Instant> = None;
        let mut to_fail: Vec<(Batch, Error)> = Vec::new();
        // Per broker: the connection the batches go out on (`None`: the
        // connect failed, reported to them) and the batches.
        #[allow(clippy::type_complexity)]
        let mut groups: Vec<(i32, Option<BrokerConnection>, Vec<(usize, Batch)>)> = Vec::new();
        let mut refresh: Vec<Arc<str>> = Vec::new();
        let metadata = shared.cluster.metadata();
        let fatal = shared.fatal.get().cloned();
        let max = shared.config.max_in_flight;
        let linger = shared.config.linger;
        let delivery_timeout = shared.config.delivery_timeout;
        let idempotent = shared.identity.lock().expect("identity lock").is_some();
        {
            let mut state = shared.state.lock().expect("producer state lock");
            let state = &mut *state;
            // Partitions whose open batch was sealed here (by linger or a
            // flush): unkeyed records stuck to one of them move on
            // (KIP-480: the sticky partition changes when its batch is sent,
            // not only when it fills).
            let mut sealed: Vec<(Arc<str>, i32)> = Vec::new();
            for (qi, q) in state.partitions.iter_mut().enumerate() {
                // Until the broker has acknowledged one of this partition's
                // batches under our identity it may hold no state for us, and
                // then it accepts any first sequence: a second batch in flight
                // could land before a first one that failed (franz-go limits
                // the same way).
                let limit = if idempotent && !q.acked { 1 } else { max };
                // A drain after a failure ends once none of the partition's
                // batches is in flight; its queue is renumbered then.
                if q.draining && q.in_flight.is_empty() {
                    q.draining = false;
                    if q.resequence {
                        resequence(q);
                    }
                }
                if let Some(open) = &q.open {
                    let due = open.created + linger;
                    // A lingering batch is sealed only when it could go now:
                    // nothing queued before it, a free in-flight slot, no
                    // retry or drain pending. Otherwise it keeps filling (up
                    // to `batch_size`, sealed by `send`) until a slot frees,
                    // as Java's accumulator does: sealing it at its deadline
                    // would fill the queue with tiny batches under a backlog,
                    // each waiting a round trip. An answer, a retry deadline
                    // or a connect wakes this loop again.
                    let could_go =
                        q.queue.is_empty() && !q.draining && q.retry_at.is_none() && q.in_flight.len() < limit;
                    if flushing || fatal.is_some() || (could_go && due <= now + linger_slack) {
                        let b = q.open.take().expect("checked");
                        q.last_batch_len = b.records.len();
                        q.queue.push_back(b.into());
                        sealed.push((q.tp.topic.clone(), q.tp.partition));
                    } else if could_go {
                        linger_deadline = Some(linger_deadline.map_or(due, |d| d.min(due)));
                    }
                }
                if let Some(e) = &fatal {
                    to_fail.extend(q.queue.drain(..).map(|b| (b, e.clone())));
                    continue;
                }
                // Batches never sent that ran out of time fail here (not
                // written: nothing to give back, they hold no sequence yet).
                while let Some(pos) = q.queue.iter().position(|b| matches!(b.body, Body::Records(..))) {
                    let b = &q.queue[pos];
                    if b.created + delivery_timeout > now {
                        break;
                    }
                    let b = q.queue.remove(pos).expect("found");
                    let e = Error::Timeout {
                        operation: format!("delivering a batch to {}[{}] (never sent)", q.tp.topic, q.tp.partition),
                        timeout: delivery_timeout,
                    };
                    to_fail.push((b, e));
                }
                if q.draining {
                    continue;
                }
                // Looked up only for a partition waiting to retry or with
                // a batch to send (this loop visits every partition).
                let mut looked_up = None;
                if let Some(t) = q.retry_at {
                    // A failover: the metadata names a new leader since the
                    // failure, so the retry goes now, its backoff forgotten,
                    // not up to retry.backoff.max.ms after the leader moved.
                    let leader = leader_of(&metadata, &q.tp.topic, q.tp.partition);
                    looked_up = Some(leader);
                    let moved = leader.is_some() && q.retry_leader.is_some() && leader != q.retry_leader;
                    if t > now && !moved {
                        next_deadline = Some(next_deadline.map_or(t, |d| d.min(t)));
                        continue;
                    }
                    if moved {
                        q.backoff = None;
                    }
                    q.retry_at = None;
                    q.retry_leader = None;
                }
                if q.in_flight.len() >= limit || q.queue.is_empty() {
                    continue;
                }
                let Some(node) = looked_up.unwrap_or_else(|| leader_of(&metadata, &q.tp.topic, q.tp.partition)) else {
                    if !refresh.contains(&q.tp.topic) {
                        refresh.push(q.tp.topic.clone());
                    }
                    let t = now + shared.cluster.config().retry_backoff;
                    q.retry_at = Some(t);
                    next_deadline = Some(next_deadline.map_or(t, |d| d.min(t)));
                    continue;
                };
                // No connection yet: opened in the background while this
                // batch waits in its queue (a failed connect is reported by
                // the attempt that follows it).
                let conn = conns.get(&node).filter(|c| !c.is_closed());
                if conn.is_none() && !connect_failed.contains_key(&node) {
                    if connecting_to.insert(node) {
                        to_connect.push(node);
                    }
                    continue;
                }
                // A partition's batches in flight are all on one
                // connection: the broker appends a connection's requests in
                // the order they were written, and nothing orders two
                // connections' requests. A batch sent on a new connection
                // while an earlier one is still out on the old (its failure
                // not yet applied) could land first: OUT_OF_ORDER_SEQUENCE.
                // So it waits for the old connection's batches to return
                // (their answers wake this loop).
                if let Some(c) = conn {
                    if !q.in_flight.is_empty() && q.in_flight_conn != Some(c.id()) {
                        continue;
                    }
                }
                let group = match groups.iter().position(|(n, _, _)| *n == node) {
                    Some(g) => g,
                    None => {
                        let slots = state.broker_in_flight.entry(node).or_insert(0);
                        if *slots >= max {
                            continue;
                        }
                        *slots += 1;
                        groups.push((node, conn.cloned(), Vec::new()));
                        groups.len() - 1
                    }
                };
                let mut b = q.queue.pop_front().expect("not empty");
                if matches!(b.body, Body::Records(..)) && idempotent {
                    b.base_sequence = q.next_sequence;
                    q.next_sequence = increment_sequence(q.next_sequence, b.count);
                }
                q.in_flight.push_back(b.order);
                q.in_flight_conn = groups[group].1.as_ref().map(BrokerConnection::id);
                groups[group].2.push((qi, b));
            }
            for (topic, partition) in sealed {
                if let Some(&t) = state.topics.get(&topic) {
                    let entry = &mut state.topic_list[t];
                    if entry.sticky == Some(partition) {
                        entry.sticky = None;
                    }
                }
            }
        }
        for (b, e) in to_fail {
            shared.complete(&b.completion, b.permits, Err(e));
        }
        spawn_refresh(&shared, refresh);
        for node in to_connect {
            let cluster = shared.cluster.clone();
            connecting.spawn(async move { (node, cluster.broker_for(node, ConnectionRole::Produce).await) });
        }
        let sent_any = !groups.is_empty();
        for (node, conn, batches) in groups {
            send_request(&shared, conn, &mut connect_failed, node, batches).await;
        }
        if closing && shared.outstanding.load(Ordering::Acquire) == 0 {
            break;
        }
        if sent_any {
            tokio::task::yield_now().await;
            continue;
        }
        // A linger deadline is slept to one tick early: tokio's timer rounds
        // a deadline up to its next millisecond and parks in whole ones, so
        // `sleep_until(due)` would hold a 1 ms linger 1-3 ms. Woken a tick
        // early, the loop seals every batch due within that tick (above).
        // The other deadlines (retries) are slept to exactly: woken early
        // with nothing to do, the loop would spin until they pass.
        let wake_at = match (linger_deadline, next_deadline) {
            (Some(l), other) => {
                let early = l.checked_sub(LINGER_SLACK).unwrap_or(l);
                Some(other.map_or(early, |d| d.min(early)))
            }
            (None, other) => other,
        };
        match wake_at {
            Some(d) => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep_until(d.into()) => timer_fired = true,
                    Some(joined) = connecting.join_next(), if !connecting.is_empty() => {
                        connected(joined, &mut conns, &mut connecting_to, &mut connect_failed);
                    }
                }
            }
            None => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    Some(joined) = connecting.join_next(), if !connecting.is_empty() => {
                        connected(joined, &mut conns, &mut connecting_to, &mut connect_failed);
                    }
                }
            }
        }
    }
    tracing::debug!("producer sender stopped");
}

/// The partition's leader in `metadata`; a leader missing from the broker
/// list (down or restarting) counts as none yet (as `Cluster::leader`).
fn leader_of(metadata: &Metadata, topic: &str, partition: i32) -> Option<i32> {
    metadata
        .topics
        .get(topic)
        .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
        .map(|p| p.leader)
        .filter(|l| *l >= 0 && metadata.brokers.contains_key(l))
}

/// A background connect ended: keep the connection, or keep the failure
/// for the next attempt to that broker to report.
fn connected(
    joined: Result<(i32, Result<BrokerConnection, Error>), tokio::task::JoinError>,
    conns: &mut HashMap<i32, BrokerConnection>,
    connecting_to: &mut HashSet<i32>,
    connect_failed: &mut HashMap<i32, Error>,
) {
    match joined {
        Ok((node, Ok(conn))) => {
            connecting_to.remove(&node);
            conns.insert(node, conn);
        }
        Ok((node, Err(e))) => {
            connecting_to.remove(&node);
            tracing::debug!(broker = node, error = %e, "connect failed");
            connect_failed.insert(node, e);
        }
        Err(e) => {
            // Only a bug or a runtime shutting down; the brokers are tried
            // again.
            tracing::error!(error = %e, "connect task failed");
            connecting_to.clear();
        }
    }
}

/// Renumbers the encoded batches queued behind a refused one from the last
/// sequence known written.
fn resequence(q: &mut PartitionQueue) {
    let mut seq = q.confirmed_next;
    for b in q.queue.iter_mut() {
        let Body::Encoded(bytes) = &mut b.body else { break };
        if b.base_sequence != seq {
            let mut m = BytesMut::from(&bytes[..]);
            if produce_state::rewrite_base_sequence(&mut m, seq).is_ok() {
                *bytes = m.freeze();
                b.base_sequence = seq;
            }
        }
        seq = increment_sequence(seq, b.count);
    }
    q.next_sequence = seq;
    q.resequence = false;
}

fn encode(shared: &Shared, records: &[PendingRecord], base_sequence: i32) -> Result<Bytes, Error> {
    // Header views only when some record has headers: most batches have
    // none, and then no per-record vector is built.
    let headers: Vec<Vec<HeaderOut<'_>>> = if records.iter().any(|r| !r.headers.is_empty()) {
        records
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .map(|(k, v)| HeaderOut {
                        key: k,
                        value: v.as_deref(),
                    })
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    let out_records: Vec<RecordOut<'_>> = records
        .iter()
        .enumerate()
        .map(|(i, r)| RecordOut {
            timestamp: r.timestamp,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: headers.get(i).map_or(&[], Vec::as_slice),
        })
        .collect();
    let mut meta = BatchMeta {
        compression: shared.config.compression,
        compression_level: shared.config.compression_level,
        ..BatchMeta::default()
    };
    if let Some(id) = *shared.identity.lock().expect("identity lock") {
        meta.producer_id = id.producer_id;
        meta.producer_epoch = id.producer_epoch;
        meta.base_sequence = base_sequence;
    }
    meta.transactional = shared.txn.is_some();
    // Empty (a completed batch's buffer when one is kept): the encoder
    // reserves what the batch needs itself (a guess made here would be
    // reallocated, copying it, whenever it fell short).
    let mut out = shared.batch_buffer();
    ENCODER
        .with(|e| e.borrow_mut().encode(&mut out, &meta, &out_records))
        .map_err(|e| Error::Protocol {
            broker: BrokerRef::addr("(none: encoding a record batch)"),
            api: "Produce",
            source: Arc::new(e),
        })?;
    Ok(out.freeze())
}

thread_local! {
    /// One encoder per runtime thread: its compression buffers are reused
    /// from batch to batch instead of growing afresh each time.
    static ENCODER: std::cell::RefCell<RecordBatchEncoder> = std::cell::RefCell::new(RecordBatchEncoder::new());
}

/// Encodes what needs it, then queues one Produce request for `batches`
/// on `node`'s connection and spawns the wait for its answer.
async fn send_request(
    shared: &Arc<Shared>,
    conn: Option<BrokerConnection>,
    connect_failed: &mut HashMap<i32, Error>,
    node: i32,
    batches: Vec<(usize, Batch)>,
) {
    let mut ready = Vec::with_capacity(batches.len());
    let mut failed = Vec::new();
    for (qi, mut b) in batches {
        if let Body::Records(records) = &b.body {
            match encode(shared, records, b.base_sequence) {
                Ok(encoded) => b.body = Body::Encoded(encoded),
                Err(e) => {
                    failed.push((
                        qi,
                        b,
                        Outcome::Failed {
                            error: e,
                            maybe_written: false,
                        },
                    ));
                    continue;
                }
            }
        }
        ready.push((qi, b));
    }
    if let Some(registrar) = shared.txn.as_ref().and_then(|t| t.registrar.as_ref()) {
        let mut kept = Vec::with_capacity(ready.len());
        for (qi, b) in ready {
            let c = b.completion.0.clone();
            match registrar.ensure_added(c.topic(), c.partition()).await {
                Ok(()) => kept.push((qi, b)),
                Err(e) => failed.push((
                    qi,
                    b,
                    Outcome::Failed {
                        error: e,
                        maybe_written: false,
                    },
                )),
            }
        }
        ready = kept;
    }
    // The connection the batches were taken for, even if it has closed
    // since: then the request fails unwritten and the batches are retried
    // in order once their partitions' earlier batches are back. Never a
    // fresh connection here, ahead of those earlier batches' retries.
    let conn = match conn {
        Some(c) => Ok(c),
        None => Err(connect_failed.remove(&node).unwrap_or_else(|| Error::ConnectionClosed {
            broker: BrokerRef {
                addr: format!("(broker {node}: not connected)"),
                node_id: Some(node),
            },
        })),
    };
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            failed.extend(ready.into_iter().map(|(qi, b)| {
                (
                    qi,
                    b,
                    Outcome::Failed {
                        error: e.clone(),
                        maybe_written: false,
                    },
                )
            }));
            apply(shared, Some(node), failed, None).await;
            return;
        }
    };
    if ready.is_empty() {
        apply(shared, Some(node), failed, None).await;
        return;
    }
    if !failed.is_empty() {
        // Their slot is the request's; only the request's end frees it.
        apply(shared, None, failed, None).await;
    }
    let cap = shared
        .txn
        .as_ref()
        .map_or(PRODUCE_MAX_VERSION, |t| t.produce_max_version);
    let version = conn.version_for::<ProduceRequest>(Some(cap.min(PRODUCE_MAX_VERSION)));
    let broker = conn.broker().clone();
    let fail_all = |ready: Vec<(usize, Batch)>, e: Error| -> Vec<(usize, Batch, Outcome)> {
        ready
            .into_iter()
            .map(|(qi, b)| {
                (
                    qi,
                    b,
                    Outcome::Failed {
                        error: e.clone(),
                        maybe_written: false,
                    },
                )
            })
            .collect()
    };
    let version = match version {
        Ok(v) => v,
        Err(e) => {
            apply(shared, Some(node), fail_all(ready, e), None).await;
            return;
        }
    };
    let shared = shared.clone();
    let started = {
        let topics = request_topics(&ready);
        let transactional_id = shared.txn.as_ref().map(|t| t.transactional_id.as_str());
        let acks = shared.config.acks.wire();
        let timeout_ms = shared.config.ack_timeout.as_millis().min(i32::MAX as u128) as i32;
        conn.start_request_parts::<ProduceRequest>(
            version,
            shared.config.acks != Acks::None,
            |correlation_id, client_id| {
                encode_produce_request(
                    correlation_id,
                    client_id,
                    version,
                    transactional_id,
                    acks,
                    timeout_ms,
                    &topics,
                )
            },
        )
    };
    let pending = match started {
        Ok(StartedParts::Answered(p)) => p,
        Ok(StartedParts::Unanswered(written)) => {
            // The batches (and their buffer space) are held until the frame is
            // written: a slow broker fills `buffer_memory` and `send` waits.
            tokio::spawn(async move {
                let outcome = match written.await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e),
                    Err(_) => Some(Error::ConnectionClosed { broker: broker.clone() }),
                };
                let results = ready
                    .into_iter()
                    .map(|(qi, b)| {
                        let o = match &outcome {
                            None => Outcome::Written,
                            Some(e) => Outcome::Failed {
                                error: e.clone(),
                                maybe_written: true,
                            },
                        };
                        (qi, b, o)
                    })
                    .collect();
                apply(&shared, Some(node), results, Some(&broker)).await;
            });
            return;
        }
        Err(e) => {
            apply(&shared, Some(node), fail_all(ready, e), None).await;
            return;
        }
    };
    tokio::spawn(async move {
        let results: Vec<(usize, Batch, Outcome)> = match pending.wait().await {
            Ok(response) => {
                let sent: Vec<SentBatch<'_>> = ready
                    .iter()
                    .map(|(_, b)| SentBatch {
                        topic: b.completion.0.topic(),
                        partition: b.completion.0.partition(),
                        record_count: b.count,
                    })
                    .collect();
                let answer = produce_state::handle_produce_response(&sent, &response);
                drop(sent);
                if answer.unexpected > 0 {
                    tracing::warn!(broker = %broker, entries = answer.unexpected,
                        "Produce answer names partitions the request did not carry; ignored");
                }
                ready
                    .into_iter()
                    .zip(answer.outcomes)
                    .map(|((qi, b), o)| (qi, b, Outcome::Answer(o)))
                    .collect()
            }
            Err(e) => ready
                .into_iter()
                .map(|(qi, b)| {
                    (
                        qi,
                        b,
                        Outcome::Failed {
                            error: e.clone(),
                            maybe_written: true,
                        },
                    )
                })
                .collect(),
        };
        apply(&shared, Some(node), results, Some(&broker)).await;
    });
}

/// The request's topics, each with its partitions' batches, in the order
/// of `ready` (batches of one topic are adjacent when partitions were
/// created together; a linear search keeps the rest right).
fn request_topics(ready: &[(usize, Batch)]) -> Vec<ProduceTopic<'_>> {
    let mut topics: Vec<ProduceTopic<'_>> = Vec::new();
    for (_, b) in ready {
        let c = &b.completion.0;
        let Body::Encoded(bytes) = &b.body else { continue };
        let idx = match topics.iter().rposition(|t| t.name == c.topic()) {
            Some(i) => i,
            None => {
                topics.push(ProduceTopic {
                    name: c.topic(),
                    partitions: Vec::new(),
                });
                topics.len() - 1
            }
        };
        topics[idx].partitions.push((c.partition(), bytes.clone()));
    }
    topics
}

/// Applies the outcomes of one request's batches: completes, requeues or
/// fails each, frees the request's slot on `node` (when given), and wakes
/// the sender.
async fn apply(
    shared: &Arc<Shared>,
    node: Option<i32>,
    results: Vec<(usize, Batch, Outcome)>,
    broker: Option<&BrokerRef>,
) {
    let none = BrokerRef::addr("(unknown)");
    let broker = broker.unwrap_or(&none);
    type Completed = (Batch, Result<(i64, i64), Error>);
    let mut done: Vec<Completed> = Vec::new();
    let mut refresh: Vec<Arc<str>> = Vec::new();
    let now = Instant::now();
    let idempotent = shared.identity.lock().expect("identity lock").is_some();
    {
        let mut state = shared.state.lock().expect("producer state lock");
        let state = &mut *state;
        if let Some(node) = node {
            if let Some(n) = state.broker_in_flight.get_mut(&node) {
                *n = n.saturating_sub(1);
            }
        }
        for (qi, mut b, outcome) in results {
            let q = &mut state.partitions[qi];
            let pos = q.in_flight.iter().position(|o| *o == b.order);
            if let Some(pos) = pos {
                q.in_flight.remove(pos);
            }
            let earlier_in_flight = pos.is_some_and(|p| p > 0);
            let topic = q.tp.topic.clone();
            let partition = q.tp.partition;
            let kafka = |code: KafkaCode, message: Option<&str>| {
                Error::kafka("Produce", broker, Some(&topic), Some(partition), code.0, message)
            };
            // What to do with the batch.
            enum Next {
                Done(Result<(i64, i64), Error>),
                Retry(Error),
                /// Refused for good: not written.
                Refused(Error),
                /// It may or may not be written: the sequence is broken.
                Unknown(Error),
            }
            let next = match outcome {
                Outcome::Written => Next::Done(Ok((-1, -1))),
                Outcome::Answer(BatchOutcome::Delivered {
                    base_offset,
                    log_append_time,
                }) => Next::Done(Ok((base_offset, log_append_time))),
                Outcome::Answer(BatchOutcome::Duplicate) => Next::Done(Ok((-1, -1))),
                Outcome::Answer(BatchOutcome::Retry { code, refresh_metadata }) => {
                    if refresh_metadata && !refresh.contains(&topic) {
                        refresh.push(topic.clone());
                    }
                    Next::Retry(kafka(code, None))
                }
                Outcome::Answer(BatchOutcome::OutOfOrder) => {
                    let e = kafka(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER, None);
                    if idempotent && (q.draining || earlier_in_flight) {
                        // An earlier batch failed first: this one was not written.
                        Next::Retry(e)
                    } else {
                        Next::Unknown(e)
                    }
                }
                Outcome::Answer(BatchOutcome::IdentityLost { code }) => Next::Unknown(kafka(code, None)),
                Outcome::Answer(BatchOutcome::Refused { code, message }) => {
                    Next::Refused(kafka(code, message.as_deref()))
                }
                Outcome::Answer(BatchOutcome::Invalid(why)) => {
                    b.maybe_written = true;
                    Next::Unknown(Error::Protocol {
                        broker: broker.clone(),
                        api: "Produce",
                        source: Arc::new(clink_kafka_wire::Error::Invalid {
                            context: "Produce response",
                            message: format!("{topic}[{partition}]: {}", why.describe()),
                        }),
                    })
                }
                Outcome::Answer(_) => Next::Unknown(Error::Protocol {
                    broker: broker.clone(),
                    api: "Produce",
                    source: Arc::new(clink_kafka_wire::Error::Invalid {
                        context: "Produce response",
                        message: format!("{topic}[{partition}]: an outcome this client does not know"),
                    }),
                }),
                Outcome::Failed { error, maybe_written } => {
                    b.maybe_written |= maybe_written;
                    // The leader may have moved (failover): look again.
                    if error.is_connection_error() && !refresh.contains(&topic) {
                        refresh.push(topic.clone());
                    }
                    if error.is_retriable() || error.is_connection_error() {
                        Next::Retry(error)
                    } else if b.maybe_written {
                        Next::Unknown(error)
                    } else {
                        Next::Refused(error)
                    }
                }
            };
            let next = match next {
                Next::Retry(e) if b.created + shared.config.delivery_timeout <= now => {
                    let e = Error::Timeout {
                        operation: format!("delivering a batch to {topic}[{partition}] (last error: {e})"),
                        timeout: shared.config.delivery_timeout,
                    };
                    if b.maybe_written {
                        Next::Unknown(e)
                    } else {
                        Next::Refused(e)
                    }
                }
                other => other,
            };
            match next {
                Next::Done(r) => {
                    if idempotent && r.is_ok() {
                        q.confirmed_next = increment_sequence(b.base_sequence, b.count);
                        q.acked = true;
                    }
                    q.backoff = None;
                    done.push((b, r));
                }
                Next::Retry(e) => {
                    tracing::debug!(topic = %topic, partition, error = %e, "retrying produce");
                    let at = q.queue.iter().position(|x| x.order > b.order).unwrap_or(q.queue.len());
                    q.queue.insert(at, b);
                    q.draining = true;
                    let delay = q.backoff.get_or_insert_with(|| shared.cluster.backoff()).next_delay();
                    q.retry_at = Some(now + delay);
                    q.retry_leader = node;
                }
                Next::Refused(e) => {
                    if idempotent {
                        q.resequence = true;
                        q.draining = true;
                    }
                    done.push((b, Err(e)));
                }
                Next::Unknown(e) => {
                    if idempotent {
                        let fatal = Error::ProducerFailed { cause: Box::new(e) };
                        if shared.fatal.set(fatal).is_ok() {
                            tracing::error!(topic = %topic, partition,
                                error = %shared.fatal.get().expect("set"), "idempotent producer failed");
                        }
                        done.push((b, Err(shared.fatal.get().expect("set").clone())));
                    } else {
                        done.push((b, Err(e)));
                    }
                }
            }
        }
    }
    for (b, r) in done {
        if r.is_ok() {
            shared.metrics.acknowledged(b.count as usize);
        }
        shared.complete(&b.completion, b.permits, r);
        if let Body::Encoded(bytes) = b.body {
            shared.recycle_batch_buffer(bytes);
        }
    }
    shared.wake.notify_one();
    spawn_refresh(shared, refresh);
}

/// Looks up `topics`' leaders again in a task of its own, then wakes the
/// sender. Never awaited where it is asked for: `apply` also runs inline in
/// the sender loop, and a refresh there would stop every partition's
/// sending, not just the failed ones', for as long as the Metadata answer
/// takes (measured: 8.8 s behind an acks=all Produce parked until a dead
/// follower left the ISR).
fn spawn_refresh(shared: &Arc<Shared>, topics: Vec<Arc<str>>) {
    if topics.is_empty() {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
        if let Err(e) = shared.cluster.refresh_topics(&names).await {
            tracing::debug!(error = %e, "metadata refresh failed");
        }
        shared.wake.notify_one();
    });
}
