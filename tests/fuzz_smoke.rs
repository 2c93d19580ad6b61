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

/// The watchdog catches a parser that never returns (no check after it returns could): a child
/// process fuzzes a target that loops forever; the watchdog saves the input and ends the process
/// with status 3 once the execution has run past `WATCHDOG`.
#[test]
fn the_watchdog_ends_a_run_stuck_in_a_parser() {
    let root = common::temp_dir("fuzz-watchdog");
    if std::env::var_os("SINKSCOPE_FUZZ_HANG_CHILD").is_some() {
        let stuck = fuzzing::Target {
            name: "stuck",
            file: "input.bin",
            seeds: vec![b"never returns".to_vec()],
            run: |_, _| loop {
                std::thread::sleep(std::time::Duration::from_millis(100));
            },
        };
        fuzzing::fuzz(&stuck, 1, 1, &root.join("work"), &root.join("crashes"), None);
        unreachable!("the watchdog ends the process");
    }
    let started = std::time::Instant::now();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_watchdog_ends_a_run_stuck_in_a_parser", "--nocapture", "--test-threads", "1"])
        .env("SINKSCOPE_FUZZ_HANG_CHILD", "1")
        .env("TMPDIR", root.join("child-tmp"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("hang: an execution ran past"), "{err}");
    assert!(started.elapsed() >= fuzzing::WATCHDOG, "ended after {:?}", started.elapsed());
    let saved = err.split("saved to ").nth(1).map(|s| s.trim().to_string()).unwrap_or_default();
    assert_eq!(std::fs::read(&saved).unwrap_or_default(), b"never returns", "{err}");
    let _ = std::fs::remove_dir_all(&root);
}
