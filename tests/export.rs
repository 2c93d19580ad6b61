//! `export` end to end on the committed stories260K run: every Parquet table read back with polars
//! (values and dtypes), byte-identical output from two exports, the figures and index.md, the
//! streaming tables against stream.json, and clear errors for bad run directories.

#![cfg(all(feature = "parquet", feature = "plots"))]
mod common;

use std::path::{Path, PathBuf};

use polars::prelude::{AnyValue, DataType};
use sinkscope::report::bundle::ExportOptions;
use sinkscope::report::export::export;
use sinkscope::report::parquet::{read_frame, write_table};
use sinkscope::report::run::Run;
use sinkscope::report::tables::{tables, ColumnData};

/// A private copy of the committed run (exports write into the run directory).
fn run_copy(tag: &str) -> common::TempDir {
    let dir = common::temp_child(tag, "run");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(common::fixture("run-stories260k")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    dir
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn every_table_round_trips_through_parquet_with_its_types() {
    let dir = run_copy("roundtrip");
    let run = Run::open(&dir).unwrap();
    let all = tables(&run);
    let names: Vec<&str> = all.iter().map(|t| t.name).collect();
    assert_eq!(names, ["head_sinks", "layers", "massive", "resid_norms", "ablation", "tokens", "stream_nll", "recommend"]);
    // `tokens`: one row per captured token, its NLL given its prefix (none at position 0), whose
    // mean is capture.json's mean NLL.
    let capture = run.capture.as_ref().unwrap();
    let tokens = all.iter().find(|t| t.name == "tokens").unwrap();
    assert_eq!(tokens.n_rows(), capture.n_tokens);
    let Some(ColumnData::OptF64(nll)) = tokens.column("nll") else { panic!("tokens.nll is not an optional f64") };
    assert_eq!(nll[0], None);
    let scored: Vec<f64> = nll[1..].iter().map(|v| v.expect("every later token is scored")).collect();
    assert!(scored.iter().all(|v| v.is_finite() && *v >= 0.0));
    let mean = capture.nll.as_ref().unwrap().mean_nll;
    assert!((scored.iter().sum::<f64>() / scored.len() as f64 - mean).abs() < 1e-12);
    for table in &all {
        let path = dir.join(format!("{}.parquet", table.name));
        write_table(table, &path).unwrap();
        let df = read_frame(&path).unwrap();
        assert_eq!(df.height(), table.n_rows(), "{}", table.name);
        assert_eq!(df.width(), table.columns.len(), "{}", table.name);
        for col in &table.columns {
            let got = df.column(col.name).unwrap_or_else(|_| panic!("{}.{} missing", table.name, col.name));
            let want_type = match &col.data {
                ColumnData::U32(_) | ColumnData::OptU32(_) => DataType::UInt32,
                ColumnData::F64(_) | ColumnData::OptF64(_) => DataType::Float64,
                ColumnData::Str(_) => DataType::String,
                ColumnData::Bool(_) => DataType::Boolean,
            };
            assert_eq!(got.dtype(), &want_type, "{}.{}", table.name, col.name);
            for i in 0..table.n_rows() {
                let v = got.get(i).unwrap();
                let ok = match (&col.data, &v) {
                    (ColumnData::U32(w), AnyValue::UInt32(g)) => w[i] == *g,
                    (ColumnData::OptU32(w), AnyValue::UInt32(g)) => w[i] == Some(*g),
                    (ColumnData::OptU32(w), AnyValue::Null) => w[i].is_none(),
                    (ColumnData::F64(w), AnyValue::Float64(g)) => w[i].to_bits() == g.to_bits(),
                    (ColumnData::OptF64(w), AnyValue::Float64(g)) => w[i].map(f64::to_bits) == Some(g.to_bits()),
                    (ColumnData::OptF64(w), AnyValue::Null) => w[i].is_none(),
                    (ColumnData::Str(w), AnyValue::String(g)) => w[i] == *g,
                    (ColumnData::Bool(w), AnyValue::Boolean(g)) => w[i] == *g,
                    _ => false,
                };
                assert!(ok, "{}.{} row {i}: wrote {:?}, read {v:?}", table.name, col.name, col.data.type_name());
            }
        }
    }
}

#[test]
fn tables_carry_the_runs_numbers() {
    let run = Run::open(&common::fixture("run-stories260k")).unwrap();
    let all = tables(&run);
    let get = |name: &str| all.iter().find(|t| t.name == name).unwrap();
    // head_sinks: capture rows = layers × heads × K, and α equals capture.json's.
    let capture = run.capture.as_ref().unwrap();
    let hs = get("head_sinks");
    let ColumnData::Str(probe) = hs.column("probe").unwrap() else { panic!() };
    let ColumnData::F64(alpha) = hs.column("alpha").unwrap() else { panic!() };
    let capture_rows: Vec<usize> = (0..hs.n_rows()).filter(|&i| probe[i] == "capture").collect();
    assert_eq!(capture_rows.len(), capture.summary.heads.len() * 16);
    let h = &capture.summary.heads[13];
    assert_eq!(alpha[capture_rows[13 * 16 + 2]], h.alpha[2]);
    // stream_nll: one row per (policy, step); NLL equals stream.json's, step by step.
    let stream = run.stream.as_ref().unwrap();
    let sn = get("stream_nll");
    assert_eq!(sn.n_rows(), stream.outcomes.iter().map(|o| o.nll.len()).sum::<usize>());
    let ColumnData::OptF64(nll) = sn.column("nll").unwrap() else { panic!() };
    let flat: Vec<f64> = stream.outcomes.iter().flat_map(|o| o.nll.iter().copied()).collect();
    for (a, b) in nll.iter().zip(&flat) {
        assert!(a.is_none_or(|a| (a - b).abs() == 0.0));
    }
    // recommend: exactly the recommended S is flagged.
    let rec = get("recommend");
    let ColumnData::Bool(flag) = rec.column("recommended").unwrap() else { panic!() };
    let ColumnData::OptU32(sinks) = rec.column("sinks").unwrap() else { panic!() };
    let want = stream.recommendation.as_ref().unwrap().recommended_sinks.map(|s| s as u32);
    for (f, s) in flag.iter().zip(sinks) {
        assert_eq!(*f, s.is_some() && *s == want);
    }
}

#[test]
fn two_exports_of_the_same_run_are_byte_identical() {
    let (a, b) = (run_copy("ident-a"), run_copy("ident-b"));
    let opts = ExportOptions { parquet: true, png: true, svg: true, md: true, heads: None, grid_keys: None };
    export(&Run::open(&a).unwrap(), &opts).unwrap();
    export(&Run::open(&b).unwrap(), &opts).unwrap();
    let (fa, fb) = (files_under(&a), files_under(&b));
    assert_eq!(fa.len(), fb.len());
    assert!(fa.iter().filter(|p| p.extension().is_some_and(|e| e == "parquet")).count() >= 7);
    assert!(fa.iter().filter(|p| p.extension().is_some_and(|e| e == "png")).count() >= 10);
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.strip_prefix(&a).unwrap(), y.strip_prefix(&b).unwrap());
        let (bx, by) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        // index.md names its run directory; everything else must match byte for byte.
        if x.ends_with("index.md") {
            assert_eq!(String::from_utf8(bx).unwrap().replace("ident-a", "ident-b"), String::from_utf8(by).unwrap());
        } else {
            assert!(bx == by, "{} differs between two exports", x.display());
        }
    }
}

#[test]
fn export_command_writes_figures_and_an_index_that_links_them() {
    let dir = run_copy("cli");
    let out = common::sinkscope(&["export", dir.to_str().unwrap(), "--heads", "4:0,1:4", "--alpha-keys", "0,3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let index = std::fs::read_to_string(dir.join("index.md")).unwrap();
    for name in [
        "alpha-grid-k0",
        "alpha-grid-k3",
        "heatmap-L4-H0-log",
        "heatmap-L1-H4-first16",
        "layer-magnitudes",
        "massive-dims",
        "ppl-curves",
        "ppl-after-eviction",
    ] {
        let png = dir.join("figures").join(format!("{name}.png"));
        let bytes = std::fs::read(&png).unwrap_or_else(|_| panic!("{} missing", png.display()));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        let svg = std::fs::read_to_string(dir.join("figures").join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{name}.svg");
        assert!(index.contains(&format!("figures/{name}.png")), "index.md does not link {name}");
    }
    for table in ["head_sinks", "massive", "stream_nll", "recommend"] {
        assert!(index.contains(&format!("tables/{table}.parquet")), "index.md does not link {table}");
    }
    assert!(index.contains("Recommended sink count at W = 48"));
    // No temp files are left behind.
    assert!(files_under(&dir).iter().all(|p| !p.file_name().unwrap().to_string_lossy().contains(".tmp-")));
    // Every step of the fixture's recompute was scored: exact values, no whiskers.
    let svg = std::fs::read_to_string(dir.join("figures/ppl-after-eviction.svg")).unwrap();
    assert!(svg.contains("every step scored") && !svg.contains("95% interval"), "exact values drawn as estimates");
}

/// A recompute scored on a sample of the steps is drawn with its bootstrap interval, the numbers
/// those of stream.json.
#[test]
fn a_sampled_perplexity_is_drawn_with_its_interval() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_child("export-interval", "run");
    let d = dir.to_str().unwrap();
    let ok = |args: &[&str]| {
        let out = common::sinkscope(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ok(&[
        "recommend",
        "-m",
        "stories260k",
        "-f",
        "tests/fixtures/texts/tinystories.txt",
        "--tokens",
        "200",
        "--cache",
        "32",
        "--sinks",
        "0,2",
        "--recompute-every",
        "4",
        "-o",
        d,
    ]);
    ok(&["export", d, "--svg"]);
    let stream: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("stream.json")).unwrap()).unwrap();
    let row = stream["recommendation"]["table"].as_array().unwrap().last().unwrap();
    let ci = row["ppl_after_eviction_ci"].as_array().expect("a sampled recompute has an interval");
    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    let svg = std::fs::read_to_string(dir.join("figures/ppl-after-eviction.svg")).unwrap();
    let want = format!("95% interval {lo:.2}–{hi:.2}");
    assert!(svg.contains(&want), "the figure does not show {want}");
    assert!(svg.contains("recompute W=32 (1 step in 4 scored)"));
}

#[test]
fn export_refuses_bad_run_directories_clearly() {
    let empty = common::temp_dir("export-empty");
    let out = common::sinkscope(&["export", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no sinkscope results") && err.contains("sinkscope demo"), "{err}");

    let dir = run_copy("export-corrupt");
    std::fs::write(dir.join("report.json"), b"{\"not\": \"a report\"").unwrap();
    let out = common::sinkscope(&["export", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("report.json") && err.lines().count() == 1, "{err}");
    assert!(!dir.join("tables").exists() && !dir.join("index.md").exists(), "nothing is written from a bad run");

    let dir = run_copy("export-heads");
    let out = common::sinkscope(&["export", dir.to_str().unwrap(), "--heads", "9:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside this model's 5 layers × 8 heads"));
    let out = common::sinkscope(&["export", dir.to_str().unwrap(), "--heads", "four"]);
    assert_eq!(out.status.code(), Some(2));
    let out = common::sinkscope(&["export", dir.to_str().unwrap(), "--alpha-keys", "16"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("k < 16"));

    let dir = run_copy("export-truncated");
    let maps = std::fs::read(dir.join("heatmaps.safetensors")).unwrap();
    std::fs::write(dir.join("heatmaps.safetensors"), &maps[..maps.len() / 2]).unwrap();
    let out = common::sinkscope(&["export", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("heatmaps.safetensors"));

    // Found by fuzzing: a corrupt head count sized every layer × head table (0.9 GB for 7,747,748).
    let dir = run_copy("export-lying-heads");
    let mut capture: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("capture.json")).unwrap()).unwrap();
    capture["model"]["n_heads"] = 7_747_748.into();
    std::fs::write(dir.join("capture.json"), capture.to_string()).unwrap();
    let out = common::sinkscope(&["export", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("capture.json") && err.contains("7747748 heads, which no model has"), "{err}");
}

#[test]
fn commands_share_one_run_directory() {
    let _ = model_or_skip!("stories260K.gguf");
    // analyze first: its first probe's heatmaps; then capture, whose heatmaps take over; then a
    // second analyze must not overwrite them.
    let dir = common::temp_child("shared-run", "run");
    let d = dir.to_str().unwrap();
    let ok = |args: &[&str]| {
        let out = common::sinkscope(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ok(&["analyze", "-m", "stories260k", "--no-ablation", "-o", d]);
    let run = Run::open(&dir).unwrap();
    assert_eq!(run.heatmaps.as_ref().unwrap().n_tokens, run.analysis.as_ref().unwrap().probes[0].n_tokens);
    ok(&["capture", "-m", "stories260k", "-f", "probes/texts/tinystories.txt", "--max-tokens", "40", "-o", d]);
    ok(&["analyze", "-m", "stories260k", "--no-ablation", "-o", d]);
    ok(&[
        "recommend",
        "-m",
        "stories260k",
        "-f",
        "tests/fixtures/texts/tinystories.txt",
        "--tokens",
        "120",
        "--cache",
        "32",
        "--sinks",
        "0,2",
        "--no-recompute",
        "-o",
        d,
    ]);
    let run = Run::open(&dir).unwrap();
    assert_eq!(run.heatmaps.as_ref().unwrap().n_tokens, 40);
    assert_eq!(run.model().sha256.as_deref().map(str::len), Some(64));
    ok(&["export", d, "--parquet", "--md"]);
    let index = std::fs::read_to_string(dir.join("index.md")).unwrap();
    assert!(index.contains("40 tokens") && index.contains("Recommended sink count at W = 32"), "{index}");
    // A new capture without maps removes the old ones (they index other tokens).
    ok(&["capture", "-m", "stories260k", "-f", "probes/texts/tinystories.txt", "--max-tokens", "30", "--heatmap-bins", "0", "-o", d]);
    let run = Run::open(&dir).unwrap();
    assert!(run.heatmaps.is_none() && run.tokens().unwrap().len() == 30);
}
