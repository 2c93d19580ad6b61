//! A short fuzz of every parser of untrusted input (see `tests/fuzzing`): 2,000 mutated inputs per
//! target, no panic, no hang, no allocation over 1 GiB. The long runs (millions per target) are
//! `cargo run --release --example fuzz`.

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
        let r = fuzzing::fuzz(t, 2_000, 0x5EED ^ t.name.len() as u64, &root.join(t.name), &root.join("crashes"));
        assert_eq!(r.executions, 2_000, "{}: stopped early: {:?}", t.name, r.failures);
        failures.extend(r.failures.iter().map(|f| format!("{}: {f}", t.name)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let _ = std::fs::remove_dir_all(&root);
}
