//! The needle under `recompute W`: no cache; each answer token is predicted by a fresh run of the
//! last W tokens before it (positions from 0), the prompt's tail and the candidate's earlier
//! tokens — what the simulator's `recompute` runs at every step — prefilled into a cache of the
//! run's format (`kv::cache::prefill_windows`), and under a rounding format beside the same
//! windows run exact, for the answer's KL from them.

use candle_core::Tensor;

use super::haystack::{Haystack, Trial};
use super::{answer_len, each_prompt, scores_from_rows, truth_kl, TrialOutcome};
use crate::error::Result;
use crate::kv::cache::prefill_windows;
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;

/// [`super::sweep`] under `recompute W`. Windows of one answer position run as one batch.
pub(super) fn recompute_sweep(
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
