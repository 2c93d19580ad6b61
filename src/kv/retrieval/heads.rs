//! Which heads retrieve: for each (layer, head) the causal effect on the true answer's NLL of
//! hiding the needle's keys from that head at the answer's queries only (the last prompt token
//! and the answer's own), the rest of the model and every other query unchanged. A KV head's
//! effect hides the needle from every query head sharing it — what a cache that drops those keys
//! for that head does to retrieval.
//!
//! The prompt up to its last token runs once into a plain cache; the answer's rows run once
//! clean (keeping each layer's input) and then, per layer, once per masked head, stacked — only
//! the few answer rows from the masked layer on, over the shared prefix.

use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::haystack::{Haystack, Trial};
use crate::error::{Error, Result};
use crate::model::decoder::{Decoder, KeyMask, KvCache, PrefixView};
use crate::model::hook::HookPoint;
use crate::model::receiver::{HookReceiver, NoCapture};
use crate::model::scoring::token_nll;
use crate::numerics::tensor::with_f32;

/// Mean effects over the prompts measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadEffects {
    /// [layer][kv head]: mean ΔNLL (nats, the answer's tokens summed) when every query head
    /// sharing the KV head loses the needle at the answer's queries.
    pub kv: Vec<Vec<f64>>,
    /// [layer][head]: the same for each query head alone.
    pub query: Vec<Vec<f64>>,
    /// Prompts averaged over, and their mean clean answer NLL.
    pub prompts: usize,
    pub answer_nll: f64,
}

/// One prompt's effects: (kv [layer][kv head], query [layer][head], clean answer NLL).
type PromptEffects = (Vec<Vec<f64>>, Vec<Vec<f64>>, f64);

/// Keeps each layer's input over the rows run.
struct LayerInputs(Vec<Option<Tensor>>);

impl HookReceiver for LayerInputs {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::ResidPre(_))
    }

    fn record(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<()> {
        if let HookPoint::ResidPre(l) = *hook {
            self.0[l] = Some(value.clone());
        }
        Ok(())
    }
}

/// The answer's NLL per stacked variant: `hidden` holds `variants` runs of the answer rows
/// (`answer.len()` rows each: row j predicts answer token j).
fn answer_nll(model: &Decoder, hidden: &Tensor, answer: &[u32], variants: usize) -> Result<Vec<f64>> {
    let m = answer.len();
    let vocab = model.cfg.vocab_size;
    let logits = model.logits(hidden)?.contiguous()?;
    with_f32(&logits, |all| {
        (0..variants).map(|v| answer.iter().enumerate().map(|(j, &id)| token_nll(&all[(v * m + j) * vocab..][..vocab], id as usize)).sum()).collect()
    })
}

/// Effects on one prompt (`prompt` ends with the question; `needle` its keys' positions).
pub fn prompt_effects(model: &Decoder, prompt: &[u32], needle: Range<usize>, answer: &[u32]) -> Result<PromptEffects> {
    let cfg = &model.cfg;
    let t = prompt.len();
    if answer.is_empty() || t < 2 || needle.end >= t {
        return Err(Error::Internal("a head-effect prompt needs a needle before its last token and an answer".into()));
    }
    let mut prefix = KvCache::default();
    model.forward(&prompt[..t - 1], Some(&mut prefix), &mut NoCapture)?;
    // The answer's rows: the prompt's last token, then every answer token but the last.
    let rows = [&prompt[t - 1..], &answer[..answer.len() - 1]].concat();
    let mut inputs = LayerInputs(vec![None; cfg.n_layers]);
    let clean_hidden = model.forward_with(&rows, Some(&mut PrefixView::new(&prefix)), &mut inputs)?;
    let clean = answer_nll(model, &clean_hidden, answer, 1)?[0];
    let group = cfg.n_heads / cfg.n_kv_heads;
    let (mut kv, mut query) = (vec![vec![0.0; cfg.n_kv_heads]; cfg.n_layers], vec![vec![0.0; cfg.n_heads]; cfg.n_layers]);
    for layer in 0..cfg.n_layers {
        let x = inputs.0[layer].as_ref().ok_or_else(|| Error::Internal(format!("layer {layer}'s input was not kept")))?;
        // Each KV head's query heads together, then (with grouped queries) each query head alone.
        let mut masks: Vec<KeyMask> =
            (0..cfg.n_kv_heads).map(|g| KeyMask::span(layer, (g * group..(g + 1) * group).collect(), needle.clone(), t - 1)).collect();
        if group > 1 {
            masks.extend((0..cfg.n_heads).map(|h| KeyMask::span(layer, vec![h], needle.clone(), t - 1)));
        }
        let hidden = model.forward_masked_after(&prefix, x, &masks)?;
        let nll = answer_nll(model, &hidden, answer, masks.len())?;
        for (g, d) in kv[layer].iter_mut().enumerate() {
            *d = nll[g] - clean;
        }
        for (h, d) in query[layer].iter_mut().enumerate() {
            // Without grouped queries a query head is its KV head.
            *d = if group > 1 { nll[cfg.n_kv_heads + h] } else { nll[h] } - clean;
        }
    }
    Ok((kv, query, clean))
}

/// Mean effects over every (insertion, trial) prompt of `haystack`, in order; `progress(done,
/// total)` after each prompt.
pub fn head_effects(
    model: &Decoder,
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<HeadEffects> {
    let cfg = &model.cfg;
    let total = insertions.len() * trials.len();
    if total == 0 {
        return Err(Error::input("measuring retrieval heads needs at least one depth and one trial"));
    }
    let (mut kv, mut query, mut nll) = (vec![vec![0.0; cfg.n_kv_heads]; cfg.n_layers], vec![vec![0.0; cfg.n_heads]; cfg.n_layers], 0.0);
    let mut done = 0;
    for &at in insertions {
        for trial in trials {
            let prompt = haystack.prompt(at, &trial.needle);
            let start = haystack.head.len() + at;
            let (k, q, clean) = prompt_effects(model, &prompt, start..start + trial.needle.len(), &trial.candidates[0])?;
            add(&mut kv, &k);
            add(&mut query, &q);
            nll += clean;
            done += 1;
            progress(done, total);
        }
    }
    let n = total as f64;
    let mean = |m: Vec<Vec<f64>>| m.into_iter().map(|r| r.into_iter().map(|x| x / n).collect()).collect();
    Ok(HeadEffects { kv: mean(kv), query: mean(query), prompts: total, answer_nll: nll / n })
}

fn add(sum: &mut [Vec<f64>], x: &[Vec<f64>]) {
    for (s, r) in sum.iter_mut().zip(x) {
        for (a, b) in s.iter_mut().zip(r) {
            *a += b;
        }
    }
}
