//! Runs last (cargo runs test binaries in name order): prints how many tests of this run ran on
//! real weights (stories260K, SmolLM2, Gemma 3), per test binary, from the marks `common::model`
//! leaves. Where skips are failures (CI), a run in which none did fails.

mod common;

use std::io::Write;

#[test]
fn count_of_tests_on_real_weights() {
    let dir = common::real_weights_dir();
    let mut per_binary: Vec<(String, Vec<String>)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for binary in entries.filter_map(|e| e.ok()) {
            let mut tests: Vec<String> = std::fs::read_dir(binary.path())
                .map(|e| e.filter_map(|t| t.ok().map(|t| t.file_name().to_string_lossy().into_owned())).collect())
                .unwrap_or_default();
            tests.sort();
            per_binary.push((binary.file_name().to_string_lossy().into_owned(), tests));
        }
    }
    per_binary.sort();
    let total: usize = per_binary.iter().map(|(_, t)| t.len()).sum();
    let by_binary = per_binary.iter().map(|(b, t)| format!("{b} {}", t.len())).collect::<Vec<_>>().join(", ");
    // Written past the test harness's capture, so `cargo test` shows it.
    let _ = writeln!(
        std::io::stderr(),
        "REAL WEIGHTS: {total} tests of this run ran on real weights ({by_binary}); data from {}",
        common::data_dir().display()
    );
    if common::skips_are_failures() {
        assert!(total > 0, "no test of this run ran on real weights (marks under {})", dir.display());
    }
}
