//! Compression as kvpress runs it (NVIDIA's kvpress 0.5.5, `BasePress.forward_hook`): the context
//! is prefilled with every key; each (layer, KV head) then keeps the `n_kept` context positions its
//! press scores highest (kvpress's `compute_n_kept`: ⌊n·(1 − ratio)⌋, at least 1), and the question
//! and the answer run after it uncompressed, at the context's original positions. The presses'
//! scores are `scores`; ties at the cut go to the earlier position.

pub mod scores;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use self::scores::{press_scores, FutureRope, PressKind, EXPECTED_FUTURE};
use super::policy::{Eviction, Policy, PositionMode, Scorer};
use super::prefill::PrefillCapture;
use super::scored::ScoredCache;
use crate::error::{Error, Result};
use crate::model::decoder::Decoder;

/// One press at one compression ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Press {
    pub kind: PressKind,
    /// The share of the context's keys removed (kvpress's `compression_ratio`), in [0, 1).
    pub ratio: f64,
    /// First context positions kept whatever their score (StreamingLLM's `n_sink`; for the
    /// other presses sinkscope's option, 0 in kvpress).
    pub sinks: usize,
}

impl Press {
    /// Refuses a ratio outside [0, 1) and sinks that fill the budget.
    pub fn check(&self, context: usize) -> Result<()> {
        if !(0.0..1.0).contains(&self.ratio) {
            return Err(Error::input(format!(
                "a compression ratio of {}: the share of the context's keys removed is at least 0 and under 1",
                self.ratio
            )));
        }
        self.kind.check(context)?;
        if self.sinks > n_kept(context, self.ratio) {
            return Err(Error::input(format!(
                "{} pinned first tokens exceed the {} keys a ratio of {} keeps of {context}",
                self.sinks,
                n_kept(context, self.ratio),
                self.ratio
            )));
        }
        Ok(())
    }
}

/// kvpress's `compute_n_kept`: the keys a ratio keeps of `n` (at least 1).
pub fn n_kept(n: usize, ratio: f64) -> usize {
    ((n as f64 * (1.0 - ratio)) as usize).max(1)
}

/// What one compression kept and what it did to the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PressOutcome {
    pub press: Press,
    pub n_kept: usize,
    /// Per layer, per KV head: the kept context positions, ascending.
    pub kept: Vec<Vec<Vec<usize>>>,
    /// Per answer token: its NLL (nats), the first predicted from the question's last token.
    pub answer_nll: Vec<f64>,
}

/// The positions `scores` (higher keeps) keeps: the first `sinks`, then the best-scored up to
/// `n`, ties to the earlier position; ascending.
pub fn kept_positions(scores: &[f64], n: usize, sinks: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (sinks.min(scores.len())..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut kept: Vec<usize> = (0..sinks.min(n)).chain(order.into_iter().take(n.saturating_sub(sinks))).collect();
    kept.sort_unstable();
    kept
}

/// Prefills `context`, compresses each (layer, KV head) as `press` says, then runs `question` and
/// `answer` (teacher-forced) after it; the answer's per-token NLL and what was kept.
pub fn run_press(model: &Decoder, press: Press, context: &[u32], (question, answer): (&[u32], &[u32])) -> Result<PressOutcome> {
    check_texts(context, question, answer)?;
    press.check(context.len())?;
    let cfg = &model.cfg;
    let n = context.len();
    let capture = PrefillCapture::new(cfg, n, press.kind.scoring_from(n));
    let mut capture = if press.kind.reads_queries() { capture.with_queries() } else { capture };
    model.forward(context, None, &mut capture)?;
    let keep = n_kept(n, press.ratio);
    let mut kept = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let rope = model.layer_rope(l);
        let layer = capture.layer(l, &rope)?;
        let future = match press.kind.reads_queries() {
            true => Some(FutureRope::new(&rope, n, EXPECTED_FUTURE)?),
            false => None,
        };
        let scores = press_scores(press.kind, &layer, (n, keep, press.sinks), (cfg.n_heads, cfg.n_kv_heads), future.as_ref())?;
        kept.push(scores.iter().map(|s| kept_positions(s, keep, press.sinks)).collect());
    }
    let answer_nll = answer_after(model, &capture, &kept, (question, answer))?;
    Ok(PressOutcome { press, n_kept: keep, kept, answer_nll })
}

/// The answer's per-token NLL after `context` compressed to the positions `kept` ([layer][KV
/// head], ascending) — the decode of [`run_press`] given another implementation's choice.
pub fn answer_with_kept(model: &Decoder, context: &[u32], kept: &[Vec<Vec<usize>>], (question, answer): (&[u32], &[u32])) -> Result<Vec<f64>> {
    check_texts(context, question, answer)?;
    let cfg = &model.cfg;
    if kept.len() != cfg.n_layers || kept.iter().any(|l| l.len() != cfg.n_kv_heads || l.iter().any(|h| h.iter().any(|&p| p >= context.len()))) {
        return Err(Error::input(format!(
            "kept positions for {} layers × {} KV heads within the context's {} tokens",
            cfg.n_layers,
            cfg.n_kv_heads,
            context.len()
        )));
    }
    let mut capture = PrefillCapture::new(cfg, context.len(), None);
    model.forward(context, None, &mut capture)?;
    answer_after(model, &capture, kept, (question, answer))
}

fn check_texts(context: &[u32], question: &[u32], answer: &[u32]) -> Result<()> {
    match context.is_empty() || question.is_empty() || answer.is_empty() {
        true => Err(Error::input("a press needs a context, a question and an answer, each at least one token")),
        false => Ok(()),
    }
}

/// Fills a cache that never evicts again with each (layer, KV head)'s kept keys and values from
/// the prefill, runs the question and the answer's tokens but the last through it at the
/// context's original positions, and scores the answer.
fn answer_after(model: &Decoder, capture: &PrefillCapture, kept: &[Vec<Vec<usize>>], (question, answer): (&[u32], &[u32])) -> Result<Vec<f64>> {
    let cfg = &model.cfg;
    let most = kept.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let holder = Policy::new(Eviction::Scored { sinks: 0, scorer: Scorer::Tova }, most + question.len() + answer.len(), PositionMode::Original);
    let mut cache = ScoredCache::new(holder, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?;
    for (l, per_head) in kept.iter().enumerate() {
        let rope = model.layer_rope(l);
        let layer = capture.layer(l, &rope)?;
        for (kv, positions) in per_head.iter().enumerate() {
            let keys: Vec<(usize, Vec<f32>, Vec<f32>)> =
                positions.iter().map(|&p| (p, layer.key_pre(p, kv).to_vec(), layer.value(p, kv).to_vec())).collect();
            cache.fill((l, kv), &keys, (&rope, &layer.tables))?;
        }
    }
    cache.set_stream_len(capture.tokens());
    let tokens = [question, &answer[..answer.len() - 1]].concat();
    let (hidden, _) = cache.forward_block(model, &tokens)?;
    let rows: Tensor = hidden.narrow(0, question.len() - 1, answer.len())?;
    model.next_token_nll(&rows, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_keeps_sinks_then_the_best_and_ties_go_to_the_earlier_position() {
        assert_eq!(n_kept(512, 0.25), 384);
        assert_eq!(n_kept(3, 0.9), 1);
        let scores = [0.0, 5.0, 1.0, 5.0, 2.0, 5.0];
        assert_eq!(kept_positions(&scores, 2, 0), vec![1, 3]);
        assert_eq!(kept_positions(&scores, 3, 1), vec![0, 1, 3]);
    }
}
