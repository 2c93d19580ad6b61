//! Pass-key sweep benchmark (a plain harness, not a timed test): times `kv::retrieval::sweep` —
//! the haystack shared up to each needle, a positional policy's candidates as one batch of
//! branches — on one length under dense and sink, beside its anchor: scoring every candidate the
//! way a harness without a cache does it, one plain forward over prompt + candidate each (what
//! lm-eval-style log-likelihood scoring runs). Checks the two agree, and prints one JSON line:
//! seconds each, their ratio, tokens run.
//!
//!     cargo bench --bench needle -- [--model M] [--book FILE] [--length T] [--trials N]

use std::time::Instant;

use sinkscope::kv::retrieval::arms::sweep;
use sinkscope::kv::retrieval::haystack::{draw_trials, Haystack};
use sinkscope::kv::retrieval::Compression;
use sinkscope::kv::{Eviction, Policy, PositionMode};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let model = arg("--model").unwrap_or_else(|| "smollm2-135m".into());
    let book = arg("--book").unwrap_or_else(|| "../shared/corpora/pg84_frankenstein.txt".into());
    let length: usize = arg("--length").and_then(|v| v.parse().ok()).unwrap_or(1024);
    let n_trials: usize = arg("--trials").and_then(|v| v.parse().ok()).unwrap_or(2);
    let lm = load(&model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&book).unwrap_or_else(|e| panic!("{book}: {e}"));
    let trials = draw_trials(&lm.tokenizer, n_trials, 9, 0).unwrap();
    let haystack = Haystack::new(&lm.tokenizer, &text[..length * 16], length, trials[0].needle.len()).unwrap();
    let depths = [0.0, 0.25, 0.5, 0.75, 1.0];
    let insertions: Vec<usize> = depths.iter().map(|&d| haystack.insertion(d)).collect();
    let m = &lm.model;
    let mut report = Vec::new();
    for (name, policy) in
        [("dense", Policy::new(Eviction::Dense, 0, PositionMode::Slot)), ("sink", Policy::new(Eviction::Sink { sinks: 4 }, 256, PositionMode::Slot))]
    {
        let mut tokens = 0;
        let t = Instant::now();
        let out = sweep(m, (policy, Compression::Streamed, CacheRounding::default()), &haystack, &insertions, &trials, &mut |n| tokens += n).unwrap();
        let sweep_s = t.elapsed().as_secs_f64();
        report.push(format!("\"{name}_sweep_s\": {sweep_s:.2}, \"{name}_tokens\": {tokens}"));
        if name != "dense" {
            continue;
        }
        // The anchor: one plain forward over prompt + candidate per candidate.
        let t = Instant::now();
        let mut worst = 0f64;
        let mut anchor_tokens = 0;
        for (i, &at) in insertions.iter().enumerate() {
            for (j, trial) in trials.iter().enumerate() {
                let prompt = haystack.prompt(at, &trial.needle);
                for (k, cand) in trial.candidates.iter().enumerate() {
                    let ids = [&prompt[..], cand].concat();
                    anchor_tokens += ids.len();
                    let h = m.forward(&ids, None, &mut NoCapture).unwrap();
                    let nll: f64 = m.next_token_nll(&h.narrow(0, prompt.len() - 1, cand.len()).unwrap(), cand).unwrap().iter().sum();
                    let diff = (nll - out[i][j].scores.nll[k]).abs();
                    // A NaN would vanish in the max below: refuse it here.
                    assert!(diff.is_finite(), "a non-finite NLL: the sweep {} vs a plain forward {nll}", out[i][j].scores.nll[k]);
                    worst = worst.max(diff);
                }
            }
        }
        let anchor_s = t.elapsed().as_secs_f64();
        assert!(worst < 1e-3, "the sweep and the plain forwards disagree by {worst} nats");
        report.push(format!(
            "\"dense_anchor_s\": {anchor_s:.2}, \"anchor_tokens\": {anchor_tokens}, \"dense_speedup\": {:.2}, \"max_abs_nll_diff\": {worst:.2e}",
            anchor_s / sweep_s
        ));
    }
    println!(
        "{{\"bench\": \"needle\", \"model\": \"{model}\", \"length\": {length}, \"depths\": {}, \"trials\": {n_trials}, \"candidates\": 10, {}}}",
        depths.len(),
        report.join(", ")
    );
}
