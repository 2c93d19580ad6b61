//! A tiny seeded fixture of tests/fixtures/arch/<family>/ against HF transformers' outputs on its
//! 48 tokens: logits ≤ 1e-3 and every layer's pattern ≤ 1e-4 (abs), learned-sink masses ≤ 1e-4.

use super::Fixture;
use sinkscope::capture::collector::TensorCollector;
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::{load, LoadOptions};

pub const LOGIT_TOL: f32 = 1e-3;
pub const PATTERN_TOL: f32 = 1e-4;
pub const SINK_TOL: f32 = 1e-4;

/// Runs the fixture's tokens through the model at `model_path` and compares with its reference.
pub fn matches_transformers(family: &str, model_path: &str) {
    let fx = Fixture::open(&super::fixture(&format!("arch/{family}/reference.safetensors")));
    let lm = load(model_path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{family}: {e}"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let t = tokens.len();
    let cfg = &lm.model.cfg;
    let learned_sinks = cfg.arch.learned_sinks;
    let hooks = if learned_sinks { "hook_pattern,hook_sink_prob" } else { "hook_pattern" };
    let mut sink = TensorCollector::new(HookFilter::parse(hooks, cfg.n_layers).unwrap(), t);
    let hidden = lm.model.forward(&tokens, None, &mut sink).unwrap();
    let logits: Vec<f32> = lm.model.logits(&hidden).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let (shape, reference) = fx.f32("logits");
    assert_eq!(shape, [t, cfg.vocab_size], "{family}");
    let worst_logit = super::max_abs_diff("logits", &logits, &reference) as f32;
    let mut worst_pattern = 0f32;
    // A linear-attention layer has no pattern (hybrid_matches_transformers holds its outputs).
    for l in (0..cfg.n_layers).filter(|&l| !cfg.is_linear(l)) {
        let (shape, reference) = fx.f32(&format!("pattern.{l}"));
        let (ours_shape, ours) = sink.get(&HookPoint::Pattern(l)).unwrap();
        assert_eq!(ours_shape[..], shape[..], "{family} layer {l}");
        worst_pattern = worst_pattern.max(super::max_abs_diff(&format!("{family} pattern {l}"), ours, &reference) as f32);
    }
    // The mass each head's learned sink logit took, [head, query] (HF: 1 − the row's sum).
    let mut worst_sink = 0f32;
    for l in (0..cfg.n_layers).filter(|_| learned_sinks) {
        let (shape, reference) = fx.f32(&format!("sink_prob.{l}"));
        let (ours_shape, ours) = sink.get(&HookPoint::SinkProb(l)).unwrap();
        assert_eq!(ours_shape[..], shape[..], "{family} layer {l}");
        worst_sink = worst_sink.max(super::max_abs_diff(&format!("{family} learned-sink mass {l}"), ours, &reference) as f32);
    }
    assert!(worst_sink <= SINK_TOL, "{family}: learned-sink mass differs from transformers by {worst_sink} > {SINK_TOL}");
    // Perplexity of the tokens after the first, from either side's logits.
    let (ppl, ppl_ref) = (perplexity(&logits, &tokens, cfg.vocab_size), perplexity(&reference, &tokens, cfg.vocab_size));
    let ppl_gap = (ppl - ppl_ref).abs() / ppl_ref;
    assert!(ppl.is_finite() && ppl_gap <= 1e-4, "{family}: perplexity {ppl} against transformers' {ppl_ref}");
    eprintln!(
        "{family} ({model_path}): T={t} max |Δlogit| {worst_logit:.2e}, max |Δpattern| {worst_pattern:.2e}, max |Δsink mass| {worst_sink:.2e}, perplexity {ppl:.4} vs {ppl_ref:.4}"
    );
    assert!(worst_logit <= LOGIT_TOL, "{family}: logits differ from transformers by {worst_logit} > {LOGIT_TOL}");
    assert!(worst_pattern <= PATTERN_TOL, "{family}: patterns differ from transformers by {worst_pattern} > {PATTERN_TOL}");
}

/// What a gated hybrid adds, against the same reference: each attention layer's σ(gate)
/// (`hook_gate`), each linear-attention layer's readings (`hook_z`, what out_proj reads; relative
/// to the largest, as they come out of an RMSNorm) and its
/// recurrent state after the last token (carried by a [`KvCache`]), all ≤ [`PATTERN_TOL`]; and the
/// decode path — a prefill of all but the last 8 tokens, then one token per call (the recurrence,
/// the cached keys) — giving the full forward's logits ≤ [`LOGIT_TOL`]. Returns the worst
/// (gate, readings, state, decode logit) differences.
pub fn hybrid_matches_transformers(family: &str, model_path: &str) -> [f32; 4] {
    use sinkscope::model::decoder::KvCache;
    let fx = Fixture::open(&super::fixture(&format!("arch/{family}/reference.safetensors")));
    let lm = load(model_path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{family}: {e}"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let (t, cfg) = (tokens.len(), &lm.model.cfg);
    let mut sink = TensorCollector::new(HookFilter::parse("hook_gate,hook_z", cfg.n_layers).unwrap(), t);
    let mut cache = KvCache::default();
    lm.model.forward(&tokens, Some(&mut cache), &mut sink).unwrap();
    let mut worst = [0f32; 4];
    for l in 0..cfg.n_layers {
        let (slot, name, hook) = if cfg.is_linear(l) { (1, format!("z.{l}"), HookPoint::Z(l)) } else { (0, format!("gate.{l}"), HookPoint::Gate(l)) };
        let (shape, reference) = fx.f32(&name);
        let (ours_shape, ours) = sink.get(&hook).unwrap_or_else(|| panic!("{family}: no {hook}"));
        assert_eq!(ours_shape[..], shape[..], "{family} {name}");
        // The readings come out of an RMSNorm (of order 10 here): held relative to their scale.
        let scale = reference.iter().fold(1f32, |m, x| m.max(x.abs()));
        worst[slot] = worst[slot].max(super::max_abs_diff(&format!("{family} {name}"), ours, &reference) as f32 / scale);
        if cfg.is_linear(l) {
            let (_, reference) = fx.f32(&format!("state.{l}"));
            let state = cache.recurrent_states().get(l).unwrap_or_else(|| panic!("{family}: layer {l} kept no state"));
            worst[2] = worst[2].max(super::max_abs_diff(&format!("{family} state {l}"), state.matrix(), &reference) as f32);
        }
    }
    // The decode path, against the full forward's logits for the last 8 positions.
    let prefill = t - 8;
    let mut cache = KvCache::default();
    lm.model.forward(&tokens[..prefill], Some(&mut cache), &mut sinkscope::model::receiver::NoCapture).unwrap();
    let (_, reference) = fx.f32("logits");
    let vocab = cfg.vocab_size;
    for (i, &token) in tokens[prefill..].iter().enumerate() {
        let hidden = lm.model.forward(&[token], Some(&mut cache), &mut sinkscope::model::receiver::NoCapture).unwrap();
        let logits: Vec<f32> = lm.model.logits(&hidden).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let row = &reference[(prefill + i) * vocab..][..vocab];
        worst[3] = worst[3].max(super::max_abs_diff(&format!("{family} decode step {i}"), &logits, row) as f32);
    }
    eprintln!(
        "{family} ({model_path}): max |Δgate| {:.2e}, |Δreadings|/max {:.2e}, |Δstate| {:.2e}, decode |Δlogit| {:.2e}",
        worst[0], worst[1], worst[2], worst[3]
    );
    for (what, w, tol) in [
        ("gates", worst[0], PATTERN_TOL),
        ("linear-attention readings", worst[1], PATTERN_TOL),
        ("recurrent states", worst[2], PATTERN_TOL),
        ("decode logits", worst[3], LOGIT_TOL),
    ] {
        assert!(w <= tol, "{family}: {what} differ from transformers by {w} > {tol}");
    }
    worst
}

/// exp of the mean NLL of `tokens[1..]` under logits rows `0..T−1` (row-major, `vocab` wide).
fn perplexity(logits: &[f32], tokens: &[u32], vocab: usize) -> f64 {
    let nll: Vec<f64> = tokens[1..]
        .iter()
        .enumerate()
        .map(|(r, &next)| {
            let row = &logits[r * vocab..][..vocab];
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
            let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
            max + sum.ln() - row[next as usize] as f64
        })
        .collect();
    (nll.iter().sum::<f64>() / nll.len() as f64).exp()
}
