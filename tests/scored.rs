//! Score-based cache policies (h2o, tova, snapkv): against an independent PyTorch loop
//! (tests/fixtures/make_score_stream_reference.py → score_stream_reference.json) on both committed
//! models, 199 steps at W = 48, with and without 4 pinned sinks, decoded token by token and
//! replayed a block at a time; and the identities the rules imply (no eviction ⇒ dense; h2o with
//! R = W − S ⇒ window / sink).

mod common;

use sinkscope::kv::{simulate, simulate_with, Eviction, Policy, PolicyKind, PositionMode, SimOptions};
use sinkscope::model::{load, LoadOptions, LoadedModel};

const NLL_TOL: f64 = 1e-4;

fn policy(kind: PolicyKind, sinks: usize, cache: usize, recent: usize) -> Policy {
    Policy::new(Eviction::of_kind(kind, sinks, (recent != 0).then_some(recent)), cache, PositionMode::Slot)
}

fn load_model(file: &str) -> Option<LoadedModel> {
    let path = common::model(file)?;
    Some(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap())
}

#[test]
fn score_policies_match_a_pytorch_loop() {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("score_stream_reference.json")).unwrap()).unwrap();
    let w = reference["cache"].as_u64().unwrap() as usize;
    for (name, file) in [("stories260k", "stories260K.gguf"), ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")] {
        let Some(lm) = load_model(file) else { return };
        let data = &reference["models"][name];
        let ids: Vec<u32> = data["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        for run in data["runs"].as_array().unwrap() {
            if run["policy"] == "mixed" {
                per_head_run_matches(&lm, &ids, w, run);
                continue;
            }
            let kind = match run["policy"].as_str().unwrap() {
                "h2o" => PolicyKind::H2o,
                "tova" => PolicyKind::Tova,
                _ => PolicyKind::Snapkv,
            };
            let p = policy(kind, run["sinks"].as_u64().unwrap() as usize, w, 0);
            let want: Vec<f64> = run["nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            // Decoded token by token, and replayed a block of tokens at a time.
            let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
            for o in [
                simulate_with(&lm.model, &ids, &[p], by_token, &mut |_, _| {}).unwrap().remove(0),
                simulate(&lm.model, &ids, &[p], &mut |_, _| {}).unwrap().remove(0),
            ] {
                let worst = common::max_abs_diff("o.nll", &o.nll, &want);
                let kept = o.kept.expect("a score-based policy reports what it kept");
                let shares: Vec<f64> = run["kept_first_share"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                eprintln!("{name} {}: max |ΔNLL| {worst:.2e}; kept_first_share {:?} vs {shares:?}", o.label, kept.kept_first_share);
                assert_eq!(o.nll.len(), want.len());
                assert!(worst < NLL_TOL, "{name} {}: {worst} nats from the PyTorch loop", o.label);
                // The same keys kept: the shares and ages agree to the last sample.
                for (a, b) in kept.kept_first_share.iter().zip(&shares) {
                    assert!((a - b).abs() < 1e-9, "{name} {}: kept_first_share {a} vs {b}", o.label);
                }
                assert!((kept.mean_age - run["mean_age"].as_f64().unwrap()).abs() < 1e-9, "{name} {}: mean age", o.label);
                assert_eq!(kept.samples as u64, run["samples"].as_u64().unwrap());
            }
        }
    }
}

/// The per-head run of the reference (every third (layer, KV head) keeps the whole cache, the
/// rest S = 4 + W − 4 recent).
fn per_head_run_matches(lm: &LoadedModel, ids: &[u32], w: usize, run: &serde_json::Value) {
    let gates: Vec<Vec<bool>> =
        run["gates"].as_array().unwrap().iter().map(|l| l.as_array().unwrap().iter().map(|g| g.as_bool().unwrap()).collect()).collect();
    let o = sinkscope::kv::per_head::simulate_mixed(&lm.model, ids, &gates, (run["sinks"].as_u64().unwrap() as usize, w), Default::default())
        .unwrap()
        .outcome;
    let want: Vec<f64> = run["nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let worst = common::max_abs_diff("o.nll", &o.nll, &want);
    eprintln!("{}: max |ΔNLL| {worst:.2e} vs the PyTorch loop", o.label);
    assert!(o.nll.len() == want.len() && worst < NLL_TOL, "{}: {worst} nats from the PyTorch loop", o.label);
    let kept = o.kept.unwrap();
    assert!((kept.mean_age - run["mean_age"].as_f64().unwrap()).abs() < 1e-9, "{}: mean age", o.label);
    assert_eq!(kept.samples as u64, run["samples"].as_u64().unwrap());
}

/// With a budget holding the whole stream nothing is evicted and every score-based policy is the
/// dense decode, bit for bit; h2o whose recent window fills everything but the sinks (R = W − S)
/// keeps exactly what `window` (S = 0) and `sink` keep, bit for bit.
#[test]
fn score_policies_reduce_to_dense_window_and_sink() {
    let Some(lm) = load_model("stories260K.gguf") else { return };
    let text = std::fs::read_to_string(common::corpora_dir().join("tinystories_val_subset.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap()[..160].to_vec();
    let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
    let run = |p: Policy| simulate_with(&lm.model, &ids, &[p], by_token, &mut |_, _| {}).unwrap().remove(0);
    let dense = run(policy(PolicyKind::Dense, 0, 0, 0));
    for kind in [PolicyKind::H2o, PolicyKind::Tova, PolicyKind::Snapkv] {
        let o = run(policy(kind, 2, 200, 8));
        assert_eq!(o.nll, dense.nll, "{}", o.label);
        assert_eq!((o.first_eviction_step, o.kept), (None, None), "{}", o.label);
    }
    let window = run(policy(PolicyKind::Window, 0, 40, 0));
    let h2o = run(policy(PolicyKind::H2o, 0, 40, 40));
    assert_eq!(h2o.nll, window.nll, "h2o with R = W equals window");
    let sink = run(policy(PolicyKind::Sink, 4, 40, 0));
    let h2o = run(policy(PolicyKind::H2o, 4, 40, 36));
    assert_eq!(h2o.nll, sink.nll, "h2o with R = W − S equals sink");
    assert_eq!(h2o.kept.unwrap().kept_first_share, [1.0; 4], "pinned keys are always kept");
    // And the scores do choose: with R = W/2 the kept sets differ from the window's.
    let chosen = run(policy(PolicyKind::H2o, 0, 40, 0));
    assert_ne!(chosen.nll, window.nll);
}

/// Bad settings are refused with the reason: delta positions (per-head sets cannot share one
/// re-rotation), a recent window that leaves nothing to choose, sinks filling the budget.
#[test]
fn impossible_score_settings_are_refused() {
    for (p, why) in [
        (Policy { positions: PositionMode::Delta, ..policy(PolicyKind::H2o, 0, 32, 0) }, "use slot or original positions"),
        (policy(PolicyKind::H2o, 4, 32, 30), "recent window R of 30"),
        (policy(PolicyKind::Snapkv, 0, 32, 32), "observation window of 32"),
        (policy(PolicyKind::Tova, 32, 32, 0), "S = 32 pinned tokens"),
    ] {
        let e = p.validate(1000, 4096).expect_err(why);
        assert!(e.to_string().contains(why), "{e}");
    }
}

/// A per-head policy with no retrieval heads is `sink` (S, W), with every head retrieval it is
/// dense; in between its memory is the sum of what each head keeps.
#[test]
fn per_head_policies_span_sink_to_dense() {
    use sinkscope::kv::per_head::{gates_by_share, measure, simulate_mixed};
    let Some(lm) = load_model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let text = std::fs::read_to_string(common::corpora_dir().join("tinystories_val_subset.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap()[..300].to_vec();
    let cfg = &lm.model.cfg;
    let evidence = measure(&lm.model, &ids, 4, 32).unwrap();
    let score = evidence.outside;
    // α_0 is a mean attention weight; SmolLM2's heads sink onto key 0.
    assert!(evidence.alpha0.iter().flatten().all(|a| (0.0..=1.0 + 1e-6).contains(a)));
    assert!(evidence.alpha0.iter().flatten().any(|&a| a > 0.5));
    assert_eq!((score.len(), score[0].len()), (cfg.n_layers, cfg.n_kv_heads));
    let close = |a: &[f64], b: &[f64]| common::max_abs_diff("NLL", a, b);
    let none = simulate_mixed(&lm.model, &ids, &gates_by_share(&score, 0.0), (4, 64), Default::default()).unwrap();
    let sink = simulate(&lm.model, &ids, &[policy(PolicyKind::Sink, 4, 64, 0)], &mut |_, _| {}).unwrap().remove(0);
    assert!(close(&none.outcome.nll, &sink.nll) < 1e-4, "no retrieval heads vs sink: {}", close(&none.outcome.nll, &sink.nll));
    let all = simulate_mixed(&lm.model, &ids, &gates_by_share(&score, 1.0), (4, 64), Default::default()).unwrap();
    let dense = simulate(&lm.model, &ids, &[policy(PolicyKind::Dense, 0, 0, 0)], &mut |_, _| {}).unwrap().remove(0);
    assert!(close(&all.outcome.nll, &dense.nll) < 1e-4, "all retrieval heads vs dense: {}", close(&all.outcome.nll, &dense.nll));
    let kv = cfg.n_layers * cfg.n_kv_heads;
    assert_eq!((none.entries, all.entries), (kv * 63, kv * 299));
    let half = simulate_mixed(&lm.model, &ids, &gates_by_share(&score, 0.5), (4, 64), Default::default()).unwrap();
    assert_eq!(half.retrieval_heads, kv / 2);
    assert_eq!(half.entries, (kv / 2) * 299 + (kv - kv / 2) * 63);
    assert_eq!(half.bytes, half.entries as u64 * 2 * cfg.d_head as u64 * 2);
}

/// `sinkscope heads` writes DuoAttention-format gates (layers × KV heads, 1 = whole cache, the
/// asked share of them) and the scores behind them; `recommend --per-head` lays the sweep beside
/// uniform caches of the same memory, from 0% retrieval heads (= sink) to 100% (= dense).
#[test]
fn heads_and_the_per_head_sweep_from_the_cli() {
    let Some(_) = common::model("stories260K.gguf") else { return };
    let dir = common::temp_dir("heads-cli");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "heads",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "400",
        "--sinks",
        "2",
        "--recent",
        "30",
        "--retrieval-share",
        "0.5",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tsv = std::fs::read_to_string(dir.join("head_gates.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!((rows.len(), rows[0].len()), (5, 4), "stories260K: 5 layers × 4 KV heads");
    assert!(rows.iter().flatten().all(|g| *g == "0" || *g == "1"));
    assert_eq!(rows.iter().flatten().filter(|g| **g == "1").count(), 10);
    let heads: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("heads.json")).unwrap()).unwrap();
    assert_eq!((heads["sinks"].as_u64(), heads["recent"].as_u64(), heads["tokens"].as_u64()), (Some(2), Some(30), Some(400)));
    let out = common::sinkscope(&[
        "recommend",
        "--per-head",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "300",
        "--cache",
        "48",
        "--head-sinks",
        "2",
        "--shares",
        "0,0.5,1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = f["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    // 0%: the uniform cache of equal memory is the same sink cache; 100%: both are dense.
    for r in [&rows[0], &rows[2]] {
        let (a, b) = (r["ppl_from_w"].as_f64().unwrap(), r["uniform_ppl_from_w"].as_f64().unwrap());
        assert!((a - b).abs() < 1e-3 * b, "{r}");
    }
    assert!(rows[0]["entries"].as_u64() < rows[1]["entries"].as_u64() && rows[1]["entries"].as_u64() < rows[2]["entries"].as_u64());
    let bad =
        common::sinkscope(&["heads", "-m", "stories260k", "-f", text.to_str().unwrap(), "--retrieval-share", "1.5", "-o", dir.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    // With -o the sweep is a run: its streams, the frontier, and the gates export as tables.
    let run = dir.join("run");
    let out = common::sinkscope(&[
        "recommend",
        "--per-head",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "300",
        "--cache",
        "48",
        "--head-sinks",
        "2",
        "--shares",
        "0,0.5",
        "-o",
        run.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = common::sinkscope(&["export", run.to_str().unwrap(), "--parquet", "--md", "--png"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for t in ["head_gates", "per_head_frontier", "stream_nll"] {
        assert!(run.join("tables").join(format!("{t}.parquet")).is_file(), "{t}");
    }
    assert!(run.join("figures/per-head-frontier.png").is_file());
    let gates = sinkscope::report::parquet::read_frame(&run.join("tables/head_gates.parquet")).unwrap();
    assert_eq!(gates.height(), 20);
    let index = std::fs::read_to_string(run.join("index.md")).unwrap();
    assert!(index.contains("**Per-head policies**") && index.contains("| 10 of 20 (50.0%)"), "{index}");
}

/// `heads --causal` ranks KV heads by the ΔNLL when each alone keeps only S + R keys (the masks
/// are checked against HF in tests/analysis.rs): the gates are the top share by that evidence,
/// α_0 and the outside mass sit beside it, and the TSV is what heads.json says.
#[test]
fn heads_ranked_by_causal_evidence() {
    let Some(_) = common::model("stories260K.gguf") else { return };
    let dir = common::temp_dir("heads-causal");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "heads",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "300",
        "--sinks",
        "2",
        "--recent",
        "30",
        "--retrieval-share",
        "0.25",
        "--causal",
        "--causal-tokens",
        "120",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ΔNLL"), "{}", String::from_utf8_lossy(&out.stdout));
    let heads: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("heads.json")).unwrap()).unwrap();
    assert_eq!((heads["ranked_by"].as_str(), heads["causal_tokens"].as_u64()), (Some("causal"), Some(120)));
    let grid = |key: &str| -> Vec<Vec<f64>> {
        heads[key].as_array().unwrap().iter().map(|l| l.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()).collect()
    };
    let (causal, alpha0) = (grid("causal"), grid("alpha0"));
    assert_eq!((causal.len(), causal[0].len(), alpha0.len(), alpha0[0].len()), (5, 4, 5, 4));
    assert!(causal.iter().flatten().all(|d| d.is_finite() && d.abs() < 5.0) && causal.iter().flatten().any(|d| d.abs() > 1e-6));
    assert!(alpha0.iter().flatten().all(|a| (0.0..=1.0 + 1e-6).contains(a)));
    // The 5 of 20 gates set are the 5 largest ΔNLL.
    let tsv = std::fs::read_to_string(dir.join("head_gates.tsv")).unwrap();
    let gates: Vec<bool> = tsv.lines().flat_map(|l| l.split('\t').map(|g| g == "1").collect::<Vec<_>>()).collect();
    let flat: Vec<f64> = causal.iter().flatten().copied().collect();
    assert_eq!(flat.len(), gates.len(), "one gate per (layer, KV head)");
    let kept: Vec<f64> = flat.iter().zip(&gates).filter(|(_, &g)| g).map(|(d, _)| -*d).collect();
    let left: Vec<f64> = flat.iter().zip(&gates).filter(|(_, &g)| !g).map(|(d, _)| *d).collect();
    let lowest_kept = -common::finite_max("ΔNLL of the gated heads (negated)", &kept);
    let highest_left = common::finite_max("ΔNLL of the heads left streaming", &left);
    assert_eq!(gates.iter().filter(|&&g| g).count(), 5);
    assert!(lowest_kept >= highest_left, "gates must be the top ΔNLL: {lowest_kept} < {highest_left}");
    // A causal window that leaves no query beyond S + R is refused with the reason.
    let bad = common::sinkscope(&[
        "heads",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "300",
        "--sinks",
        "2",
        "--recent",
        "30",
        "--causal",
        "--causal-tokens",
        "20",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sinks + 30 recent"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// `recommend --policy h2o` sweeps the pinned keys of h2o (S = 0 is h2o unpinned, not a window),
/// on a separate calibration text the per-head ranking says so, and settings that name no S to
/// sweep are refused.
#[test]
fn recommend_sweeps_score_policies() {
    let Some(_) = common::model("stories260K.gguf") else { return };
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let t = text.to_str().unwrap();
    let out = common::sinkscope(&[
        "recommend",
        "-m",
        "stories260k",
        "-f",
        t,
        "--tokens",
        "200",
        "--cache",
        "48",
        "--policy",
        "h2o",
        "--recent",
        "16",
        "--sinks",
        "0,2",
        "--no-recompute",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let labels: Vec<&str> = rec["table"].as_array().unwrap().iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["h2o S=0 R=16, W=48 (slot)", "h2o S=2 R=16, W=48 (slot)"]);
    assert!(rec["verdict"].as_str().unwrap().contains("h2o") || rec["verdict"].as_str().unwrap().contains("Pin"), "{}", rec["verdict"]);
    for bad in [vec!["--policy", "dense"], vec!["--policy", "tova", "--recent", "8"], vec!["--causal"], vec!["--calibrate", t]] {
        let mut args = vec!["recommend", "-m", "stories260k", "-f", t, "--tokens", "200", "--cache", "48"];
        args.extend(bad.iter().copied());
        let out = common::sinkscope(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let cal = common::corpora_dir().join("tinyshakespeare.txt");
    let out = common::sinkscope(&[
        "recommend",
        "--per-head",
        "-m",
        "stories260k",
        "-f",
        t,
        "--tokens",
        "200",
        "--cache",
        "48",
        "--head-sinks",
        "2",
        "--shares",
        "0,0.5",
        "--calibrate",
        cal.to_str().unwrap(),
        "--calibrate-start-char",
        "1000",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(f["gates"]["calibration"].as_str().unwrap().ends_with("tinyshakespeare.txt from character 1000"), "{}", f["gates"]);
}

/// A stream of a score-based policy with nothing pinned exports the kept-first figure and says
/// in index.md what it kept.
#[test]
fn kept_first_positions_are_exported() {
    let Some(_) = common::model("stories260K.gguf") else { return };
    let dir = common::temp_dir("kept-first");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "stream",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "200",
        "--cache",
        "48",
        "--policy",
        "tova",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = common::sinkscope(&["export", dir.to_str().unwrap(), "--md", "--svg"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(dir.join("figures/kept-first.svg")).unwrap();
    assert!(svg.contains("tova S=0"), "the legend names the policy");
    let index = std::fs::read_to_string(dir.join("index.md")).unwrap();
    assert!(index.contains("What score-based policies with nothing pinned kept") && index.contains("- tova S=0, W=48 (slot): "), "{index}");
}
