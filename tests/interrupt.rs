//! Ctrl-C (SIGINT) during `capture`, `analyze`, `recommend` and `export`, at several points of
//! real runs: the output directory must be exactly as it was before the command (same files, same
//! bytes, no temp or staging files; a directory the run would have created does not exist), the
//! exit status non-zero with one line, and running the command again to the end must give the
//! same files as a run that was never interrupted.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Every file under `dir` (relative path → bytes); JSON without its wall-clock fields.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn without_clock(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    common::without_clock(&mut v);
    v
}

fn same_results(a: &Path, b: &Path) {
    let (ta, tb) = (tree(a), tree(b));
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>(), "the same files");
    for (rel, bytes) in &ta {
        if rel.extension().is_some_and(|e| e == "json") {
            assert!(without_clock(bytes) == without_clock(&tb[rel]), "{} differs", rel.display());
        } else if rel.file_name().is_some_and(|n| n != "index.md") {
            // index.md names its run directory; everything else must match byte for byte.
            assert!(*bytes == tb[rel], "{} differs", rel.display());
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (rel, bytes) in tree(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// Runs sinkscope with `args` (OUT replaced by `out`) and sends SIGINT after `delay`; returns
/// whether it was interrupted before its files were written (false: it finished first, or the
/// signal came after its files were in place, which it must then say).
fn interrupt(args: &[&str], out: &Path, delay: Duration) -> bool {
    let args: Vec<String> = args.iter().map(|a| a.replace("OUT", out.to_str().unwrap())).collect();
    let child = Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SINKSCOPE_MODELS", common::model_path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return false;
    }
    if out.status.code().is_none() {
        // Killed by the signal itself, before the program could install its handler (a very
        // loaded machine): nothing of the command ran, which the caller checks like an interruption.
        return true;
    }
    assert_eq!(out.status.code(), Some(130), "{args:?}: {err}");
    let last = err.trim_end().lines().last().unwrap_or("");
    assert!(last.starts_with("error: interrupted"), "{args:?}: one line saying so, got {err}");
    !last.contains("once it had written")
}

fn run_to_end(args: &[&str], out: &Path) {
    let args: Vec<String> = args.iter().map(|a| a.replace("OUT", out.to_str().unwrap())).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = common::sinkscope(&refs);
    assert!(done.status.success(), "{args:?}: {}", String::from_utf8_lossy(&done.stderr));
}

/// Interrupts `args` at each delay against a directory that starts as a copy of `before` (or
/// does not exist), checks nothing changed, then checks a full rerun equals an uninterrupted run.
fn check(tag: &str, args: &[&str], before: Option<&Path>, delays_ms: &[u64]) {
    let root = common::temp_dir(&format!("interrupt-{tag}"));
    let out = root.join("run/out");
    if let Some(b) = before {
        copy_dir(b, &out);
    }
    let start = tree(&out);
    let mut interrupted = 0;
    for &ms in delays_ms {
        if interrupt(args, &out, Duration::from_millis(ms)) {
            interrupted += 1;
            assert_eq!(out.exists(), before.is_some(), "{tag} at {ms} ms: the output directory exists afterwards: left; it existed before: right");
            assert!(tree(&out) == start, "{tag} at {ms} ms: the output directory changed: {:?}", tree(&out).keys().collect::<Vec<_>>());
        } else {
            // It finished first: start the next attempt from the same state again.
            let _ = std::fs::remove_dir_all(root.join("run"));
            if let Some(b) = before {
                copy_dir(b, &out);
            }
        }
    }
    assert!(interrupted > 0, "{tag}: no attempt was interrupted (delays {delays_ms:?} ms); the run is faster than the test assumes");
    run_to_end(args, &out);
    let reference = root.join("reference/out");
    if let Some(b) = before {
        copy_dir(b, &reference);
    }
    run_to_end(args, &reference);
    same_results(&out, &reference);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn interrupted_captures_leave_the_directory_as_it_was() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let book = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let args = ["capture", "-m", "smollm2-135m", "-f", book.to_str().unwrap(), "--max-tokens", "512", "-o", "OUT"];
    check("capture-new", &args, None, &[300, 1200, 2000]);
    // Over another model's run: only with --replace, whose removals happen at the commit, so an
    // interrupted one leaves the old run as it was.
    let over = ["capture", "-m", "smollm2-135m", "-f", book.to_str().unwrap(), "--max-tokens", "512", "-o", "OUT", "--replace"];
    check("capture-over", &over, Some(&common::fixture("run-stories260k")), &[900, 1800]);
}

/// An interrupted `capture --save-tensors FILE` keeps nothing — no run directory, no tensors file
/// (written under a temp name beside FILE until the commit), no temp file — and says so; one that
/// finished first says its files were written, and they are all there.
#[test]
fn an_interrupted_capture_keeps_no_saved_tensors() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let root = common::temp_dir("interrupt-tensors");
    let (out, tensors) = (root.join("out"), root.join("patterns.safetensors"));
    let book = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let args = [
        "capture",
        "-m",
        "smollm2-135m",
        "-f",
        book.to_str().unwrap(),
        "--max-tokens",
        "512",
        "-o",
        "OUT",
        "--save-tensors",
        tensors.to_str().unwrap(),
    ];
    // The 283 MB tensors file is written in the last 40 % or so of the run: interrupt in there.
    let started = std::time::Instant::now();
    run_to_end(&args, &out);
    let whole = started.elapsed();
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::remove_file(&tensors).unwrap();
    let mut interrupted = 0;
    for at in [0.5, 0.6, 0.7, 0.8, 0.9] {
        let ms = (whole.as_millis() as f64 * at) as u64;
        if interrupt(&args, &out, Duration::from_millis(ms)) {
            interrupted += 1;
            let left: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.file_name()).collect();
            assert!(left.is_empty(), "at {ms} ms an interrupted capture left {left:?}");
        } else {
            assert!(out.join("capture.json").is_file() && tensors.is_file(), "at {ms} ms: a finished capture has its files");
            std::fs::remove_dir_all(&out).unwrap();
            std::fs::remove_file(&tensors).unwrap();
        }
    }
    assert!(interrupted > 0, "no attempt was interrupted; the run is faster than the test assumes");
    let _ = std::fs::remove_dir_all(&root);
}

/// What an interrupted needle sweep says it kept is what it kept: nothing (and no directory), or
/// "once it had written P and N more": N + 1 finished parts, each a whole record, P among them.
#[test]
fn an_interrupted_needle_sweep_keeps_what_it_says() {
    let _ = model_or_skip!("stories260K.gguf");
    let root = common::temp_dir("interrupt-needle");
    let out = root.join("out");
    let args = ["needle", "-m", "stories260k", "--lengths", "300,600", "--trials", "2", "-o", "OUT"];
    let mut saw_parts = false;
    for ms in [100, 1500, 3000] {
        let _ = std::fs::remove_dir_all(&out);
        let argv: Vec<String> = args.iter().map(|a| a.replace("OUT", out.to_str().unwrap())).collect();
        let child = Command::new(env!("CARGO_BIN_EXE_sinkscope"))
            .args(&argv)
            .env("SINKSCOPE_MODELS", common::model_path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let done = child.wait_with_output().unwrap();
        if done.status.success() || done.status.code().is_none() {
            continue;
        }
        let err = String::from_utf8_lossy(&done.stderr);
        let last = err.trim_end().lines().last().unwrap_or("");
        let parts: Vec<PathBuf> = std::fs::read_dir(out.join("needle-parts")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        if last.contains("nothing of this command was kept") {
            assert!(!out.exists(), "at {ms} ms: said nothing was kept, left {parts:?}");
            continue;
        }
        let written = last.split_once(" once it had written ").unwrap().1.split_once("; those are complete").unwrap().0;
        let (first, more) = match written.split_once(" and ") {
            Some((first, more)) => (first, more.trim_end_matches(" more").parse::<usize>().unwrap()),
            None => (written, 0),
        };
        assert_eq!(parts.len(), more + 1, "at {ms} ms: {last}");
        assert!(parts.iter().any(|p| p.to_str() == Some(first)), "at {ms} ms: {first} among {parts:?}");
        for p in &parts {
            assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap()).is_ok(), "{} is whole", p.display());
        }
        saw_parts = true;
    }
    assert!(saw_parts, "no attempt was interrupted after a finished part");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn interrupted_analysis_and_sweep_leave_the_directory_as_it_was() {
    let _ = model_or_skip!("stories260K.gguf");
    let fixture = common::fixture("run-stories260k");
    check("analyze", &["analyze", "-m", "stories260k", "-o", "OUT"], Some(&fixture), &[200, 800, 1300]);
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let sweep =
        ["recommend", "-m", "stories260k", "-f", text.to_str().unwrap(), "--tokens", "1500", "--cache", "64", "--sinks", "0,1,4", "-o", "OUT"];
    check("recommend", &sweep, Some(&fixture), &[500, 2000, 3500]);
}

#[test]
fn interrupted_exports_leave_the_directory_as_it_was() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    // A SmolLM2 capture: a few hundred milliseconds of figures to interrupt.
    let root = common::temp_dir("interrupt-export-src");
    let run = root.join("run");
    let book = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    run_to_end(&["capture", "-m", "smollm2-135m", "-f", book.to_str().unwrap(), "--max-tokens", "256", "-o", run.to_str().unwrap()], &run);
    check("export", &["export", "OUT"], Some(&run), &[80, 120, 160, 220, 300]);
    let _ = std::fs::remove_dir_all(&root);
}

/// A run killed outright (SIGKILL: no handler runs) leaves its staging directory and temp files,
/// named by its process id. The next run into the same directory removes those of dead processes
/// and leaves alone those of a live one (another run writing there now). The killed process here
/// is a `sleep` given a sinkscope run's leftover names (what a killed sinkscope leaves is exactly
/// those names; the window in which a real run holds them open is milliseconds long).
#[cfg(unix)]
#[test]
fn a_later_run_removes_what_a_killed_run_left() {
    let _ = model_or_skip!("stories260K.gguf");
    let out = common::temp_child("sigkill", "out");
    std::fs::create_dir_all(&out).unwrap();
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let dead = victim.id();
    let staging = format!(".sinkscope-staging-{dead}-0");
    std::fs::create_dir_all(out.join(&staging).join("tables")).unwrap();
    std::fs::write(out.join(&staging).join("tables/t.parquet"), vec![0u8; 1 << 20]).unwrap();
    std::fs::write(out.join(format!(".stream.json.tmp-{dead}")), b"{").unwrap();
    let _ = Command::new("kill").args(["-KILL", &dead.to_string()]).status();
    assert!(victim.wait().unwrap().code().is_none(), "the victim was killed by the signal");
    let alive = format!(".sinkscope-staging-{}-0", std::process::id());
    std::fs::create_dir_all(out.join(&alive)).unwrap();

    let text = common::fixture("texts/tinystories.txt");
    let args = ["recommend", "-m", "stories260k", "-f", text.to_str().unwrap(), "--tokens", "100", "--cache", "32", "--sinks", "0,4", "-o", "OUT"];
    run_to_end(&args, &out);
    let mut names: Vec<String> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, vec![alive, "commands.json".to_string(), "stream.json".to_string()], "the dead run's leftovers go, the live one's stay");
    let _ = std::fs::remove_dir_all(out.parent().unwrap());
}

/// A commit whose last move fails (here: a directory stands where the run writes a file) puts
/// back every file it had already replaced: the run directory is exactly as before, and the
/// error is one line.
#[test]
fn a_failed_final_move_leaves_the_directory_as_it_was() {
    let _ = model_or_skip!("stories260K.gguf");
    let root = common::temp_dir("failed-move");
    let out = root.join("out");
    copy_dir(&common::fixture("run-stories260k"), &out);
    std::fs::remove_file(out.join("reductions.safetensors")).unwrap();
    std::fs::create_dir_all(out.join("reductions.safetensors")).unwrap();
    std::fs::write(out.join("reductions.safetensors/in-the-way"), b"x").unwrap();
    let before = tree(&out);
    let text = common::fixture("texts/tinystories.txt");
    let done = common::sinkscope(&["capture", "-m", "stories260k", "-f", text.to_str().unwrap(), "--max-tokens", "48", "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(2), "{err}");
    assert!(err.contains("is a directory where the run writes a file") && err.trim_end().lines().count() == 1, "{err}");
    assert!(tree(&out) == before, "the run directory changed: {:?}", tree(&out).keys().collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&root);
}
