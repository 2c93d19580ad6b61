//! sinkscope's side of the speed table beside llama.cpp (a plain harness, not a timed test; one run
//! of each item, as `benches/speed_vs_llama_cpp.sh` reports them): on one GGUF model and the first
//! T tokens of a book, prompt processing at each T — the bare forward (no hooks, no output head),
//! `capture` (every reducer, all-position NLL) — with f32 weights and with `--quantized`;
//! single-token decoding (128 tokens after one, each with its logits, as llama-bench's tg128);
//! the stream simulator (`sink` S = 4, W = 256, over the longest T); and `--quantized`'s error
//! against f32 on the first T: perplexity, the largest |Δlogit| over every position and vocabulary
//! entry, and α_0 (attention on position 0) per head; and the CPU's f32 multiply-add peak for
//! scale. Prints one JSON object.
//!
//!     cargo bench --bench speed -- [--model M] [--book FILE] [--tokens 512,2048] [--tokens-out F.json]

use std::time::Instant;

use sinkscope::capture::run::{capture, CaptureOptions, CaptureOutput};
use sinkscope::kv::policy::{Eviction, Policy, PositionMode};
use sinkscope::kv::simulate::simulate;
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, KvCache, LoadOptions, LoadedModel};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

fn capture_all(lm: &LoadedModel, ids: &[u32]) -> CaptureOutput {
    // capture's defaults but the heatmaps (the table times what the dashboard does not need).
    let opts = CaptureOptions { heatmap_bins: None, ..CaptureOptions::default() };
    capture(&lm.model, ids, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// Prompt-processing tokens/s of the bare forward and of `capture` at each length.
fn prompt_speeds(lm: &LoadedModel, ids: &[u32], lengths: &[usize]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for &t in lengths {
        let ids = &ids[..t];
        let (_, bare) = timed(|| lm.model.forward(ids, None, &mut NoCapture).unwrap_or_else(|e| panic!("{e}")));
        let (_, instrumented) = timed(|| capture_all(lm, ids));
        out.insert(t.to_string(), serde_json::json!({ "forward_tok_s": t as f64 / bare, "capture_tok_s": t as f64 / instrumented }));
    }
    out.into()
}

/// Tokens/s of decoding `n` tokens one at a time after the first, each step's logits computed.
fn decode_speed(lm: &LoadedModel, ids: &[u32], n: usize) -> f64 {
    let mut cache = KvCache::default();
    let h = lm.model.forward(&ids[..1], Some(&mut cache), &mut NoCapture).unwrap_or_else(|e| panic!("{e}"));
    lm.model.logits(&h).unwrap_or_else(|e| panic!("{e}"));
    let (_, s) = timed(|| {
        for &id in &ids[1..=n] {
            let h = lm.model.forward(&[id], Some(&mut cache), &mut NoCapture).unwrap_or_else(|e| panic!("{e}"));
            lm.model.logits(&h).unwrap_or_else(|e| panic!("{e}"));
        }
    });
    n as f64 / s
}

/// The largest |Δ| between two models' logits over every position of `ids`, 64 rows at a time.
fn max_logit_gap(a: &LoadedModel, b: &LoadedModel, ids: &[u32]) -> f64 {
    let ha = a.model.forward(ids, None, &mut NoCapture).unwrap_or_else(|e| panic!("{e}"));
    let hb = b.model.forward(ids, None, &mut NoCapture).unwrap_or_else(|e| panic!("{e}"));
    let mut worst = 0f64;
    for r0 in (0..ids.len()).step_by(64) {
        let n = 64.min(ids.len() - r0);
        let la: Vec<f32> = a.model.logits(&ha.narrow(0, r0, n).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let lb: Vec<f32> = b.model.logits(&hb.narrow(0, r0, n).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(la.len(), lb.len());
        for (x, y) in la.iter().zip(&lb) {
            let d = (*x as f64 - *y as f64).abs();
            assert!(d.is_finite(), "a non-finite logit");
            worst = if d > worst { d } else { worst };
        }
    }
    worst
}

/// This CPU's f32 multiply-add ceiling on every pool thread at once, GFLOP/s: 12 independent
/// 16-lane chains per thread for ~0.1 s (AVX-512; `None` without it), the scale the table's
/// rates are read against.
fn fma_peak_gflops() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        use rayon::prelude::*;
        const STEPS: usize = 30_000_000;
        #[target_feature(enable = "avx512f")]
        fn chains(steps: usize, seed: f32) -> f32 {
            use std::arch::x86_64::*;
            let mut acc = [_mm512_set1_ps(seed); 12];
            let (a, b) = (_mm512_set1_ps(0.999), _mm512_set1_ps(1e-3));
            for _ in 0..steps {
                for v in acc.iter_mut() {
                    *v = _mm512_fmadd_ps(*v, a, b);
                }
            }
            acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
        }
        let threads = rayon::current_num_threads();
        let (sum, seconds) = timed(|| {
            // SAFETY: the CPU has AVX-512F (checked above).
            (0..threads).into_par_iter().map(|t| unsafe { chains(STEPS, t as f32) }).sum::<f32>()
        });
        std::hint::black_box(sum);
        return Some((threads * STEPS * 12 * 16 * 2) as f64 / seconds / 1e9);
    }
    None
}

fn main() {
    let model = arg("--model").unwrap_or_else(|| "smollm2-135m".into());
    let book = arg("--book").unwrap_or_else(|| "../shared/corpora/pg1342_pride_and_prejudice.txt".into());
    let lengths: Vec<usize> =
        arg("--tokens").unwrap_or_else(|| "512,2048".into()).split(',').map(|v| v.parse().expect("--tokens: lengths")).collect();
    let longest = *lengths.iter().max().expect("--tokens: at least one length");
    let (f32_lm, f32_load) = timed(|| load(&model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}")));
    let (q_lm, q_load) = timed(|| load(&model, &LoadOptions { quantized: true, ..LoadOptions::default() }).unwrap_or_else(|e| panic!("{e}")));
    let text = std::fs::read_to_string(&book).unwrap_or_else(|e| panic!("{book}: {e}"));
    // A third of the way in, past the Gutenberg header (as benches/capture.rs).
    let start = text.char_indices().nth(text.chars().count() / 3).map_or(0, |(i, _)| i);
    let ids: Vec<u32> = f32_lm.tokenizer.encode(&text[start..]).unwrap().into_iter().take(longest.max(129)).collect();
    assert_eq!(ids.len(), longest.max(129), "book too short");
    if let Some(path) = arg("--tokens-out") {
        std::fs::write(&path, serde_json::to_string(&ids).unwrap()).unwrap();
    }
    let f32_prompt = prompt_speeds(&f32_lm, &ids, &lengths);
    let q_prompt = prompt_speeds(&q_lm, &ids, &lengths);
    let decode = (decode_speed(&f32_lm, &ids, 128), decode_speed(&q_lm, &ids, 128));
    let policy = Policy::new(Eviction::Sink { sinks: 4 }, 256, PositionMode::Slot);
    let (_, stream_s) = timed(|| simulate(&f32_lm.model, &ids[..longest], &[policy], &mut |_, _| {}).unwrap_or_else(|e| panic!("{e}")));
    // --quantized against f32 on the shortest length.
    let t = *lengths.iter().min().unwrap();
    let (a, b) = (capture_all(&f32_lm, &ids[..t]), capture_all(&q_lm, &ids[..t]));
    let (sa, sb) = (a.reducers.summarize(), b.reducers.summarize());
    assert_eq!(sa.heads.len(), sb.heads.len());
    let gaps: Vec<f64> = sa.heads.iter().zip(&sb.heads).map(|(x, y)| (x.alpha[0] - y.alpha[0]).abs()).collect();
    assert!(gaps.iter().all(|g| g.is_finite()), "a non-finite α_0");
    let ppl = |o: &CaptureOutput| o.nll.as_ref().map(|n| n.perplexity).unwrap_or(f64::NAN);
    let json = serde_json::json!({
        "model": model,
        "threads": rayon::current_num_threads(),
        "fma_peak_gflops": fma_peak_gflops(),
        "load_s": { "f32": f32_load, "quantized": q_load },
        "weight_bytes": { "f32": f32_lm.model.weight_bytes(), "quantized": q_lm.model.weight_bytes() },
        "prompt": { "f32": f32_prompt, "quantized": q_prompt },
        "decode_tok_s": { "f32": decode.0, "quantized": decode.1 },
        "stream_sink4_w256_tok_s": longest as f64 / stream_s,
        "quantized_error": {
            "tokens": t,
            "ppl_f32": ppl(&a),
            "ppl_quantized": ppl(&b),
            "max_abs_logit_gap": max_logit_gap(&f32_lm, &q_lm, &ids[..t]),
            "alpha0_max_abs_gap": gaps.iter().copied().max_by(f64::total_cmp),
            "alpha0_mean_abs_gap": gaps.iter().sum::<f64>() / gaps.len() as f64,
            "heads": gaps.len(),
        },
    });
    println!("{json}");
}
