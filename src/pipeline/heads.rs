//! Per-head cache policies end to end: `heads` (measure which KV heads need the whole cache and
//! write DuoAttention-format gates) and `recommend --per-head` (sweep the share of such heads and
//! lay KV memory against post-eviction perplexity, beside a uniform sink + window cache of the
//! same memory).

use std::path::Path;

use super::progress::Progress;
use super::stream::{stream_report, stream_tokens, StreamSource};
use crate::capture::ablation::streaming_head_ablation;
use crate::error::{Error, Result};
use crate::io::atomic::write_atomic;
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::kv::per_head::{gates_by_share, gates_tsv, measure, simulate_mixed, uniform_bytes_at, Frontier, FrontierRow, GateEvidence, HeadGates};
use crate::kv::policy::{Eviction, Policy, PositionMode};
use crate::kv::simulate::{ppl, simulate, StreamOutcome};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::load::LoadedModel;
use crate::report::run::{PER_HEAD_FILE, STREAM_FILE};

/// The gates file DuoAttention reads (layers × KV heads, 1 = the whole cache).
pub const GATES_FILE: &str = "head_gates.tsv";
/// The scores behind the gates.
pub const HEADS_FILE: &str = "heads.json";
/// Tokens the gates are measured on at most (one forward; attention is blocked, so memory stays
/// small, but time grows with T²).
pub const GATE_TOKENS: usize = 2048;

/// Tokens the causal evidence is measured on by default: each of the layers × KV heads variants
/// re-runs the layers from its own on and scores every row, so time grows with T·heads.
pub const CAUSAL_TOKENS: usize = 512;

/// What the per-head classification looks at.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// The S first keys a streaming head keeps.
    pub sinks: usize,
    /// The R recent keys (its own included) a streaming head keeps.
    pub recent: usize,
    /// Share of KV heads kept whole.
    pub share: f64,
    /// Also measure each KV head's ΔNLL when it alone keeps S + R keys, on this many tokens, and
    /// rank by it (`None`: rank by the attention outside S + R).
    pub causal_tokens: Option<usize>,
    /// Measure on this text instead of the one the policies are evaluated on.
    pub calibration: Option<StreamSource>,
}

/// Measures the gates on the first tokens of `source` (at most [`GATE_TOKENS`] and the model's
/// context; the calibration text instead when given), and writes `head_gates.tsv` and
/// `heads.json` into `out` when given.
pub fn heads_into(
    lm: &mut LoadedModel,
    source: &StreamSource,
    opts: &GateOptions,
    out: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<HeadGates> {
    if !(0.0..=1.0).contains(&opts.share) {
        return Err(Error::input(format!("--retrieval-share {} must lie between 0 and 1", opts.share)));
    }
    lm.model.cfg.refuse_linear_layers(crate::kv::per_head::HEAD_CLASSIFICATION)?;
    super::claim_out(lm, out)?;
    let ids = stream_tokens(lm, opts.calibration.as_ref().unwrap_or(source), progress)?;
    let gates = measure_gates(lm, &ids, opts, progress)?;
    if let Some(dir) = out {
        // Both files land together or not at all.
        let stage = Staging::begin(dir)?;
        write_atomic(&stage.path(GATES_FILE)?, gates_tsv(&gates.full).as_bytes())?;
        write_json_atomic(&stage.path(HEADS_FILE)?, &gates)?;
        stage.commit()?;
    }
    Ok(gates)
}

fn measure_gates(lm: &LoadedModel, ids: &[u32], opts: &GateOptions, progress: &mut dyn Progress) -> Result<HeadGates> {
    let n = ids.len().min(GATE_TOKENS).min(lm.model.cfg.context_len);
    progress.stage(&format!("measuring each KV head's attention outside {} sinks + {} recent keys over {n} tokens", opts.sinks, opts.recent));
    let evidence = measure(&lm.model, &ids[..n], opts.sinks, opts.recent)?;
    let (causal, causal_tokens) = match opts.causal_tokens {
        Some(t) => {
            let t = t.min(n);
            let label = format!("each KV head alone restricted to {} sinks + {} recent keys, over {t} tokens", opts.sinks, opts.recent);
            progress.stage(&label);
            let delta =
                streaming_head_ablation(&lm.model, &ids[..t], opts.sinks, opts.recent, &mut |done, total| progress.steps(&label, done, total))?;
            (Some(delta), t)
        }
        None => (None, 0),
    };
    let mut gates = HeadGates {
        sinks: opts.sinks,
        recent: opts.recent,
        tokens: n,
        calibration: opts.calibration.as_ref().map(|c| {
            if c.start_char == 0 {
                c.file.display().to_string()
            } else {
                format!("{} from character {}", c.file.display(), c.start_char)
            }
        }),
        score: evidence.outside,
        alpha0: evidence.alpha0,
        ranked_by: if causal.is_some() { GateEvidence::Causal } else { GateEvidence::Outside },
        causal,
        causal_tokens,
        full: Vec::new(),
    };
    gates.full = gates_by_share(gates.ranking(), opts.share);
    Ok(gates)
}

/// A per-head sweep: the budget W, the streaming heads' S, the shares of retrieval heads, and
/// the evidence heads are ranked by.
#[derive(Debug, Clone)]
pub struct PerHeadSweep {
    pub cache: usize,
    pub sinks: usize,
    pub shares: Vec<f64>,
    /// See [`GateOptions::causal_tokens`].
    pub causal_tokens: Option<usize>,
    /// See [`GateOptions::calibration`].
    pub calibration: Option<StreamSource>,
    /// How every cache of the sweep (mixed and uniform) stores keys and values; the heads are
    /// chosen on the exact model.
    pub rounding: CacheRounding,
}

/// The uniform `sink` S cache a share is compared with. Under a rounding cache it runs through
/// the mixed arm's own store (no head full: `sink` S exactly), so that the two differ by the
/// policy, not by two arithmetics' rounding noise (about 3% perplexity under q4_0).
fn uniform_arm(model: &Decoder, ids: &[u32], (uniform, sinks): (Policy, usize), rounding: CacheRounding) -> Result<StreamOutcome> {
    if rounding.is_exact() {
        return Ok(simulate(model, ids, &[uniform], &mut |_, _| {})?.remove(0));
    }
    let none = vec![vec![false; model.cfg.n_kv_heads]; model.cfg.n_layers];
    let mut o = simulate_mixed(model, ids, &none, (sinks, uniform.cache), rounding)?.outcome;
    (o.policy, o.label) = (uniform, uniform.label());
    Ok(o)
}

/// Sweeps `shares` of retrieval heads (streaming heads keep S sinks + W − S recent), each beside
/// `sink S` at the budget of equal memory; writes `per_head.json` into `out` when given.
pub fn per_head_sweep(
    lm: &mut LoadedModel,
    source: &StreamSource,
    sweep: &PerHeadSweep,
    out: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<Frontier> {
    let start = std::time::Instant::now();
    let (cache, sinks, shares) = (sweep.cache, sweep.sinks, &sweep.shares);
    if sinks >= cache {
        return Err(Error::input(format!("the streaming heads' S = {sinks} pinned tokens must be fewer than the budget W = {cache}")));
    }
    if let Some(bad) = shares.iter().find(|s| !(0.0..=1.0).contains(*s)) {
        return Err(Error::input(format!("--shares {bad} must lie between 0 and 1")));
    }
    super::claim_out(lm, out)?;
    let ids = stream_tokens(lm, source, progress)?;
    if ids.len() <= cache + 1 {
        return Err(Error::input(format!("{} tokens never fill the budget W = {cache}; stream more tokens", ids.len())));
    }
    let from = cache;
    let opts = GateOptions { sinks, recent: cache - sinks, share: 0.0, causal_tokens: sweep.causal_tokens, calibration: sweep.calibration.clone() };
    let gates = match &sweep.calibration {
        Some(c) => measure_gates(lm, &stream_tokens(lm, c, progress)?, &opts, progress)?,
        None => measure_gates(lm, &ids, &opts, progress)?,
    };
    let kv_heads = lm.model.cfg.n_layers * lm.model.cfg.n_kv_heads;
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    for (i, &share) in shares.iter().enumerate() {
        progress.stage(&format!("[{}/{}] {:.0}% of KV heads keep the whole cache", i + 1, shares.len(), 100.0 * share));
        let full = gates_by_share(gates.ranking(), share);
        let mixed = simulate_mixed(&lm.model, &ids, &full, (sinks, cache), sweep.rounding)?;
        let uniform_cache = (mixed.entries as f64 / kv_heads as f64).round() as usize + 1;
        let uniform = Policy::new(Eviction::Sink { sinks }, uniform_cache.max(sinks + 2), PositionMode::Slot);
        let u = uniform_arm(&lm.model, &ids, (uniform, sinks), sweep.rounding)?;
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
            uniform_bytes_at_equal_ppl: None,
        });
    }
    for i in 0..rows.len() {
        rows[i].uniform_bytes_at_equal_ppl = uniform_bytes_at(&rows, rows[i].ppl_from_w);
    }
    let cache_rounding = (!sweep.rounding.is_exact()).then_some(sweep.rounding);
    let frontier = Frontier { cache, sinks, tokens: ids.len(), gates, rows, wall_seconds: start.elapsed().as_secs_f64(), cache_rounding };
    if let Some(dir) = out {
        // Every stream as stream.json (the run's curves and `stream_nll`), the frontier beside it:
        // both land together or not at all.
        let mut report = stream_report(lm, source, &ids, outcomes, None, start)?;
        report.cache_rounding = cache_rounding;
        let stage = Staging::begin(dir)?;
        write_json_atomic(&stage.path(STREAM_FILE)?, &report)?;
        write_json_atomic(&stage.path(PER_HEAD_FILE)?, &frontier)?;
        stage.commit()?;
    }
    Ok(frontier)
}
