//! Choosing a partition for a record the way the Java client does, so that
//! Java and clink producers agree on where a key lives.
//!
//! - A keyed record goes to `toPositive(murmur2(key)) % partitions`
//!   (`org.apache.kafka.clients.producer.internals.BuiltInPartitioner`,
//!   `org.apache.kafka.common.utils.Utils.murmur2`).
//! - An unkeyed record sticks to one partition until that partition's batch
//!   is sealed, then moves on (the sticky partitioner, KIP-480 / KIP-794);
//!   the producer owns that state.

/// Kafka's murmur2 (MurmurHash2, seed `0x9747b28c`), bit for bit as
/// `Utils.murmur2` in the Java client.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `Utils.toPositive`: clears the sign bit (not `abs`, which overflows).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition the Java client picks for `key` among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (to_positive(murmur2(key)) as u32 % partitions as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by kafka-clients 4.4.0's `Utils.murmur2`, `toPositive`
    /// and `% 3` / `% 7` (tools/golden-batches/lib, via a java source-file
    /// program).
    const JAVA: &[(&str, i32, i32, i32, i32)] = &[
        ("", 275646681, 275646681, 0, 2),
        ("kafka", -798503068, 1348980580, 1, 3),
        ("a", -1563381124, 584102524, 1, 5),
        ("abc", 479470107, 479470107, 0, 4),
        ("hello world", 1221641059, 1221641059, 1, 2),
        ("key-0", 29210041, 29210041, 1, 0),
        ("key-1", 193331640, 193331640, 0, 5),
        ("key-42", -187086521, 1960397127, 0, 3),
        ("clink", 1256177998, 1256177998, 1, 5),
        ("0123456789abcdef", 1438427052, 1438427052, 0, 6),
    ];

    #[test]
    fn murmur2_matches_java() {
        for &(key, hash, positive, p3, p7) in JAVA {
            assert_eq!(murmur2(key.as_bytes()), hash, "murmur2({key:?})");
            assert_eq!(to_positive(hash), positive, "toPositive({key:?})");
            assert_eq!(partition_for_key(key.as_bytes(), 3), p3, "{key:?} % 3");
            assert_eq!(partition_for_key(key.as_bytes(), 7), p7, "{key:?} % 7");
        }
    }

    #[test]
    fn to_positive_is_not_abs() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
    }
}
