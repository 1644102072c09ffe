//! A canonical text form of a batch: one `batch` line, then one `record`
//! line per record. `tools/golden-batches` prints the same form from the
//! Java client's own reader, so the two implementations are compared line
//! for line (see that folder's README for the format).

use std::fmt::Write;

use super::{RecordBatch, TimestampType};
use crate::error::Result;

fn hex(out: &mut String, b: Option<&[u8]>) {
    match b {
        None => out.push_str("null"),
        Some(b) => {
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
    }
}

/// Appends the canonical dump of `batch` to `out`.
pub fn dump_batch(batch: &RecordBatch, out: &mut String) -> Result<()> {
    let h = &batch.header;
    let _ = writeln!(
        out,
        "batch base_offset={} last_offset_delta={} base_timestamp={} max_timestamp={} compression={} timestamp_type={} transactional={} control={} producer_id={} producer_epoch={} base_sequence={} partition_leader_epoch={} records={}",
        h.base_offset,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        batch.compression().name(),
        match h.timestamp_type() {
            TimestampType::CreateTime => "create",
            TimestampType::LogAppendTime => "log_append",
        },
        h.is_transactional(),
        h.is_control(),
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.partition_leader_epoch,
        h.record_count,
    );
    for r in batch.records() {
        let r = r?;
        let _ = write!(out, "record offset={} timestamp={} key=", r.offset, r.timestamp);
        hex(out, r.key);
        out.push_str(" value=");
        hex(out, r.value);
        let _ = write!(out, " headers={}", r.header_count());
        for (k, v) in r.headers() {
            out.push(' ');
            hex(out, Some(k));
            out.push(':');
            hex(out, v);
        }
        out.push('\n');
    }
    Ok(())
}
