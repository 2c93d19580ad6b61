//! Shared by the rounding-cache tests (`kv_cache_types`, `kv_cache_scored`): SmolLM2, a stretch of
//! *Pride and Prejudice* in its tokens, one policy's per-token NLL through the simulator, and the
//! mean per-token gap between two runs.
#![allow(dead_code)]

use sinkscope::kv::{simulate_with, Policy, SimOptions};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::{load, LoadOptions, LoadedModel};

pub fn smollm2() -> Option<LoadedModel> {
    let path = crate::common::model("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    Some(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap())
}

pub fn book_ids(lm: &LoadedModel, n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(crate::common::corpora_dir().join("pg1342_pride_and_prejudice.txt")).unwrap();
    lm.tokenizer.encode(&text[30_000..60_000]).unwrap()[..n].to_vec()
}

/// `policy`'s per-token NLL over `ids` under `rounding` (block replay, or decoded token by token).
pub fn nll(lm: &LoadedModel, ids: &[u32], policy: Policy, rounding: CacheRounding, token_by_token: bool) -> Vec<f64> {
    let opts = SimOptions { rounding, token_by_token, ..SimOptions::default() };
    let o = simulate_with(&lm.model, ids, &[policy], opts, &mut |_, _| {}).unwrap().remove(0);
    assert!(o.nll.iter().all(|x| x.is_finite()), "{}: a non-finite NLL", o.label);
    assert_eq!(o.nll.len(), ids.len() - 1);
    o.nll
}

pub fn mean_gap(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64
}
