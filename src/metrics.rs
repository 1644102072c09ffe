//! Metrics an operator can scrape: series names, the Prometheus recorder
//! and its loopback scrape endpoint.
//!
//! Every series goes through the [`metrics`] facade, so an application that
//! embeds the connector can install any recorder it likes; without one,
//! every handle is a no-op. [`install_prometheus`] installs the
//! `metrics-exporter-prometheus` recorder (latency histograms get the
//! buckets in [`LATENCY_BUCKETS`]) and [`serve`] answers `GET /metrics`
//! with its text format on a loopback address (the CLI's `--metrics-addr`).
//!
//! Names are `<prefix>_<name>`: the prefix is the connector's
//! `metric_prefix` (default [`DEFAULT_PREFIX`]). Handles are registered
//! once (at build, assignment or connection time) and moved once per batch,
//! poll or request, never looked up per record.
//!
//! | series | kind | labels | moves |
//! |---|---|---|---|
//! | `consumed`, `consume_errors` | counter | topic, subtask | per source batch / failed poll |
//! | `delivered`, `delivery_errors` | counter | topic, subtask | per acknowledged batch / failure |
//! | `assigned_partitions` | gauge | topic, subtask | per (re)assignment |
//! | `records_consumed`, `records_produced` | counter | client_id | per poll / acknowledged batch |
//! | `fetch_bytes`, `produce_bytes` | counter | client_id | per Fetch answer / Produce request (wire bytes) |
//! | `consumer_lag` | gauge | client_id, topic, partition | per poll: high watermark − position |
//! | `request_latency_seconds` | histogram | client_id, api | per answered request |
//! | `in_flight_requests` | gauge | client_id | per request written / answered |
//! | `transaction_commits`, `transaction_aborts` | counter | client_id | per EndTxn |
//! | `transaction_commit_latency_seconds`, `transaction_abort_latency_seconds` | histogram | client_id | per EndTxn |
//! | `in_doubt_resolutions` | counter | verdict | per resolver verdict |

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The prefix of every series when `metric_prefix` is not given.
pub const DEFAULT_PREFIX: &str = "clink_kafka";

/// Histogram buckets of the latency series, in seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The most bytes of a scrape request read before answering.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// `<prefix>_<name>`.
pub fn series(prefix: &str, name: &str) -> String {
    format!("{prefix}_{name}")
}

/// A metrics setup error; each names the option (or flag) it came from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The value is not an `IP:PORT` address.
    #[error("{option} {value:?}: not an IP:PORT address (e.g. 127.0.0.1:9464)")]
    BadAddress {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// The value given.
        value: String,
    },
    /// The address is not a loopback address (the endpoint is loopback-only).
    #[error("{option} {value:?}: not a loopback address; the metrics endpoint listens on 127.0.0.0/8 or [::1] only")]
    NotLoopback {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// The address given.
        value: String,
    },
    /// The endpoint could not listen on the address.
    #[error("{option} {value:?}: cannot listen there: {source}")]
    Bind {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// The address given.
        value: String,
        /// The I/O error from binding.
        source: std::io::Error,
    },
    /// Another metrics recorder is already installed in this process.
    #[error("{option}: another metrics recorder is already installed in this process")]
    RecorderTaken {
        /// The option (or flag) that asked for the recorder.
        option: &'static str,
    },
    /// The histogram buckets were refused by the exporter.
    #[error("{option}: the histogram buckets were refused: {message}")]
    Buckets {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// Why the buckets were refused.
        message: String,
    },
}

/// A connector's own series: `consumed` / `consume_errors` and the
/// `assigned_partitions` gauge (a source), or `delivered` /
/// `delivery_errors` (a sink), labelled by topic and subtask.
#[derive(Clone)]
pub(crate) struct ConnectorSeries {
    pub(crate) ok: metrics::Counter,
    pub(crate) errors: metrics::Counter,
    pub(crate) assigned: metrics::Gauge,
}

impl std::fmt::Debug for ConnectorSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectorSeries")
    }
}

impl ConnectorSeries {
    fn new(prefix: Option<&str>, names: [&str; 2], topic: &str, subtask: u32, gauge: bool) -> Self {
        let p = prefix.unwrap_or(DEFAULT_PREFIX);
        let labels = [("topic", topic.to_owned()), ("subtask", subtask.to_string())];
        ConnectorSeries {
            ok: metrics::counter!(series(p, names[0]), &labels),
            errors: metrics::counter!(series(p, names[1]), &labels),
            assigned: if gauge {
                metrics::gauge!(series(p, "assigned_partitions"), &labels)
            } else {
                metrics::Gauge::noop()
            },
        }
    }

    /// A source's: `consumed`, `consume_errors`, `assigned_partitions`.
    pub(crate) fn source(prefix: Option<&str>, topic: &str, subtask: u32) -> Self {
        Self::new(prefix, ["consumed", "consume_errors"], topic, subtask, true)
    }

    /// A sink's: `delivered`, `delivery_errors`.
    pub(crate) fn sink(prefix: Option<&str>, topic: &str, subtask: u32) -> Self {
        Self::new(prefix, ["delivered", "delivery_errors"], topic, subtask, false)
    }
}

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder as this process's `metrics` recorder
/// (once; later calls return the same handle). `option` names what asked
/// for it, for the error when another recorder is already installed.
pub fn install_prometheus(option: &'static str) -> Result<PrometheusHandle, MetricsError> {
    if let Some(h) = PROMETHEUS.get() {
        return Ok(h.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)
        .map_err(|e| MetricsError::Buckets {
            option,
            message: e.to_string(),
        })?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|_| MetricsError::RecorderTaken { option })?;
    Ok(PROMETHEUS.get_or_init(|| handle).clone())
}

/// A running scrape endpoint; dropping it stops the listener.
#[derive(Debug)]
pub struct MetricsEndpoint {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsEndpoint {
    /// The address it listens on (the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks `value` (given as `option`) is a loopback `IP:PORT`.
pub fn loopback_addr(option: &'static str, value: &str) -> Result<SocketAddr, MetricsError> {
    let addr: SocketAddr = value.trim().parse().map_err(|_| MetricsError::BadAddress {
        option,
        value: value.to_owned(),
    })?;
    if !addr.ip().is_loopback() {
        return Err(MetricsError::NotLoopback {
            option,
            value: value.to_owned(),
        });
    }
    Ok(addr)
}

/// Installs the Prometheus recorder and serves `GET /metrics` on the
/// loopback address `value` (given as `option`, for errors): an address
/// that is not loopback, or already in use, is an error naming `option`.
/// Must run inside a tokio runtime.
///
/// Cancel safety: cancel safe. Its only await is the bind; a call dropped
/// there has installed nothing and holds no socket.
pub async fn serve(option: &'static str, value: &str) -> Result<MetricsEndpoint, MetricsError> {
    let addr = loopback_addr(option, value)?;
    let listener = TcpListener::bind(addr).await.map_err(|source| MetricsError::Bind {
        option,
        value: value.to_owned(),
        source,
    })?;
    let handle = install_prometheus(option)?;
    let addr = listener.local_addr().map_err(|source| MetricsError::Bind {
        option,
        value: value.to_owned(),
        source,
    })?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors or similar: back off, keep serving.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &handle).await {
                    tracing::debug!(error = %e, "metrics scrape failed");
                }
            });
        }
    });
    tracing::info!(%addr, "metrics endpoint listening (GET /metrics)");
    Ok(MetricsEndpoint { addr, task })
}

/// One HTTP/1.1 exchange: reads the request head (bounded in size and
/// time), answers `GET /metrics` (or `/`) with the text format, anything
/// else with 404 or 405, and closes.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "scrape request too slow"))??;
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split(|b| *b == b'?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics" | b"/") => {
            handle.run_upkeep();
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", handle.render())
        }
        (b"GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_ip_port_is_accepted() {
        assert!(loopback_addr("--metrics-addr", "127.0.0.1:9464").is_ok());
        assert!(loopback_addr("--metrics-addr", "[::1]:9464").is_ok());
        let e = loopback_addr("--metrics-addr", "0.0.0.0:9464").unwrap_err();
        assert!(matches!(e, MetricsError::NotLoopback { .. }), "{e}");
        assert!(e.to_string().contains("--metrics-addr"), "{e}");
        let e = loopback_addr("--metrics-addr", "10.1.2.3:9464").unwrap_err();
        assert!(matches!(e, MetricsError::NotLoopback { .. }), "{e}");
        let e = loopback_addr("--metrics-addr", "localhost").unwrap_err();
        assert!(matches!(e, MetricsError::BadAddress { .. }), "{e}");
        assert!(e.to_string().contains("--metrics-addr"), "{e}");
    }
}
