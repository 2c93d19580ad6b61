//! `capture` end to end: the files it writes, their consistency with each other (reduced α vs the
//! saved full patterns), and the sink / massive-activation facts on SmolLM2.

mod common;

use common::Fixture;

fn run_ok(args: &[&str]) -> String {
    let out = common::sinkscope(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn capture_writes_summary_reductions_and_tensors_that_agree() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("capture");
    let out = dir.join("run");
    let tensors = dir.join("full.safetensors");
    let text = common::fixture("texts/tinystories.txt");
    let stdout = run_ok(&[
        "capture",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--save-tensors",
        tensors.to_str().unwrap(),
        "--hooks",
        "blocks.*.attn.hook_pattern,hook_resid_post",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let on_disk: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("capture.json")).unwrap()).unwrap();
    assert_eq!(report, on_disk);
    let t = report["n_tokens"].as_u64().unwrap() as usize;
    assert_eq!(report["tokens"][0]["piece"], "<s>");
    assert_eq!(report["summary"]["layers"].as_array().unwrap().len(), 5);
    assert_eq!(report["summary"]["heads"].as_array().unwrap().len(), 5 * 8);
    let ppl = report["nll"]["perplexity"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 20.0, "stories260K on TinyStories text should have low perplexity: {ppl}");

    // Saved patterns: [head, T, T], rows sum to 1, causal.
    let full = Fixture::open(&tensors);
    let reductions = Fixture::open(&out.join("reductions.safetensors"));
    let (cshape, col_mass) = reductions.f32("attn_col_mass");
    assert_eq!(cshape, vec![5, 8, t]);
    for l in 0..5 {
        let (shape, p) = full.f32(&format!("blocks.{l}.attn.hook_pattern"));
        assert_eq!(shape, vec![8, t, t]);
        for h in 0..8 {
            for q in 0..t {
                let row = &p[(h * t + q) * t..(h * t + q + 1) * t];
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
                assert!(row[q + 1..].iter().all(|&x| x == 0.0));
            }
            // The streaming reducer's column mass equals the saved pattern's column sums, and
            // the summary's α_k equals the mean over queries i ≥ k.
            for k in 0..t {
                let col: f32 = (0..t).map(|q| p[(h * t + q) * t + k]).sum();
                assert!((col - col_mass[(l * 8 + h) * t + k]).abs() < 1e-4, "layer {l} head {h} key {k}");
            }
            let alpha = &report["summary"]["heads"][l * 8 + h]["alpha"];
            for k in 0..16 {
                let want: f32 = (k..t).map(|q| p[(h * t + q) * t + k]).sum::<f32>() / (t - k) as f32;
                assert!((alpha[k].as_f64().unwrap() as f32 - want).abs() < 1e-5);
            }
        }
        let (rshape, _) = full.f32(&format!("blocks.{l}.hook_resid_post"));
        assert_eq!(rshape, vec![t, 64]);
    }
}

/// `hook_attn_scores` (scaled, masked −∞) and `hook_pattern` saved together: the pattern is the
/// row softmax of the scores (1e-6), and the scores are −∞ exactly above the diagonal.
#[test]
fn saved_scores_softmax_to_the_saved_pattern() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("capture-scores");
    let tensors = dir.join("scores.safetensors");
    let text = common::fixture("texts/tinystories.txt");
    run_ok(&[
        "capture",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "-o",
        dir.join("run").to_str().unwrap(),
        "--save-tensors",
        tensors.to_str().unwrap(),
        "--hooks",
        "blocks.2.attn.hook_attn_scores,blocks.2.attn.hook_pattern",
    ]);
    let full = Fixture::open(&tensors);
    let (shape, scores) = full.f32("blocks.2.attn.hook_attn_scores");
    let (_, pattern) = full.f32("blocks.2.attn.hook_pattern");
    let (heads, t) = (shape[0], shape[1]);
    for h in 0..heads {
        for q in 0..t {
            let s = &scores[(h * t + q) * t..(h * t + q + 1) * t];
            assert!(s[q + 1..].iter().all(|&x| x == f32::NEG_INFINITY));
            let max = common::finite_max(&format!("head {h} query {q}: scores"), &s[..=q]);
            let z: f64 = s[..=q].iter().map(|&x| (x as f64 - max).exp()).sum();
            for k in 0..=q {
                let want = (s[k] as f64 - max).exp() / z;
                assert!((pattern[(h * t + q) * t + k] as f64 - want).abs() < 1e-6, "head {h} query {q} key {k}");
            }
        }
    }
}

#[test]
fn smollm2_sinks_on_position_zero_with_massive_activations() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = common::temp_dir("smol");
    let out = dir.join("run");
    let book = common::corpora_dir().join("pg84_frankenstein.txt");
    run_ok(&["capture", "-m", "smollm2-135m", "-f", book.to_str().unwrap(), "--max-tokens", "300", "-o", out.to_str().unwrap()]);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("capture.json")).unwrap()).unwrap();
    assert_eq!(r["n_tokens"], 300);
    let layers = r["summary"]["layers"].as_array().unwrap();
    // Deep layers: most attention lands on position 0, whose residual carries a massive activation
    // (Sun et al.: |h| > 100 and ≥ 1000× the layer median).
    let deep = &layers[12..26];
    let mean_sink: f64 = deep.iter().map(|l| l["mean_attention_pos0"].as_f64().unwrap()).sum::<f64>() / deep.len() as f64;
    assert!(mean_sink > 0.3, "mean attention on position 0 in layers 12–25: {mean_sink}");
    for l in deep {
        let max = l["max_abs"].as_f64().unwrap();
        let median = l["median_abs"].as_f64().unwrap();
        assert_eq!(l["max_abs_pos"], 0, "{l}");
        assert!(max > 100.0 && max >= 1000.0 * median, "layer {}: max {max}, median {median}", l["layer"]);
    }
}

#[test]
fn demo_prints_a_table_and_writes_the_run() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("demo");
    let out = dir.join("demo");
    let stdout = run_ok(&["demo", "-m", "stories260k", "-o", out.to_str().unwrap()]);
    assert!(stdout.contains("attn→pos0") && stdout.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).count() >= 5, "{stdout}");
    assert!(out.join("capture.json").is_file() && out.join("reductions.safetensors").is_file());
}

#[test]
fn info_json_describes_the_model() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let info: serde_json::Value = serde_json::from_str(&run_ok(&["info", "smollm2-135m", "--json"])).unwrap();
    assert_eq!(info["n_layers"], 30);
    assert_eq!(info["n_heads"], 9);
    assert_eq!(info["n_kv_heads"], 3);
    assert_eq!(info["d_model"], 576);
    assert_eq!(info["context_len"], 8192);
    assert_eq!(info["vocab_size"], 49152);
    assert_eq!(info["rope_layout"], "interleaved");
    assert_eq!(info["tied_embeddings"], true);
    assert!(info["quantization"].as_str().unwrap().contains("Q4_1 ×210"));
    assert!(info["tokenizer"].as_str().unwrap().contains("smollm"));
}
