//! Compression as kvpress runs it (NVIDIA's kvpress 0.5.5, `BasePress.forward_hook`): the context
//! is prefilled with every key; each (layer, KV head) then keeps the `n_kept` context positions its
//! press scores highest (kvpress's `compute_n_kept`: ⌊n·(1 − ratio)⌋, at least 1), and the question
//! and the answer run after it uncompressed, at the context's original positions. The presses'
//! scores are `scores`; ties at the cut go to the earlier position.

pub mod scores;
pub mod select;
pub mod tasks;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use self::scores::{press_scores, FutureRope, PressKind, EXPECTED_FUTURE};
use self::select::{adaptive_positions, chunk_positions, kept_positions, pyramid_budget, Budget};
use super::policy::{Eviction, Policy, PositionMode, Scorer};
use super::prefill::PrefillCapture;
use super::scored::ScoredCache;
use crate::error::{Error, Result};
use crate::model::decoder::Decoder;

pub use self::select::n_kept;

/// One press at one compression ratio, with kvpress's wrappers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Press {
    pub kind: PressKind,
    /// The share of the context's keys removed (kvpress's `compression_ratio`), in [0, 1).
    pub ratio: f64,
    /// First context positions kept whatever their score (StreamingLLM's `n_sink`; for the
    /// other presses sinkscope's option, 0 in kvpress).
    pub sinks: usize,
    /// How the budget is shared among layers and KV heads.
    pub budget: Budget,
    /// Whole blocks of this many positions from position 0 (ChunkKV's `chunk_length`; a page of
    /// vLLM's cache holds 16): one choice for every KV head of a layer, as a page holds them all.
    pub block: Option<usize>,
    /// kvpress's `KeyRerotationPress`: the kept keys move to slots 0… (re-rotated there) and the
    /// question follows them, instead of every key staying at its original position.
    pub rerotate: bool,
}

impl Press {
    /// `kind` at `ratio` as kvpress runs it alone: its own pinned first tokens, a uniform budget.
    pub fn new(kind: PressKind, ratio: f64) -> Press {
        Press { kind, ratio, sinks: kind.default_sinks(), budget: Budget::Uniform, block: None, rerotate: false }
    }

    /// "snapkv", "knorm+block16+sinks4", "snapkv+rerotate": the press and its wrappers.
    pub fn label(&self) -> String {
        let mut s = match self.budget {
            Budget::Uniform => self.kind.name().to_string(),
            Budget::Pyramid { .. } if self.kind == PressKind::Snapkv => "pyramidkv".to_string(),
            Budget::Pyramid { .. } => format!("pyramid({})", self.kind.name()),
            Budget::Adaptive { .. } => format!("adakv({})", self.kind.name()),
        };
        if let Some(b) = self.block {
            s += &format!("+block{b}");
        }
        if self.rerotate {
            s += "+rerotate";
        }
        if self.sinks != self.kind.default_sinks() {
            s += &format!("+sinks{}", self.sinks);
        }
        s
    }

    /// Refuses a ratio outside [0, 1), wrappers kvpress does not combine, and sinks that fill
    /// the budget.
    pub fn check(&self, context: usize) -> Result<()> {
        if !(0.0..1.0).contains(&self.ratio) {
            return Err(Error::input(format!(
                "a compression ratio of {}: the share of the context's keys removed is at least 0 and under 1",
                self.ratio
            )));
        }
        self.kind.check(context)?;
        self.budget.check()?;
        if self.block == Some(0) {
            return Err(Error::input("a block of 0 positions: blocks hold at least 1"));
        }
        if self.budget != Budget::Uniform && (self.block.is_some() || self.rerotate) {
            return Err(Error::input(format!(
                "{} budgets with {}: kvpress's ChunkKV and key re-rotation cut every head of every layer alike",
                self.budget.name(),
                if self.rerotate { "key re-rotation" } else { "blocks" }
            )));
        }
        if self.block.is_some() && self.rerotate {
            return Err(Error::input(
                "blocks with key re-rotation: kvpress wraps neither in the other, and a kept short last block would leave layers of different lengths with no one position for the question",
            ));
        }
        if let Some(b) = self.block.filter(|&b| context / b > 0 && self.sinks > self.kind.default_sinks()) {
            let blocks = ((context.div_ceil(b) as f64 * (1.0 - self.ratio)) as usize).max(1);
            if self.sinks.div_ceil(b) > blocks {
                return Err(Error::input(format!(
                    "{} pinned first tokens fill {} blocks of {b}, more than the {blocks} a ratio of {} keeps of {context}",
                    self.sinks,
                    self.sinks.div_ceil(b),
                    self.ratio
                )));
            }
        }
        let least = self.least_budget(context);
        // A press's own first tokens (StreamingLLM's n_sink) beyond a small budget are cut as
        // kvpress cuts them (the first of them kept); pins asked for must fit.
        if self.sinks > least && self.sinks != self.kind.default_sinks() {
            return Err(Error::input(format!(
                "{} pinned first tokens exceed the {least} keys a ratio of {} keeps of {context} (in the layer that keeps fewest)",
                self.sinks, self.ratio
            )));
        }
        Ok(())
    }

    /// The fewest keys a layer's KV head is promised of a context of `n`: the pyramid's top
    /// layer, whatever the depth; AdaKV's safeguard may give a head fewer, but never its pins.
    fn least_budget(&self, n: usize) -> usize {
        match self.budget {
            Budget::Pyramid { window, beta } => pyramid_budget(n, self.ratio, (window, beta), (1, 2)),
            _ => n_kept(n, self.ratio),
        }
    }

    /// Each layer's keys per KV head (AdaKV: on average) over a context of `n`.
    fn layer_budget(&self, n: usize, (layer, layers): (usize, usize)) -> usize {
        match self.budget {
            Budget::Pyramid { window, beta } => pyramid_budget(n, self.ratio, (window, beta), (layer, layers)),
            _ => n_kept(n, self.ratio),
        }
    }

    /// Per KV head, the kept positions of one layer given its scores.
    fn select(&self, scores: &[Vec<f64>], keep: usize) -> Vec<Vec<usize>> {
        if let Budget::Adaptive { alpha } = self.budget {
            return adaptive_positions(scores, keep, self.sinks, alpha);
        }
        // The press's own first tokens (StreamingLLM's, ExpectedAttention's `n_sink`) count
        // through its scores, as in kvpress's ChunkKV (which may then drop their block); only
        // first tokens pinned beyond them keep their blocks whatever the scores.
        let pinned = if self.sinks > self.kind.default_sinks() { self.sinks } else { 0 };
        if let Some(chunked) = self.block.and_then(|b| chunk_positions(scores, b, self.ratio, pinned)) {
            return vec![chunked; scores.len()];
        }
        scores.iter().map(|s| kept_positions(s, keep, self.sinks)).collect()
    }
}

/// The tokens a press runs on: the context it compresses, then the question and the answer
/// appended uncompressed (kvpress's setting) — or, query-aware, the question compressed with
/// the context and only the answer appended.
#[derive(Debug, Clone, Copy)]
pub struct PressTokens<'a> {
    pub context: &'a [u32],
    pub question: &'a [u32],
    pub answer: &'a [u32],
    pub query_aware: bool,
}

impl PressTokens<'_> {
    /// Refuses an empty part, and a prompt longer than a windowed layer's window.
    pub fn check(&self, model: &Decoder) -> Result<()> {
        if self.context.is_empty() || self.question.is_empty() || self.answer.is_empty() {
            return Err(Error::input("a press needs a context, a question and an answer, each at least one token"));
        }
        let prompt = self.context.len() + self.question.len() + self.answer.len();
        if let Some(w) = model.cfg.layer_windows().into_iter().flatten().min().filter(|&w| prompt > w) {
            return Err(Error::input(format!(
                "this model's local layers see {w} positions, fewer than the prompt's {prompt}: after a press, whether that window counts positions or cache slots (transformers counts slots) is not modelled; give a shorter prompt"
            )));
        }
        Ok(())
    }

    /// Positions the press compresses: the context, with the question when query-aware.
    pub fn prefix_len(&self) -> usize {
        self.context.len() + if self.query_aware { self.question.len() } else { 0 }
    }

    /// The prefix compressed.
    pub fn prefix(&self) -> Vec<u32> {
        [self.context, if self.query_aware { self.question } else { &[] }].concat()
    }

    /// What runs after the prefix before the answer (the question, unless query-aware).
    pub fn appended(&self) -> &[u32] {
        if self.query_aware {
            &[]
        } else {
            self.question
        }
    }
}

/// What one compression kept and what it did to the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PressOutcome {
    pub press: Press,
    /// Positions compressed (the context, with the question when query-aware).
    pub compressed: usize,
    /// Per layer, per KV head: the kept positions, ascending.
    pub kept: Vec<Vec<Vec<usize>>>,
    /// Per answer token: its NLL (nats), the first predicted from the token before it.
    pub answer_nll: Vec<f64>,
}

/// The prefix's prefill as a press reads it — the attention sums from the first query it scores
/// with, the queries when it reads them — and the final-norm hidden row of its last token. Presses
/// reading the same ([`PressKind::capture_key`]) share one.
pub struct Prefill {
    capture: PrefillCapture,
    last: Tensor,
    key: (Option<usize>, bool),
}

impl Prefill {
    /// Runs `prefix` with every key, keeping what `kind` scores from.
    pub fn new(model: &Decoder, kind: PressKind, prefix: &[u32]) -> Result<Self> {
        let n = prefix.len();
        let key = kind.capture_key(n);
        let (from, queries) = key;
        let capture = PrefillCapture::new(&model.cfg, n, from)?;
        let mut capture = if queries { capture.with_queries() } else { capture };
        let hidden = model.forward(prefix, None, &mut capture)?;
        let last = hidden.narrow(0, n - 1, 1)?;
        Ok(Prefill { capture, last, key })
    }

    /// Tokens prefilled.
    pub fn len(&self) -> usize {
        self.capture.tokens()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What it kept ([`PressKind::capture_key`]).
    pub fn capture_key(&self) -> (Option<usize>, bool) {
        self.key
    }

    /// The final-norm hidden row of the prefix's last token.
    pub fn last(&self) -> &Tensor {
        &self.last
    }
}

/// Per layer, per KV head: the positions `press` keeps of the prefilled prefix, ascending.
pub fn compress(model: &Decoder, press: Press, prefill: &Prefill) -> Result<Vec<Vec<Vec<usize>>>> {
    let cfg = &model.cfg;
    let n = prefill.len();
    press.check(n)?;
    if prefill.capture_key() != press.kind.capture_key(n) {
        return Err(Error::Internal(format!("{} reads another prefill than the one given", press.label())));
    }
    let mut kept = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let rope = model.layer_rope(l);
        let layer = prefill.capture.layer(l, &rope)?;
        let future = match press.kind.reads_queries() {
            true => Some(FutureRope::new(&rope, n, EXPECTED_FUTURE)?),
            false => None,
        };
        // Scores see the layer's budget (StreamingLLM's zeros): PyramidKV's own, else the uniform one.
        let keep = press.layer_budget(n, (l, cfg.n_layers));
        let scores = press_scores(press.kind, &layer, (n, keep, press.sinks), (cfg.n_heads, cfg.n_kv_heads), future.as_ref())?;
        kept.push(press.select(&scores, keep));
    }
    Ok(kept)
}

/// Prefills the prefix, compresses each (layer, KV head) as `press` says, then runs what follows
/// (teacher-forced): the answer's per-token NLL and what was kept.
pub fn run_press(model: &Decoder, press: Press, tokens: PressTokens) -> Result<PressOutcome> {
    tokens.check(model)?;
    let prefix = tokens.prefix();
    let n = prefix.len();
    // Refused before the prefill runs (compress checks again).
    press.check(n)?;
    let prefill = Prefill::new(model, press.kind, &prefix)?;
    let kept = compress(model, press, &prefill)?;
    let answer_nll = answer_after(model, &prefill.capture, &kept, (tokens, press.rerotate), &prefill.last)?;
    Ok(PressOutcome { press, compressed: n, kept, answer_nll })
}

/// The answer's per-token NLL after the prefix compressed to the positions `kept` ([layer][KV
/// head], ascending) — the decode of [`run_press`] given another implementation's choice.
pub fn answer_with_kept(model: &Decoder, tokens: PressTokens, kept: &[Vec<Vec<usize>>], rerotate: bool) -> Result<Vec<f64>> {
    tokens.check(model)?;
    let prefix = tokens.prefix();
    let cfg = &model.cfg;
    if kept.len() != cfg.n_layers || kept.iter().any(|l| l.len() != cfg.n_kv_heads || l.iter().any(|h| h.iter().any(|&p| p >= prefix.len()))) {
        return Err(Error::input(format!(
            "kept positions for {} layers × {} KV heads within the compressed {} tokens",
            cfg.n_layers,
            cfg.n_kv_heads,
            prefix.len()
        )));
    }
    let mut capture = PrefillCapture::new(cfg, prefix.len(), None)?;
    let hidden = model.forward(&prefix, None, &mut capture)?;
    let last = hidden.narrow(0, prefix.len() - 1, 1)?;
    answer_after(model, &capture, kept, (tokens, rerotate), &last)
}

/// The prompt with nothing compressed: what each press is compared with.
#[derive(Debug, Clone)]
pub struct Uncompressed {
    /// The answer's per-token NLL.
    pub answer_nll: Vec<f64>,
    /// Per layer, per query head, per prefix position: the attention the queries after the prefix
    /// pay it (the prefix's last query when nothing follows it), summed.
    attention: Vec<Vec<Vec<f64>>>,
}

impl Uncompressed {
    /// Per layer, per query head: the share of its attention on the prefix that falls on the
    /// positions `kept` ([layer][KV head]) keeps — 1 where a press left the head what it reads.
    pub fn attention_kept(&self, kept: &[Vec<Vec<usize>>]) -> Vec<Vec<f64>> {
        self.attention
            .iter()
            .zip(kept)
            .map(|(heads, per_kv)| {
                let group = heads.len() / per_kv.len().max(1);
                heads
                    .iter()
                    .enumerate()
                    .map(|(h, a)| {
                        let total: f64 = a.iter().sum();
                        let on_kept: f64 = per_kv[h / group.max(1)].iter().map(|&p| a[p]).sum();
                        if total > 0.0 {
                            on_kept / total
                        } else {
                            1.0
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

/// The answer's per-token NLL with nothing compressed, and where the queries after the prefix look.
pub fn answer_uncompressed(model: &Decoder, tokens: PressTokens) -> Result<Uncompressed> {
    tokens.check(model)?;
    let all = [tokens.context, tokens.question, tokens.answer].concat();
    let run = &all[..all.len() - 1];
    let prefix = tokens.prefix_len();
    let mut capture = PrefillCapture::new(&model.cfg, run.len(), Some(prefix.min(run.len() - 1)))?;
    let hidden = model.forward(run, None, &mut capture)?;
    let from = tokens.context.len() + tokens.question.len() - 1;
    let answer_nll = model.next_token_nll(&hidden.narrow(0, from, tokens.answer.len())?, tokens.answer)?;
    let attention =
        (0..model.cfg.n_layers).map(|l| capture.attention_sums(l).chunks(run.len()).map(|row| row[..prefix].to_vec()).collect()).collect();
    Ok(Uncompressed { answer_nll, attention })
}

/// A cache that never evicts again, with room for `extra` more tokens, holding each (layer, KV
/// head)'s kept keys and values from the prefill — at their original positions, or re-rotated to
/// slots 0….
pub fn filled_cache(model: &Decoder, prefill: &Prefill, kept: &[Vec<Vec<usize>>], rerotate: bool, extra: usize) -> Result<ScoredCache> {
    fill(model, &prefill.capture, kept, rerotate, extra)
}

fn fill(model: &Decoder, capture: &PrefillCapture, kept: &[Vec<Vec<usize>>], rerotate: bool, extra: usize) -> Result<ScoredCache> {
    let cfg = &model.cfg;
    let most = kept.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let positions = if rerotate { PositionMode::Slot } else { PositionMode::Original };
    let holder = Policy::new(Eviction::Scored { sinks: 0, scorer: Scorer::Tova }, most + extra, positions);
    let mut cache = ScoredCache::new(holder, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?.windows_by_position();
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
    Ok(cache)
}

/// Runs what follows the prefix and the answer's tokens but the last through the compressed
/// cache, and scores the answer (its first token from the prefill's `last` row when nothing
/// follows the prefix).
fn answer_after(
    model: &Decoder,
    capture: &PrefillCapture,
    kept: &[Vec<Vec<usize>>],
    (tokens, rerotate): (PressTokens, bool),
    last: &Tensor,
) -> Result<Vec<f64>> {
    let (question, answer) = (tokens.appended(), tokens.answer);
    debug_assert!(tokens.prefix_len() == capture.tokens());
    let mut cache = fill(model, capture, kept, rerotate, question.len() + answer.len())?;
    let follow = [question, &answer[..answer.len() - 1]].concat();
    let mut rows = Vec::with_capacity(2);
    if question.is_empty() {
        rows.push(last.clone());
    }
    if !follow.is_empty() {
        let (hidden, _) = cache.forward_block(model, &follow)?;
        let from = question.len().saturating_sub(1);
        rows.push(hidden.narrow(0, from, follow.len() - from)?);
    }
    model.next_token_nll(&Tensor::cat(&rows, 0)?, answer)
}
