//! Cached policies decoded through their own [`PolicyCache`] (`delta` positions, learned absolute
//! positions under `slot`, or `--token-by-token`). Between two evictions a cache only grows, so
//! the tokens up to the next eviction run as one block through it (each query sees the cache and
//! the block's tokens up to its own: the arithmetic of decoding them one by one, at
//! matrix-multiply speed); the steps after which a policy evicts are decoded one token per step,
//! every policy due at that step as one batch. `keep` (llama.cpp's context shift) discards half
//! its budget at a time, so its stream is a handful of blocks; `window` and `sink` evict at every
//! step once full, so they decode token by token.

use std::time::Instant;

use super::cache::PolicyCache;
use super::policy::Policy;
use crate::error::Result;
use crate::model::decoder::{Decoder, KvStore};
use crate::model::receiver::NoCapture;

/// Per-policy results being gathered.
pub(super) struct Track {
    pub(super) nll: Vec<f64>,
    pub(super) lens: Vec<usize>,
    /// Seconds spent on this policy alone (its share of batched work).
    pub(super) wall: f64,
}

/// One policy's cache, the step it decodes next, and the track it extends.
struct CachedStream<'t> {
    cache: PolicyCache,
    next: usize,
    track: &'t mut Track,
}

/// Tokens a cache holding `len` entries can take as one block: up to and including the first
/// one after which `policy` evicts, at most `limit` (≥ 1).
fn tokens_before_eviction(policy: &Policy, len: usize, limit: usize) -> usize {
    let mut run = 1;
    while run < limit && policy.evict(len + run).is_empty() {
        run += 1;
    }
    run
}

/// Each (policy, track) decoded from the prefix `cache` from step `shared` on, its steps appended
/// to its track, in blocks of at most `block` tokens; `one_token_steps` decodes every step on its
/// own (the reference the blocks are tested against). `progress(n)` reports n more policy-steps.
pub(super) fn decode_through_caches(
    model: &Decoder,
    ids: &[u32],
    chosen: Vec<(Policy, &mut Track)>,
    prefix: &PolicyCache,
    shared: usize,
    (block, one_token_steps): (usize, bool),
    progress: &mut dyn FnMut(usize),
) -> Result<()> {
    let rope_of = |l: usize| model.layer_rope(l);
    let steps = ids.len() - 1;
    let mut streams = Vec::with_capacity(chosen.len());
    for (p, track) in chosen {
        let mut cache = prefix.with_policy(p);
        cache.evict(&rope_of)?;
        streams.push(CachedStream { cache, next: shared, track });
    }
    // The streams furthest behind go first, so the ones that decode token by token stay together.
    while let Some(at) = streams.iter().map(|s| s.next).filter(|&t| t < steps).min() {
        let mut due = Vec::new();
        for s in streams.iter_mut().filter(|s| s.next == at) {
            let run = if one_token_steps { 1 } else { tokens_before_eviction(&s.cache.policy, s.cache.len(), block.min(steps - at)) };
            if run == 1 {
                due.push(s);
                continue;
            }
            let t0 = Instant::now();
            let held = s.cache.len();
            let h = model.forward_with(&ids[at..at + run], Some(&mut s.cache), &mut NoCapture)?;
            s.track.nll.extend(model.next_token_nll(&h, &ids[at + 1..at + run + 1])?);
            s.track.lens.extend(held + 1..=held + run);
            s.cache.evict(&rope_of)?;
            s.next += run;
            s.track.wall += t0.elapsed().as_secs_f64();
            progress(run);
        }
        if due.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let tokens = vec![ids[at]; due.len()];
        let h = {
            let mut stores: Vec<&mut dyn KvStore> = due.iter_mut().map(|s| &mut s.cache as &mut dyn KvStore).collect();
            model.decode_step(&tokens, &mut stores)?
        };
        let scores = model.next_token_nll(&h, &vec![ids[at + 1]; due.len()])?;
        let share = t0.elapsed().as_secs_f64() / due.len() as f64;
        for (s, score) in due.iter_mut().zip(scores) {
            s.track.nll.push(score);
            s.track.lens.push(s.cache.len());
            s.track.wall += share;
            s.cache.evict(&rope_of)?;
            s.next += 1;
        }
        progress(due.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::{Eviction, PositionMode};

    #[test]
    fn a_block_ends_with_the_token_after_which_the_policy_evicts() {
        // keep 4 of a budget of 10: evicts once the cache holds 10 entries.
        let keep = Policy::new(Eviction::Keep { n_keep: 4 }, 10, PositionMode::Delta);
        assert_eq!(tokens_before_eviction(&keep, 3, 128), 7);
        assert_eq!(tokens_before_eviction(&keep, 3, 5), 5);
        assert_eq!(tokens_before_eviction(&keep, 9, 128), 1);
        // A full window evicts after every token.
        let window = Policy::new(Eviction::Window, 10, PositionMode::Delta);
        assert_eq!(tokens_before_eviction(&window, 9, 128), 1);
        // Dense never evicts: only the limit ends the block.
        let dense = Policy::new(Eviction::Dense, 0, PositionMode::Delta);
        assert_eq!(tokens_before_eviction(&dense, 500, 128), 128);
    }
}
