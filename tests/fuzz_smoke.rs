//! A short fuzz of every parser of untrusted input (see `tests/fuzzing`): per target its seeds and
//! committed corpus (`fuzz/corpus/`, the inputs long coverage-guided runs kept) replayed, then
//! mutated inputs up to 2,000; no panic, no hang, no allocation over 1 GiB. The long runs
//! (millions per target, coverage-guided) are `scripts/fuzz.sh`.

mod common;
mod fuzzing;

#[global_allocator]
static ALLOC: fuzzing::Capped = fuzzing::Capped;

#[test]
fn every_parser_survives_two_thousand_mutated_inputs() {
    let Some(targets) = fuzzing::targets() else {
        common::skip("the fuzz seeds are missing from tests/data and tests/fixtures");
        return;
    };
    let root = common::temp_dir("fuzz-smoke");
    let mut failures = Vec::new();
    for t in &targets {
        // The committed corpus is only read here: without coverage instrumentation nothing is new.
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(t.name);
        let r = fuzzing::fuzz(t, 2_000, 0x5EED ^ t.name.len() as u64, &root.join(t.name), &root.join("crashes"), Some(&corpus));
        assert_eq!(r.executions, 2_000, "{}: stopped early: {:?}", t.name, r.failures);
        failures.extend(r.failures.iter().map(|f| format!("{}: {f}", t.name)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let _ = std::fs::remove_dir_all(&root);
}
