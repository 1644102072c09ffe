//! The CLI's exit codes, defined once: commands return them, `main` exits
//! with them, and `--help` prints [`help`] from the same table.

/// Success (`txn resolve`: the transaction is committed).
pub const OK: u8 = 0;
/// An error; stderr says what failed (the last line starts `error:`, or is
/// a JSON object of level ERROR under `--log-format json`).
pub const ERROR: u8 = 1;
/// Bad or missing arguments (the argument parser's own code).
pub const USAGE: u8 = 2;
/// `copy --expected N`: idle for `--until-idle-ms` with fewer than N records copied.
pub const COPY_SHORT: u8 = 3;
/// `copy`: another copy holds `--state-dir`'s lock (still, after `--lock-wait-ms`).
pub const COPY_LOCKED: u8 = 4;
/// `txn resolve`: not committed, the identity is fenced.
pub const RESOLVE_FENCED: u8 = 10;
/// `txn resolve`: not committed, the coordinator timed the transaction out.
pub const RESOLVE_TIMED_OUT: u8 = 11;
/// `txn resolve`: not committed, aborted (the success of `--abort`).
pub const RESOLVE_ABORTED: u8 = 12;
/// `txn resolve`: not committed, unknown transactional id.
pub const RESOLVE_UNKNOWN_ID: u8 = 13;
/// `txn resolve`: not committed, the broker cannot resolve (unsupported).
pub const RESOLVE_UNSUPPORTED_BROKER: u8 = 14;
/// `txn resolve`: not committed, authentication refused.
pub const RESOLVE_AUTHENTICATION_REFUSED: u8 = 15;
/// `txn resolve`: not committed, the handle carries no identity.
pub const RESOLVE_NO_IDENTITY: u8 = 16;
/// `txn resolve`: not committed, another refusal by the broker.
pub const RESOLVE_REFUSED: u8 = 17;
/// `txn resolve`: unreachable (transport failures after bounded retries).
pub const RESOLVE_UNREACHABLE: u8 = 20;

/// Every code with its meaning, in the order `--help` lists them.
pub const TABLE: &[(u8, &str)] = &[
    (OK, "success (txn resolve: committed)"),
    (ERROR, "error: stderr says what failed"),
    (USAGE, "bad or missing arguments"),
    (COPY_SHORT, "copy: idle with fewer than --expected records copied"),
    (
        COPY_LOCKED,
        "copy: another copy holds --state-dir's lock (after --lock-wait-ms)",
    ),
    (RESOLVE_FENCED, "txn resolve: not committed: fenced"),
    (RESOLVE_TIMED_OUT, "txn resolve: not committed: timed out"),
    (
        RESOLVE_ABORTED,
        "txn resolve: not committed: aborted (the success of --abort)",
    ),
    (
        RESOLVE_UNKNOWN_ID,
        "txn resolve: not committed: unknown transactional id",
    ),
    (
        RESOLVE_UNSUPPORTED_BROKER,
        "txn resolve: not committed: unsupported broker",
    ),
    (
        RESOLVE_AUTHENTICATION_REFUSED,
        "txn resolve: not committed: authentication refused",
    ),
    (
        RESOLVE_NO_IDENTITY,
        "txn resolve: not committed: no identity in the handle",
    ),
    (
        RESOLVE_REFUSED,
        "txn resolve: not committed: other refusal by the broker",
    ),
    (
        RESOLVE_UNREACHABLE,
        "txn resolve: unreachable (transport failures after bounded retries)",
    ),
];

/// The "Exit codes:" section of `--help`.
pub fn help() -> String {
    let mut s = String::from("Exit codes:\n");
    for (code, meaning) in TABLE {
        s.push_str(&format!("  {code:<3}{meaning}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_code_is_listed_once_in_the_help() {
        let help = super::help();
        let mut seen = std::collections::BTreeSet::new();
        for (code, meaning) in super::TABLE {
            assert!(seen.insert(*code), "exit code {code} listed twice");
            assert!(help.contains(&format!("  {code:<3}{meaning}\n")), "{help}");
        }
        assert_eq!(help.lines().count(), super::TABLE.len() + 1);
    }
}
