//! Weight matrices kept in bf16/f16 (`--dtype`, or as the file stores them) against HF
//! transformers: tests/fixtures/arch/llama_{f32,bf16,f16}/ hold one tiny random Llama saved three
//! ways and HF's eager float32 outputs from each checkpoint, and arch/qwen3_f16/ the qwen3 fixture as
//! an f16 GGUF (tests/fixtures/make_half_fixtures.py).
//! Tolerances as for every family (tests/architectures.rs): logits ≤ 1e-3, patterns ≤ 1e-4 (abs).

mod common;

use common::Fixture;
use sinkscope::capture::collector::TensorCollector;
use sinkscope::model::decoder::WeightDtype;
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::load::LoadedModel;
use sinkscope::model::{load, LoadOptions};

const LOGIT_TOL: f32 = 1e-3;
const PATTERN_TOL: f32 = 1e-4;

fn load_as(stored: &str, dtype: WeightDtype) -> LoadedModel {
    let dir = common::fixture(&format!("arch/llama_{stored}"));
    load(dir.to_str().unwrap(), &LoadOptions { dtype, ..LoadOptions::default() }).unwrap_or_else(|e| panic!("llama_{stored}: {e}"))
}

/// Logits and every layer's pattern on the fixture's tokens.
fn outputs(lm: &LoadedModel, tokens: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
    let n_layers = lm.model.cfg.n_layers;
    let mut sink = TensorCollector::new(HookFilter::parse("hook_pattern", n_layers).unwrap(), tokens.len());
    let hidden = lm.model.forward(tokens, None, &mut sink).unwrap();
    let logits = lm.model.logits(&hidden).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let patterns = (0..n_layers).map(|l| sink.get(&HookPoint::Pattern(l)).unwrap().1.to_vec()).collect();
    (logits, patterns)
}

/// The largest difference over every layer's pattern, layer by layer (each layer the same size on
/// both sides).
fn worst_pattern(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.iter().map(Vec::len).collect::<Vec<_>>(), b.iter().map(Vec::len).collect::<Vec<_>>(), "pattern shapes differ");
    worst(&a.concat(), &b.concat())
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    common::max_abs_diff("values", a, b) as f32
}

/// `lm` against the reference of the checkpoint stored as `reference`.
fn check(what: &str, lm: &LoadedModel, reference: &str) {
    let fx = Fixture::open(&common::fixture(&format!("arch/llama_{reference}/reference.safetensors")));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let (logits, patterns) = outputs(lm, &tokens);
    let d_logit = worst(&logits, &fx.f32("logits").1);
    let reference_patterns: Vec<Vec<f32>> = (0..patterns.len()).map(|l| fx.f32(&format!("pattern.{l}")).1).collect();
    let d_pattern = worst_pattern(&patterns, &reference_patterns);
    eprintln!("{what} vs transformers on the {reference} checkpoint: max |Δlogit| {d_logit:.2e}, max |Δpattern| {d_pattern:.2e}");
    assert!(d_logit <= LOGIT_TOL, "{what}: logits differ by {d_logit} > {LOGIT_TOL}");
    assert!(d_pattern <= PATTERN_TOL, "{what}: patterns differ by {d_pattern} > {PATTERN_TOL}");
}

#[test]
fn half_checkpoints_are_kept_half_and_match_transformers() {
    for stored in ["f32", "bf16", "f16"] {
        let lm = load_as(stored, WeightDtype::Auto);
        let want = if stored == "f32" { "f32 (dequantized)".to_string() } else { format!("f32 over {stored} weight matrices") };
        assert_eq!(lm.info.compute, want, "llama_{stored}");
        check(&format!("llama_{stored} kept as stored"), &lm, stored);
    }
}

#[test]
fn converting_on_load_rounds_as_torch_does() {
    // f32 weights rounded to bf16 / f16 on load reproduce the half checkpoints' outputs.
    check("llama_f32 --dtype bf16", &load_as("f32", WeightDtype::Bf16), "bf16");
    check("llama_f32 --dtype f16", &load_as("f32", WeightDtype::F16), "f16");
    // And a half checkpoint widened to f32 at load is the same model.
    check("llama_bf16 --dtype f32", &load_as("bf16", WeightDtype::F32), "bf16");
}

#[test]
fn half_storage_halves_the_matrices_and_computes_the_same_numbers() {
    let half = load_as("bf16", WeightDtype::Auto);
    let full = load_as("bf16", WeightDtype::F32);
    let cfg = &half.model.cfg;
    let (d, ff, kv) = (cfg.d_model, cfg.d_ff, cfg.n_kv_heads * cfg.d_head);
    // Tied: one embedding matrix; per layer q, k, v, o, gate, up, down; norms stay f32.
    let matrices = cfg.vocab_size * d + cfg.n_layers * (2 * d * d + 2 * kv * d + 3 * ff * d);
    let norms = d + cfg.n_layers * 2 * d;
    assert_eq!(full.info.weight_bytes, 4 * (matrices + norms) as u64);
    assert_eq!(half.info.weight_bytes, (2 * matrices + 4 * norms) as u64);
    // The same values in both: only the order of the f32 sums may differ.
    let tokens: Vec<u32> = (0..40).map(|i| 3 + (i * 37 % 500) as u32).collect();
    let (a, pa) = outputs(&half, &tokens);
    let (b, pb) = outputs(&full, &tokens);
    let d_logit = worst(&a, &b);
    let d_pattern = worst_pattern(&pa, &pb);
    eprintln!("bf16-kept vs widened at load: max |Δlogit| {d_logit:.2e}, max |Δpattern| {d_pattern:.2e}");
    assert!(d_logit <= 1e-5 && d_pattern <= 1e-6, "{d_logit} / {d_pattern}");
}

#[test]
fn half_products_do_not_depend_on_the_thread_count() {
    let lm = load_as("f16", WeightDtype::Auto);
    let tokens: Vec<u32> = (0..48).map(|i| 3 + (i * 53 % 500) as u32).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| outputs(&lm, &tokens))
    };
    let one = run(1);
    for threads in [2, 3] {
        let many = run(threads);
        assert!(one.0.iter().zip(&many.0).all(|(a, b)| a.to_bits() == b.to_bits()), "logits differ on {threads} threads");
        assert_eq!(one.1, many.1, "patterns differ on {threads} threads");
    }
}

/// An f16 GGUF (as llama.cpp's converter writes one: matrices f16, norms f32) keeps its matrices
/// half and computes what the same f32 weights rounded to f16 on load compute.
#[test]
fn an_f16_gguf_is_kept_half_and_equals_rounding_on_load() {
    let gguf = load(common::fixture("arch/qwen3_f16/model.gguf").to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(gguf.info.compute, "f32 over f16 weight matrices");
    assert!(gguf.info.quantization.contains("F16"), "{}", gguf.info.quantization);
    let rounded = load(common::fixture("arch/qwen3").to_str().unwrap(), &LoadOptions { dtype: WeightDtype::F16, ..LoadOptions::default() }).unwrap();
    assert_eq!(gguf.info.weight_bytes, rounded.info.weight_bytes);
    let fx = Fixture::open(&common::fixture("arch/qwen3/reference.safetensors"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let ((a, pa), (b, pb)) = (outputs(&gguf, &tokens), outputs(&rounded, &tokens));
    let (d_logit, d_pattern) = (worst(&a, &b), worst_pattern(&pa, &pb));
    // Against the f32 weights' reference: only the rounding of the weights to f16 differs.
    let d_f32 = worst(&a, &fx.f32("logits").1);
    eprintln!(
        "f16 GGUF vs f32 weights rounded to f16 on load: max |Δlogit| {d_logit:.2e}, max |Δpattern| {d_pattern:.2e}; vs the f32 model {d_f32:.2e}"
    );
    assert!(d_logit <= 1e-5 && d_pattern <= 1e-6, "{d_logit} / {d_pattern}");
    assert!(d_f32 > 0.0 && d_f32 <= 5e-2, "{d_f32}");
}

#[test]
fn an_unknown_dtype_is_refused_with_the_choices() {
    let out = common::sinkscope(&["info", "tests/fixtures/arch/llama_bf16", "--dtype", "int3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auto, f32, bf16, f16"), "{err}");
    let out = common::sinkscope(&["info", "tests/fixtures/arch/llama_bf16"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("f32 over bf16 weight matrices") && text.contains("BF16 ×"), "{text}");
}

/// A model too large for this machine's memory in f32 (a limit set through
/// `SINKSCOPE_MEMORY_LIMIT`): loaded with bf16 matrices, said on one line before loading; with
/// even less, with `--quantized`; with less still, refused with the numbers (exit 2, nothing
/// written). A weight type asked for is never changed.
#[test]
fn a_model_that_does_not_fit_is_kept_smaller_or_refused_with_the_numbers() {
    let Some(model) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let dir = common::temp_dir("memory-fit");
    let text = common::fixture("texts/tinystories.txt");
    let capture = |limit: &str, extra: &[&str], out: &str| {
        let out_dir = dir.join(out);
        let mut args = vec!["capture", "-m", model.to_str().unwrap(), "-f", text.to_str().unwrap(), "-o", out_dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
            .args(&args)
            .env("SINKSCOPE_MEMORY_LIMIT", limit)
            .output()
            .expect("run sinkscope");
        (run.status.code(), String::from_utf8_lossy(&run.stderr).into_owned(), out_dir)
    };
    // f32 needs 0.5 GiB (+ 0.25 headroom); bf16 0.26; --quantized 0.17.
    let (code, err, out) = capture("650000000", &[], "half");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.starts_with("note: ") && err.contains("loading them with --dtype bf16"), "{err}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("capture.json")).unwrap()).unwrap();
    assert!(record.to_string().contains("f32 over bf16 weight matrices"), "{record}");
    let (code, err, _) = capture("480000000", &[], "quantized");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("loading them with --quantized"), "{err}");
    let (code, err, out) = capture("300000000", &[], "refused");
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("does not fit") && err.contains("--dtype bf16 needs 0.3 GiB") && err.contains("--quantized needs 0.2 GiB"), "{err}");
    assert!(!out.exists());
    let (code, err, _) = capture("650000000", &["--dtype", "f32"], "asked");
    assert_eq!(code, Some(2), "an f32 load asked for was changed: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
