//! Causal-sweep benchmark (a plain harness, not a timed test): times `run_ablation` — key 0 hidden
//! from every head, and from every whole layer, one variant each — on T tokens, beside its anchor:
//! what re-running half a forward per variant costs. The anchor is measured, not estimated: a plain
//! forward's time (no hooks) scaled by the share of layers a variant re-runs ((L − l)/L for a
//! variant masked at layer l), plus the output head and log-softmax over the rows it scores
//! (timed once over T − 1 rows). Prints one JSON line: sweep seconds, anchor seconds, their ratio.
//!
//!     cargo bench --bench sweep -- [--model M] [--book FILE] [--tokens T]

use std::time::Instant;

use sinkscope::capture::ablation::{run_ablation, AblationPlan};
use sinkscope::metrics::divergence::log_softmax_rows;
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// Median of three timed runs of `f`.
fn median3(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..3)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[1]
}

fn main() {
    let model = arg("--model").unwrap_or_else(|| "smollm2-135m".into());
    let book = arg("--book").unwrap_or_else(|| "../shared/corpora/pg84_frankenstein.txt".into());
    let n: usize = arg("--tokens").and_then(|v| v.parse().ok()).unwrap_or(160);
    let lm = load(&model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&book).unwrap_or_else(|e| panic!("{book}: {e}"));
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(n).collect();
    assert_eq!(ids.len(), n, "book too short");
    let (m, cfg) = (&lm.model, &lm.model.cfg);
    let forward_s = median3(|| {
        m.forward(&ids, None, &mut NoCapture).unwrap();
    });
    let hidden = m.forward(&ids, None, &mut NoCapture).unwrap();
    let head_s = median3(|| {
        let logits: Vec<f32> = m.logits(&hidden.narrow(0, 1, n - 1).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        log_softmax_rows(&logits, cfg.vocab_size);
    });
    let plan = AblationPlan { keys: vec![0], per_head: true, per_layer: true };
    let per_layer_variants = cfg.n_heads + 1;
    let l_n = cfg.n_layers as f64;
    let anchor_s: f64 = (0..cfg.n_layers).map(|l| per_layer_variants as f64 * (forward_s * (l_n - l as f64) / l_n + head_s)).sum();
    let t = Instant::now();
    let results = run_ablation(m, &ids, &plan, &mut |_, _| {}).unwrap();
    let sweep_s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "tokens": n,
            "variants": results.len(),
            "forward_s": forward_s,
            "head_s": head_s,
            "anchor_s": anchor_s,
            "sweep_s": sweep_s,
            "ratio": sweep_s / anchor_s,
            "threads": rayon::current_num_threads(),
        })
    );
}
