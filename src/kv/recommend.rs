//! The model-specific sink-count recommendation (DESIGN §8): sweep S at a fixed budget W (the
//! StreamingLLM Table-2 design), with `recompute W` as the reference, and recommend the smallest
//! S whose post-eviction perplexity is within δ of the best S — with the evidence and a verdict.

use serde::{Deserialize, Serialize};

use super::memory::KvMemory;
use super::policy::PolicyKind;
use super::simulate::{find_cliff_against, StreamOutcome};

/// One row of the evidence table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepRow {
    pub label: String,
    /// S for sink rows; `None` for the recompute reference.
    pub sinks: Option<usize>,
    pub ppl: f64,
    pub ppl_after_eviction: Option<f64>,
    /// Post-eviction perplexity relative to the best S (1.0 = the best).
    pub ratio_to_best: Option<f64>,
    pub cliff_step: Option<usize>,
    pub tokens_per_s: f64,
    /// Post-eviction steps whose NLL was scored (fewer than all for a sampled recompute).
    #[serde(default)]
    pub scored_steps: Option<usize>,
    /// A 95% bootstrap interval of `ppl_after_eviction` when it comes from a sample of the steps
    /// (resampling the scored steps, [`BOOTSTRAP_RESAMPLES`] times, fixed seed); `None` when every
    /// step was scored and the value is exact.
    #[serde(default)]
    pub ppl_after_eviction_ci: Option<[f64; 2]>,
}

/// Resamples behind a bootstrap interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// The post-eviction NLLs that were scored, and whether some were not.
fn scored_after_eviction(o: &StreamOutcome) -> (Vec<f64>, bool) {
    let after = o.first_eviction_step.map_or(&[][..], |s| &o.nll[s.min(o.nll.len())..]);
    let scored: Vec<f64> = after.iter().copied().filter(|v| !v.is_nan()).collect();
    let sampled = scored.len() < after.len();
    (scored, sampled)
}

/// 95% percentile-bootstrap interval of exp(mean NLL) over `nll`: the steps are resampled with
/// replacement (a fixed-seed generator, so the interval is reproducible). Given per-step NLL
/// differences of two policies, the interval of their perplexity ratio on those steps.
pub fn bootstrap_ppl_interval(nll: &[f64], resamples: usize) -> Option<[f64; 2]> {
    if nll.len() < 2 || resamples < 40 {
        return None;
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        // xorshift64*: cheap, reproducible, plenty for picking indices.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let n = nll.len();
    let mut ppls: Vec<f64> = (0..resamples)
        .map(|_| {
            let sum: f64 = (0..n).map(|_| nll[(next() % n as u64) as usize]).sum();
            (sum / n as f64).exp()
        })
        .collect();
    ppls.sort_by(f64::total_cmp);
    let at = |q: f64| ppls[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some([at(0.025), at(0.975)])
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recommendation {
    pub cache: usize,
    pub delta: f64,
    pub tokens: usize,
    pub first_eviction_step: Option<usize>,
    /// The smallest S within δ of the best post-eviction perplexity (`None`: nothing was evicted).
    pub recommended_sinks: Option<usize>,
    pub table: Vec<SweepRow>,
    pub verdict: String,
    /// The cache's memory at the budget W (the model's own windows capping its windowed layers).
    #[serde(default)]
    pub kv_memory: Option<KvMemory>,
    /// What the model's own sliding windows imply whatever the policy (`None`: it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_windows: Option<String>,
}

/// Re-dates every sweep policy's cliff against the best policy of the sweep (lowest
/// post-eviction perplexity) on the same tokens, instead of against its own pre-eviction
/// baseline: a passage of the text that is hard for every policy is then not a cliff.
pub fn cliffs_against_best(sweep: &mut [StreamOutcome]) {
    let best = sweep
        .iter()
        .filter(|o| o.ppl_after_eviction.is_some())
        .min_by(|a, b| a.ppl_after_eviction.unwrap_or(f64::INFINITY).total_cmp(&b.ppl_after_eviction.unwrap_or(f64::INFINITY)));
    let Some(reference) = best.map(|o| o.nll.clone()) else { return };
    for o in sweep.iter_mut() {
        o.cliff_step = o.first_eviction_step.and_then(|fe| find_cliff_against(&o.nll, &reference, fe));
    }
}

/// Builds the recommendation from the sink sweep (S ascending; S = 0 is a plain window) and the
/// optional recompute reference.
pub fn recommend(sweep: &[StreamOutcome], recompute: Option<&StreamOutcome>, cache: usize, delta: f64) -> Recommendation {
    let post = |o: &StreamOutcome| o.ppl_after_eviction;
    let best = sweep.iter().filter_map(post).fold(f64::INFINITY, f64::min);
    let row = |o: &StreamOutcome, sinks: Option<usize>| {
        let (scored, sampled) = scored_after_eviction(o);
        SweepRow {
            label: o.label.clone(),
            sinks,
            ppl: o.ppl,
            ppl_after_eviction: o.ppl_after_eviction,
            // A perplexity from a sample of the steps is no ratio to an exact one (its interval says why).
            ratio_to_best: o.ppl_after_eviction.filter(|_| best.is_finite() && !sampled).map(|p| p / best),
            cliff_step: o.cliff_step,
            tokens_per_s: o.tokens_per_s,
            scored_steps: o.first_eviction_step.map(|_| scored.len()),
            ppl_after_eviction_ci: if sampled { bootstrap_ppl_interval(&scored, BOOTSTRAP_RESAMPLES) } else { None },
        }
    };
    let mut table: Vec<SweepRow> = sweep.iter().map(|o| row(o, Some(o.policy.pinned()))).collect();
    if let Some(r) = recompute {
        table.push(row(r, None));
    }
    let tokens = sweep.first().map_or(0, |o| o.tokens);
    let first_eviction_step = sweep.iter().filter_map(|o| o.first_eviction_step).min();
    let recommended = sweep.iter().find(|o| post(o).is_some_and(|p| p <= best * (1.0 + delta))).map(|o| o.policy.pinned());
    let recompute_row = recompute.and(table.last());
    let verdict = verdict(sweep, recompute.zip(recompute_row), recommended, best, delta, cache, tokens);
    // Every sink row holds W entries at its peak.
    let kv_memory = sweep.iter().find(|o| o.policy.is_cached()).map(|o| o.kv_memory);
    Recommendation { cache, delta, tokens, first_eviction_step, recommended_sinks: recommended, table, verdict, kv_memory, model_windows: None }
}

/// exp(mean over the post-eviction steps `recompute` scored of its NLL minus `other`'s) — the
/// ratio of the two perplexities on the same steps — with its 95% paired bootstrap interval and
/// the number of steps; `None` with fewer than two such steps.
fn paired_ratio(recompute: &StreamOutcome, other: Option<&StreamOutcome>) -> Option<(f64, [f64; 2], usize)> {
    let other = other?;
    let from = recompute.first_eviction_step?;
    let diffs: Vec<f64> =
        (from..recompute.nll.len().min(other.nll.len())).map(|t| recompute.nll[t] - other.nll[t]).filter(|d| d.is_finite()).collect();
    let ci = bootstrap_ppl_interval(&diffs, BOOTSTRAP_RESAMPLES)?;
    Some(((diffs.iter().sum::<f64>() / diffs.len() as f64).exp(), ci, diffs.len()))
}

fn verdict(
    sweep: &[StreamOutcome],
    recompute: Option<(&StreamOutcome, &SweepRow)>,
    rec: Option<usize>,
    best: f64,
    delta: f64,
    cache: usize,
    tokens: usize,
) -> String {
    let Some(s) = rec else {
        return format!("No eviction happened: the {tokens}-token stream fits the {cache}-entry cache, so the sweep says nothing. Use a longer text or a smaller budget.");
    };
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let at = |s: usize| sweep.iter().find(|o| o.policy.pinned() == s).and_then(|o| o.ppl_after_eviction);
    let mut v = String::new();
    // What S = 0 is: a plain window, or the score-based policy with nothing pinned.
    let unpinned = match sweep.first().map(|o| o.policy.kind()) {
        Some(PolicyKind::H2o) => "h2o with nothing pinned (S=0)",
        Some(PolicyKind::Tova) => "tova with nothing pinned (S=0)",
        Some(PolicyKind::Snapkv) => "snapkv with nothing pinned (S=0)",
        _ => "a plain window (S=0)",
    };
    match at(0) {
        Some(p0) if p0 <= best * (1.0 + delta) => {
            v.push_str(&format!(
                "This model does not collapse without sinks: {unpinned} reaches post-eviction perplexity {p0:.2}, within {} of the best ({best:.2}); pinning sink tokens buys nothing here.",
                pct(delta)
            ));
        }
        Some(p0) => {
            v.push_str(&format!(
                "Pin S={s} sink token{}: without sinks (S=0) post-eviction perplexity is {p0:.2}, {:.2}× the best ({best:.2}); S={s} is the smallest within {} of the best.",
                if s == 1 { "" } else { "s" },
                p0 / best,
                pct(delta)
            ));
        }
        None => v.push_str(&format!("Recommended S={s} (smallest within {} of the best post-eviction perplexity {best:.2}).", pct(delta))),
    }
    // Confidence: how much the recommendation differs from the next larger S that was measured.
    if let Some(next) = sweep.iter().filter(|o| o.policy.pinned() > s).find_map(|o| o.ppl_after_eviction.map(|p| (o.policy.pinned(), p))) {
        if let Some(ps) = at(s) {
            v.push_str(&format!(" S={s} and S={} differ by {}.", next.0, pct((ps - next.1).abs() / next.1)));
        }
    }
    if let (Some((o, row)), Some(ps)) = (recompute, at(s)) {
        let Some(r) = row.ppl_after_eviction else { return v };
        let steps = o.first_eviction_step.map_or(0, |fe| o.nll.len() - fe);
        let scored = row.scored_steps.unwrap_or(steps);
        if scored >= steps {
            v.push_str(&format!(
                " Recomputing the window from scratch gives {r:.2}; S={s} is {} {}.",
                pct((ps - r).abs() / r),
                if ps >= r { "above it" } else { "below it" }
            ));
        } else {
            // A recompute scored on a sample of the steps: its own interval is wide (token NLLs
            // are heavy-tailed), but S was scored on those same steps, so compare them pairwise.
            match paired_ratio(o, sweep.iter().find(|x| x.policy.pinned() == s)) {
                Some((ratio, [lo, hi], n)) if lo > 1.0 || hi < 1.0 => v.push_str(&format!(
                    " Recomputing the window from scratch (scored on {scored} of {steps} steps) gives a perplexity {} {} than S={s} on those same steps (95% interval of the ratio {lo:.3}–{hi:.3}, {n} steps).",
                    pct((ratio - 1.0).abs()),
                    if ratio < 1.0 { "lower" } else { "higher" }
                )),
                Some((ratio, [lo, hi], n)) => v.push_str(&format!(
                    " Recomputing the window from scratch (scored on {scored} of {steps} steps) and S={s} cannot be told apart on those same steps: ratio {ratio:.3}, 95% interval {lo:.3}–{hi:.3} over {n} steps; score more steps of recompute to decide."
                )),
                None => v.push_str(&format!(" Recomputing the window was scored on {scored} of {steps} steps: too few to compare.")),
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::{Eviction, Policy, PolicyKind, PositionMode};
    use crate::kv::simulate::ppl;

    fn outcome(kind: PolicyKind, sinks: usize, nll: Vec<f64>) -> StreamOutcome {
        let first = 10;
        StreamOutcome {
            policy: Policy::new(Eviction::of_kind(kind, sinks, None), 10, PositionMode::Slot),
            label: format!("{kind:?} {sinks}"),
            ppl: ppl(&nll),
            ppl_after_eviction: Some(ppl(&nll[first..])),
            first_eviction_step: Some(first),
            cliff_step: None,
            tokens: nll.len() + 1,
            tokens_per_s: 1.0,
            cache_len: (0..nll.len()).map(|t| (t + 1).min(10)).collect(),
            kv_memory: Default::default(),
            kept: None,
            nll,
        }
    }

    /// Heavy-tailed token NLLs make a sampled perplexity's own interval wide, but the same steps
    /// scored under S tell a consistent 0.05-nat difference apart; a zero difference is not.
    #[test]
    fn a_sampled_recompute_is_compared_with_s_on_the_same_steps() {
        let text: Vec<f64> = (0..410).map(|t| 1.0 + ((t * 7919) % 97) as f64 / 10.0).collect();
        let sink = outcome(PolicyKind::Sink, 1, text.clone());
        let window = outcome(PolicyKind::Window, 0, text.iter().map(|v| v + 1.0).collect());
        let sampled = |shift: f64| {
            let nll = text
                .iter()
                .enumerate()
                .map(|(t, v)| if t >= 10 && (t - 10) % 4 != 0 { f64::NAN } else { v + shift + if (t / 4) % 2 == 0 { 0.02 } else { -0.02 } })
                .collect();
            outcome(PolicyKind::Recompute, 0, nll)
        };
        let better = recommend(&[window.clone(), sink.clone()], Some(&sampled(-0.05)), 10, 0.02);
        assert!(better.verdict.contains("lower than S=1 on those same steps"), "{}", better.verdict);
        let row = better.table.last().unwrap();
        let [lo, hi] = row.ppl_after_eviction_ci.unwrap();
        let s1 = sink.ppl_after_eviction.unwrap();
        assert!(lo < s1 && s1 < hi, "the recompute row's own interval cannot separate them: {lo}–{hi} around {s1}");
        let same = recommend(&[window, sink], Some(&sampled(0.0)), 10, 0.02);
        assert!(same.verdict.contains("cannot be told apart"), "{}", same.verdict);
    }

    #[test]
    fn bootstrap_interval_covers_the_mean_and_narrows_with_more_steps() {
        let nll: Vec<f64> = (0..400).map(|i| 3.0 + ((i * 7919) % 101) as f64 / 25.0).collect();
        let ppl = (nll.iter().sum::<f64>() / nll.len() as f64).exp();
        let [lo, hi] = bootstrap_ppl_interval(&nll, BOOTSTRAP_RESAMPLES).unwrap();
        assert!(lo < ppl && ppl < hi, "{lo} {ppl} {hi}");
        let [lo_small, hi_small] = bootstrap_ppl_interval(&nll[..25], BOOTSTRAP_RESAMPLES).unwrap();
        assert!(hi_small - lo_small > hi - lo, "25 steps give a wider interval than 400");
        assert_eq!(bootstrap_ppl_interval(&nll, BOOTSTRAP_RESAMPLES), Some([lo, hi]), "reproducible");
        assert_eq!(bootstrap_ppl_interval(&nll[..1], BOOTSTRAP_RESAMPLES), None);
    }
}
