//! The bad-input suite (issue 43): every case of `scripts/bad-inputs/cases.txt` — each kind of bad
//! input (a file that is not a regular file, a GGUF value out of its range, an overflowing model, a
//! blank text, a bad trace record, another model's or a held run directory, an edited or cut
//! record, a flag that means nothing) through every command that takes that input — run by the
//! binary on the inputs `scripts/bad-inputs/make_inputs.py` makes. Each must end as promised: exit
//! 2, no panic, exactly one `error:` line and it is the last, naming what the case says, within a
//! time limit (a blocked read is a failure, not a hang), and nothing left behind: no `-o` directory,
//! the other model's and the held runs unchanged, no tables published from a bad record.
//! `scripts/bad-inputs/table.sh` prints the same cases as the before/after table of docs/findings.md.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A case still running after this long blocked (the slowest takes about a second).
const LIMIT: Duration = Duration::from_secs(60);

struct Case {
    kind: String,
    says: String,
    words: Vec<String>,
}

fn cases() -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bad-inputs/cases.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            assert_eq!(cells.len(), 3, "{line}: kind | what the refusal says | command");
            Case { kind: cells[0].into(), says: cells[1].into(), words: cells[2].split_whitespace().map(str::to_string).collect() }
        })
        .collect()
}

/// A directory's entries with their sizes and modification times.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            (e.file_name().into(), meta.len(), meta.modified().ok())
        })
        .collect();
    all.sort();
    all
}

/// Runs the binary on `args`; `None` when it was still running after [`LIMIT`] (then killed).
fn run(args: &[String]) -> Option<(Option<i32>, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SINKSCOPE_MODELS", common::model_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Some((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// What is wrong with how a case ended (`None`: as promised).
fn judge(case: &Case, ended: Option<(Option<i32>, String)>) -> Option<String> {
    let Some((code, stderr)) = ended else { return Some(format!("still running after {LIMIT:?}")) };
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    if code != Some(2) || stderr.contains("panicked") {
        Some(format!("exit {code:?}: {stderr}"))
    } else if errors.len() != 1 || !last.starts_with("error: ") {
        Some(format!("not one error line, last: {stderr}"))
    } else if !last.contains(&case.says) {
        Some(format!("says {last:?}, not {:?}", case.says))
    } else {
        None
    }
}

#[cfg(unix)]
#[test]
fn every_kind_of_bad_input_ends_as_promised_in_every_command_that_takes_it() {
    let Some(models) = common::models_dir() else { return };
    let shared = models.parent().unwrap().to_path_buf();
    let work = common::temp_dir("bad-inputs");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let maker = repo.join("scripts/bad-inputs/make_inputs.py");
    let made = Command::new("python3").arg(&maker).arg(&shared).arg(common::fixture("run-stories260k")).arg(&*work).status().unwrap();
    assert!(made.success(), "make_inputs.py failed");
    // The runs the directory cases write into: another model's, and one this test holds.
    let at = |name: &str| work.join(name).to_str().unwrap().to_owned();
    for (model, dir) in [("stories260k".to_string(), "other"), (at("stories260K.bin"), "held")] {
        let made = common::sinkscope(&["capture", "-m", &model, "-p", "Once upon a time", "-o", &at(dir)]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    }
    let held = std::fs::File::open(work.join("held")).unwrap();
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this test owns; released when it is dropped.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    }
    let kept: Vec<_> = ["other", "held"].iter().map(|d| listing(&work.join(d))).collect();
    let mut failures = Vec::new();
    let cases = cases();
    for case in &cases {
        let args: Vec<String> = case.words.iter().map(|w| w.strip_prefix('@').map_or(w.clone(), at)).collect();
        let shown = case.words.join(" ");
        if let Some(why) = judge(case, run(&args)) {
            failures.push(format!("{} — `{shown}`: {why}", case.kind));
        }
        for made in ["out", "no"] {
            if work.join(made).exists() {
                failures.push(format!("{} — `{shown}`: left {made}/ behind", case.kind));
                std::fs::remove_dir_all(work.join(made)).unwrap();
            }
        }
        for (dir, before) in ["other", "held"].iter().zip(&kept) {
            if listing(&work.join(dir)) != *before {
                failures.push(format!("{} — `{shown}`: changed the run in {dir}", case.kind));
            }
        }
        if ["ppl", "alpha", "trunc", "needle", "quant", "kl"].iter().any(|r| work.join(r).join("tables").exists()) {
            failures.push(format!("{} — `{shown}`: published tables from a bad record", case.kind));
        }
    }
    drop(held);
    assert!(failures.is_empty(), "{} of {} cases did not end as promised:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
