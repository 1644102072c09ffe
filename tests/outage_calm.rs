//! Calm under outages (issue 24, point 4).
//!
//! - Many callers waiting on metadata during an outage share one refresh in
//!   flight, and refreshes are paced by the backoff: at most one per
//!   backoff step, not one per waiter.
//! - Opening a `Cluster` retries the whole bootstrap list with backoff
//!   until `ClientConfig::bootstrap_timeout`: a broker that comes back
//!   within it is found; one that does not fails with an error naming the
//!   option.
//!
//! The outage is a test-local proxy (tests/common/proxy.rs) that cuts the
//! client off from the real broker silently, then heals.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clink_kafka::client::{ClientConfig, Cluster, NewTopic};
use common::proxy::{Proxy, ProxyOptions};

const WAITERS: usize = 48;

fn outage_config(bootstrap: &str) -> ClientConfig {
    let mut c = common::config(bootstrap);
    c.connect_timeout = Duration::from_millis(200);
    c.request_timeout = Duration::from_millis(500);
    c.retry_backoff = Duration::from_millis(200);
    c.retry_backoff_max = Duration::from_secs(1);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_costs_one_metadata_refresh_per_backoff_step_not_one_per_waiter() {
    let Some(brokers) = common::brokers() else { return };
    let direct = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("outage-calm");
    common::create_topic(&direct, NewTopic::new(&topic, 1, 1)).await;

    let proxy = Proxy::start(brokers.split(',').next().unwrap().to_owned(), ProxyOptions::default()).await;
    let cluster = common::cluster(outage_config(&proxy.addr.to_string())).await;
    cluster
        .refresh_topics(&[&topic])
        .await
        .expect("metadata before the outage");

    proxy.partitioned.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = cluster.metadata_refreshes();
    let started = Instant::now();
    let outage = Duration::from_secs(3);
    // Each waiter asks again at once whenever its refresh fails: the worst
    // caller there is.
    let mut waiters = Vec::new();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..WAITERS {
        let cluster = cluster.clone();
        let topic = topic.clone();
        let failures = failures.clone();
        waiters.push(tokio::spawn(async move {
            while started.elapsed() < outage {
                if cluster.refresh_topics(&[&topic]).await.is_err() {
                    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
    let elapsed = started.elapsed();
    let refreshes = cluster.metadata_refreshes() - before;
    let failures = failures.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "outage: {refreshes} metadata refreshes in {elapsed:?} for {WAITERS} waiters \
         ({failures} failed calls shared among them)"
    );
    // One per backoff step: the step is at least retry_backoff (200 ms).
    let steps = (elapsed.as_millis() / 200) as u64 + 1;
    assert!(refreshes >= 1, "no refresh during the outage");
    assert!(
        refreshes <= steps,
        "{refreshes} refreshes in {elapsed:?} for {WAITERS} waiters: more than one per 200 ms backoff step"
    );
    assert!(
        failures >= WAITERS,
        "every waiter saw the outage ({failures} failed calls)"
    );

    // Healed: the next refresh answers.
    proxy.partitioned.store(false, std::sync::atomic::Ordering::SeqCst);
    let healed = Instant::now();
    loop {
        match cluster.refresh_topics(&[&topic]).await {
            Ok(md) if md.topics.contains_key(&topic) => break,
            _ if healed.elapsed() > Duration::from_secs(20) => panic!("metadata never came back after the outage"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_retries_until_the_broker_comes_back_within_bootstrap_timeout() {
    let Some(brokers) = common::brokers() else { return };
    let proxy = Proxy::start(brokers.split(',').next().unwrap().to_owned(), ProxyOptions::default()).await;
    proxy.partitioned.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut config = outage_config(&proxy.addr.to_string());
    config.bootstrap_timeout = Duration::from_secs(20);
    let started = Instant::now();
    let connecting = tokio::spawn(Cluster::connect(config));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!connecting.is_finished(), "bootstrap gave up while the broker was away");
    proxy.partitioned.store(false, std::sync::atomic::Ordering::SeqCst);
    let cluster = tokio::time::timeout(Duration::from_secs(25), connecting)
        .await
        .expect("bootstrap hung past its deadline")
        .unwrap()
        .expect("bootstrap once the broker is back");
    println!(
        "bootstrap: connected {:?} after start, {} metadata refreshes",
        started.elapsed(),
        cluster.metadata_refreshes()
    );
    assert!(!cluster.metadata().brokers.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_gives_up_at_bootstrap_timeout_naming_the_option() {
    // A port nothing listens on: connections are refused at once.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut config = outage_config(&addr.to_string());
    config.bootstrap_timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), Cluster::connect(config))
        .await
        .expect("bootstrap hung past its deadline")
        .expect_err("nothing listens there");
    let waited = started.elapsed();
    let text = err.to_string();
    assert!(text.contains("bootstrap_timeout"), "{text}");
    assert!(text.contains(&addr.to_string()), "{text}");
    assert!(
        waited >= Duration::from_millis(700),
        "gave up after {waited:?}: before retrying"
    );

    // Zero: one pass, at once.
    let mut once = outage_config(&addr.to_string());
    once.bootstrap_timeout = Duration::ZERO;
    let started = Instant::now();
    let err = Cluster::connect(once).await.expect_err("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a single pass took {:?}: {err}",
        started.elapsed()
    );
}

/// Control requests are hedged like Metadata: with the control
/// connection's broker cut off silently, DescribeCluster, the admin's
/// Metadata read and a non-transactional InitProducerId (opening an
/// idempotent producer) are answered by another broker within a few
/// hundred milliseconds, not after `request_timeout` (20 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_requests_are_hedged_when_the_control_broker_is_cut_off() {
    let Some(brokers) = common::cluster::brokers() else {
        return;
    };
    let direct = common::cluster(common::cluster::config(&brokers)).await;
    let nodes: Vec<(i32, String)> = direct
        .metadata()
        .brokers
        .values()
        .map(|b| (b.node_id, b.addr()))
        .collect();
    assert!(nodes.len() >= 2, "the cluster has {} brokers", nodes.len());
    let proxies = common::proxy::ClusterProxy::start(&nodes).await;
    let mut config = common::cluster::config(&proxies.bootstrap());
    config.request_timeout = Duration::from_secs(20);
    let cluster = common::cluster(config).await;
    // A data connection to every broker (what the hedge may use).
    for (id, _) in &nodes {
        cluster.broker(*id).await.expect("a data connection");
    }
    let control = cluster.any_broker().await.expect("the control connection");
    let cut = *proxies
        .proxies
        .iter()
        .find(|(_, p)| p.addr.to_string() == control.broker().addr)
        .map(|(id, _)| id)
        .expect("the control connection goes through a proxy");
    proxies.set_partitioned(cut, true);
    let admin = clink_kafka::client::Admin::new(cluster.clone());
    let bound = Duration::from_secs(5);

    let started = Instant::now();
    let described = tokio::time::timeout(bound, admin.describe_cluster())
        .await
        .expect("DescribeCluster waited for the cut-off broker")
        .expect("DescribeCluster");
    println!(
        "DescribeCluster answered in {:?} with broker {cut} cut off",
        started.elapsed()
    );
    assert!(!described.brokers.is_empty());

    let started = Instant::now();
    tokio::time::timeout(bound, admin.describe_topics(None))
        .await
        .expect("the admin's Metadata waited for the cut-off broker")
        .expect("describe_topics");
    println!("admin Metadata answered in {:?}", started.elapsed());

    let started = Instant::now();
    let producer = tokio::time::timeout(
        bound,
        clink_kafka::client::Producer::new(
            cluster.clone(),
            clink_kafka::client::ProducerConfig::default().with_idempotent(true),
        ),
    )
    .await
    .expect("InitProducerId waited for the cut-off broker")
    .expect("an idempotent producer");
    println!("idempotent producer (InitProducerId) opened in {:?}", started.elapsed());
    drop(producer);
    proxies.set_partitioned(cut, false);
}
