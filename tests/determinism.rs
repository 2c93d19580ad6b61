//! Same inputs, same bytes: a real model's capture, diagnosis (with the causal sweep), sink-count
//! sweep and Parquet export are run three times — on one thread, on two, and on two again — and
//! every file must be byte-identical, JSON apart from its wall-clock fields. Float reductions that
//! depended on scheduling (the sweep's ΔNLL/KL sums) or on hash order (safetensors headers)
//! failed this.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(dir: &Path, threads: usize, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SINKSCOPE_MODELS", common::model_path())
        .env("RAYON_NUM_THREADS", threads.to_string())
        .output()
        .expect("run sinkscope");
    assert!(out.status.success(), "sinkscope {args:?} into {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
}

/// Every step of a run into `dir` with `threads` worker threads.
fn make_run(model: &Path, text: &Path, dir: &Path, threads: usize) {
    let (m, f, d) = (model.to_str().unwrap(), text.to_str().unwrap(), dir.to_str().unwrap());
    run(dir, threads, &["capture", "-m", m, "-f", f, "--max-tokens", "200", "-o", d]);
    run(dir, threads, &["analyze", "-m", m, "-f", f, "--max-tokens", "160", "-o", d]);
    run(dir, threads, &["recommend", "-m", m, "-f", f, "--tokens", "400", "--cache", "48", "--sinks", "0,2", "-o", d]);
    run(dir, threads, &["export", d, "--parquet"]);
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("tables")] {
        for e in std::fs::read_dir(&sub).unwrap().flatten() {
            if e.path().is_file() {
                out.push(e.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn two_runs_and_one_or_two_threads_give_byte_identical_results() {
    let Some(model) = common::model("stories260K.gguf") else { return };
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let dirs: Vec<(common::TempDir, usize)> =
        [1, 2, 2].iter().enumerate().map(|(i, &t)| (common::temp_dir(&format!("determinism-{i}")), t)).collect();
    for (dir, threads) in &dirs {
        make_run(&model, &text, dir, *threads);
    }
    let reference = files(&dirs[0].0);
    for want in [
        "capture.json",
        "report.json",
        "stream.json",
        "reductions.safetensors",
        "heatmaps.safetensors",
        "tables/ablation.parquet",
        "tables/stream_nll.parquet",
    ] {
        assert!(reference.contains(&PathBuf::from(want)), "the run has no {want}: {reference:?}");
    }
    for (dir, threads) in &dirs[1..] {
        assert_eq!(files(dir), reference, "the same files");
        for rel in &reference {
            let (a, b) = (std::fs::read(dirs[0].0.join(rel)).unwrap(), std::fs::read(dir.join(rel)).unwrap());
            if rel.extension().is_some_and(|e| e == "json") {
                let (mut a, mut b): (serde_json::Value, serde_json::Value) =
                    (serde_json::from_slice(&a).unwrap(), serde_json::from_slice(&b).unwrap());
                common::without_clock(&mut a);
                common::without_clock(&mut b);
                assert!(a == b, "{} differs between 1 thread and {threads} threads (apart from wall-clock fields)", rel.display());
            } else {
                assert!(a == b, "{} differs between 1 thread and {threads} threads", rel.display());
            }
        }
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dirs[0].0.join("report.json")).unwrap()).unwrap();
    let results = report["ablation"]["results"].as_array().expect("the diagnosis ran the causal sweep");
    assert!(!results.is_empty() && results.iter().all(|r| r["kl"].as_f64().is_some_and(|kl| kl >= 0.0)), "every KL is ≥ 0");
    for (dir, _) in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
