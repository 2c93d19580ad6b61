//! `recompute` benchmark (a plain harness, not a timed test): the windows of `recompute W` run
//! one forward each (what the simulator did before batching) and as stacked batches (what it
//! does now), alternating R times on the same steps of a book, and prints one JSON line with
//! the median seconds per scored step of each, their ratio and the largest NLL difference.
//!
//!     cargo bench --bench recompute -- [--model M] [--book FILE] [--cache W] [--steps N] [--repeat R]

use std::time::Instant;

use sinkscope::kv::{simulate_with, Eviction, Policy, PositionMode, SimOptions};
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let model = arg("--model").unwrap_or_else(|| "smollm2-135m".into());
    let book = arg("--book").unwrap_or_else(|| "../shared/corpora/pg1342_pride_and_prejudice.txt".into());
    let w: usize = arg("--cache").and_then(|v| v.parse().ok()).unwrap_or(128);
    let steps: usize = arg("--steps").and_then(|v| v.parse().ok()).unwrap_or(64);
    let repeat: usize = arg("--repeat").and_then(|v| v.parse().ok()).unwrap_or(3);
    let lm = load(&model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&book).unwrap_or_else(|e| panic!("{book}: {e}"));
    let start = text.char_indices().nth(text.chars().count() / 3).map_or(0, |(i, _)| i);
    // W tokens fill the budget (the shared prefix), then `steps` scored steps.
    let ids: Vec<u32> = lm.tokenizer.encode(&text[start..]).unwrap().into_iter().take(w + steps + 1).collect();
    let recompute = Policy::new(Eviction::Recompute, w, PositionMode::Slot);
    let (mut single, mut batched) = (Vec::new(), Vec::new());
    let mut worst = 0f64;
    for _ in 0..repeat.max(1) {
        let t0 = Instant::now();
        let mut one_by_one = Vec::new();
        for t in w..w + steps {
            let from = t + 1 - w;
            let hidden = lm.model.forward(&ids[from..=t], None, &mut NoCapture).unwrap();
            let last = hidden.narrow(0, t - from, 1).unwrap();
            one_by_one.push(lm.model.next_token_nll(&last, &[ids[t + 1]]).unwrap()[0]);
        }
        single.push(t0.elapsed().as_secs_f64() / steps as f64);
        let t0 = Instant::now();
        // The prefix (W tokens, one block replay) is timed too; it is small beside the windows.
        let out = simulate_with(&lm.model, &ids, &[recompute], SimOptions::default(), &mut |_, _| {}).unwrap().remove(0);
        batched.push(t0.elapsed().as_secs_f64() / steps as f64);
        worst = one_by_one.iter().zip(&out.nll[w..]).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
    }
    let (s, b) = (median(single), median(batched));
    println!(
        "{}",
        serde_json::json!({"model": model, "cache": w, "steps": steps, "repeat": repeat, "threads": rayon::current_num_threads(),
            "one_forward_per_window_s_per_step": s, "batched_s_per_step": b, "speedup": s / b, "max_abs_nll_diff": worst})
    );
}
