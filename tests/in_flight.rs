//! The producer's in-flight limit (`max_in_flight`), observed on the wire: a
//! proxy in front of the real broker holds every Produce response back for
//! a while and counts the Produce requests outstanding at once. With eight
//! partitions' batches ready, a limit of 2 keeps exactly 2 on the wire; a
//! limit of 8 lets more through (so it is the limit that bounded the first
//! run, not the proxy or the broker). Every record is delivered either way.
//! And while a partition's one in-flight slot is taken, the records that
//! arrive meanwhile wait in one open batch (sealed when the slot frees), not
//! in a queue of linger-sized batches each waiting its own round trip.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use clink_kafka::client::{NewTopic, Producer, ProducerConfig, ProducerRecord};
use common::proxy::{Proxy, ProxyOptions};

const PARTITIONS: i32 = 8;
const RECORDS: usize = 1_600;

/// Produces RECORDS records round-robin over the partitions through a fresh
/// proxy; returns the most Produce requests it saw outstanding at once.
async fn max_outstanding_with(brokers: &str, topic: &str, max_in_flight: usize) -> usize {
    let options = ProxyOptions {
        hold_produce_responses: Duration::from_millis(40),
        ..ProxyOptions::default()
    };
    let proxy = Proxy::start(brokers.split(',').next().unwrap().to_owned(), options).await;
    let cluster = common::cluster(common::config(&proxy.addr.to_string())).await;
    let producer = Producer::new(
        cluster,
        ProducerConfig::default()
            .with_max_in_flight(max_in_flight)
            // Small batches, so every partition always has one ready.
            .with_batch_size(2048)
            .with_linger(Duration::from_millis(1)),
    )
    .await
    .expect("producer through the proxy");
    let mut acks = Vec::new();
    for i in 0..RECORDS {
        let p = (i % PARTITIONS as usize) as i32;
        let r = ProducerRecord::new(topic, format!("{i:05}-{}", "v".repeat(100))).with_partition(p);
        acks.push(producer.send(r).await.expect("send"));
    }
    producer.flush(Duration::from_secs(60)).await.expect("flush");
    for a in acks {
        a.await.expect("delivered");
    }
    assert!(proxy.rewritten.load(Ordering::Relaxed) >= 1, "went through the proxy");
    assert_eq!(proxy.produce_outstanding.load(Ordering::SeqCst), 0);
    proxy.max_produce_outstanding.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_in_flight_produce_requests_are_outstanding() {
    let Some(brokers) = common::brokers() else { return };
    let direct = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("in-flight");
    common::create_topic(&direct, NewTopic::new(&topic, PARTITIONS, 1)).await;

    let limited = max_outstanding_with(&brokers, &topic, 2).await;
    assert_eq!(limited, 2, "max_in_flight=2 allowed {limited} Produce requests at once");
    let wider = max_outstanding_with(&brokers, &topic, 5).await;
    assert!(
        wider > 2,
        "max_in_flight=5 never had more than {wider} requests out: the proxy cannot see concurrency"
    );
    assert!(wider <= 5, "max_in_flight=5 allowed {wider}");
    let last = direct.refresh_topics(&[&topic]).await.unwrap();
    assert_eq!(last.topics[topic.as_str()].partitions.len(), PARTITIONS as usize);
}

/// Records that trickle in (one every ~2 ms, longer than the 1 ms linger)
/// while each Produce answer is held 100 ms: with one request in flight at a
/// time, the records that arrive during a round trip go out together in the
/// next request. Sealing a batch at every linger deadline regardless of the
/// free slot made one request per record here (200 round trips, 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_behind_a_full_in_flight_slot_coalesces_into_one_batch() {
    let Some(brokers) = common::brokers() else { return };
    let direct = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("in-flight-coalesce");
    common::create_topic(&direct, NewTopic::new(&topic, 1, 1)).await;
    let options = ProxyOptions {
        hold_produce_responses: Duration::from_millis(100),
        ..ProxyOptions::default()
    };
    let proxy = Proxy::start(brokers.split(',').next().unwrap().to_owned(), options).await;
    let cluster = common::cluster(common::config(&proxy.addr.to_string())).await;
    let producer = Producer::new(
        cluster,
        ProducerConfig::default()
            .with_max_in_flight(1)
            .with_linger(Duration::from_millis(1)),
    )
    .await
    .expect("producer through the proxy");
    const TRICKLE: usize = 200;
    let mut acks = Vec::new();
    for i in 0..TRICKLE {
        let r = ProducerRecord::new(&topic, format!("{i:05}")).with_partition(0);
        acks.push(producer.send(r).await.expect("send"));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    producer.flush(Duration::from_secs(60)).await.expect("flush");
    for a in acks {
        a.await.expect("delivered");
    }
    let requests = proxy.produce_requests.load(Ordering::SeqCst);
    assert_eq!(proxy.max_produce_outstanding.load(Ordering::SeqCst), 1);
    eprintln!("{TRICKLE} records trickled in: {requests} Produce requests");
    assert!(
        requests <= TRICKLE / 5,
        "{requests} Produce requests for {TRICKLE} records: batches were sealed while the in-flight slot was \
         taken, one round trip each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_out_of_range_is_a_named_config_error() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    for bad in [0, 6] {
        let e = Producer::new(cluster.clone(), ProducerConfig::default().with_max_in_flight(bad))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("max.in.flight.requests.per.connection") && text.contains("between 1 and 5"),
            "{text}"
        );
    }
}
