//! How a transaction ended, read from one partition's log (sans-IO).
//!
//! A transaction that wrote a partition starting at offset `first` is ended
//! on that partition by the first control batch (transaction marker) of its
//! producer id after `first`: a producer has at most one transaction open
//! per partition, and the coordinator writes the previous transaction's
//! markers before a new one may add the partition (KIP-98; KIP-890 keeps
//! that). So, reading the log uncommitted (control batches included):
//!
//! - a COMMIT marker of the producer id at the epoch the commit writes
//!   (transaction.version 1: the transaction's epoch; version 2: one above,
//!   the coordinator bumps at every end, `TransactionMetadata::prepareAbortOrCommit`,
//!   `Short.MAX_VALUE` included before the id rotates) proves the commit;
//! - an ABORT marker of the producer id at the transaction's epoch or above
//!   (a fence or the transaction timeout bumps it) proves the abort;
//! - anything else is no proof ([`ScanStep::Undecided`]): the log does not
//!   start at or before `first` any more, the record at `first` is not the
//!   transaction's, the producer id wrote again without a marker between,
//!   a marker whose epoch fits neither, a batch that does not decode, or a
//!   partition whose last stable offset passed `first` with no marker found
//!   up to the high watermark (a read_committed consumer would deliver such
//!   records: calling them "not committed" could publish them twice).
//!
//! The batch at `first` must be the transaction's (transactional, its
//! producer id and epoch). Under transaction.version 1 one producer's
//! consecutive transactions share the epoch, so `first` must come from the
//! transaction's own delivery reports: that offset is what names it.
//!
//! While the last stable offset has not passed `first` and nothing decided,
//! the answer is [`ScanStep::More`]: read again from its offset (the marker
//! may not be written yet). [`TxnEndScan`] keeps only offsets between
//! answers; the caller bounds the bytes of each fetch.

use bytes::Bytes;

use super::{ControlKind, DecodeOptions, RecordBatch};

/// The transaction whose end is looked for on one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnEndQuery {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// The epoch its records were written under.
    pub producer_epoch: i16,
    /// The epoch a COMMIT marker of it carries: `producer_epoch` under
    /// transaction.version 1, `producer_epoch + 1` under version 2.
    pub commit_epoch: i16,
    /// The offset of its first record on the partition.
    pub first_offset: i64,
}

impl TxnEndQuery {
    /// The query for a transaction of `transaction_version` (1 or 2; any
    /// other value is judged as 2's epoch bump) that wrote from `first_offset`.
    /// `None` when the commit epoch would overflow (an epoch of
    /// `i16::MAX` cannot have been a transaction's under version 2).
    pub fn new(producer_id: i64, producer_epoch: i16, transaction_version: u8, first_offset: i64) -> Option<Self> {
        let commit_epoch = if transaction_version == 1 {
            producer_epoch
        } else {
            producer_epoch.checked_add(1)?
        };
        Some(TxnEndQuery {
            producer_id,
            producer_epoch,
            commit_epoch,
            first_offset,
        })
    }
}

/// What the log proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnEnd {
    /// A COMMIT marker of the transaction.
    Committed {
        /// The marker's offset.
        offset: i64,
        /// The marker's producer epoch.
        epoch: i16,
    },
    /// An ABORT marker of the transaction.
    Aborted {
        /// The marker's offset.
        offset: i64,
        /// The marker's producer epoch.
        epoch: i16,
    },
}

/// The partition-level facts of one fetch answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionView {
    /// The high watermark.
    pub high_watermark: i64,
    /// The last stable offset (-1: unknown).
    pub last_stable_offset: i64,
    /// The log start offset (-1: unknown).
    pub log_start_offset: i64,
}

/// The answer to one fetch's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanStep {
    /// The transaction's end is proven.
    Ended(TxnEnd),
    /// Not decided by these bytes: fetch again from `next_offset`.
    More {
        /// Where to read next.
        next_offset: i64,
    },
    /// The log cannot prove either way (why). Final for this partition.
    Undecided(String),
}

/// The scan of one partition (see the module docs).
#[derive(Clone, Debug)]
pub struct TxnEndScan {
    query: TxnEndQuery,
    next_offset: i64,
    /// The batch holding `first_offset` was seen and is the transaction's.
    seen_first: bool,
    opts: DecodeOptions,
}

impl TxnEndScan {
    /// A scan from the query's first offset; batches larger than
    /// `max_batch_size` bytes are refused (undecided).
    pub fn new(query: TxnEndQuery, max_batch_size: usize) -> Self {
        TxnEndScan {
            query,
            next_offset: query.first_offset,
            seen_first: false,
            opts: DecodeOptions {
                max_batch_size,
                ..DecodeOptions::default()
            },
        }
    }

    /// The offset to fetch from next.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Judges the record bytes of one fetch answer (fetched from
    /// [`next_offset`](Self::next_offset), read_uncommitted) and the
    /// partition's offsets. Never panics; hostile bytes are undecided.
    pub fn handle_fetch(&mut self, records: &Bytes, view: PartitionView) -> ScanStep {
        let q = self.query;
        if q.first_offset < 0 || q.producer_id < 0 || q.producer_epoch < 0 {
            return ScanStep::Undecided(format!("no transaction to look for: {q:?}"));
        }
        if !self.seen_first && view.log_start_offset > q.first_offset {
            return ScanStep::Undecided(format!(
                "the log starts at offset {}, past the transaction's first offset {} (deleted)",
                view.log_start_offset, q.first_offset
            ));
        }
        let mut at = 0usize;
        while at < records.len() {
            let rest = records.slice(at..);
            let (header, size) = match RecordBatch::peek(&rest, &self.opts) {
                Ok(Some(h)) => h,
                // A batch the broker cut at the size limit: read again from it.
                Ok(None) => break,
                Err(e) => {
                    return ScanStep::Undecided(format!("a batch at offset {} does not decode: {e}", self.next_offset))
                }
            };
            at = at.saturating_add(size);
            if header.last_offset_delta < 0 || header.base_offset < 0 {
                return ScanStep::Undecided(format!("a malformed batch header at offset {}", header.base_offset));
            }
            if header.last_offset() < self.next_offset {
                continue;
            }
            if !self.seen_first {
                if header.base_offset > q.first_offset {
                    return ScanStep::Undecided(format!(
                        "no batch holds the transaction's first offset {} (the next starts at {})",
                        q.first_offset, header.base_offset
                    ));
                }
                let ours = header.is_transactional()
                    && !header.is_control()
                    && header.producer_id == q.producer_id
                    && header.producer_epoch == q.producer_epoch;
                if !ours {
                    return ScanStep::Undecided(format!(
                        "offset {} is not this transaction's record: a batch of producer id {} epoch {} \
                         (transactional: {}, control: {})",
                        q.first_offset,
                        header.producer_id,
                        header.producer_epoch,
                        header.is_transactional(),
                        header.is_control()
                    ));
                }
                self.seen_first = true;
            } else if header.producer_id == q.producer_id {
                if header.is_control() {
                    let batch = match RecordBatch::decode(&rest, &self.opts) {
                        Ok(Some((b, _))) => b,
                        Ok(None) => break,
                        Err(e) => {
                            return ScanStep::Undecided(format!(
                                "the control batch at offset {} does not decode: {e}",
                                header.base_offset
                            ))
                        }
                    };
                    let epoch = header.producer_epoch;
                    let offset = header.base_offset;
                    match batch.control_record() {
                        Ok(Some(c)) => match c.kind {
                            ControlKind::Commit if epoch == q.commit_epoch => {
                                return ScanStep::Ended(TxnEnd::Committed { offset, epoch })
                            }
                            ControlKind::Abort if epoch >= q.producer_epoch => {
                                return ScanStep::Ended(TxnEnd::Aborted { offset, epoch })
                            }
                            ControlKind::Commit | ControlKind::Abort => {
                                return ScanStep::Undecided(format!(
                                    "a {:?} marker at offset {offset} with epoch {epoch} fits neither the \
                                     transaction's epoch {} nor its commit epoch {}",
                                    c.kind, q.producer_epoch, q.commit_epoch
                                ))
                            }
                            ControlKind::Other(_) => {}
                        },
                        Ok(None) => {}
                        Err(e) => {
                            return ScanStep::Undecided(format!(
                                "the control record at offset {offset} does not decode: {e}"
                            ))
                        }
                    }
                } else if !(header.is_transactional() && header.producer_epoch == q.producer_epoch) {
                    return ScanStep::Undecided(format!(
                        "producer id {} wrote again at offset {} (epoch {}) with no marker after the transaction's \
                         records",
                        q.producer_id, header.base_offset, header.producer_epoch
                    ));
                }
            }
            self.next_offset = self.next_offset.max(header.next_offset());
        }
        if self.next_offset >= view.high_watermark {
            if !self.seen_first {
                return ScanStep::Undecided(format!(
                    "the log ends at offset {} (high watermark), before the transaction's first offset {}",
                    view.high_watermark, q.first_offset
                ));
            }
            if view.last_stable_offset > q.first_offset {
                return ScanStep::Undecided(format!(
                    "the partition is stable past offset {} (last stable offset {}) but no marker of producer id {} \
                     up to the high watermark {}",
                    q.first_offset, view.last_stable_offset, q.producer_id, view.high_watermark
                ));
            }
        }
        ScanStep::More {
            next_offset: self.next_offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchMeta, RecordBatchEncoder, RecordOut};
    use bytes::BytesMut;

    const PID: i64 = 4001;

    fn data(base: i64, count: i32, pid: i64, epoch: i16) -> BytesMut {
        let meta = BatchMeta {
            base_offset: base,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: 0,
            transactional: true,
            ..BatchMeta::default()
        };
        let values: Vec<Vec<u8>> = (0..count).map(|i| format!("v{i}").into_bytes()).collect();
        let records: Vec<RecordOut<'_>> = values
            .iter()
            .map(|v| RecordOut {
                timestamp: 1,
                value: Some(v),
                ..RecordOut::default()
            })
            .collect();
        let mut out = BytesMut::new();
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        out
    }

    fn marker(base: i64, pid: i64, epoch: i16, commit: bool) -> BytesMut {
        let meta = BatchMeta {
            base_offset: base,
            producer_id: pid,
            producer_epoch: epoch,
            ..BatchMeta::default()
        };
        let kind = if commit {
            ControlKind::Commit
        } else {
            ControlKind::Abort
        };
        let mut out = BytesMut::new();
        RecordBatchEncoder::new()
            .encode_end_txn_marker(&mut out, &meta, kind, 0, 1)
            .unwrap();
        out
    }

    fn join(parts: &[BytesMut]) -> Bytes {
        let mut all = BytesMut::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        all.freeze()
    }

    fn view(hw: i64, lso: i64) -> PartitionView {
        PartitionView {
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: 0,
        }
    }

    fn scan(tv: u8, first: i64) -> TxnEndScan {
        TxnEndScan::new(TxnEndQuery::new(PID, 7, tv, first).unwrap(), 1 << 20)
    }

    #[test]
    fn a_commit_marker_at_the_commit_epoch_proves_the_commit() {
        // Another producer's records and marker interleave; ours start at 12.
        let log = join(&[
            data(10, 2, 99, 0),
            data(12, 3, PID, 7),
            data(15, 1, 99, 0),
            marker(16, 99, 0, false),
            marker(17, PID, 8, true),
        ]);
        let mut s = scan(2, 13);
        assert_eq!(
            s.handle_fetch(&log, view(18, 18)),
            ScanStep::Ended(TxnEnd::Committed { offset: 17, epoch: 8 })
        );
        // Under transaction.version 1 the marker carries the same epoch.
        let log = join(&[data(12, 3, PID, 7), marker(15, PID, 7, true)]);
        assert!(matches!(
            scan(1, 12).handle_fetch(&log, view(16, 16)),
            ScanStep::Ended(TxnEnd::Committed { offset: 15, epoch: 7 })
        ));
        // An abort at the epoch or above (a fence bumps it) proves the abort.
        for (tv, epoch) in [(1, 7), (1, 8), (2, 8), (2, 9)] {
            let log = join(&[data(12, 3, PID, 7), marker(15, PID, epoch, false)]);
            assert!(
                matches!(
                    scan(tv, 12).handle_fetch(&log, view(16, 16)),
                    ScanStep::Ended(TxnEnd::Aborted { offset: 15, .. })
                ),
                "tv{tv} epoch {epoch}"
            );
        }
    }

    #[test]
    fn the_scan_goes_on_across_fetches_and_waits_below_the_lso() {
        let mut s = scan(2, 12);
        let first = join(&[data(12, 3, PID, 7)]);
        assert_eq!(s.handle_fetch(&first, view(15, 12)), ScanStep::More { next_offset: 15 });
        // Nothing new yet: still open (the LSO has not passed it).
        assert_eq!(
            s.handle_fetch(&Bytes::new(), view(15, 12)),
            ScanStep::More { next_offset: 15 }
        );
        // A fetch from 15 may return the batch before it again: skipped.
        let later = join(&[data(12, 3, PID, 7), data(15, 2, 99, 0), marker(17, PID, 8, true)]);
        assert!(matches!(
            s.handle_fetch(&later, view(18, 18)),
            ScanStep::Ended(TxnEnd::Committed { .. })
        ));
        // A batch cut at the fetch size: read again from the last whole one.
        let mut s = scan(2, 12);
        let whole = join(&[data(12, 3, PID, 7), marker(15, PID, 8, true)]);
        let cut = whole.slice(..whole.len() - 5);
        assert_eq!(s.handle_fetch(&cut, view(16, 16)), ScanStep::More { next_offset: 15 });
        assert!(matches!(
            s.handle_fetch(
                &whole.slice(whole.len() - marker(15, PID, 8, true).len()..),
                view(16, 16)
            ),
            ScanStep::Ended(TxnEnd::Committed { offset: 15, .. })
        ));
    }

    #[test]
    fn what_the_log_cannot_prove_is_undecided() {
        let undecided = |s: ScanStep| matches!(s, ScanStep::Undecided(_));
        // Deleted past the first offset.
        let mut v = view(100, 100);
        v.log_start_offset = 50;
        assert!(undecided(scan(2, 12).handle_fetch(&Bytes::new(), v)));
        // The record at the first offset is someone else's (or ours at another epoch).
        for (pid, epoch) in [(99, 7), (PID, 6), (PID, 8)] {
            let log = join(&[data(12, 3, pid, epoch), marker(15, PID, 8, true)]);
            assert!(undecided(scan(2, 12).handle_fetch(&log, view(16, 16))), "{pid} {epoch}");
        }
        // A gap: no batch holds the first offset.
        let log = join(&[data(14, 1, PID, 7), marker(15, PID, 8, true)]);
        assert!(undecided(scan(2, 12).handle_fetch(&log, view(16, 16))));
        // A commit marker at an epoch that is not the commit's (a successor's, a wrong protocol).
        for (tv, epoch) in [(2, 7), (2, 9), (1, 8)] {
            let log = join(&[data(12, 3, PID, 7), marker(15, PID, epoch, true)]);
            assert!(
                undecided(scan(tv, 12).handle_fetch(&log, view(16, 16))),
                "tv{tv} {epoch}"
            );
        }
        // The producer wrote again without a marker between.
        let log = join(&[data(12, 3, PID, 7), data(15, 1, PID, 8), marker(16, PID, 9, true)]);
        assert!(undecided(scan(2, 12).handle_fetch(&log, view(17, 17))));
        // Stable past the transaction, but no marker of it up to the high watermark.
        let log = join(&[data(12, 3, PID, 7)]);
        assert!(undecided(scan(2, 12).handle_fetch(&log, view(15, 15))));
        // The log ends before the first offset.
        assert!(undecided(scan(2, 12).handle_fetch(&Bytes::new(), view(10, 10))));
        // The commit epoch of i16::MAX is refused up front.
        assert!(TxnEndQuery::new(PID, i16::MAX, 2, 0).is_none());
        assert!(TxnEndQuery::new(PID, i16::MAX - 1, 2, 0).is_some_and(|q| q.commit_epoch == i16::MAX));
    }

    #[test]
    fn hostile_bytes_are_undecided_or_more_never_a_panic() {
        let good = join(&[data(12, 3, PID, 7), marker(15, PID, 8, true)]);
        let mut inputs: Vec<Vec<u8>> = vec![vec![0xff; 80], vec![0; 61], i32::MAX.to_be_bytes().repeat(30)];
        // Every single-byte corruption and every truncation of a real log.
        for i in 0..good.len() {
            let mut b = good.to_vec();
            b[i] ^= 0x5a;
            inputs.push(b);
            inputs.push(good[..i].to_vec());
        }
        // A length claiming i32::MAX bytes.
        let mut huge = good.to_vec();
        huge[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        inputs.push(huge);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (seed % 200) as usize;
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                b.push(seed as u8);
            }
            inputs.push(b);
        }
        for input in inputs {
            let step = scan(2, 12).handle_fetch(&Bytes::from(input.clone()), view(16, 12));
            // The CRC covers the attributes, producer id, epoch and records
            // (not the offsets, length or leader epoch): a corruption may
            // leave the real answer standing but never invents another.
            if let ScanStep::Ended(e) = step {
                assert!(matches!(e, TxnEnd::Committed { epoch: 8, .. }), "{e:?} from {input:?}");
            }
        }
    }
}
