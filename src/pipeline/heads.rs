//! Per-head cache policies end to end: `heads` (measure which KV heads need the whole cache and
//! write DuoAttention-format gates) and `recommend --per-head` (sweep the share of such heads and
//! lay KV memory against post-eviction perplexity, beside a uniform sink + window cache of the
//! same memory).

use std::path::Path;

use super::progress::Progress;
use super::stream::{stream_tokens, write_stream_report, StreamSource};
use crate::error::{Error, Result};
use crate::io::atomic::write_atomic;
use crate::io::write_json_atomic;
use crate::kv::per_head::{gates_by_share, gates_tsv, measure, simulate_mixed, Frontier, FrontierRow, HeadGates};
use crate::kv::policy::{Policy, PolicyKind, PositionMode};
use crate::kv::simulate::{ppl, simulate};
use crate::model::load::LoadedModel;
use crate::report::run::PER_HEAD_FILE;

/// The gates file DuoAttention reads (layers × KV heads, 1 = the whole cache).
pub const GATES_FILE: &str = "head_gates.tsv";
/// The scores behind the gates.
pub const HEADS_FILE: &str = "heads.json";
/// Tokens the gates are measured on at most (one forward; attention is blocked, so memory stays
/// small, but time grows with T²).
pub const GATE_TOKENS: usize = 2048;

/// What the per-head classification looks at.
#[derive(Debug, Clone, Copy)]
pub struct GateOptions {
    /// The S first keys a streaming head keeps.
    pub sinks: usize,
    /// The R recent keys (its own included) a streaming head keeps.
    pub recent: usize,
    /// Share of KV heads kept whole.
    pub share: f64,
}

/// Measures the gates on the first tokens of `source` (at most [`GATE_TOKENS`] and the model's
/// context), and writes `head_gates.tsv` and `heads.json` into `out` when given.
pub fn heads_into(lm: &LoadedModel, source: &StreamSource, opts: GateOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<HeadGates> {
    if !(0.0..=1.0).contains(&opts.share) {
        return Err(Error::input(format!("--retrieval-share {} must lie between 0 and 1", opts.share)));
    }
    let ids = stream_tokens(lm, source, progress)?;
    let gates = measure_gates(lm, &ids, opts, progress)?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot create the output directory ({e})")))?;
        write_atomic(&dir.join(GATES_FILE), gates_tsv(&gates.full).as_bytes())?;
        write_json_atomic(&dir.join(HEADS_FILE), &gates)?;
    }
    Ok(gates)
}

fn measure_gates(lm: &LoadedModel, ids: &[u32], opts: GateOptions, progress: &mut dyn Progress) -> Result<HeadGates> {
    let n = ids.len().min(GATE_TOKENS).min(lm.model.cfg.context_len);
    progress.stage(&format!("measuring each KV head's attention outside {} sinks + {} recent keys over {n} tokens", opts.sinks, opts.recent));
    let score = measure(&lm.model, &ids[..n], opts.sinks, opts.recent)?;
    let full = gates_by_share(&score, opts.share);
    Ok(HeadGates { sinks: opts.sinks, recent: opts.recent, tokens: n, score, full })
}

/// Sweeps `shares` of retrieval heads (streaming heads keep S sinks + W − S recent), each beside
/// `sink S` at the budget of equal memory; writes `per_head.json` into `out` when given.
pub fn per_head_sweep(lm: &mut LoadedModel, source: &StreamSource, cache: usize, sinks: usize, shares: &[f64], out: Option<&Path>, progress: &mut dyn Progress) -> Result<Frontier> {
    let start = std::time::Instant::now();
    if sinks >= cache {
        return Err(Error::input(format!("--head-sinks {sinks} must be smaller than --cache {cache}")));
    }
    if let Some(bad) = shares.iter().find(|s| !(0.0..=1.0).contains(*s)) {
        return Err(Error::input(format!("--shares {bad} must lie between 0 and 1")));
    }
    let ids = stream_tokens(lm, source, progress)?;
    if ids.len() <= cache + 1 {
        return Err(Error::input(format!("{} tokens never fill --cache {cache}; use more --tokens", ids.len())));
    }
    let from = cache;
    let opts = GateOptions { sinks, recent: cache - sinks, share: 0.0 };
    let gates = measure_gates(lm, &ids, opts, progress)?;
    let kv_heads = lm.model.cfg.n_layers * lm.model.cfg.n_kv_heads;
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    for (i, &share) in shares.iter().enumerate() {
        progress.stage(&format!("[{}/{}] {:.0}% of KV heads keep the whole cache", i + 1, shares.len(), 100.0 * share));
        let full = gates_by_share(&gates.score, share);
        let mixed = simulate_mixed(&lm.model, &ids, &full, sinks, cache)?;
        let uniform_cache = (mixed.entries as f64 / kv_heads as f64).round() as usize + 1;
        let uniform = Policy { kind: PolicyKind::Sink, sinks, cache: uniform_cache.max(sinks + 2), positions: PositionMode::Slot, recent: 0 };
        let u = simulate(&lm.model, &ids, &[uniform], &mut |_, _| {})?.remove(0);
        let mut uniform_outcome = u.clone();
        uniform_outcome.label = format!("{} (memory of {:.0}% retrieval)", u.label, 100.0 * share);
        outcomes.push(mixed.outcome.clone());
        outcomes.push(uniform_outcome);
        rows.push(FrontierRow {
            share,
            retrieval_heads: mixed.retrieval_heads,
            entries: mixed.entries,
            bytes: mixed.bytes,
            ppl: mixed.outcome.ppl,
            ppl_from_w: ppl(&mixed.outcome.nll[from..]),
            uniform_cache: uniform.cache,
            uniform_ppl_from_w: ppl(&u.nll[from..]),
        });
    }
    let frontier = Frontier { cache, sinks, tokens: ids.len(), gates, rows, wall_seconds: start.elapsed().as_secs_f64() };
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot create the output directory ({e})")))?;
        // Every stream as stream.json (the run's curves and `stream_nll`), the frontier beside it.
        write_stream_report(lm, source, &ids, outcomes, None, start, dir)?;
        write_json_atomic(&dir.join(PER_HEAD_FILE), &frontier)?;
    }
    Ok(frontier)
}

