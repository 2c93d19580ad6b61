//! Each press's score of the context's keys, per (layer, KV head), higher kept — as kvpress 0.5.5
//! computes it (`presses/*_press.py`, each `score`), on keys as a cache holds them (after RoPE).
//! The names are kvpress's.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kv::prefill::LayerCapture;

/// SnapKV's observation window and pooling kernel in kvpress (`SnapKVPress` defaults).
pub const SNAPKV_WINDOW: usize = 64;
pub const SNAPKV_KERNEL: usize = 5;
/// ExpectedAttention's future queries and its first positions kept (`n_future_positions`, `n_sink`).
pub const EXPECTED_FUTURE: usize = 512;
const EXPECTED_SINKS: usize = 4;

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
    /// `ExpectedAttentionPress`: the attention the next 512 positions' queries are expected to
    /// pay each key (the queries' mean and covariance after the first `n_sink`, under RoPE
    /// averaged over those positions), averaged over the query heads of a KV head, times the
    /// value's norm; the first `n_sink` (4) kept.
    ExpectedAttention,
}

impl PressKind {
    pub const ALL: [PressKind; 7] = [
        PressKind::Knorm,
        PressKind::StreamingLlm,
        PressKind::Snapkv,
        PressKind::Tova,
        PressKind::ObservedAttention,
        PressKind::Keydiff,
        PressKind::ExpectedAttention,
    ];

    /// kvpress's name (`--press`).
    pub fn name(self) -> &'static str {
        match self {
            PressKind::Knorm => "knorm",
            PressKind::StreamingLlm => "streaming_llm",
            PressKind::Snapkv => "snapkv",
            PressKind::Tova => "tova",
            PressKind::ObservedAttention => "observed_attention",
            PressKind::Keydiff => "keydiff",
            PressKind::ExpectedAttention => "expected_attention",
        }
    }

    pub fn parse(s: &str) -> Option<PressKind> {
        PressKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Pinned first positions when none are asked for (StreamingLLM's and ExpectedAttention's
    /// `n_sink`).
    pub fn default_sinks(self) -> usize {
        match self {
            PressKind::StreamingLlm | PressKind::ExpectedAttention => 4,
            _ => 0,
        }
    }

    /// Whether the press reads the prefill's queries.
    pub(super) fn reads_queries(self) -> bool {
        self == PressKind::ExpectedAttention
    }

    /// The first of a context of `n`'s queries whose attention the press sums (`None`: it
    /// reads no attention).
    pub(super) fn scoring_from(self, n: usize) -> Option<usize> {
        match self {
            PressKind::Snapkv => Some(n.saturating_sub(SNAPKV_WINDOW)),
            PressKind::Tova => Some(n.saturating_sub(1)),
            PressKind::ObservedAttention => Some(0),
            PressKind::Knorm | PressKind::StreamingLlm | PressKind::Keydiff | PressKind::ExpectedAttention => None,
        }
    }

    /// What the press reads of a context of `n`'s prefill: the first query whose attention it
    /// sums, and whether it reads the queries. Presses with one key share a prefill.
    pub fn capture_key(self, n: usize) -> (Option<usize>, bool) {
        (self.scoring_from(n), self.reads_queries())
    }

    /// Refuses a context the press cannot score (kvpress asserts the same).
    pub(super) fn check(self, n: usize) -> Result<()> {
        match self {
            PressKind::Snapkv if n <= SNAPKV_WINDOW => {
                Err(Error::input(format!("snapkv observes the last {SNAPKV_WINDOW} queries: give a context longer than that ({n} tokens)")))
            }
            PressKind::Tova if n < 2 => Err(Error::input("tova scores the keys before the last query: give a context of at least 2 tokens")),
            PressKind::ExpectedAttention if n <= EXPECTED_SINKS => Err(Error::input(format!(
                "expected_attention keeps the first {EXPECTED_SINKS} and scores the rest: give a context longer than that ({n} tokens)"
            ))),
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
    future: Option<&FutureRope>,
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
        PressKind::ExpectedAttention => {
            let Some(future) = future else { return Err(Error::Internal("expected_attention needs the future positions' rotation".into())) };
            // kvpress's `n_sink` (4 unless `--sinks` says otherwise): kept, and left out of the
            // queries' statistics.
            expected_attention(layer, (heads, kv_heads), sinks.min(n - 1), future)
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

/// RoPE averaged over the future positions ExpectedAttention looks at: per rotated pair of
/// dimensions (a, b) the mean cosine and sine, R̄ = [[C, −S], [S, C]] on (a, b).
pub struct FutureRope {
    pub pairs: Vec<(usize, usize)>,
    pub mean_cos: Vec<f64>,
    pub mean_sin: Vec<f64>,
}

impl FutureRope {
    /// `rope` averaged over positions `from..from + count`.
    pub fn new(rope: &crate::model::rope::Rope, from: usize, count: usize) -> Result<Self> {
        use crate::model::rope::RopeLayout;
        let half = rope.rot_dims / 2;
        let (cos, sin) = rope.tables(&(from..from + count).collect::<Vec<_>>(), &candle_core::Device::Cpu)?;
        let (cos, sin) = (cos.flatten_all()?.to_vec1::<f32>()?, sin.flatten_all()?.to_vec1::<f32>()?);
        let mean = |t: &[f32], i: usize| (0..count).map(|r| t[r * half + i] as f64).sum::<f64>() / count as f64;
        let pairs = (0..half)
            .map(|i| match rope.layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            })
            .collect();
        Ok(FutureRope { pairs, mean_cos: (0..half).map(|i| mean(&cos, i)).collect(), mean_sin: (0..half).map(|i| mean(&sin, i)).collect() })
    }

    /// R̄ as a d × d matrix (the identity on dimensions RoPE leaves alone), row-major.
    fn matrix(&self, d: usize) -> Vec<f64> {
        let mut r = vec![0.0; d * d];
        (0..d).for_each(|i| r[i * d + i] = 1.0);
        for ((&(a, b), &c), &s) in self.pairs.iter().zip(&self.mean_cos).zip(&self.mean_sin) {
            r[a * d + a] = c;
            r[b * d + b] = c;
            r[a * d + b] = -s;
            r[b * d + a] = s;
        }
        r
    }
}

/// ExpectedAttention: per query head, the mean μ and covariance Σ of its queries before RoPE at
/// positions `sinks`…, rotated by the averaged future RoPE (μ' = R̄μ, Σ' = R̄ΣR̄ᵀ); each key k
/// after the sinks scores softmax_k(μ'·k/√d + kᵀΣ'k/2d), averaged over the KV head's query heads,
/// times ‖v‖; the sinks score the maximum plus 1.
fn expected_attention(layer: &LayerCapture, (heads, kv_heads): (usize, usize), sinks: usize, future: &FutureRope) -> Vec<Vec<f64>> {
    let (n, d) = (layer.n, layer.d_head);
    let group = heads / kv_heads.max(1);
    let r = future.matrix(d);
    let rows = n - sinks;
    let query = |p: usize, h: usize| &layer.q[(p * heads + h) * d..][..d];
    let per_head: Vec<Vec<f64>> = (0..heads)
        .map(|h| {
            let mut mu = vec![0.0; d];
            (sinks..n).for_each(|p| mu.iter_mut().zip(query(p, h)).for_each(|(m, &x)| *m += x as f64));
            mu.iter_mut().for_each(|m| *m /= rows as f64);
            let mut cov = vec![0.0; d * d];
            for p in sinks..n {
                let c: Vec<f64> = query(p, h).iter().zip(&mu).map(|(&x, m)| x as f64 - m).collect();
                for i in 0..d {
                    for j in 0..d {
                        cov[i * d + j] += c[i] * c[j];
                    }
                }
            }
            cov.iter_mut().for_each(|c| *c /= rows as f64);
            let mu = mat_vec(&r, &mu, d);
            let cov = mat_mul(&mat_mul(&r, &cov, d), &transpose(&r, d), d);
            let kv = h / group;
            let z: Vec<f64> = (sinks..n)
                .map(|p| {
                    let k: Vec<f64> = layer.key(p, kv).iter().map(|&x| x as f64).collect();
                    let quad: f64 = mat_vec(&cov, &k, d).iter().zip(&k).map(|(a, b)| a * b).sum();
                    mu.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt() + quad / d as f64 / 2.0
                })
                .collect();
            softmax(&z)
        })
        .collect();
    let mut out: Vec<Vec<f64>> = (0..kv_heads)
        .map(|kv| {
            let mut s = vec![0.0; n];
            for (i, p) in (sinks..n).enumerate() {
                let mean = (0..group).map(|g| per_head[kv * group + g][i]).sum::<f64>() / group as f64;
                s[p] = mean * norm(layer.value(p, kv));
            }
            s
        })
        .collect();
    let top = out.iter().flat_map(|s| s[sinks..].iter().copied()).fold(f64::NEG_INFINITY, f64::max) + 1.0;
    out.iter_mut().for_each(|s| s[..sinks].iter_mut().for_each(|x| *x = top));
    out
}

fn mat_vec(m: &[f64], v: &[f64], d: usize) -> Vec<f64> {
    (0..d).map(|i| m[i * d..(i + 1) * d].iter().zip(v).map(|(a, b)| a * b).sum()).collect()
}

fn mat_mul(a: &[f64], b: &[f64], d: usize) -> Vec<f64> {
    let mut out = vec![0.0; d * d];
    for i in 0..d {
        for k in 0..d {
            let x = a[i * d + k];
            for j in 0..d {
                out[i * d + j] += x * b[k * d + j];
            }
        }
    }
    out
}

fn transpose(m: &[f64], d: usize) -> Vec<f64> {
    (0..d * d).map(|at| m[(at % d) * d + at / d]).collect()
}

fn softmax(z: &[f64]) -> Vec<f64> {
    let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|x| (x - top).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|x| x / sum).collect()
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
