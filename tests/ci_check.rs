//! Whether a run must have its brokers and tools (`CI` set to `true` or
//! `1`) is decided in one place, `common::broker_required` (which the
//! `common` helpers use): a test that spells its own check drifts (one
//! accepted only `CI=true` and skipped silently under `CI=1`). This test
//! reads every Rust file under `tests/` and fails on any other mention of
//! the `CI` variable.

mod common;

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` that read the `CI` variable.
fn ci_reads(text: &str) -> Vec<(usize, String)> {
    // Built, so that this file does not match itself.
    let quoted = ["\"C", "I\""].concat();
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&quoted))
        .map(|(i, l)| (i + 1, l.trim().to_owned()))
        .collect()
}

#[test]
fn only_the_common_helper_reads_the_ci_variable() {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let helper = tests.join("common").join("mod.rs");
    let mut files = Vec::new();
    rust_files(&tests, &mut files);
    assert!(files.len() > 50, "only {} test files found", files.len());
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let reads = ci_reads(&text);
        if *file == helper {
            assert_eq!(
                reads.len(),
                1,
                "tests/common/mod.rs reads CI once, in broker_required: {reads:?}"
            );
            continue;
        }
        for (line, l) in reads {
            offenders.push(format!("{}:{line}: {l}", file.strip_prefix(&tests).unwrap().display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "tests that spell their own CI check (use common::broker_required, common::skip_or_fail or \
         common::required_env):\n{}",
        offenders.join("\n")
    );
}

/// The check catches the spellings it is for.
#[test]
fn the_scan_sees_a_spelt_check() {
    let q = |s: &str| s.replace('\'', "\"");
    assert_eq!(
        ci_reads(&q("if std::env::var('CI').is_ok_and(|v| v == 'true') {")).len(),
        1
    );
    assert_eq!(ci_reads(&q("let ci = std::env::var_os('CI');")).len(), 1);
    assert!(ci_reads(&q("let x = common::broker_required(); // CI")).is_empty());
}

/// The helper's meaning: `true` or `1` (any case, trimmed), nothing else.
#[test]
fn broker_required_follows_the_ci_variable() {
    // Only this test in this binary touches the variable.
    let saved = std::env::var_os(["C", "I"].concat());
    let set = |v: Option<&str>| {
        let name = ["C", "I"].concat();
        // SAFETY: no other thread of this test binary reads or writes the
        // environment meanwhile (the other tests here only read files).
        unsafe {
            match v {
                Some(v) => std::env::set_var(&name, v),
                None => std::env::remove_var(&name),
            }
        }
    };
    for (value, required) in [
        (Some("true"), true),
        (Some("1"), true),
        (Some("TRUE"), true),
        (Some(" true "), true),
        (Some("false"), false),
        (Some("0"), false),
        (Some(""), false),
        (None, false),
    ] {
        set(value);
        assert_eq!(common::broker_required(), required, "CI={value:?}");
    }
    set(saved.as_deref().map(|v| v.to_str().unwrap()));
}
