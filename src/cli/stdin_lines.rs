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
//!
//! When stdin is a regular file (`produce < file`), each block is filled
//! whole and read into again once no line of it is held any more (besides
//! the one reused, at most [`SPARES`] free blocks are kept): the memory is then already mapped
//! and needs no zeroing, where every fresh block cost a page fault per 4 KiB
//! in the kernel's copy (three quarters of a 100 MB run's 16,800 faults).
//! A pipe or terminal is read as it comes (a line is produced as soon as it
//! arrives), into fresh zeroed blocks.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::mpsc;

/// The size of a fresh block (one read takes at most what is left of it).
const BLOCK: usize = 1024 * 1024;

/// Reads handed over and not yet taken, at most.
const READS_AHEAD: usize = 8;

/// Whole blocks a file reader hands over ahead of the lines taken, at most
/// (a file's reads do not wait: a short queue keeps the reader busy).
const FILE_READS_AHEAD: usize = 2;

/// Blocks a file reader keeps once nothing else holds them, to read into
/// again, at most (the rest are freed).
const SPARES: usize = 2;

/// Blocks a file reader keeps track of, at most: each one handed over until
/// it is free (what the producer holds: its `buffer.memory`, 64 MiB by
/// default, of lines). Tracking one still held costs no memory.
const TRACKED: usize = 1024;

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
    /// Blocks the reading thread allocated (the rest were read into again).
    fresh_blocks: Arc<AtomicUsize>,
}

impl LineReader {
    /// Lines of stdin: read in whole, reused blocks when it is a regular
    /// file, else as it comes.
    pub(super) fn stdin() -> std::io::Result<Self> {
        match regular_file_stdin() {
            Some(file) => Self::of_file(file),
            None => Self::new(std::io::stdin()),
        }
    }

    /// Lines of `input`, read on a thread of their own (ending when the
    /// input ends, fails, or the reader is dropped and a read returns),
    /// each read handed over as it returns.
    pub(super) fn new(mut input: impl Read + Send + 'static) -> std::io::Result<Self> {
        Self::spawn(READS_AHEAD, move |tx, fresh| {
            let mut block = BytesMut::new();
            loop {
                if block.len() < BLOCK / 8 {
                    block = BytesMut::zeroed(BLOCK);
                    fresh.fetch_add(1, Ordering::Relaxed);
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
        })
    }

    /// Lines of `input`, an input whose reads return at once until its end
    /// (a regular file): read in whole blocks of [`BLOCK`] bytes, each read
    /// into again once every line of it is dropped (no page faults, no
    /// zeroing). On an input that can wait (a pipe), a block would only be
    /// handed over once full: use [`new`](Self::new) there.
    pub(super) fn of_file(mut input: impl Read + Send + 'static) -> std::io::Result<Self> {
        Self::spawn(FILE_READS_AHEAD, move |tx, fresh| {
            // Every block handed over, oldest first.
            let mut handed: VecDeque<Bytes> = VecDeque::new();
            loop {
                // The oldest block nothing else holds any more (no line of
                // it is left), and at most SPARES more free ones kept.
                let reused = handed
                    .iter()
                    .position(Bytes::is_unique)
                    .and_then(|i| handed.remove(i))
                    .and_then(|b| b.try_into_mut().ok());
                let mut free = 0;
                handed.retain(|b| {
                    if b.is_unique() {
                        free += 1;
                        free <= SPARES
                    } else {
                        true
                    }
                });
                let mut block = match reused {
                    Some(mut b) => {
                        b.clear();
                        Vec::from(b)
                    }
                    None => {
                        fresh.fetch_add(1, Ordering::Relaxed);
                        Vec::with_capacity(BLOCK)
                    }
                };
                // Reads into the vector's spare room (not zeroed first);
                // returns at the block's end or the input's.
                let result = (&mut input).take(BLOCK as u64).read_to_end(&mut block);
                let at_end = !matches!(result, Ok(n) if n == BLOCK);
                if !block.is_empty() {
                    let b = Bytes::from(block);
                    if handed.len() == TRACKED {
                        handed.pop_front();
                    }
                    handed.push_back(b.clone());
                    if tx.blocking_send(Ok(b)).is_err() {
                        break;
                    }
                }
                if let Err(e) = result {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
                if at_end {
                    break;
                }
            }
        })
    }

    fn spawn(
        ahead: usize,
        read: impl FnOnce(&mpsc::Sender<std::io::Result<Bytes>>, &AtomicUsize) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, reads) = mpsc::channel(ahead);
        let fresh_blocks = Arc::new(AtomicUsize::new(0));
        let fresh = fresh_blocks.clone();
        std::thread::Builder::new()
            .name("clink-kafka-stdin".into())
            .spawn(move || read(&tx, &fresh))?;
        Ok(LineReader {
            reads,
            chunk: Bytes::new(),
            partial: BytesMut::new(),
            eof: false,
            fresh_blocks,
        })
    }

    /// Blocks the reading thread has allocated so far (the rest of its
    /// reads went into blocks used before).
    pub(super) fn fresh_blocks(&self) -> usize {
        self.fresh_blocks.load(Ordering::Relaxed)
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

/// Stdin as a file of its own (a duplicate of descriptor 0) when it is a
/// regular file.
fn regular_file_stdin() -> Option<std::fs::File> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let file = std::fs::File::from(fd);
        file.metadata().ok()?.is_file().then_some(file)
    }
    #[cfg(not(unix))]
    {
        None
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
        let whole_blocks = lines_of(LineReader::of_file(Steps(input.to_vec(), step)).unwrap());
        let as_they_come = lines_of(LineReader::new(Steps(input.to_vec(), step)).unwrap());
        assert_eq!(whole_blocks, as_they_come, "the two readers disagree (reads of {step})");
        as_they_come
    }

    fn lines_of(mut r: LineReader) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
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

    /// `n` numbered lines of 1,000 bytes.
    fn numbered(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n * 1000);
        for i in 0..n {
            v.extend_from_slice(format!("{i:08}{}\n", "x".repeat(991)).as_bytes());
        }
        v
    }

    #[test]
    fn a_file_is_read_into_the_same_blocks_again_once_their_lines_are_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        // 40 MiB exactly (a multiple of the block: the end is found by an
        // empty read), every line dropped once checked.
        let input = numbered(40 * BLOCK / 1000 + 1);
        let input = &input[..40 * BLOCK];
        let lines = input.split(|b| *b == b'\n').count() - 1;
        let mut r = LineReader::of_file(std::io::Cursor::new(input.to_vec())).unwrap();
        let (seen, bytes) = rt.block_on(async {
            let (mut seen, mut bytes) = (0usize, 0usize);
            while let Some(l) = r.next_line().await.unwrap() {
                if l.len() == 999 {
                    assert_eq!(&l[..8], format!("{seen:08}").as_bytes());
                }
                bytes += l.len() + 1;
                seen += 1;
            }
            (seen, bytes)
        });
        assert_eq!(
            (seen, bytes),
            (lines + 1, 40 * BLOCK + 1),
            "every line, the cut last one too"
        );
        let fresh = r.fresh_blocks.load(Ordering::Relaxed);
        // 40 blocks read; at most those queued, being split, being read
        // and kept free are ever new.
        assert!(
            fresh <= FILE_READS_AHEAD + SPARES + 2,
            "{fresh} fresh blocks for 40 reads"
        );
        assert!(fresh >= 1);

        // Lines still held keep their block: it is never read into again.
        let input = numbered(12 * BLOCK / 1000);
        let mut r = LineReader::of_file(std::io::Cursor::new(input.clone())).unwrap();
        let held = rt.block_on(async {
            let mut held = Vec::new();
            let mut i = 0usize;
            while let Some(l) = r.next_line().await.unwrap() {
                if i.is_multiple_of(500) {
                    held.push((i, l));
                }
                i += 1;
            }
            held
        });
        for (i, l) in &held {
            assert_eq!(&l[..8], format!("{i:08}").as_bytes(), "line {i} was overwritten");
            assert!(l[8..].iter().all(|b| *b == b'x'), "line {i} was overwritten");
        }
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
