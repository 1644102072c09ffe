//! The default build pulls no `*-sys` crate and nothing that builds C: no
//! cmake, no cc-built bundled library. `--features rdkafka` adds exactly
//! librdkafka (`rdkafka-sys`, which builds the bundled C library with
//! make, probing with `pkg-config`) and no optional C library: no OpenSSL,
//! libsasl2, zlib, zstd or curl. Checked on the real dependency graph.

use std::collections::BTreeSet;
use std::process::Command;

/// The crate names of the normal and build dependency graph.
fn crates(features: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-e", "normal,build", "--prefix", "none", "--format", "{p}"])
        .args(["-p", "clink-kafka", "-p", "clink-kafka-wire"])
        .args(features)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: BTreeSet<String> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        crates.contains("clink-kafka-wire"),
        "unexpected cargo tree output:\n{tree}"
    );
    crates
}

/// The crates that are, or build, C.
fn c_bound(crates: &BTreeSet<String>) -> BTreeSet<&str> {
    crates
        .iter()
        .map(String::as_str)
        .filter(|c| c.ends_with("-sys") || matches!(*c, "cmake" | "cc" | "openssl" | "pkg-config" | "vcpkg"))
        .collect()
}

#[test]
fn default_build_has_no_sys_crates() {
    let all = crates(&[]);
    let bad = c_bound(&all);
    assert!(bad.is_empty(), "C-bound crates in the default build: {bad:?}");
}

#[test]
fn the_rdkafka_feature_adds_librdkafka_and_nothing_else_c_bound() {
    let all = crates(&["--features", "rdkafka"]);
    assert!(all.contains("rdkafka"), "the feature pulls the rdkafka crate: {all:?}");
    let found = c_bound(&all);
    let allowed: BTreeSet<&str> = ["pkg-config", "rdkafka-sys"].into_iter().collect();
    assert_eq!(
        found, allowed,
        "--features rdkafka must add exactly rdkafka-sys (and its pkg-config probe): no OpenSSL, libsasl2, zlib, \
         zstd or curl"
    );
}
