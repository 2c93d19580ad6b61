//! Bad input, third pass (issue 43): a run directory belongs to one run — another model's results
//! there are refused unless `--replace`, which starts it afresh, and a second writer fails at once
//! while the first holds it. Every other kind of bad input × every command that takes it is the
//! table-driven suite in tests/bad_inputs.rs.

mod common;

use std::path::Path;

/// Runs sinkscope, checks the failure contract (exit 2, one line, no panic) and returns stderr.
fn fails(args: &[&str]) -> String {
    let out = common::sinkscope(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: exit {:?}; stderr: {stderr}", out.status.code());
    assert!(!stderr.contains("panicked") && stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line expected: {stderr}");
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A run directory belongs to one run: another model's results there are refused naming both,
/// `--replace` starts it afresh, and a second writer fails at once while the first holds it.
#[test]
fn a_run_directory_belongs_to_one_run() {
    let _ = model_or_skip!("stories260K.gguf");
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_dir("trust-run-dir");
    let run = dir.join("run");
    let capture = |model: &str, extra: &[&str]| {
        let mut args = vec!["capture", "-m", model, "-p", "Once upon a time there was", "-o", s(&run)];
        args.extend_from_slice(extra);
        common::sinkscope(&args)
    };
    assert!(capture("stories260k", &[]).status.success());
    // The llama2.c checkpoint is other weights (another SHA-256) in another format.
    let e = fails(&["capture", "-m", s(&bin), "-p", "Once upon a time there was", "-o", s(&run)]);
    assert!(e.contains("holds results of another model") && e.contains("stories260K.gguf") && e.contains("stories260K.bin"), "{e}");
    let replaced = capture(s(&bin), &["--replace"]);
    assert!(replaced.status.success(), "{}", String::from_utf8_lossy(&replaced.stderr));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("capture.json")).unwrap()).unwrap();
    assert!(record["model"]["source"].as_str().unwrap().ends_with("stories260K.bin"));
    // --replace where no run is written.
    assert!(fails(&["info", "stories260k", "--replace"]).contains("--replace applies to"));
    // A second writer while the directory is held (as a running command holds it).
    let held = std::fs::File::open(&run).unwrap();
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let e = fails(&["capture", "-m", s(&bin), "-p", "Once upon a time there was", "-o", s(&run)]);
        assert!(e.contains("another sinkscope command is writing into this directory"), "{e}");
    }
    drop(held);
    assert!(capture(s(&bin), &[]).status.success(), "released with the handle");
    let _ = std::fs::remove_dir_all(&dir);
}
