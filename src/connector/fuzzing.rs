//! Harness for the `checkpoint_files` fuzz target (`fuzz/`): the parsers of
//! what the checkpoint protocol reads back from disk after a crash — state
//! files and markers ([`super::checkpoint`]), commit receipts, unresolved
//! markers and staged state rows ([`super::twopc`]). Built under
//! `cfg(fuzzing)` (and for tests, which replay the committed corpus
//! `fuzz/corpus/checkpoint_files/`). Every input must return normally: a
//! panic is a bug in the parser it reaches; whatever parses must
//! round-trip through its writer.

use super::checkpoint::{parse_marker, parse_state, state_text};
use super::twopc::{parse_unresolved_marker, Receipt, StagedCheckpoint};
use super::StateRow;

/// The job lines the state parsers check against (as `copy` writes them).
const JOB: &str = "from=in\nto=out\n";

/// The first byte picks the parser; the next eight (big-endian) the
/// checkpoint id where one is needed; the rest is the file's text (lossy
/// UTF-8, as the readers refuse non-UTF-8 before parsing).
pub fn checkpoint_files(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (id, body) = match rest.split_first_chunk::<8>() {
        Some((id, body)) => (u64::from_be_bytes(*id) % 1_000_000, body),
        None => (1, rest),
    };
    let text = String::from_utf8_lossy(body);
    match selector % 5 {
        0 => {
            // A key the writer refuses (a carriage return) is not round-tripped.
            if let Ok(state) = parse_state(JOB, id, &text) {
                if let Ok(again) = state_text(JOB, &state) {
                    assert_eq!(parse_state(JOB, id, &again), Ok(state), "a state file round-trips");
                }
            }
        }
        1 => {
            let _ = parse_marker(JOB, id, &text);
        }
        2 => {
            if let Ok(receipt) = Receipt::parse(&text) {
                assert_eq!(Receipt::parse(&receipt.to_text()), Ok(receipt), "a receipt round-trips");
            }
        }
        3 => {
            let _ = parse_unresolved_marker(id, &text);
        }
        _ => {
            let (key, value) = text.split_once('\t').unwrap_or((text.as_ref(), ""));
            let row = StateRow {
                key: key.to_owned(),
                value: value.as_bytes().to_vec(),
            };
            if let Ok(Some(staged)) = StagedCheckpoint::from_row(&row) {
                assert_eq!(
                    StagedCheckpoint::from_row(&staged.to_row()).ok().flatten(),
                    Some(staged),
                    "a staged row round-trips"
                );
            }
        }
    }
}

/// Replays the committed corpus through the harness (every input a fuzzer
/// kept is re-checked by `cargo test`); the wire crate's replay test does
/// the same for its targets.
#[cfg(test)]
mod corpus_replay {
    use std::path::PathBuf;

    #[test]
    fn replay_committed_checkpoint_files_corpus() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/checkpoint_files");
        let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus missing at {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(entries.len() >= 5, "the seeds cover every parser");
        for path in entries {
            super::checkpoint_files(&std::fs::read(&path).unwrap());
        }
    }
}
