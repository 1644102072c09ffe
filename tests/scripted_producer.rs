//! Scripted-peer tests of the producer: a fake broker on 127.0.0.1 that
//! speaks just enough (ApiVersions v3, Metadata v4, InitProducerId v0,
//! Produce v3, all hand-encoded) to check what real brokers cannot be made
//! to do on demand: a retriable refusal is retried with the very same batch
//! bytes and sequence; a non-retriable refusal gives its sequence numbers
//! back to the next batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use clink_kafka::client::{ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord};
use clink_kafka::wire::record::{DecodeOptions, RecordBatch};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PRODUCER_ID: i64 = 77;

/// What the fake broker saw and what it answers to Produce, in order.
#[derive(Default)]
struct Script {
    /// Error codes for successive Produce requests (then 0).
    produce_errors: Vec<i16>,
    /// The record batch bytes of every Produce request received.
    batches: Vec<Bytes>,
    next_offset: i64,
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn get_str(b: &mut Bytes) -> String {
    let n = b.get_i16();
    if n < 0 {
        return String::new();
    }
    String::from_utf8(b.split_to(n as usize).to_vec()).unwrap()
}

async fn serve(mut s: TcpStream, port: u16, script: Arc<Mutex<Script>>) {
    loop {
        let Ok(len) = s.read_i32().await else { return };
        let mut frame = vec![0u8; len as usize];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        let mut req = Bytes::from(frame);
        let key = req.get_i16();
        let version = req.get_i16();
        let corr = req.get_i32();
        let _client_id = get_str(&mut req);
        let mut body = BytesMut::new();
        match (key, version) {
            (18, 3) => {
                // ApiVersions v3 (flexible body; header v0).
                let apis: &[(i16, i16, i16)] = &[(18, 0, 3), (3, 4, 4), (0, 3, 3), (22, 0, 0)];
                body.put_i16(0);
                body.put_u8(apis.len() as u8 + 1);
                for (k, min, max) in apis {
                    body.put_i16(*k);
                    body.put_i16(*min);
                    body.put_i16(*max);
                    body.put_u8(0);
                }
                body.put_i32(0);
                body.put_u8(0);
            }
            (3, 4) => {
                // Metadata v4: one broker (us), topic "t" with one partition led by node 1.
                body.put_i32(0); // throttle
                body.put_i32(1);
                body.put_i32(1);
                put_str(&mut body, "127.0.0.1");
                body.put_i32(i32::from(port));
                body.put_i16(-1); // rack
                body.put_i16(-1); // cluster id
                body.put_i32(1); // controller
                body.put_i32(1); // topics
                body.put_i16(0);
                put_str(&mut body, "t");
                body.put_u8(0); // is_internal
                body.put_i32(1); // partitions
                body.put_i16(0);
                body.put_i32(0);
                body.put_i32(1); // leader
                body.put_i32(1);
                body.put_i32(1); // replicas
                body.put_i32(1);
                body.put_i32(1); // isr
            }
            (22, 0) => {
                body.put_i32(0);
                body.put_i16(0);
                body.put_i64(PRODUCER_ID);
                body.put_i16(0);
            }
            (0, 3) => {
                let _txn = get_str(&mut req);
                let _acks = req.get_i16();
                let _timeout = req.get_i32();
                assert_eq!(req.get_i32(), 1, "one topic");
                assert_eq!(get_str(&mut req), "t");
                assert_eq!(req.get_i32(), 1, "one partition");
                assert_eq!(req.get_i32(), 0, "partition 0");
                let n = req.get_i32() as usize;
                let records = req.split_to(n);
                let (code, base_offset) = {
                    let mut sc = script.lock().unwrap();
                    let batch = RecordBatch::decode_exact(&records, &DecodeOptions::default()).unwrap();
                    sc.batches.push(records);
                    let code = if sc.produce_errors.is_empty() {
                        0
                    } else {
                        sc.produce_errors.remove(0)
                    };
                    let base = sc.next_offset;
                    if code == 0 {
                        sc.next_offset += i64::from(batch.header.record_count);
                    }
                    (code, base)
                };
                body.put_i32(1);
                put_str(&mut body, "t");
                body.put_i32(1);
                body.put_i32(0);
                body.put_i16(code);
                body.put_i64(if code == 0 { base_offset } else { -1 });
                body.put_i64(-1); // log append time
                body.put_i32(0); // throttle
            }
            other => panic!("the scripted broker does not speak {other:?}"),
        }
        let mut out = BytesMut::new();
        out.put_i32(4 + body.len() as i32);
        out.put_i32(corr);
        out.put_slice(&body);
        if s.write_all(&out).await.is_err() {
            return;
        }
    }
}

async fn start(produce_errors: Vec<i16>) -> (Cluster, Arc<Mutex<Script>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = Arc::new(Mutex::new(Script {
        produce_errors,
        ..Script::default()
    }));
    let shared = script.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, port, shared.clone()));
        }
    });
    let mut config = ClientConfig::new(&format!("127.0.0.1:{port}"));
    config.request_timeout = Duration::from_secs(5);
    config.retry_backoff = Duration::from_millis(5);
    config.retry_backoff_max = Duration::from_millis(20);
    let cluster = tokio::time::timeout(Duration::from_secs(10), Cluster::connect(config))
        .await
        .unwrap()
        .unwrap();
    (cluster, script)
}

async fn send_batch(producer: &Producer, values: &[&str]) -> Vec<clink_kafka::Result<i64>> {
    let mut futures = Vec::new();
    for v in values {
        futures.push(producer.send(ProducerRecord::new("t", v.to_string())).await.unwrap());
    }
    producer.flush(Duration::from_secs(10)).await.unwrap();
    let mut out = Vec::new();
    for f in futures {
        out.push(f.await.map(|r| r.offset));
    }
    out
}

fn header(batch: &Bytes) -> clink_kafka::wire::record::BatchHeader {
    RecordBatch::decode_exact(batch, &DecodeOptions::default())
        .unwrap()
        .header
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_refusal_resends_identical_bytes() {
    // NOT_LEADER_OR_FOLLOWER twice, then success.
    let (cluster, script) = start(vec![6, 6]).await;
    let producer = Producer::new(cluster, ProducerConfig::default()).await.unwrap();
    assert_eq!(producer.identity().unwrap().producer_id, PRODUCER_ID);
    let offsets = send_batch(&producer, &["a", "b"]).await;
    assert_eq!(offsets.into_iter().map(Result::unwrap).collect::<Vec<_>>(), vec![0, 1]);
    let second = send_batch(&producer, &["c"]).await;
    assert_eq!(second[0].as_ref().unwrap(), &2);

    let sc = script.lock().unwrap();
    assert_eq!(
        sc.batches.len(),
        4,
        "three attempts for the first batch, one for the second"
    );
    assert_eq!(sc.batches[0], sc.batches[1], "a retry sends the same bytes");
    assert_eq!(sc.batches[1], sc.batches[2], "a retry sends the same bytes");
    let first = header(&sc.batches[0]);
    assert_eq!(
        (first.producer_id, first.producer_epoch, first.base_sequence),
        (PRODUCER_ID, 0, 0)
    );
    assert_eq!(first.record_count, 2);
    assert_eq!(
        header(&sc.batches[3]).base_sequence,
        2,
        "the next batch continues the sequence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definite_refusal_gives_the_sequence_back() {
    // MESSAGE_TOO_LARGE (not retriable): the batch fails, nothing was written.
    let (cluster, script) = start(vec![10]).await;
    let producer = Producer::new(cluster, ProducerConfig::default()).await.unwrap();
    let failed = send_batch(&producer, &["x", "y", "z"]).await;
    for r in &failed {
        let e = r.as_ref().unwrap_err();
        assert!(e.to_string().contains("MESSAGE_TOO_LARGE"), "{e}");
    }
    let ok = send_batch(&producer, &["p"]).await;
    assert_eq!(ok[0].as_ref().unwrap(), &0);
    let sc = script.lock().unwrap();
    assert_eq!(sc.batches.len(), 2, "a non-retriable refusal is not retried");
    assert_eq!(header(&sc.batches[0]).base_sequence, 0);
    assert_eq!(
        header(&sc.batches[1]).base_sequence,
        0,
        "the refused batch's sequence numbers are reused"
    );
}
