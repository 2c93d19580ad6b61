//! Capture benchmark (a plain harness, not a timed test): loads a model once, then times `capture`
//! (forward pass with every layer's pattern reduced) on T tokens of a book R times with NLL scoring
//! (all-position logits) and R times without, alternating so drift hits both alike, and prints one
//! JSON line with min/median wall time of each and peak RSS (VmHWM). `benches/capture_vs_hf.sh`
//! runs it beside HF transformers on the same tokens.
//!
//!     cargo bench --bench capture -- [--model M] [--book FILE] [--tokens T] [--repeat R]
//!                                    [--tokens-out FILE.json] [--bare]

use std::time::Instant;

use sinkscope::capture::run::{capture, CaptureOptions};
use sinkscope::model::{load, LoadOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn peak_rss_mb() -> f64 {
    sinkscope::capture::memory::peak_rss_bytes().map_or(0.0, |b| b as f64 / (1u64 << 20) as f64)
}

fn main() {
    let model = arg("--model").unwrap_or_else(|| "smollm2-135m".into());
    let book = arg("--book").unwrap_or_else(|| "../shared/corpora/pg1342_pride_and_prejudice.txt".into());
    let n: usize = arg("--tokens").and_then(|v| v.parse().ok()).unwrap_or(512);
    let repeat: usize = arg("--repeat").and_then(|v| v.parse().ok()).unwrap_or(5);
    let t0 = Instant::now();
    let lm = load(&model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let load_s = t0.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&book).unwrap_or_else(|e| panic!("{book}: {e}"));
    // Start a third of the way in, past the Gutenberg header.
    let start = text.char_indices().nth(text.chars().count() / 3).map_or(0, |(i, _)| i);
    let ids: Vec<u32> = lm.tokenizer.encode(&text[start..]).unwrap().into_iter().take(n).collect();
    assert_eq!(ids.len(), n, "book too short");
    if let Some(path) = arg("--tokens-out") {
        std::fs::write(&path, serde_json::to_string(&ids).unwrap()).unwrap();
    }
    let opts = |score| CaptureOptions {
        first_keys: 16,
        top_k: 16,
        save: None,
        memory_limit: None,
        weight_bytes: 0,
        score,
        quant_risk: false,
        heatmap_bins: None,
    };
    let mut sink_mean = 0.0;
    if std::env::args().any(|a| a == "--bare") {
        // The forward pass alone (no hooks, no reducers): what the capture machinery costs on top.
        let mut bare = Vec::new();
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            lm.model.forward(&ids, None, &mut sinkscope::model::receiver::NoCapture).unwrap();
            bare.push(t.elapsed().as_secs_f64());
        }
        bare.sort_by(f64::total_cmp);
        eprintln!("bare forward: min {:.3} s, median {:.3} s", bare[0], bare[bare.len() / 2]);
    }
    // walls[0]: with NLL scoring, walls[1]: without.
    let mut walls = [Vec::new(), Vec::new()];
    for i in 0..repeat.max(1) {
        for without in [i % 2, 1 - i % 2] {
            let t = Instant::now();
            let out = capture(&lm.model, &ids, &opts(without == 0)).unwrap();
            walls[without].push(t.elapsed().as_secs_f64());
            let s = out.reducers.summarize();
            sink_mean = s.layers.iter().filter_map(|l| l.mean_attention_pos0).sum::<f64>() / s.layers.len() as f64;
        }
    }
    let stats = |w: &mut Vec<f64>| {
        w.sort_by(f64::total_cmp);
        serde_json::json!({ "wall_s_min": w[0], "wall_s_median": w[w.len() / 2] })
    };
    let (with_logits, without_logits) = (stats(&mut walls[0]), stats(&mut walls[1]));
    println!(
        "{}",
        serde_json::json!({
            "impl": "sinkscope",
            "tokens": n,
            "repeat": walls[0].len(),
            "with_logits": with_logits,
            "without_logits": without_logits,
            "load_s": load_s,
            "peak_rss_mb": peak_rss_mb(),
            "sink_mean": sink_mean,
            "threads": rayon::current_num_threads(),
        })
    );
}
