//! One needle arm's sweep over every (insertion, trial) prompt: streamed through the policy's cache
//! (`sweep_from`, `sweep_against_exact`), prefilled and compressed once with the question known
//! (`compress`), or, under `recompute W`, each answer token predicted by a fresh run of the last W
//! tokens before it (the prompt's tail and the candidate's earlier tokens — what the simulator's
//! `recompute` runs at every step) prefilled into a cache of the run's format
//! (`kv::cache::prefill_windows`). Under a rounding cache each arm runs beside its exact twin,
//! for the answer's KL from it.

use candle_core::Tensor;

use super::compress::compress_prefilled;
use super::haystack::{Haystack, Trial};
use super::{
    answer_len, candidate_rows, check_insertions, compression_applies, each_prompt, scores_from_rows, sweep_against_exact, sweep_from, truth_kl,
    CacheStream, Compression, TrialOutcome,
};
use crate::error::Result;
use crate::kv::cache::prefill_windows;
use crate::kv::policy::{Eviction, Policy};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;

/// Runs every (insertion, trial) prompt of `haystack` through `policy`'s cache and scores its
/// candidates; `insertions` are filler indices (see [`Haystack::insertion`]). Streamed, the head
/// and the filler run once, in order, each prompt branching off where its needle goes; with the
/// question known, each prompt is prefilled and compressed on its own. Under a rounding cache
/// each arm runs beside its exact twin and records the answer's KL from it. `progress(n)` reports
/// n more tokens run. Outcomes are `[insertion][trial]`, in the order given.
pub fn sweep(
    model: &Decoder,
    (policy, compression, rounding): (Policy, Compression, CacheRounding),
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    check_insertions(haystack, insertions)?;
    if compression == Compression::QuestionKnown {
        return compressed_sweep(model, (policy, rounding), haystack, insertions, trials, progress);
    }
    if policy.eviction == Eviction::Recompute {
        return recompute_sweep(model, (policy.cache, rounding), haystack, insertions, trials, progress);
    }
    let stream = CacheStream::new(model, policy)?;
    match rounding.is_exact() {
        true => sweep_from(model, stream, haystack, insertions, trials, progress),
        false => sweep_against_exact(model, (stream.clone().rounded(rounding)?, stream), haystack, insertions, trials, progress),
    }
}

/// [`sweep`] with the question known: each prompt prefilled whole and compressed once;
/// under a rounding cache beside the same compression of the exact cache (which may keep other
/// keys: its own attention chooses), for the answer's KL from it.
fn compressed_sweep(
    model: &Decoder,
    (policy, rounding): (Policy, CacheRounding),
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    compression_applies(&policy, Compression::QuestionKnown)?;
    // The streaming refusals hold here too (delta positions; original positions on a model with
    // its own sliding windows).
    CacheStream::new(model, policy)?;
    let answer_len = trials.first().and_then(|t| t.candidates.first()).map_or(0, Vec::len);
    each_prompt(insertions, trials, |at, trial| {
        let prompt = haystack.prompt(at, &trial.needle);
        let (cache, last) = compress_prefilled(model, (policy, rounding), &prompt, answer_len)?;
        let stream = CacheStream::Scored(cache);
        let needle_start = haystack.head.len() + at;
        let needle_kept = stream.held_share(needle_start..needle_start + trial.needle.len());
        let rows = candidate_rows(model, &stream, &last, &trial.candidates)?;
        let kl_from_exact = match rounding.is_exact() {
            true => None,
            false => {
                let (exact, exact_last) = compress_prefilled(model, (policy, CacheRounding::default()), &prompt, answer_len)?;
                let exact_rows = candidate_rows(model, &CacheStream::Scored(exact), &exact_last, &trial.candidates[..1])?;
                Some(truth_kl(model, &exact_rows, &rows, answer_len)?)
            }
        };
        let scores = scores_from_rows(model, &rows, &trial.candidates)?;
        progress(prompt.len());
        Ok(TrialOutcome { scores, prompt_len: prompt.len(), needle_start, needle_kept, kl_from_exact })
    })
}

/// [`sweep`] under `recompute W`. Windows of one answer position run as one batch.
fn recompute_sweep(
    model: &Decoder,
    (w, rounding): (usize, CacheRounding),
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    let w = w.max(1);
    each_prompt(insertions, trials, |at, trial| {
        let prompt = haystack.prompt(at, &trial.needle);
        let candidates = &trial.candidates;
        let m = answer_len(candidates)?;
        let tail = |seq: &[u32]| seq[seq.len().saturating_sub(w)..].to_vec();
        // Answer position j's windows: the prompt's for j = 0, each candidate's after.
        let windows_at = |j: usize, of: &[Vec<u32>]| -> Vec<Vec<u32>> {
            if j == 0 {
                vec![tail(&prompt)]
            } else {
                of.iter().map(|c| tail(&[&prompt[..], &c[..j]].concat())).collect()
            }
        };
        // Each window's last hidden row, per answer position, under `r`.
        let last_rows = |of: &[Vec<u32>], r: CacheRounding, progress: &mut dyn FnMut(usize)| -> Result<Vec<Vec<Tensor>>> {
            (0..m)
                .map(|j| {
                    let windows = windows_at(j, of);
                    let refs: Vec<&[u32]> = windows.iter().map(Vec::as_slice).collect();
                    let len = refs[0].len();
                    let hidden = prefill_windows(model, &refs, r)?;
                    progress(windows.len() * len);
                    Ok((0..windows.len()).map(|i| hidden.narrow(0, i * len + len - 1, 1)).collect::<candle_core::Result<_>>()?)
                })
                .collect()
        };
        // Row order of `scores_from_rows`: j = 0, then each candidate's j = 1..m.
        let ordered = |by_position: &[Vec<Tensor>], n: usize| -> Result<Tensor> {
            let mut rows = vec![by_position[0][0].clone()];
            for c in 0..n {
                rows.extend(by_position.iter().skip(1).map(|row| row[c].clone()));
            }
            Ok(Tensor::cat(&rows, 0)?)
        };
        let rows = ordered(&last_rows(candidates, rounding, progress)?, candidates.len())?;
        let scores = scores_from_rows(model, &rows, candidates)?;
        let kl_from_exact = match rounding.is_exact() {
            true => None,
            false => {
                let exact = ordered(&last_rows(&candidates[..1], CacheRounding::default(), &mut |_| {})?, 1)?;
                Some(truth_kl(model, &exact, &rows, m)?)
            }
        };
        let needle_start = haystack.head.len() + at;
        let seen = prompt.len().saturating_sub(w);
        let needle_end = needle_start + trial.needle.len();
        let needle_kept = needle_end.saturating_sub(needle_start.max(seen)) as f64 / trial.needle.len().max(1) as f64;
        Ok(TrialOutcome { scores, prompt_len: prompt.len(), needle_start, needle_kept, kl_from_exact })
    })
}
