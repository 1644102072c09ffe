//! Input lines for `produce`, as zero-copy slices of large reads.
//!
//! `produce` used tokio's `lines()` on tokio's stdin: each chunk of input
//! was copied out of tokio's read buffer, each line into a `String`
//! (checked to be UTF-8, so a record of other bytes could not be
//! produced), and into the record again. Here a thread of its own reads
//! stdin straight into blocks of [`BLOCK`] bytes and hands each read over
//! as a [`Bytes`]; a line is a slice of it, so the record shares the block
//! and nothing is copied or checked (only a line that spans two reads is
//! copied, once). A block is freed once the last record holding a slice of
//! it is delivered, so memory follows what the producer holds (its
//! `buffer.memory`), plus the reads in the channel ([`READS_AHEAD`]).

use std::io::Read;

use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::mpsc;

/// The size of a fresh block (one read takes at most what is left of it).
const BLOCK: usize = 1024 * 1024;

/// Reads handed over and not yet taken, at most.
const READS_AHEAD: usize = 8;

/// The longest line accepted: a longer one is an error rather than a
/// buffer that grows with the input.
const MAX_LINE: usize = 128 * 1024 * 1024;

/// Lines of an input, each without its `\n` (or `\r\n`); a last line
/// without a newline is a line too, as with tokio's `lines()`.
pub(super) struct LineReader {
    reads: mpsc::Receiver<std::io::Result<Bytes>>,
    /// What is left of the latest read.
    chunk: Bytes,
    /// A line begun in an earlier read.
    partial: BytesMut,
    eof: bool,
}

impl LineReader {
    /// Lines of stdin.
    pub(super) fn stdin() -> std::io::Result<Self> {
        Self::new(std::io::stdin())
    }

    /// Lines of `input`, read on a thread of their own (ending when the
    /// input ends, fails, or the reader is dropped and a read returns).
    pub(super) fn new(mut input: impl Read + Send + 'static) -> std::io::Result<Self> {
        let (tx, reads) = mpsc::channel(READS_AHEAD);
        std::thread::Builder::new()
            .name("clink-kafka-stdin".into())
            .spawn(move || {
                let mut block = BytesMut::new();
                loop {
                    if block.len() < BLOCK / 8 {
                        block = BytesMut::zeroed(BLOCK);
                    }
                    let read = match input.read(&mut block) {
                        Ok(0) => break,
                        Ok(n) => Ok(block.split_to(n).freeze()),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => Err(e),
                    };
                    let failed = read.is_err();
                    if tx.blocking_send(read).is_err() || failed {
                        break;
                    }
                }
            })?;
        Ok(LineReader {
            reads,
            chunk: Bytes::new(),
            partial: BytesMut::new(),
            eof: false,
        })
    }

    /// The next line, or `None` at the end of the input.
    ///
    /// Cancel safety: cancel safe. What was read stays in the reader, and
    /// the next call hands over the same line.
    pub(super) async fn next_line(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.chunk) {
                let line = if self.partial.is_empty() {
                    self.chunk.split_to(i + 1)
                } else {
                    self.partial.extend_from_slice(&self.chunk[..=i]);
                    self.chunk.advance(i + 1);
                    self.partial.split().freeze()
                };
                return Ok(Some(strip_newline(line)));
            }
            if !self.chunk.is_empty() {
                if self.partial.len() + self.chunk.len() > MAX_LINE {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a line longer than {} MiB (no newline)", MAX_LINE >> 20),
                    ));
                }
                self.partial.extend_from_slice(&self.chunk);
                self.chunk.clear();
            }
            if self.eof {
                return Ok((!self.partial.is_empty()).then(|| self.partial.split().freeze()));
            }
            match self.reads.recv().await {
                Some(Ok(read)) => self.chunk = read,
                Some(Err(e)) => {
                    self.eof = true;
                    return Err(e);
                }
                None => self.eof = true,
            }
        }
    }
}

/// `line` without its final `\n` and a `\r` before it.
fn strip_newline(mut line: Bytes) -> Bytes {
    let mut end = line.len().saturating_sub(1);
    if end > 0 && line.get(end - 1) == Some(&b'\r') {
        end -= 1;
    }
    line.truncate(end);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands its bytes over in reads of at most `step` bytes.
    struct Steps(Vec<u8>, usize);

    impl Read for Steps {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    fn lines(input: &[u8], step: usize) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut r = LineReader::new(Steps(input.to_vec(), step)).unwrap();
            let mut out = Vec::new();
            while let Some(l) = r.next_line().await.unwrap() {
                out.push(l.to_vec());
            }
            out
        })
    }

    #[test]
    fn splits_like_lines_without_copying_or_checking_utf8() {
        let v = |s: &[&[u8]]| s.iter().map(|l| l.to_vec()).collect::<Vec<_>>();
        // Whole, and in reads of 1, 2 and 3 bytes (lines and "\r\n" cut
        // across reads).
        for step in [usize::MAX, 1, 2, 3] {
            assert_eq!(
                lines(b"a\nbc\r\n\n\xff\xfe\nlast", step),
                v(&[b"a", b"bc", b"", b"\xff\xfe", b"last"]),
                "reads of {step}"
            );
            assert_eq!(lines(b"a\n", step), v(&[b"a"]));
            assert_eq!(lines(b"\r\n", step), v(&[b""]));
            assert_eq!(lines(b"", step), v(&[]));
        }
        // 3 MiB of 1,000-byte lines, in pipe-sized reads (64 KiB).
        let mut big = Vec::new();
        for i in 0..3000 {
            big.extend_from_slice(format!("{i:04}{}\n", "x".repeat(995)).as_bytes());
        }
        let got = lines(&big, 64 * 1024);
        assert_eq!(got.len(), 3000);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, l)| l.len() == 999 && l.starts_with(format!("{i:04}").as_bytes())));
    }

    #[test]
    fn a_line_past_the_bound_is_an_error_not_a_growing_buffer() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let e = rt.block_on(async {
            let endless = std::io::repeat(b'x');
            LineReader::new(endless).unwrap().next_line().await.unwrap_err()
        });
        assert!(e.to_string().contains("MiB"), "{e}");
    }

    #[test]
    fn a_read_error_is_returned() {
        struct Fails;
        impl Read for Fails {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let e = rt.block_on(async { LineReader::new(Fails).unwrap().next_line().await.unwrap_err() });
        assert!(e.to_string().contains("disk on fire"), "{e}");
    }
}
