//! The streaming simulator (StreamingLLM protocol, DESIGN §7): for t = 0…N−2 feed token t, record
//! the NLL of token t+1, then let the policy evict. Policies are identical until their first
//! eviction, so that prefix runs once — as one causal forward that fills the cache (the same
//! computation as feeding its tokens one by one, to float rounding); after it, every cached
//! policy advances in one batched decode step per token (decoding is bound by reading the weights,
//! so a batch costs little more than one stream). `recompute` re-runs the last W tokens from
//! scratch at each step.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::cache::PolicyCache;
use super::policy::{Policy, PolicyKind};
use crate::capture::run::token_nlls;
use crate::capture::NoCapture;
use crate::error::{Error, Result};
use crate::model::Llama;

/// Logit rows scored at once while prefilling.
const PREFILL_SCORE_ROWS: usize = 128;

/// Steps averaged when looking for the perplexity cliff.
pub const CLIFF_WINDOW: usize = 32;
/// Steps before the first eviction that set the baseline NLL.
const CLIFF_BASELINE: usize = 64;

/// One policy's stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamOutcome {
    pub policy: Policy,
    pub label: String,
    /// NLL (nats) of token t+1 at step t.
    #[serde(deserialize_with = "crate::serde_nan::nans_if_null")]
    pub nll: Vec<f64>,
    /// Entries the query of step t could see (the cache's length, its own entry included).
    pub cache_len: Vec<usize>,
    pub tokens: usize,
    pub ppl: f64,
    /// Perplexity over the steps that ran on an evicted cache (none: never evicted).
    pub ppl_after_eviction: Option<f64>,
    /// First step whose query saw an evicted cache.
    pub first_eviction_step: Option<usize>,
    /// First step at or after the first eviction where the rolling NLL jumps (see [`find_cliff`]).
    pub cliff_step: Option<usize>,
    pub tokens_per_s: f64,
}

/// Runs every policy over `ids`; `progress(done, total)` after each step.
pub fn simulate(model: &Llama, ids: &[u32], policies: &[Policy], progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<StreamOutcome>> {
    simulate_with(model, ids, policies, 1, progress)
}

/// As [`simulate`], but `recompute` scores only every `recompute_every`-th step after the shared
/// prefix (the others are NaN and left out of its perplexities): each of its steps re-runs W
/// tokens, so a long stream is otherwise dominated by it.
pub fn simulate_with(model: &Llama, ids: &[u32], policies: &[Policy], recompute_every: usize, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<StreamOutcome>> {
    let n = ids.len();
    if n < 2 {
        return Err(Error::input("the stream needs at least 2 tokens"));
    }
    let steps = n - 1;
    let rope = model.rope();
    // The shared prefix: every policy sees the same cache until the smallest budget fills.
    let shared_steps = policies.iter().filter(|p| p.kind != PolicyKind::Dense).map(|p| p.cache).min().unwrap_or(steps).min(steps);
    let mut nll: Vec<Vec<f64>> = vec![Vec::with_capacity(steps); policies.len()];
    let mut lens: Vec<Vec<usize>> = vec![Vec::with_capacity(steps); policies.len()];
    let start = Instant::now();
    let needs_rotated = policies.iter().any(|p| p.positions == super::policy::PositionMode::Delta);
    let mut shared = PolicyCache::new(Policy { kind: PolicyKind::Dense, sinks: 0, cache: 0, positions: super::policy::PositionMode::Slot }, model.cfg.d_head)?;
    if needs_rotated {
        shared = shared.keeping_rotated();
    }
    if shared_steps > 0 {
        let hidden = model.forward_with(&ids[..shared_steps], Some(&mut shared), &mut NoCapture)?;
        for start in (0..shared_steps).step_by(PREFILL_SCORE_ROWS) {
            let rows = PREFILL_SCORE_ROWS.min(shared_steps - start);
            let scores = token_nlls(model, &hidden.narrow(0, start, rows)?, &ids[start + 1..start + 1 + rows])?;
            for (r, v) in scores.into_iter().enumerate() {
                for i in 0..policies.len() {
                    nll[i].push(v);
                    lens[i].push(start + r + 1);
                }
            }
        }
        progress(shared_steps, steps);
    }
    let shared_wall = start.elapsed().as_secs_f64();
    let mut caches: Vec<(usize, PolicyCache)> = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        if p.is_cached() {
            let mut c = shared.with_policy(*p);
            c.evict(&rope)?;
            caches.push((i, c));
        }
    }
    let recompute: Vec<usize> = (0..policies.len()).filter(|&i| !policies[i].is_cached()).collect();
    let mut cached_wall = 0.0;
    let mut recompute_wall = 0.0;
    for t in shared_steps..steps {
        let target = ids[t + 1];
        if !caches.is_empty() {
            let t0 = Instant::now();
            let tokens = vec![ids[t]; caches.len()];
            let h = {
                let mut stores: Vec<&mut dyn crate::model::llama::KvStore> = caches.iter_mut().map(|(_, c)| c as &mut dyn crate::model::llama::KvStore).collect();
                model.decode_step(&tokens, &mut stores)?
            };
            let scores = token_nlls(model, &h, &vec![target; caches.len()])?;
            for ((i, c), s) in caches.iter_mut().zip(scores) {
                nll[*i].push(s);
                lens[*i].push(c.len());
                c.evict(&rope)?;
            }
            cached_wall += t0.elapsed().as_secs_f64();
        }
        for &i in &recompute {
            if (t - shared_steps) % recompute_every.max(1) != 0 {
                nll[i].push(f64::NAN);
                lens[i].push(policies[i].cache.min(t + 1));
                continue;
            }
            let t0 = Instant::now();
            let w = policies[i].cache.max(1);
            let from = (t + 1).saturating_sub(w);
            let hidden = model.forward(&ids[from..=t], None, &mut NoCapture)?;
            let last = hidden.narrow(0, t - from, 1)?;
            nll[i].push(token_nlls(model, &last, &[target])?[0]);
            lens[i].push(t + 1 - from);
            recompute_wall += t0.elapsed().as_secs_f64();
        }
        progress(t + 1, steps);
    }
    let after = steps - shared_steps;
    Ok(policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let first_eviction_step = lens[i].iter().enumerate().find(|&(t, &len)| len < t + 1).map(|(t, _)| t);
            let wall = shared_wall + if p.is_cached() { cached_wall / caches.len().max(1) as f64 } else { recompute_wall / recompute.len().max(1) as f64 };
            let scored = if p.is_cached() { steps } else { shared_steps + after.div_ceil(recompute_every.max(1)) };
            StreamOutcome {
                policy: *p,
                label: if !p.is_cached() && recompute_every > 1 { format!("{} (every {recompute_every}th step)", p.label()) } else { p.label() },
                ppl: ppl(&nll[i]),
                ppl_after_eviction: first_eviction_step.map(|s| ppl(&nll[i][s..])),
                cliff_step: first_eviction_step.and_then(|s| find_cliff(&nll[i], s)),
                first_eviction_step,
                tokens: n,
                tokens_per_s: scored as f64 / wall.max(1e-9),
                nll: std::mem::take(&mut nll[i]),
                cache_len: std::mem::take(&mut lens[i]),
            }
        })
        .collect())
}

/// exp(mean NLL) over the scored (non-NaN) steps.
pub fn ppl(nll: &[f64]) -> f64 {
    let scored: Vec<f64> = nll.iter().copied().filter(|v| !v.is_nan()).collect();
    if scored.is_empty() {
        return f64::NAN;
    }
    (scored.iter().sum::<f64>() / scored.len() as f64).exp()
}

/// The first step s ≥ `first_eviction` where the mean NLL over [s, s+32) exceeds the mean over
/// the (up to) 64 steps before the first eviction by more than max(1.5 nats, 50%): where
/// perplexity falls off a cliff rather than wobbling with the text. `None` when it never does (or
/// the stream is too short to tell).
pub fn find_cliff(nll: &[f64], first_eviction: usize) -> Option<usize> {
    let w = CLIFF_WINDOW;
    let base = CLIFF_BASELINE.min(first_eviction);
    if base < w / 2 || nll.len() < first_eviction + w {
        return None;
    }
    let before = nll[first_eviction - base..first_eviction].iter().sum::<f64>() / base as f64;
    let threshold = before + (0.5 * before).max(1.5);
    (first_eviction..=nll.len() - w).find(|&s| nll[s..s + w].iter().sum::<f64>() / w as f64 > threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cliff_is_where_rolling_nll_jumps() {
        let mut nll = vec![2.0; 70];
        nll.extend(vec![8.0; 60]);
        // Evictions start at step 64; the jump at 70 is found once the rolling window tips.
        let c = find_cliff(&nll, 64).unwrap();
        assert!((64..=70).contains(&c), "{c}");
        assert_eq!(find_cliff(&vec![2.0; 130], 64), None);
        assert_eq!(find_cliff(&nll, 4), None);
        // A short wobble (8 tokens at +4 nats) is not a cliff.
        let mut wobble = vec![2.0; 130];
        wobble[80..88].iter_mut().for_each(|v| *v = 6.0);
        assert_eq!(find_cliff(&wobble, 64), None);
    }

    #[test]
    fn perplexity_of_constant_nll() {
        assert!((ppl(&[2f64.ln(); 5]) - 2.0).abs() < 1e-12);
    }
}
