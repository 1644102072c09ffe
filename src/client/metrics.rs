//! The client's own series (names and the exporter: [`crate::metrics`]).
//!
//! Handles are registered when a connection, consumer, producer or
//! transactional producer is built (labelled by `client_id`, named with
//! [`ClientConfig::metric_prefix`]) and moved once per request, poll or
//! acknowledged batch. With no recorder installed they are no-ops.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use super::ClientConfig;
use crate::metrics::series;

fn labels(config: &ClientConfig) -> [(&'static str, String); 1] {
    [("client_id", config.client_id.clone())]
}

/// Completed SASL re-authentications (KIP-368), per client.
pub(crate) fn reauth_counter(config: &ClientConfig) -> Counter {
    metrics::counter!(series(&config.metric_prefix, "sasl_reauthentications"), &labels(config))
}

/// Per connection: requests in flight, latency and wire bytes.
#[derive(Clone)]
pub(crate) struct RequestMetrics {
    prefix: Arc<str>,
    client_id: Arc<str>,
    in_flight: Gauge,
    fetch_latency: Histogram,
    produce_latency: Histogram,
    fetch_bytes: Counter,
    produce_bytes: Counter,
}

impl RequestMetrics {
    pub(crate) fn new(config: &ClientConfig) -> Self {
        let p = &config.metric_prefix;
        let l = labels(config);
        let latency = |api: &'static str| metrics::histogram!(series(p, "request_latency_seconds"), "client_id" => config.client_id.clone(), "api" => api);
        RequestMetrics {
            prefix: p.as_str().into(),
            client_id: config.client_id.as_str().into(),
            in_flight: metrics::gauge!(series(p, "in_flight_requests"), &l),
            fetch_latency: latency("Fetch"),
            produce_latency: latency("Produce"),
            fetch_bytes: metrics::counter!(series(p, "fetch_bytes"), &l),
            produce_bytes: metrics::counter!(series(p, "produce_bytes"), &l),
        }
    }

    /// A request is being written; `answered`: its answer is awaited.
    pub(crate) fn sent(&self, api: &'static str, bytes: usize, answered: bool) {
        if answered {
            self.in_flight.increment(1.0);
        }
        if api == "Produce" {
            self.produce_bytes.increment(bytes as u64);
        }
    }

    /// Its answer arrived after `latency`.
    pub(crate) fn answered(&self, api: &'static str, latency: Duration, bytes: usize) {
        self.in_flight.decrement(1.0);
        match api {
            "Fetch" => {
                self.fetch_latency.record(latency);
                self.fetch_bytes.increment(bytes as u64);
            }
            "Produce" => self.produce_latency.record(latency),
            // Rare requests: registered on use.
            _ => metrics::histogram!(series(&self.prefix, "request_latency_seconds"),
                "client_id" => self.client_id.to_string(), "api" => api)
            .record(latency),
        }
    }

    /// `n` requests will never be answered (the connection failed).
    pub(crate) fn abandoned(&self, n: usize) {
        if n > 0 {
            self.in_flight.decrement(n as f64);
        }
    }
}

/// Per consumer: records handed over and per-partition lag.
pub(crate) struct ConsumerMetrics {
    prefix: Arc<str>,
    client_id: String,
    records: Counter,
    /// (topic, partition, gauge): a handful per consumer, scanned.
    lag: Vec<(Arc<str>, i32, Gauge)>,
}

impl ConsumerMetrics {
    pub(crate) fn new(config: &ClientConfig) -> Self {
        ConsumerMetrics {
            prefix: config.metric_prefix.as_str().into(),
            client_id: config.client_id.clone(),
            records: metrics::counter!(series(&config.metric_prefix, "records_consumed"), &labels(config)),
            lag: Vec::new(),
        }
    }

    /// Once per poll: `n` records handed over.
    pub(crate) fn consumed(&self, n: usize) {
        self.records.increment(n as u64);
    }

    /// The lag of one partition after a poll (high watermark − position).
    pub(crate) fn lag(&mut self, topic: &Arc<str>, partition: i32, lag: i64) {
        let found = self
            .lag
            .iter()
            .position(|(t, p, _)| *p == partition && (Arc::ptr_eq(t, topic) || **t == **topic));
        let i = match found {
            Some(i) => i,
            None => {
                let g = metrics::gauge!(series(&self.prefix, "consumer_lag"),
                    "client_id" => self.client_id.clone(), "topic" => topic.to_string(), "partition" => partition.to_string());
                self.lag.push((topic.clone(), partition, g));
                self.lag.len() - 1
            }
        };
        self.lag[i].2.set(lag.max(0) as f64);
    }
}

/// Per producer: records acknowledged.
pub(crate) struct ProducerMetrics {
    records: Counter,
    errors: Counter,
}

impl ProducerMetrics {
    pub(crate) fn new(config: &ClientConfig) -> Self {
        let l = labels(config);
        ProducerMetrics {
            records: metrics::counter!(series(&config.metric_prefix, "records_produced"), &l),
            errors: metrics::counter!(series(&config.metric_prefix, "produce_errors"), &l),
        }
    }

    /// Once per batch: acknowledged, with `records`.
    pub(crate) fn acknowledged(&self, records: usize) {
        self.records.increment(records as u64);
    }

    /// Once per batch: failed.
    pub(crate) fn failed(&self) {
        self.errors.increment(1);
    }
}

/// Per transactional producer: commits and aborts, count and latency.
pub(crate) struct TxnMetrics {
    commits: Counter,
    aborts: Counter,
    commit_latency: Histogram,
    abort_latency: Histogram,
}

impl TxnMetrics {
    pub(crate) fn new(config: &ClientConfig) -> Self {
        let p = &config.metric_prefix;
        let l = labels(config);
        TxnMetrics {
            commits: metrics::counter!(series(p, "transaction_commits"), &l),
            aborts: metrics::counter!(series(p, "transaction_aborts"), &l),
            commit_latency: metrics::histogram!(series(p, "transaction_commit_latency_seconds"), &l),
            abort_latency: metrics::histogram!(series(p, "transaction_abort_latency_seconds"), &l),
        }
    }

    /// A transaction ended (commit or abort) after `latency`.
    pub(crate) fn ended(&self, commit: bool, latency: Duration) {
        if commit {
            self.commits.increment(1);
            self.commit_latency.record(latency);
        } else {
            self.aborts.increment(1);
            self.abort_latency.record(latency);
        }
    }
}

/// An in-doubt resolution reached `verdict` (`committed`, `not_committed`, …).
pub(crate) fn resolution(config: &ClientConfig, verdict: &'static str) {
    metrics::counter!(series(&config.metric_prefix, "in_doubt_resolutions"), "verdict" => verdict).increment(1);
}
