//! The default build pulls no `*-sys` crate and nothing that builds C: no
//! cmake, no cc-built bundled library. `--features rdkafka` adds exactly
//! librdkafka (`rdkafka-sys`, which builds the bundled C library with
//! make) and the three system C libraries this project asks it to link:
//! OpenSSL (TLS, mTLS, SCRAM), zlib (gzip) and zstd, each from the system
//! (Debian's libssl-dev, zlib1g-dev, libzstd-dev), never a vendored build;
//! no libsasl2 and no curl. Checked on the real dependency graph, on the
//! crates' features, and on the binary's dynamic section.

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
    let allowed: BTreeSet<&str> = [
        // librdkafka itself: the bundled C sources, built with make.
        "rdkafka-sys",
        // OpenSSL for TLS, mTLS and SASL SCRAM (rdkafka's `ssl`): bindings
        // to the system libssl/libcrypto, found with pkg-config.
        "openssl-sys",
        // zlib for gzip (rdkafka's `libz`): the system libz via pkg-config.
        "libz-sys",
        // zstd (rdkafka's `zstd-pkg-config`): the system libzstd via
        // pkg-config (a hard failure without it, never a bundled build).
        "zstd-sys",
        // The probes of the three -sys crates' build scripts.
        "pkg-config",
        // Build dependency of the three -sys crates: openssl-sys runs the C
        // preprocessor on OpenSSL's headers to read its configuration and
        // libz-sys compiles a one-line probe; it builds no bundled copy
        // here (see the feature check below).
        "cc",
        // openssl-sys's and libz-sys's Windows probe (does nothing here).
        "vcpkg",
    ]
    .into_iter()
    .collect();
    assert_eq!(
        found, allowed,
        "--features rdkafka must add exactly librdkafka and the system OpenSSL, zlib and zstd bindings: no \
         libsasl2 (sasl2-sys), curl, lz4-sys or cmake"
    );
}

/// `{package} [{features}]` for the rdkafka-feature graph.
fn features_of(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p} [{f}]",
        ])
        .args(["-p", "clink-kafka", "--features", "rdkafka"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    let line = tree
        .lines()
        .find(|l| l.split_whitespace().next() == Some(package))
        .unwrap_or_else(|| panic!("{package} is not in the graph:\n{tree}"));
    let inner = line
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(f, _)| f)
        .unwrap_or("");
    inner.split(',').filter(|f| !f.is_empty()).map(str::to_owned).collect()
}

#[test]
fn the_c_libraries_come_from_the_system_not_vendored_builds() {
    let rdkafka = features_of("rdkafka");
    for wanted in ["ssl", "libz", "zstd-pkg-config"] {
        assert!(rdkafka.contains(wanted), "rdkafka lacks `{wanted}`: {rdkafka:?}");
    }
    for refused in [
        "gssapi",
        "sasl",
        "ssl-vendored",
        "libz-static",
        "curl",
        "cmake-build",
        "static-linking",
    ] {
        assert!(!rdkafka.contains(refused), "rdkafka has `{refused}`: {rdkafka:?}");
    }
    let openssl = features_of("openssl-sys");
    assert!(
        !openssl.contains("vendored"),
        "openssl-sys builds OpenSSL from source: {openssl:?}"
    );
    let libz = features_of("libz-sys");
    for refused in ["static", "zlib-ng", "cmake"] {
        assert!(!libz.contains(refused), "libz-sys has `{refused}`: {libz:?}");
    }
    let zstd = features_of("zstd-sys");
    assert!(
        zstd.contains("pkg-config"),
        "zstd-sys must probe the system libzstd: {zstd:?}"
    );
}

/// The rdkafka-feature binary links the system's shared OpenSSL, zlib and
/// zstd (a vendored or bundled build would be linked statically and not
/// show up here), and no libsasl2.
#[cfg(feature = "rdkafka")]
#[test]
fn the_rdkafka_binary_links_the_system_libssl_libz_and_libzstd() {
    let out = Command::new("readelf")
        .args(["--dynamic", env!("CARGO_BIN_EXE_clink-kafka")])
        .output()
        .expect("run readelf (binutils)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let needed: BTreeSet<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split_once('[').and_then(|(_, r)| r.split_once(']')).map(|(n, _)| n))
        .collect();
    for prefix in ["libssl.so", "libcrypto.so", "libz.so", "libzstd.so"] {
        assert!(
            needed.iter().any(|n| n.starts_with(prefix)),
            "the binary does not link the system {prefix}: {needed:?}"
        );
    }
    assert!(
        !needed.iter().any(|n| n.starts_with("libsasl2")),
        "libsasl2 is linked: {needed:?}"
    );
}
