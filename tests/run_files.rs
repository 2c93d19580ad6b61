//! The committed run files (the stories260K fixture run and `notebooks-data/`) read back into the
//! records the commands write and serialize to the same bytes: a change to a record's Rust shape
//! (a policy's variants, the model description) must keep old run files loading and new ones
//! identical. After a deliberate change to what a record holds, `SINKSCOPE_REWRITE_RUN_FILES=1
//! cargo test --release --test run_files` writes each file back as it now reads (review the diff).

use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};
use sinkscope::analysis::survey::Survey;
use sinkscope::analysis::AnalysisReport;
use sinkscope::report::records::{CaptureReport, StreamReport};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every `name` under `dir`, depth first, in name order.
fn files_named(dir: &Path, name: &str, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_named(&path, name, found);
        } else if path.file_name().is_some_and(|f| f == name) {
            found.push(path);
        }
    }
}

/// Two lines of pretty JSON are the same, or the same key with numbers one or two ulps apart:
/// serde_json's fast float parser (without `float_roundtrip`) may read the last bit of a number
/// wrongly, which then prints differently; anything else (a field missing, renamed, moved or
/// another value) is a difference.
fn same_line(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let split = |s: &str| {
        let s = s.trim_end_matches(',');
        let (key, value) = s.rsplit_once(' ').unwrap_or(("", s.trim_start()));
        (key.to_owned(), value.parse::<f64>().ok())
    };
    match (split(a), split(b)) {
        ((ka, Some(x)), (kb, Some(y))) => {
            ka == kb && a.ends_with(',') == b.ends_with(',') && (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        _ => false,
    }
}

/// Reads each file as `T` and writes it back as the commands do (pretty JSON and a newline).
fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> usize {
    let mut files = Vec::new();
    for dir in ["tests/fixtures/run-stories260k", "notebooks-data"] {
        files_named(&repo(dir), name, &mut files);
    }
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let record: T = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()));
        let mut again = serde_json::to_vec_pretty(&record).unwrap();
        again.push(b'\n');
        if std::env::var_os("SINKSCOPE_REWRITE_RUN_FILES").is_some() {
            std::fs::write(path, &again).unwrap();
            continue;
        }
        let (was, now) = (String::from_utf8_lossy(&bytes), String::from_utf8_lossy(&again));
        let (was, now): (Vec<&str>, Vec<&str>) = (was.lines().collect(), now.lines().collect());
        assert_eq!(was.len(), now.len(), "{} reads back to {} lines, not {}", path.display(), now.len(), was.len());
        for (line, (a, b)) in was.iter().zip(&now).enumerate() {
            assert!(same_line(a, b), "{} reads back differently at line {}:\n  file: {a}\n  now:  {b}", path.display(), line + 1);
        }
    }
    files.len()
}

#[test]
fn committed_run_files_read_back_unchanged() {
    let counts = [
        ("capture.json", round_trip::<CaptureReport>("capture.json")),
        ("stream.json", round_trip::<StreamReport>("stream.json")),
        ("report.json", round_trip::<AnalysisReport>("report.json")),
        ("survey.json", round_trip::<Survey>("survey.json")),
    ];
    for (name, n) in counts {
        assert!(n >= 1, "no committed {name} found: the test would check nothing");
    }
    eprintln!("run files read back unchanged: {counts:?}");
}
