//! Input lines for `produce`, as zero-copy slices of large reads.
//!
//! `produce` used tokio's `lines()`: each line was copied into a `String`
//! (and checked to be UTF-8, so a record of other bytes could not be
//! produced), and copied again into the record. Here the input is read in
//! blocks of about [`BLOCK`] bytes and each line is a [`Bytes`] slice of its
//! block: the record shares the block, and nothing is copied or checked.
//! A block is freed once the last record holding a slice of it is
//! delivered, so memory follows what the producer holds (its
//! `buffer.memory`), plus one block.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The size of one read (and of a fresh block).
const BLOCK: usize = 1024 * 1024;

/// The longest line accepted: a longer one is an error rather than a
/// buffer that grows with the input.
pub(super) const MAX_LINE: usize = 128 * 1024 * 1024;

/// Lines of `reader`, each without its `\n` (or `\r\n`); a last line
/// without a newline is a line too, as with tokio's `lines()`.
pub(super) struct LineReader<R> {
    reader: R,
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    searched: usize,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(super) fn new(reader: R) -> Self {
        LineReader {
            reader,
            buf: BytesMut::new(),
            searched: 0,
            eof: false,
        }
    }

    /// The next line, or `None` at the end of the input.
    ///
    /// Cancel safety: cancel safe. What was read stays in the reader, and
    /// the next call hands over the same line.
    pub(super) async fn next_line(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.searched..]) {
                let end = self.searched + i;
                self.searched = 0;
                let mut line = self.buf.split_to(end + 1).freeze();
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                return Ok(Some(line));
            }
            self.searched = self.buf.len();
            if self.eof {
                self.searched = 0;
                return Ok((!self.buf.is_empty()).then(|| self.buf.split().freeze()));
            }
            if self.buf.len() > MAX_LINE {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a line longer than {} MiB (no newline)", MAX_LINE >> 20),
                ));
            }
            if self.buf.capacity() - self.buf.len() < BLOCK / 4 {
                self.buf.reserve(BLOCK);
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                self.eof = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut r = LineReader::new(input);
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
        assert_eq!(
            lines(b"a\nbc\r\n\n\xff\xfe\nlast"),
            v(&[b"a", b"bc", b"", b"\xff\xfe", b"last"])
        );
        assert_eq!(lines(b"a\n"), v(&[b"a"]));
        assert_eq!(lines(b""), v(&[]));
        // Lines across reads of a block: 3 MiB of 1,000-byte lines.
        let mut big = Vec::new();
        for i in 0..3000 {
            big.extend_from_slice(format!("{i:04}{}\n", "x".repeat(995)).as_bytes());
        }
        let got = lines(&big);
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
            let endless = tokio::io::repeat(b'x');
            LineReader::new(endless).next_line().await.unwrap_err()
        });
        assert!(e.to_string().contains("MiB"), "{e}");
    }
}
