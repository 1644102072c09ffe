//! The default build pulls no `*-sys` crate and nothing that builds C: no
//! cmake, no cc-built bundled library. Checked on the real dependency graph.

use std::process::Command;

#[test]
fn default_build_has_no_sys_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-e", "normal,build", "--prefix", "none", "--format", "{p}"])
        .args(["-p", "clink-kafka", "-p", "clink-kafka-wire"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(
        crates.contains(&"clink-kafka-wire"),
        "unexpected cargo tree output:\n{tree}"
    );
    let bad: Vec<&&str> = crates
        .iter()
        .filter(|c| c.ends_with("-sys") || **c == "cmake" || **c == "cc" || **c == "openssl" || **c == "pkg-config")
        .collect();
    assert!(bad.is_empty(), "C-bound crates in the default build: {bad:?}");
}
