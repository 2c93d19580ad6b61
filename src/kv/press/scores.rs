//! Each press's score of the context's keys, per (layer, KV head), higher kept — as kvpress 0.5.5
//! computes it (`presses/*_press.py`, each `score`), on keys as a cache holds them (after RoPE).
//! The names are kvpress's.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kv::prefill::LayerCapture;

/// SnapKV's observation window and pooling kernel in kvpress (`SnapKVPress` defaults).
pub const SNAPKV_WINDOW: usize = 64;
pub const SNAPKV_KERNEL: usize = 5;

/// A press, by kvpress's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PressKind {
    /// `KnormPress`: the key's norm, smaller kept.
    Knorm,
    /// `StreamingLLMPress`: the first `n_sink` (the press's sinks) and the most recent.
    StreamingLlm,
    /// `SnapKVPress`: the last 64 queries' mean attention, average-pooled over 5 keys and
    /// averaged over the query heads of a KV head; the window's own keys kept.
    Snapkv,
    /// `TOVAPress`: the last query's attention averaged over every query head (one score for
    /// every KV head); the last key kept.
    Tova,
    /// `ObservedAttentionPress`: each key's attention summed over the queries that see it, over
    /// their number, averaged over the query heads of a KV head.
    ObservedAttention,
    /// `KeyDiffPress`: the key's cosine to the mean of the normalised keys, smaller kept.
    Keydiff,
}

impl PressKind {
    pub const ALL: [PressKind; 6] =
        [PressKind::Knorm, PressKind::StreamingLlm, PressKind::Snapkv, PressKind::Tova, PressKind::ObservedAttention, PressKind::Keydiff];

    /// kvpress's name (`--press`).
    pub fn name(self) -> &'static str {
        match self {
            PressKind::Knorm => "knorm",
            PressKind::StreamingLlm => "streaming_llm",
            PressKind::Snapkv => "snapkv",
            PressKind::Tova => "tova",
            PressKind::ObservedAttention => "observed_attention",
            PressKind::Keydiff => "keydiff",
        }
    }

    pub fn parse(s: &str) -> Option<PressKind> {
        PressKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Pinned first positions when none are asked for (StreamingLLM's `n_sink`).
    pub fn default_sinks(self) -> usize {
        if self == PressKind::StreamingLlm {
            4
        } else {
            0
        }
    }

    /// The first of a context of `n`'s queries whose attention the press sums (`None`: it
    /// reads no attention).
    pub(super) fn scoring_from(self, n: usize) -> Option<usize> {
        match self {
            PressKind::Snapkv => Some(n.saturating_sub(SNAPKV_WINDOW)),
            PressKind::Tova => Some(n.saturating_sub(1)),
            PressKind::ObservedAttention => Some(0),
            PressKind::Knorm | PressKind::StreamingLlm | PressKind::Keydiff => None,
        }
    }

    /// Refuses a context the press cannot score (kvpress asserts the same).
    pub(super) fn check(self, n: usize) -> Result<()> {
        match self {
            PressKind::Snapkv if n <= SNAPKV_WINDOW => {
                Err(Error::input(format!("snapkv observes the last {SNAPKV_WINDOW} queries: give a context longer than that ({n} tokens)")))
            }
            PressKind::Tova if n < 2 => Err(Error::input("tova scores the keys before the last query: give a context of at least 2 tokens")),
            _ => Ok(()),
        }
    }
}

/// Per KV head, the scores of the context's `n` keys (`keep` of them to be kept, the first
/// `sinks` whatever their score) under `kind`.
pub fn press_scores(
    kind: PressKind,
    layer: &LayerCapture,
    (n, keep, sinks): (usize, usize, usize),
    (heads, kv_heads): (usize, usize),
) -> Result<Vec<Vec<f64>>> {
    let group = heads / kv_heads.max(1);
    let head_sums = |h: usize| &layer.sums[h * n..(h + 1) * n];
    let per_kv = |f: &dyn Fn(usize, usize) -> f64| -> Vec<Vec<f64>> { (0..kv_heads).map(|kv| (0..n).map(|p| f(kv, p)).collect()).collect() };
    Ok(match kind {
        PressKind::Knorm => per_kv(&|kv, p| -norm(layer.key(p, kv))),
        PressKind::Keydiff => (0..kv_heads).map(|kv| keydiff(layer, kv)).collect(),
        PressKind::StreamingLlm => {
            // Ones, but zeros for the pruned n − keep after the first sinks (`n_sink`).
            per_kv(&|_, p| if p >= sinks && p < sinks + (n - keep) { 0.0 } else { 1.0 })
        }
        PressKind::ObservedAttention => per_kv(&|kv, p| {
            let seen = (n - p) as f64;
            (0..group).map(|g| head_sums(kv * group + g)[p] / seen).sum::<f64>() / group as f64
        }),
        PressKind::Tova => {
            let mut s: Vec<f64> = (0..n).map(|p| (0..heads).map(|h| head_sums(h)[p]).sum::<f64>() / heads as f64).collect();
            with_kept_tail(&mut s, 1);
            vec![s; kv_heads]
        }
        PressKind::Snapkv => {
            let w = SNAPKV_WINDOW;
            let mut out: Vec<Vec<f64>> = (0..kv_heads)
                .map(|kv| {
                    let pooled: Vec<Vec<f64>> = (0..group).map(|g| avg_pool(&head_sums(kv * group + g)[..n - w], SNAPKV_KERNEL, w as f64)).collect();
                    let mut s: Vec<f64> = (0..n - w).map(|p| pooled.iter().map(|x| x[p]).sum::<f64>() / group as f64).collect();
                    s.resize(n, 0.0);
                    s
                })
                .collect();
            // The window's keys score the maximum over every head plus 1: always kept.
            let top = out.iter().flat_map(|s| s[..n - w].iter().copied()).fold(f64::NEG_INFINITY, f64::max) + 1.0;
            out.iter_mut().for_each(|s| s[n - w..].iter_mut().for_each(|x| *x = top));
            out
        }
    })
}

fn norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt()
}

/// KeyDiff: minus each key's cosine to the mean of the normalised keys.
fn keydiff(layer: &LayerCapture, kv: usize) -> Vec<f64> {
    let (n, dh) = (layer.n, layer.d_head);
    let mut anchor = vec![0f64; dh];
    for p in 0..n {
        let k = layer.key(p, kv);
        let len = norm(k).max(1e-12);
        anchor.iter_mut().zip(k).for_each(|(a, &x)| *a += x as f64 / len);
    }
    anchor.iter_mut().for_each(|a| *a /= n as f64);
    let anchor_len = anchor.iter().map(|a| a * a).sum::<f64>().sqrt();
    (0..n)
        .map(|p| {
            let k = layer.key(p, kv);
            let dot: f64 = k.iter().zip(&anchor).map(|(&x, a)| x as f64 * a).sum();
            -dot / (norm(k) * anchor_len).max(1e-8)
        })
        .collect()
}

/// Sums over `rows` queries (`sums`) as means, average-pooled over `kernel` neighbours with zero
/// padding counted (PyTorch's `avg_pool1d`, `count_include_pad`).
fn avg_pool(sums: &[f64], kernel: usize, rows: f64) -> Vec<f64> {
    let half = kernel / 2;
    (0..sums.len())
        .map(|p| {
            let lo = p.saturating_sub(half);
            let hi = (p + half + 1).min(sums.len());
            sums[lo..hi].iter().map(|s| s / rows).sum::<f64>() / kernel as f64
        })
        .collect()
}

/// The last `tail` scores set above every other (kvpress pads them with the maximum plus 1).
fn with_kept_tail(s: &mut [f64], tail: usize) {
    let n = s.len();
    let top = s[..n - tail].iter().copied().fold(f64::NEG_INFINITY, f64::max) + 1.0;
    s[n - tail..].iter_mut().for_each(|x| *x = top);
}
