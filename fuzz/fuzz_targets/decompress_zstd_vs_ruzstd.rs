//! Our zstd decoder (structured-zstd, one frame at a time under our window
//! clamp and output cap) against an independent pure-Rust decoder, ruzstd:
//! where both decode the same hostile bytes, they must agree byte for byte.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Read;

use clink_kafka_wire::compression::{decompress, Compression};
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::StreamingDecoder;

const CAP: usize = 1 << 20;

/// Every frame of `data` through ruzstd, skippable frames skipped; `None`
/// when ruzstd refuses the bytes or they inflate past `CAP`.
fn ruzstd_decode(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        match StreamingDecoder::new(&mut data) {
            Ok(mut frame) => {
                let room = (CAP + 1).saturating_sub(out.len()) as u64;
                (&mut frame).take(room).read_to_end(&mut out).ok()?;
                if out.len() > CAP || !frame.decoder.is_finished() {
                    return None;
                }
                let d = &frame.decoder;
                if let (Some(stored), Some(computed)) = (d.get_checksum_from_data(), d.get_calculated_checksum()) {
                    if stored != computed {
                        return None;
                    }
                }
            }
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame { length, .. })) => {
                data = data.get(length as usize..)?;
            }
            Err(_) => return None,
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    // Ours first: ruzstd reserves whatever window a frame declares, so it
    // only sees input that we decoded under the cap (and whose windows
    // the clamp bounded).
    let Ok(ours) = decompress(Compression::Zstd, data, CAP) else {
        return;
    };
    if let Some(theirs) = ruzstd_decode(data) {
        assert!(ours == theirs, "structured-zstd and ruzstd decode the same frames differently");
    }
});
