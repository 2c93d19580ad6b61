//! `recommend --cache-types`: streams one text under every (cache type, N exact) × policy and the
//! exact full cache, builds the frontier (`kv::cache_frontier`), and writes stream.json with
//! every run's per-step NLL and the frontier.

use std::path::Path;
use std::time::Instant;

use super::progress::Progress;
use super::stream::{stream_report, stream_tokens, write_stream_report, StreamSource};
use crate::error::{Error, Result};
use crate::kv::cache_frontier::{cache_frontier, CacheFrontier, MemoryBudget};
use crate::kv::policy::{Eviction, Policy};
use crate::kv::simulate::{refuse_unmodelled_rounding, simulate_with, SimOptions, StreamOutcome};
use crate::model::cache_rounding::CacheRounding;
use crate::model::load::LoadedModel;

/// What the frontier sweeps: every rounding under every policy (the full cache among them when
/// asked for), on one text.
#[derive(Debug, Clone)]
pub struct FrontierOptions {
    pub source: StreamSource,
    /// The cache types with their exact first tokens, each a rounding of its own.
    pub roundings: Vec<CacheRounding>,
    /// The eviction policies (sink S at each W, and `dense` for the full cache).
    pub policies: Vec<Policy>,
    /// Without a budget: the least memory within this fraction of the exact full cache.
    pub delta: f64,
    pub memory_budget: Option<MemoryBudget>,
}

/// Runs the frontier on a loaded model (writing stream.json into `out` when given).
pub fn frontier_into(lm: &mut LoadedModel, opts: &FrontierOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<CacheFrontier> {
    if opts.roundings.is_empty() || opts.policies.is_empty() {
        return Err(Error::input("a cache-type frontier needs at least one cache type and one policy"));
    }
    let start = Instant::now();
    let ids = stream_tokens(lm, &opts.source, progress)?;
    let windows = opts.policies.iter().filter(|p| p.eviction != Eviction::Dense).map(|p| p.cache);
    let scored_from = windows.max().unwrap_or(0);
    if ids.len() < scored_from + 3 {
        return Err(Error::input(format!(
            "the stream has {} tokens, too few for the largest budget W = {scored_from}: the frontier scores the steps after every budget has evicted; stream more tokens",
            ids.len()
        )));
    }
    for p in &opts.policies {
        for w in p.validate(ids.len(), lm.model.cfg.context_len)? {
            progress.warning(&w);
        }
    }
    for r in &opts.roundings {
        refuse_unmodelled_rounding(&lm.model, &opts.policies, *r)?;
    }
    super::claim_out(lm, out)?;
    let dense = Policy::new(Eviction::Dense, ids.len(), opts.policies[0].positions);
    let mut run = |policies: &[Policy], rounding: CacheRounding, label: &str| -> Result<Vec<StreamOutcome>> {
        let sim = SimOptions { rounding, ..SimOptions::default() };
        let outcomes = simulate_with(&lm.model, &ids, policies, sim, &mut |done, total| progress.steps(label, done, total))?;
        match outcomes.iter().find(|o| o.nll.iter().any(|v| !v.is_finite())) {
            Some(o) => Err(Error::Internal(format!("{label}: {} gave a non-finite NLL", o.label))),
            None => Ok(outcomes),
        }
    };
    let reference = run(&[dense], CacheRounding::default(), "the exact full cache")?.remove(0);
    let mut runs = Vec::new();
    for rounding in &opts.roundings {
        for o in run(&opts.policies, *rounding, &rounding.name())? {
            runs.push((*rounding, o));
        }
    }
    let frontier = cache_frontier(&runs, &reference, scored_from, opts.delta, opts.memory_budget);
    if let Some(dir) = out {
        let named = |(r, mut o): (CacheRounding, StreamOutcome)| {
            o.label = format!("{} · {}", r.name(), o.label);
            o
        };
        let mut exact = reference.clone();
        exact.label = format!("exact · {}", exact.label);
        let outcomes = std::iter::once(exact).chain(runs.into_iter().map(named)).collect();
        let mut report = stream_report(lm, &opts.source, &ids, outcomes, None, start)?;
        report.cache_frontier = Some(frontier.clone());
        write_stream_report(&report, dir)?;
    }
    Ok(frontier)
}
