//! How far a rounding cache moves the model's next-token distributions from the exact cache's,
//! step by step: the stream replayed twice in lockstep under one policy (the same keys visible to
//! each query, exact in one cache and rounded in the other), KL(P_exact ‖ P_rounded) per step —
//! what users tuning cache types ask for besides perplexity.

use super::policy::{Policy, PositionMode};
use super::simulate::STREAM_BLOCK;
use super::trace::PolicyTrace;
use crate::error::{Error, Result};
use crate::metrics::divergence::{kl_rows, log_softmax_rows};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::policy_forward::StreamKv;

/// Refuses a policy whose stream is not replayed from stream keys.
pub fn check_divergence(model: &Decoder, policy: Policy) -> Result<()> {
    let learned = model.cfg.arch.learned_positions;
    if !policy.is_cached() || policy.is_scored() || policy.positions == PositionMode::Delta || (learned && policy.positions == PositionMode::Slot) {
        return Err(Error::input(format!(
            "the KL divergence from the exact cache is measured for dense, window, sink and keep at slot or original positions (original only on a model with learned positions), not for {}",
            policy.label()
        )));
    }
    Ok(())
}

/// KL(P_exact ‖ P_rounded) of the next-token distribution at each step t = 0…N−2 of `ids` under
/// `policy`; `progress(done, total)` counts steps. Positional policies replayed from stream keys
/// only (`delta` and a learned-position model under `slot` decode through their own caches).
pub fn divergence_from_exact(
    model: &Decoder,
    ids: &[u32],
    policy: Policy,
    rounding: CacheRounding,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<f64>> {
    check_divergence(model, policy)?;
    rounding.check(model.cfg.d_head)?;
    let steps = ids.len().saturating_sub(1);
    let mut trace = PolicyTrace::after_prefix(policy, 0);
    let mut exact = StreamKv::new(policy.pinned());
    let mut rounded = StreamKv::new(policy.pinned()).with_rounding(rounding);
    let mut kl = Vec::with_capacity(steps);
    for b0 in (0..steps).step_by(STREAM_BLOCK) {
        let b = STREAM_BLOCK.min(steps - b0);
        let views = (b0..b0 + b).map(|t| Ok(trace.step(t)?.0)).collect::<Result<Vec<_>>>()?;
        let tokens = &ids[b0..b0 + b];
        let logp = |h: &candle_core::Tensor| -> Result<(Vec<f32>, usize)> {
            let logits = model.logits(h)?;
            let vocab = logits.dim(1)?;
            Ok((log_softmax_rows(&logits.flatten_all()?.to_vec1::<f32>()?, vocab), vocab))
        };
        let (p, vocab) = logp(&model.forward_windowed(tokens, &views, &mut exact)?)?;
        let (q, _) = logp(&model.forward_windowed(tokens, &views, &mut rounded)?)?;
        kl.extend(kl_rows(&p, &q, vocab));
        progress(b0 + b, steps);
    }
    Ok(kl)
}
