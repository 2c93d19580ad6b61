//! The diagnosis on real models: α_k, column masses, F-Attn and Sink_k^ε against HF transformers'
//! eager attentions (tests/fixtures/sink_reference.json, 1e-4 abs), the probe set, the analyze
//! command's JSON, and the causal sweep's internal consistency.

mod common;

use sinkscope::analysis::sinks::{alpha, f_attn, sink_score, Alphas};
use sinkscope::capture::collector::TensorCollector;
use sinkscope::capture::run::{capture, CaptureOptions};
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::{load, KeyMask, LoadOptions};
use sinkscope::probe::ProbeSet;

const TOL: f64 = 1e-4;

fn opts() -> CaptureOptions {
    CaptureOptions { first_keys: 16, top_k: 16, save: None, memory_limit: None, weight_bytes: 0, score: true, quant_risk: false, heatmap_bins: None }
}

fn check_sink_parity(model_key: &str, file: &str) {
    let path = model_or_skip!(file);
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("sink_reference.json")).unwrap()).unwrap();
    let reference = &json["models"][model_key];
    let eps = json["epsilon"].as_f64().unwrap();
    let mut ours_all: Vec<Alphas> = Vec::new();
    let mut theirs_all: Vec<Alphas> = Vec::new();
    for (name, probe) in reference["probes"].as_object().unwrap() {
        let ids: Vec<u32> = probe["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let t = ids.len();
        let out = capture(&lm.model, &ids, &opts()).unwrap();
        let heads = &out.reducers.attention.heads;
        let ours: Alphas = heads.iter().map(|l| l.iter().map(|h| (0..16).map(|k| alpha(&h.col_mass, t, k, None)).collect()).collect()).collect();
        let theirs: Alphas = serde_json::from_value(probe["alpha"].clone()).unwrap();
        let col: Vec<Vec<Vec<f64>>> = serde_json::from_value(probe["col_mass"].clone()).unwrap();
        let mut worst = 0f64;
        assert_eq!(ours.len(), theirs.len(), "{model_key}/{name}: layers");
        for l in 0..ours.len() {
            assert_eq!(ours[l].len(), theirs[l].len(), "{model_key}/{name}: heads of layer {l}");
            for h in 0..ours[l].len() {
                worst = worst.max(common::max_abs_diff(&format!("{model_key}/{name}: α L{l}H{h}"), &ours[l][h], &theirs[l][h]));
                // α at every key position (column mass / queries at or after it).
                assert_eq!(col[l][h].len(), t, "the reference has a column mass for every key");
                let got: Vec<f64> = (0..t).map(|k| alpha(&heads[l][h].col_mass, t, k, None)).collect();
                let want: Vec<f64> = col[l][h].iter().enumerate().map(|(k, &mass)| mass / (t - k) as f64).collect();
                worst = worst.max(common::max_abs_diff(&format!("{model_key}/{name}: α at every key L{l}H{h}"), &got, &want));
            }
        }
        assert!(worst <= TOL, "{model_key}/{name}: α differs by {worst}");
        let fa = (f_attn(&[&ours]) - probe["f_attn"].as_f64().unwrap()).abs();
        assert!(fa <= TOL, "{model_key}/{name}: F-Attn differs by {fa}");
        let nll = (out.nll.unwrap().mean_nll - probe["nll_mean"].as_f64().unwrap()).abs();
        assert!(nll <= 1e-3, "{model_key}/{name}: mean NLL differs by {nll}");
        ours_all.push(ours);
        theirs_all.push(theirs);
    }
    let ours_refs: Vec<&Alphas> = ours_all.iter().collect();
    for k in 0..16 {
        let ours = sink_score(&ours_refs, k, eps);
        let want = reference["sink_pct"][k.to_string()].as_f64().unwrap();
        // The fixture stores 7 significant digits.
        if (ours - want).abs() > 1e-4 {
            // Only a head whose α_k sits within the tolerance of ε may flip sides.
            let borderline = theirs_all.iter().flatten().flatten().any(|h| (h[k] - eps).abs() <= TOL);
            assert!(borderline, "{model_key}: Sink_{k}^{eps} = {ours}% but HF gives {want}%");
        }
    }
}

#[test]
fn smollm2_sink_metrics_match_hf_eager_attentions() {
    check_sink_parity("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn stories260k_sink_metrics_match_hf_eager_attentions() {
    check_sink_parity("stories260k", "stories260K.gguf");
}

#[test]
fn default_probe_set_builds_as_documented() {
    let path = model_or_skip!("stories260K.gguf");
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let set = ProbeSet::load("default").unwrap();
    let probes = set.build(&lm.tokenizer).unwrap();
    let by_name = |n: &str| probes.iter().find(|p| p.name == n).unwrap();
    assert!(probes.iter().all(|p| p.ids.len() == 64));
    let story = by_name("story");
    assert!(story.bos && story.ids[0] == 1);
    let flipped = by_name("story_flipped_bos");
    assert!(!flipped.bos && flipped.ids[..63] == story.ids[1..]);
    let nl = by_name("story_newline_prefix");
    assert_eq!(nl.replaced, vec![1, 2, 3, 4]);
    assert!(nl.ids[1..5].iter().all(|&id| lm.tokenizer.token_str(id) == "<0x0A>"));
    assert_eq!(nl.ids[5..], story.ids[5..]);
    let rep = by_name("repeated_the");
    assert!(rep.ids[1..].iter().all(|&id| id == rep.ids[1]) && lm.tokenizer.token_str(rep.ids[1]) == "▁the");
    let random = by_name("random");
    assert!(random.ids[1..].iter().all(|&id| !lm.tokenizer.is_special(id)));
    let (abl, keys) = set.build_ablation(&lm.tokenizer).unwrap().unwrap();
    assert_eq!((abl.len(), keys), (256, vec![0, 1, 2, 3]));
}

#[test]
fn analyze_json_has_the_documented_fields() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("analyze");
    let out = common::sinkscope(&["analyze", "-m", "stories260k", "-o", dir.to_str().unwrap(), "--ablate-keys", "0", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(r, saved);
    assert!(r["sink_positions"].as_array().unwrap().iter().all(|p| p.is_u64()));
    let score = r["sink_score"].as_object().unwrap();
    assert_eq!(score.len(), 16);
    assert!(score["0"].as_f64().unwrap() >= 0.0 && score["0"].as_f64().unwrap() <= 100.0);
    assert!(r["f_attn"].as_f64().unwrap() > 0.0);
    assert!(r["massive"]["dims"].is_array() && r["massive"]["positions"].is_array());
    assert!(r["massive"].get("first_layer").is_some());
    let heads = r["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 5 * 8);
    for h in heads {
        assert!(h["layer"].is_u64() && h["head"].is_u64());
        assert_eq!(h["alpha"].as_array().unwrap().len(), 16);
        assert!(["sink", "previous_token", "broad", "content"].contains(&h["class"].as_str().unwrap()));
    }
    assert_eq!(r["probes"].as_array().unwrap().len(), 6);
    let ablation = &r["ablation"];
    assert_eq!(ablation["results"].as_array().unwrap().len(), 5 * (8 + 1));
    assert_eq!(ablation["n_tokens"], 256);
}

#[test]
fn analyze_with_a_file_runs_exactly_that_text() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("analyze-file");
    let text = common::fixture("texts/tinystories.txt");
    let out = common::sinkscope(&[
        "analyze",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--max-tokens",
        "100",
        "--ablate-keys",
        "1",
        "-o",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let probes = r["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 1);
    assert_eq!(probes[0]["kind"], "file");
    assert_eq!(probes[0]["n_tokens"], 100);
    assert_eq!(r["ablation"]["n_tokens"], 100);
    assert_eq!(r["ablation"]["keys"], serde_json::json!([1]));
}

/// Masked re-runs start from the clean pass's input to the masked layer: starting there must
/// equal starting from the embeddings, and stacked variants must equal separate runs.
#[test]
fn masked_variants_reuse_the_prefix_and_batch_exactly() {
    let path = model_or_skip!("stories260K.gguf");
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let ids = lm.tokenizer.encode("Once upon a time, there was a little girl named Lily. She loved to play outside.").unwrap();
    let t = ids.len();
    let mut inputs = TensorCollector::new(HookFilter::parse("hook_resid_pre", 5).unwrap(), t);
    let clean = lm.model.forward(&ids, None, &mut inputs).unwrap();
    let resid = |l: usize| {
        let (shape, data) = inputs.get(&HookPoint::ResidPre(l)).unwrap();
        candle_core::Tensor::from_slice(data, shape, &candle_core::Device::Cpu).unwrap()
    };
    let diff = |a: &candle_core::Tensor, b: &candle_core::Tensor| -> f32 { (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap() };
    let masks: Vec<KeyMask> = (0..8).map(|h| KeyMask::key(3, vec![h], 0)).collect();
    let batched = lm.model.forward_masked(&resid(3), &masks).unwrap();
    for (m, b) in masks.iter().zip(&batched) {
        let single = &lm.model.forward_masked(&resid(3), std::slice::from_ref(m)).unwrap()[0];
        assert!(diff(single, b) < 1e-5, "batched variant differs from a single run");
        assert!(diff(&clean, b) > 0.0, "masking must change something");
    }
    // An empty head list masks nothing: the re-run equals the clean pass.
    let none = &lm.model.forward_masked(&resid(2), &[KeyMask::key(2, vec![], 0)]).unwrap()[0];
    assert!(diff(&clean, none) < 1e-5);
    // Re-running every layer from layer 0's input (an empty mask at layer 0) reproduces the clean
    // pass too: the clean pass's saved layer inputs are exactly where the variants may start.
    let from_zero = lm.model.forward_masked(&resid(0), &[KeyMask::key(0, vec![], 0)]).unwrap().remove(0);
    assert!(diff(&clean, &from_zero) < 1e-5);
}

/// Key-masking ablations — one key hidden, or heads restricted to S sinks + R recent keys — against
/// HF transformers with the same intervention patched into its eager attention
/// (tests/fixtures/ablation_reference.json). Tolerance: 2e-5 nats + 0.01% of the value.
#[test]
fn ablation_matches_hf_with_the_same_mask() {
    use sinkscope::capture::ablation::run_masks;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("ablation_reference.json")).unwrap()).unwrap();
    for (key, file) in [("stories260k", "stories260K.gguf"), ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")] {
        let path = model_or_skip!(file);
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        let reference = &json["models"][key];
        let ids: Vec<u32> = reference["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let cases = reference["cases"].as_array().unwrap();
        let groups: Vec<Vec<(KeyMask, Option<usize>)>> = cases
            .iter()
            .map(|c| {
                let heads: Vec<usize> = c["heads"].as_array().unwrap().iter().map(|h| h.as_u64().unwrap() as usize).collect();
                let (layer, key) = (c["layer"].as_u64().unwrap() as usize, c["key"].as_u64().unwrap() as usize);
                // A case with "recent" restricts the heads to a streaming cache (S = key, R).
                let mask = match c["recent"].as_u64() {
                    Some(r) => KeyMask::streaming(layer, heads, key, r as usize),
                    None => KeyMask::key(layer, heads, key),
                };
                vec![(mask, None)]
            })
            .collect();
        let results = run_masks(&lm.model, &ids, &groups, &mut |_, _| {}).unwrap();
        for (c, r) in cases.iter().zip(&results) {
            eprintln!(
                "{key} L{} {} k{} r{}: ΔNLL {:.6} (HF {:.6}), KL {:.6} (HF {:.6})",
                c["layer"],
                c["heads"],
                c["key"],
                c["recent"],
                r.delta_nll,
                c["delta_nll"].as_f64().unwrap(),
                r.kl,
                c["kl"].as_f64().unwrap()
            );
            for (name, ours) in [("delta_nll", r.delta_nll), ("kl", r.kl)] {
                let want = c[name].as_f64().unwrap();
                assert!(
                    (ours - want).abs() <= 2e-5 + 1e-4 * want.abs(),
                    "{key} layer {} heads {} key {}: {name} {ours} vs HF {want}",
                    c["layer"],
                    c["heads"],
                    c["key"]
                );
            }
        }
    }
}

/// A tokenizer without BOS (the tiny Gemma 2 fixture's) takes the default probes but the one
/// that flips BOS, which is left out with the reason (report.json's `skipped_probes`, the summary,
/// index.md); a tokenizer with BOS leaves none out, and a probe asking for BOS outright on a
/// tokenizer without one stays an error.
#[test]
fn a_tokenizer_without_bos_leaves_out_the_flipped_bos_probe_and_says_so() {
    use sinkscope::probe::{BosMode, SkippedProbe};
    let no_bos = load(common::fixture("arch/gemma2").to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(no_bos.tokenizer.bos(), None);
    let set = ProbeSet::load("default").unwrap();
    let built = set.build(&no_bos.tokenizer).unwrap();
    assert_eq!(built.len(), set.probes.len() - 1);
    assert!(built.iter().all(|p| p.name != "story_flipped_bos"));
    let why = "it flips BOS, and this tokenizer has no BOS token".to_string();
    assert_eq!(set.skipped(&no_bos.tokenizer), [SkippedProbe { name: "story_flipped_bos".into(), why }]);
    let with_bos = load(common::fixture("arch/qwen3").to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert!(with_bos.tokenizer.bos().is_some() && set.skipped(&with_bos.tokenizer).is_empty());
    assert_eq!(set.build(&with_bos.tokenizer).unwrap().len(), set.probes.len());
    let mut always = set.clone();
    always.probes.retain(|p| p.bos == BosMode::Flip);
    always.probes[0].bos = BosMode::Always;
    let e = always.build(&no_bos.tokenizer).unwrap_err().to_string();
    assert!(e.contains("asks for BOS but this tokenizer has none"), "{e}");
    // The whole analysis runs and says what it left out.
    let dir = common::temp_dir("analysis-no-bos");
    let out = common::sinkscope(&["analyze", "-m", common::fixture("arch/gemma2").to_str().unwrap(), "--no-ablation", "-o", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("probe left out: story_flipped_bos (it flips BOS"));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["skipped_probes"][0]["name"], "story_flipped_bos");
}

/// A hybrid (Qwen3-Next's tiny fixture: Gated DeltaNet layers 0 and 2, gated attention layers 1
/// and 3) is analysed over the layers that attend: its heads, α, sink rates and causal sweep
/// come from layers 1 and 3 only, each head's output gate is measured beside α_0 (how far it
/// opens, how often it closes), and the census reads "2 RoPE + 2 linear" with the gates'
/// numbers; a capture records no attention on position 0 for a linear layer rather than 0.
#[test]
fn a_hybrid_is_analysed_over_the_layers_that_attend_with_their_gates() {
    use sinkscope::analysis::census::Census;
    use sinkscope::analysis::AnalysisReport;
    let model = common::fixture("arch/qwen3_next");
    let dir = common::temp_dir("analysis-hybrid");
    let out = common::sinkscope(&["analyze", "-m", model.to_str().unwrap(), "-o", dir.join("a").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("L1H") && !stdout.contains("L0H") && !stdout.contains("L2H"), "{stdout}");
    let report: AnalysisReport = serde_json::from_slice(&std::fs::read(dir.join("a/report.json")).unwrap()).unwrap();
    assert_eq!(report.heads.len(), 8);
    for h in &report.heads {
        assert!(h.layer == 1 || h.layer == 3, "head of layer {}", h.layer);
        let (open, closed) = (h.gate_mean.unwrap(), h.gate_closed.unwrap());
        assert!(open > 0.0 && open < 1.0 && (0.0..=1.0).contains(&closed), "L{}H{}: gate {open}, closed {closed}", h.layer, h.head);
    }
    for p in &report.probes {
        assert_eq!(p.alpha.iter().map(Vec::len).collect::<Vec<_>>(), [0, 4, 0, 4], "{}", p.name);
        assert_eq!(p.gate_mean.iter().map(Vec::len).collect::<Vec<_>>(), [0, 4, 0, 4], "{}", p.name);
    }
    let census = Census::of(&report);
    assert_eq!((census.positions().as_str(), census.linear_layers), ("2 RoPE + 2 linear", 2));
    let (open, closed) = (census.gate_mean.unwrap(), census.gate_closed.unwrap());
    assert!(open > 0.0 && open < 1.0 && (0.0..=1.0).contains(&closed));
    // Sink rates count (probe, attending layer, head): multiples of 100 / (8 · probes).
    let unit = 100.0 / (8 * report.probes.len()) as f64;
    assert!(census.sink_rate.iter().all(|r| ((r.percent / unit) - (r.percent / unit).round()).abs() < 1e-9));
    let out = common::sinkscope(&[
        "capture",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "Once upon a time there was a dog",
        "-o",
        dir.join("c").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let capture: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("c/capture.json")).unwrap()).unwrap();
    let layers = &capture["summary"]["layers"];
    assert!(layers[0]["mean_attention_pos0"].is_null() && layers[1]["mean_attention_pos0"].is_f64(), "{layers}");
    // The head_sinks table carries each head's gate on every row of the attending layers.
    use sinkscope::report::tables::{tables, ColumnData};
    for run in ["a", "c"] {
        let run = sinkscope::report::run::Run::open(&dir.join(run)).unwrap();
        let all = tables(&run);
        let hs = all.iter().find(|t| t.name == "head_sinks").unwrap();
        let (ColumnData::U32(layer), ColumnData::OptF64(gate)) = (hs.column("layer").unwrap(), hs.column("gate_mean").unwrap()) else {
            panic!("column types")
        };
        assert!(hs.n_rows() > 0 && layer.iter().all(|&l| l == 1 || l == 3));
        assert!(gate.iter().all(|g| g.is_some_and(|g| g > 0.0 && g < 1.0)), "{gate:?}");
    }
}
