//! Runs first (cargo runs test binaries in name order): clears the marks of a previous run, so
//! `zz_real_weights` counts only the tests of this one that ran on real weights.

mod common;

#[test]
fn a_run_starts_with_no_tests_counted_on_real_weights() {
    let dir = common::real_weights_dir();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot clear {}: {e}", dir.display()));
    }
    assert!(!dir.exists());
}
