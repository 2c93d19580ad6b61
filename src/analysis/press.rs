//! `press`'s record (press.json): what each kvpress-style compression kept of one prompt and what
//! it did to the answer, beside the answer with nothing compressed, and the summaries the printout
//! and the tables show — the answer's NLL change, the share of keys kept, and per KV head the
//! share of its keys a press left it (the heads it starves).

use serde::{Deserialize, Serialize};

use crate::kv::press::{Press, PressTokens};
use crate::model::info::ModelInfo;

/// Where a part of the prompt came from, and its tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptPart {
    /// A file (text or token ids) or "--question" / "--answer" for a text given inline.
    pub source: String,
    pub ids: Vec<u32>,
}

/// One press at one ratio, run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PressRun {
    /// The press and its wrappers, e.g. "adakv(snapkv)+block16".
    pub label: String,
    pub press: Press,
    /// Per layer, per KV head: the kept positions of the compressed prefix, ascending.
    pub kept: Vec<Vec<Vec<usize>>>,
    /// The answer's per-token NLL (nats) after the compression.
    pub answer_nll: Vec<f64>,
    /// Per layer, per query head: the share of the attention the uncompressed run's queries after
    /// the prefix pay the prefix that falls on positions this press kept (low: the press starves
    /// the head of what it reads).
    pub attention_kept: Vec<Vec<f64>>,
    pub seconds: f64,
}

/// The whole record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PressReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub context: PromptPart,
    pub question: PromptPart,
    pub answer: PromptPart,
    /// The question was compressed with the context (its keys scored and cut too); only the
    /// answer was appended.
    pub query_aware: bool,
    /// The answer's per-token NLL with nothing compressed.
    pub uncompressed_nll: Vec<f64>,
    pub runs: Vec<PressRun>,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

impl PressReport {
    /// What a record read back must hold before its tables index it: per press, kept sets for
    /// every (layer, KV head) within the compressed positions, a share of attention per query
    /// head in [0, 1], and an NLL (finite, ≥ 0) per answer token. The first violation, named.
    pub fn check(&self) -> Result<(), String> {
        let cfg = &self.model.config;
        let (n, answer) = (self.compressed(), self.answer.ids.len());
        if self.uncompressed_nll.len() != answer {
            return Err(format!("holds {} uncompressed NLLs for {answer} answer tokens", self.uncompressed_nll.len()));
        }
        let nll_ok = |v: &[f64]| v.len() == answer && v.iter().all(|x| x.is_finite() && *x >= 0.0);
        for (i, r) in self.runs.iter().enumerate() {
            let at = format!("runs[{i}] ({})", r.label);
            if r.kept.len() != cfg.n_layers || r.kept.iter().any(|l| l.len() != cfg.n_kv_heads || l.iter().flatten().any(|&p| p >= n)) {
                return Err(format!("{at}: kept positions are not {} layers × {} KV heads within {n} positions", cfg.n_layers, cfg.n_kv_heads));
            }
            if r.attention_kept.len() != cfg.n_layers
                || r.attention_kept.iter().any(|l| l.len() != cfg.n_heads || l.iter().any(|s| !(0.0..=1.0 + 1e-9).contains(s)))
            {
                return Err(format!("{at}: attention_kept is not a share in [0, 1] per layer × {} heads", cfg.n_heads));
            }
            if !nll_ok(&r.answer_nll) || !nll_ok(&self.uncompressed_nll) {
                return Err(format!("{at}: answer_nll is not one finite NLL ≥ 0 per answer token"));
            }
        }
        Ok(())
    }

    /// Positions each press compressed: the context, with the question when query-aware.
    pub fn compressed(&self) -> usize {
        PressTokens { context: &self.context.ids, question: &self.question.ids, answer: &self.answer.ids, query_aware: self.query_aware }.prefix_len()
    }

    pub fn uncompressed_mean_nll(&self) -> f64 {
        mean(&self.uncompressed_nll)
    }
}

impl PressRun {
    pub fn mean_nll(&self) -> f64 {
        mean(&self.answer_nll)
    }

    /// The kept share of the compressed keys over every (layer, KV head).
    pub fn kept_share(&self, compressed: usize) -> f64 {
        let heads = self.kept.iter().map(Vec::len).sum::<usize>();
        let kept = self.kept.iter().flatten().map(Vec::len).sum::<usize>();
        kept as f64 / (heads * compressed).max(1) as f64
    }

    /// The largest per-token increase of the answer's NLL over `uncompressed`.
    pub fn max_increase(&self, uncompressed: &[f64]) -> f64 {
        self.answer_nll.iter().zip(uncompressed).map(|(a, b)| a - b).fold(f64::NEG_INFINITY, f64::max)
    }

    /// The query head left the smallest share of the attention it paid the prefix: (layer,
    /// head, share); the first such head on a tie.
    pub fn most_starved(&self) -> Option<(usize, usize, f64)> {
        let shares = self.attention_kept.iter().enumerate().flat_map(|(l, heads)| heads.iter().enumerate().map(move |(h, &s)| (l, h, s)));
        shares.reduce(|best, x| if x.2 < best.2 { x } else { best })
    }

    /// The mean over every query head of [`PressRun::attention_kept`].
    pub fn mean_attention_kept(&self) -> f64 {
        let all: Vec<f64> = self.attention_kept.iter().flatten().copied().collect();
        mean(&all)
    }
}
