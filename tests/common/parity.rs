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
    for l in 0..cfg.n_layers {
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
    eprintln!("{family} ({model_path}): T={t} max |Δlogit| {worst_logit:.2e}, max |Δpattern| {worst_pattern:.2e}, max |Δsink mass| {worst_sink:.2e}");
    assert!(worst_logit <= LOGIT_TOL, "{family}: logits differ from transformers by {worst_logit} > {LOGIT_TOL}");
    assert!(worst_pattern <= PATTERN_TOL, "{family}: patterns differ from transformers by {worst_pattern} > {PATTERN_TOL}");
}
