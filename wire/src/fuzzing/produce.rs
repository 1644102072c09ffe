//! Target `produce`: one Produce answer, decoded from fuzzer bytes, matched
//! against a fuzzer-chosen request by [`crate::produce_state`].
//!
//! Input: byte 0 picks the response version (3..=12); byte 1 the number of
//! batches sent (0..=15); then two bytes per batch (topic of three, partition
//! 0..=7, record count); the rest is the response body.

use bytes::Bytes;
use kafka_protocol::messages::ProduceResponse;

use crate::codec::{DecodeResponse, Reader};
use crate::produce_state::{handle_produce_response, BatchOutcome, SentBatch};

const TOPICS: [&str; 3] = ["topic", "a", "b"];

/// The harness; panics when a property fails.
pub fn produce(data: &[u8]) {
    let Some((&v, rest)) = data.split_first() else { return };
    let Some((&n, mut rest)) = rest.split_first() else {
        return;
    };
    let version = 3 + (v % 10) as i16;
    let mut sent: Vec<SentBatch<'static>> = Vec::new();
    for _ in 0..(n % 16) {
        let Some((pair, tail)) = rest.split_first_chunk::<2>() else {
            return;
        };
        rest = tail;
        let b = SentBatch {
            topic: TOPICS[(pair[0] % 3) as usize],
            partition: ((pair[0] >> 2) % 8) as i32,
            record_count: 1 + pair[1] as i32,
        };
        // A request carries each partition once.
        if !sent.iter().any(|s| s.topic == b.topic && s.partition == b.partition) {
            sent.push(b);
        }
    }
    let body = Bytes::copy_from_slice(rest);
    let mut r = Reader::new(&body);
    let Ok(response) = ProduceResponse::decode_response(&mut r, version) else {
        return;
    };
    let answer = handle_produce_response(&sent, &response);
    // Every batch gets exactly one outcome.
    assert_eq!(answer.outcomes.len(), sent.len());
    let entries: usize = response.responses.iter().map(|t| t.partition_responses.len()).sum();
    assert!(answer.unexpected <= entries);
    assert!(answer.throttle_time_ms >= 0);
    for (b, o) in sent.iter().zip(&answer.outcomes) {
        match o {
            // No success without a valid base offset, and offsets that fit.
            BatchOutcome::Delivered {
                base_offset,
                log_append_time,
            } => {
                assert!(*base_offset >= 0);
                assert!(base_offset.checked_add(i64::from(b.record_count)).is_some());
                assert!(*log_append_time >= -1);
                // The answer really named this partition, once, with success.
                let hits: Vec<_> = response
                    .responses
                    .iter()
                    .filter(|t| t.name.0.as_str() == b.topic)
                    .flat_map(|t| t.partition_responses.iter())
                    .filter(|p| p.index == b.partition)
                    .collect();
                assert_eq!(hits.len(), 1);
                assert_eq!(hits[0].error_code, 0);
                assert_eq!(hits[0].base_offset, *base_offset);
            }
            BatchOutcome::Refused { message: Some(m), .. } => assert!(m.len() <= 1024),
            _ => {}
        }
    }
}
