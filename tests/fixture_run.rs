//! The committed run `tests/fixtures/run-stories260k` (read by the export and dashboard tests) is
//! today's output: this test makes the same run with the current code, the same commands as
//! `tests/fixtures/make_run_fixture.sh`, and compares every number. When a change moves them,
//! it fails and says to re-run that script, so snapshots never show an older build's numbers.

mod common;

use std::path::Path;

use sinkscope::io::arrays::Arrays;

/// Fields that differ between two identical runs (clocks, memory, the model's path on disk).
const VOLATILE: [&str; 5] = ["wall_seconds", "peak_rss_bytes", "tokens_per_s", "source", "files"];

/// Relative tolerance for numbers: the run is deterministic on one machine; a CPU with other
/// vector units may round a matrix product's last bit differently.
const REL_TOL: f64 = 1e-5;

fn compare(path: &str, a: &serde_json::Value, b: &serde_json::Value, diffs: &mut Vec<String>) {
    use serde_json::Value::*;
    match (a, b) {
        (Object(x), Object(y)) => {
            for (k, v) in x.iter().filter(|(k, _)| !VOLATILE.contains(&k.as_str())) {
                match y.get(k) {
                    Some(w) => compare(&format!("{path}.{k}"), v, w, diffs),
                    None => diffs.push(format!("{path}.{k}: only in the committed run")),
                }
            }
            for k in y.keys().filter(|k| !VOLATILE.contains(&k.as_str()) && !x.contains_key(*k)) {
                diffs.push(format!("{path}.{k}: only in today's run"));
            }
        }
        (Array(x), Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().for_each(|(i, (v, w))| compare(&format!("{path}[{i}]"), v, w, diffs))
        }
        (Number(x), Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            if (x - y).abs() > REL_TOL * x.abs().max(y.abs()).max(1e-12) {
                diffs.push(format!("{path}: committed {x}, today {y}"));
            }
        }
        _ if a != b => diffs.push(format!("{path}: committed {a}, today {b}")),
        _ => {}
    }
}

fn compare_arrays(name: &str, committed: &Path, today: &Path, diffs: &mut Vec<String>) {
    let (a, b) = (Arrays::read(committed, "capture").unwrap(), Arrays::read(today, "capture").unwrap());
    if a.arrays.keys().ne(b.arrays.keys()) {
        diffs.push(format!("{name}: different arrays"));
        return;
    }
    for (key, (shape, data)) in &a.arrays {
        let (shape2, data2) = &b.arrays[key];
        // Relative to each pair's larger magnitude; a NaN or a length mismatch is a difference.
        let worst = data
            .iter()
            .zip(data2)
            .map(
                |(&x, &y)| {
                    if x.is_finite() && y.is_finite() {
                        ((x - y).abs() as f64) / (x.abs().max(y.abs()) as f64).max(1e-12)
                    } else {
                        f64::INFINITY
                    }
                },
            )
            .max_by(f64::total_cmp)
            .unwrap_or(0.0);
        // A NaN fails too (none reaches here: non-finite pairs are ∞ above).
        if shape != shape2 || data.len() != data2.len() || worst.is_nan() || worst > REL_TOL {
            diffs.push(format!("{name}/{key}: shape {shape:?} vs {shape2:?}, largest relative difference {worst:e}"));
        }
    }
}

#[test]
fn the_committed_fixture_run_is_what_the_current_code_computes() {
    let _ = model_or_skip!("stories260K.gguf");
    let today = common::temp_dir("fixture-run");
    let d = today.to_str().unwrap();
    for args in [
        vec!["capture", "-m", "stories260k", "-f", "probes/texts/tinystories.txt", "--max-tokens", "64", "-o", d],
        vec!["analyze", "-m", "stories260k", "-o", d, "--heatmap-bins", "0"],
        vec![
            "recommend",
            "-m",
            "stories260k",
            "-f",
            "tests/fixtures/texts/tinystories.txt",
            "--tokens",
            "400",
            "--cache",
            "48",
            "--sinks",
            "0,1,2,4",
            "-o",
            d,
        ],
    ] {
        let out = common::sinkscope(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let committed = common::fixture("run-stories260k");
    let mut diffs = Vec::new();
    for json in ["capture.json", "report.json", "stream.json"] {
        let read = |dir: &Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(dir.join(json)).unwrap()).unwrap() };
        compare(json, &read(&committed), &read(&today), &mut diffs);
    }
    for arrays in ["reductions.safetensors", "heatmaps.safetensors"] {
        compare_arrays(arrays, &committed.join(arrays), &today.join(arrays), &mut diffs);
    }
    let _ = std::fs::remove_dir_all(&today);
    assert!(
        diffs.is_empty(),
        "tests/fixtures/run-stories260k is not what the current code computes ({} differences; first: {:?}). \
         Re-run `bash tests/fixtures/make_run_fixture.sh` after `cargo build --release`, review the snapshot changes, and commit both.",
        diffs.len(),
        &diffs[..diffs.len().min(8)]
    );
}
