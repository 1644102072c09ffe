//! A Produce answer is checked against what was sent (scripted broker): a
//! partition the answer leaves out, names twice, or reports as written
//! without a base offset is a typed error for that batch, never a success;
//! partitions the request did not carry are ignored. Also: one Produce
//! request carries the ready batches of every partition the broker leads.

#[path = "producer_support/broker.rs"]
mod broker;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use broker::{ProduceMode, TOPIC};
use clink_kafka::client::{Acks, ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord};
use clink_kafka::Error;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

fn entry(partition: i32, code: i16, base_offset: i64) -> PartitionProduceResponse {
    let mut p = PartitionProduceResponse::default();
    p.index = partition;
    p.error_code = code;
    p.base_offset = base_offset;
    p.log_append_time_ms = -1;
    p
}

fn answer(topics: Vec<(&'static str, Vec<PartitionProduceResponse>)>) -> ProduceResponse {
    let mut r = ProduceResponse::default();
    for (name, parts) in topics {
        let mut t = TopicProduceResponse::default();
        t.name = StrBytes::from_static_str(name).into();
        t.partition_responses = parts;
        r.responses.push(t);
    }
    r
}

async fn cluster(addr: &str) -> Cluster {
    let mut config = ClientConfig::new(addr);
    config.request_timeout = Duration::from_secs(10);
    config.retry_backoff = Duration::from_millis(5);
    config.retry_backoff_max = Duration::from_millis(20);
    tokio::time::timeout(Duration::from_secs(10), Cluster::connect(config))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// Sends one record to each of partitions 0, 1, 2 and flushes: one request.
async fn one_record_per_partition(producer: &Producer) -> Vec<clink_kafka::Result<i64>> {
    let mut futures = Vec::new();
    for p in 0..3 {
        let r = ProducerRecord::new(TOPIC, format!("v{p}")).with_partition(p);
        futures.push(producer.send(r).await.expect("queued"));
    }
    producer.flush(Duration::from_secs(10)).await.ok();
    let mut out = Vec::new();
    for f in futures {
        out.push(
            tokio::time::timeout(Duration::from_secs(10), f)
                .await
                .expect("completed")
                .map(|r| r.offset),
        );
    }
    out
}

fn plain() -> ProducerConfig {
    ProducerConfig::default()
        .with_idempotent(false)
        .with_acks(Acks::Leader)
        // Long enough that the three records are sealed together by the flush.
        .with_linger(Duration::from_secs(5))
}

fn protocol_message(e: &Error) -> String {
    match e {
        Error::Protocol { api, .. } => {
            assert_eq!(*api, "Produce");
            e.to_string()
        }
        other => panic!("expected a Produce protocol error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_extra_and_offsetless_answers_fail_their_batch_only() {
    // p0 written at 10; p1 left out; p2 "written" at -1; plus zz[0] and t[7],
    // which were never sent.
    let script = |_: &ProduceRequest| {
        answer(vec![
            (TOPIC, vec![entry(0, 0, 10), entry(2, 0, -1), entry(7, 0, 3)]),
            ("zz", vec![entry(0, 0, 1)]),
        ])
    };
    let broker = broker::start(3, ProduceMode::Answer(Arc::new(script)), false).await;
    let producer = Producer::new(cluster(&broker.addr).await, plain()).await.unwrap();
    let results = one_record_per_partition(&producer).await;
    assert_eq!(results[0].as_ref().unwrap(), &10);
    let missing = protocol_message(results[1].as_ref().unwrap_err());
    assert!(missing.contains("does not name this partition"), "{missing}");
    assert!(missing.contains("t[1]"), "{missing}");
    let offsetless = protocol_message(results[2].as_ref().unwrap_err());
    assert!(offsetless.contains("without a valid base offset"), "{offsetless}");

    // All three batches travelled in one request.
    assert_eq!(broker.produce_requests.load(Ordering::SeqCst), 1);
    let requests = broker.requests.lock().unwrap();
    let parts: Vec<i32> = requests[0]
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter().map(|p| p.index))
        .collect();
    assert_eq!(parts.len(), 3, "{parts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_answered_twice_is_an_error() {
    let script = |_: &ProduceRequest| {
        answer(vec![
            (TOPIC, vec![entry(0, 0, 1), entry(1, 0, 5)]),
            (TOPIC, vec![entry(0, 0, 2), entry(2, 0, 7)]),
        ])
    };
    let broker = broker::start(3, ProduceMode::Answer(Arc::new(script)), false).await;
    let producer = Producer::new(cluster(&broker.addr).await, plain()).await.unwrap();
    let results = one_record_per_partition(&producer).await;
    let twice = protocol_message(results[0].as_ref().unwrap_err());
    assert!(twice.contains("more than once"), "{twice}");
    assert_eq!(results[1].as_ref().unwrap(), &5);
    assert_eq!(results[2].as_ref().unwrap(), &7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_fails_on_an_answer_it_cannot_trust() {
    // The idempotent producer cannot know whether a batch the answer left out
    // was written, so its sequence is broken: the batch fails with the
    // producer's sticky error, whose cause is the bad answer.
    let script = |_: &ProduceRequest| answer(vec![(TOPIC, vec![entry(0, 0, 0)])]);
    let broker = broker::start(3, ProduceMode::Answer(Arc::new(script)), false).await;
    let config = ProducerConfig::default().with_linger(Duration::from_secs(5));
    let producer = Producer::new(cluster(&broker.addr).await, config).await.unwrap();
    // One batch at a time per partition until its first answer: p0 and p1.
    let a = producer
        .send(ProducerRecord::new(TOPIC, "a").with_partition(0))
        .await
        .unwrap();
    let b = producer
        .send(ProducerRecord::new(TOPIC, "b").with_partition(1))
        .await
        .unwrap();
    let flushed = producer.flush(Duration::from_secs(10)).await;
    assert_eq!(a.await.unwrap().offset, 0);
    let e = b.await.unwrap_err();
    let Error::ProducerFailed { cause } = &e else {
        panic!("expected ProducerFailed, got {e:?}")
    };
    assert!(protocol_message(cause).contains("does not name this partition"));
    assert!(matches!(flushed, Err(Error::ProducerFailed { .. })), "{flushed:?}");
    // Sticky: nothing more is accepted.
    let again = producer.send(ProducerRecord::new(TOPIC, "c")).await.unwrap_err();
    assert!(matches!(again, Error::ProducerFailed { .. }), "{again:?}");
}

/// A request of more partitions than one `writev` takes (IOV_MAX, 1024
/// parts: each batch is a part of its own between the request's bytes)
/// still reaches the broker whole: it decodes it and every record gets
/// its partition's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_more_parts_than_one_writev_takes_arrives_whole() {
    const PARTITIONS: i32 = 700;
    let script = |request: &ProduceRequest| {
        let entries = request
            .topic_data
            .iter()
            .flat_map(|t| {
                t.partition_data
                    .iter()
                    .map(|p| entry(p.index, 0, i64::from(p.index) * 10))
            })
            .collect();
        answer(vec![(TOPIC, entries)])
    };
    let broker = broker::start(PARTITIONS, ProduceMode::Answer(Arc::new(script)), false).await;
    let producer = Producer::new(cluster(&broker.addr).await, plain())
        .await
        .expect("producer");
    let mut futures = Vec::new();
    for p in 0..PARTITIONS {
        let r = ProducerRecord::new(TOPIC, format!("value of partition {p}")).with_partition(p);
        futures.push(producer.send(r).await.expect("queued"));
    }
    tokio::time::timeout(Duration::from_secs(20), producer.flush(Duration::from_secs(15)))
        .await
        .expect("flushed in time")
        .expect("flush");
    for (p, f) in futures.into_iter().enumerate() {
        let delivered = tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("completed")
            .expect("delivered");
        assert_eq!(delivered.offset, p as i64 * 10, "partition {p}");
    }
    let requests = broker.requests.lock().unwrap();
    let carried: usize = requests
        .iter()
        .flat_map(|r| r.topic_data.iter())
        .map(|t| t.partition_data.len())
        .sum();
    assert_eq!(carried, PARTITIONS as usize);
    let widest = requests
        .iter()
        .map(|r| r.topic_data.iter().map(|t| t.partition_data.len()).sum::<usize>())
        .max()
        .unwrap_or(0);
    assert!(
        widest > 512,
        "the widest request carried {widest} partitions: too few to need two writev calls"
    );
}
