//! The backend matrix (issue 23): `tests/backends.tsv` places every test
//! file on `both` backends, on `native` only (a connector or CLI suite, with
//! its reason, listed in the README's table), or as a `client` test (the
//! native client, wire or tooling, no backend involved). `scripts/test`
//! builds its rdkafka parity pass from the `both` rows, so a file added to
//! `tests/` without a row would silently miss that pass: this test fails
//! instead. No broker needed.

use std::collections::BTreeSet;
use std::path::Path;

struct Row {
    file: String,
    backends: String,
    why: String,
}

fn rows() -> Vec<Row> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/backends.tsv")).expect("read tests/backends.tsv");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cols = l.split('\t');
            let file = cols.next().unwrap_or_default().to_string();
            let backends = cols.next().unwrap_or_default().to_string();
            let why = cols.next().unwrap_or_default().trim().to_string();
            assert!(
                cols.next().is_none(),
                "tests/backends.tsv: more than three tab-separated columns in {l:?}"
            );
            Row { file, backends, why }
        })
        .collect()
}

fn test_files() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    std::fs::read_dir(&dir)
        .expect("read tests/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_test_file_has_exactly_one_row_and_every_row_a_file() {
    let files = test_files();
    let mut seen = BTreeSet::new();
    for row in rows() {
        assert!(
            seen.insert(row.file.clone()),
            "tests/backends.tsv: {} has two rows",
            row.file
        );
        assert!(
            files.contains(&row.file),
            "tests/backends.tsv: {} names no file tests/{}.rs",
            row.file,
            row.file
        );
    }
    let missing: Vec<_> = files.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "test files not placed in tests/backends.tsv (add a row: both | native <why> | client): {missing:?}"
    );
}

#[test]
fn every_row_names_a_known_backend_set_and_one_backend_suites_say_why_in_the_readme() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README");
    for row in rows() {
        match row.backends.as_str() {
            "both" | "client" => {}
            "native" => {
                assert!(
                    !row.why.is_empty(),
                    "tests/backends.tsv: native-only {} gives no reason",
                    row.file
                );
                let cell = format!("`{}`", row.file);
                assert!(
                    readme.lines().any(|l| l.starts_with('|') && l.contains(&cell)),
                    "README.md: the table of suites on one backend has no row naming {cell}"
                );
            }
            other => panic!(
                "tests/backends.tsv: {}: backends {other:?}, expected both, native or client",
                row.file
            ),
        }
    }
}

#[test]
fn the_parity_pass_is_built_from_the_matrix() {
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test")).expect("scripts/test");
    assert!(
        script.contains("done < tests/backends.tsv") && script.contains("CLINK_KAFKA_TEST_BACKEND=rdkafka"),
        "scripts/test must build its rdkafka parity pass from tests/backends.tsv"
    );
    let both = rows().into_iter().filter(|r| r.backends == "both").count();
    assert!(
        both >= 11,
        "only {both} suites run on both backends; the parity pass had 11 before the matrix"
    );
}
