//! Where queries meet keys: the `Attend` seam between the layer stack and attention, and causal
//! softmax attention over stacked sequences computed in query blocks (no layer ever holds a full
//! T×T pattern), each head of a block its own task.

use std::ops::Range;

use candle_core::{Device, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

use super::delta_net::{GatedDeltaNet, RecurrentStates};
use super::kv::{KeyMask, KvStore};
use crate::error::{Error, Result};
use crate::model::hook::HookPoint;
use crate::model::matmul::{gemm_f32, SendPtr};
use crate::model::receiver::HookReceiver;
use crate::model::rope::Rope;
use crate::numerics::kernels::{softmax_prefix, softmax_segments, softmax_segments_with_sink};
use crate::numerics::tensor::with_f32;

/// Upper bound on one query block's score matrix, so attention memory is independent of T².
pub(crate) const ATTENTION_BLOCK_BYTES: usize = 32 << 20;
/// Query rows per block at most.
const MAX_BLOCK_ROWS: usize = 128;
/// One sequence of a (possibly stacked) forward: where its keys go, and an optional key mask.
pub(crate) struct Seq<'a> {
    pub(crate) store: Option<&'a mut dyn KvStore>,
    pub(crate) mask: Option<&'a KeyMask>,
}

/// What one layer's attention needs besides its q, k, v: its RoPE (Gemma 3's windowed layers
/// rotate with their own base) and its sliding window, if any.
pub(crate) struct LayerAttention<'r> {
    pub(crate) index: usize,
    pub(crate) rope: &'r Rope,
    /// Which of the model's RoPEs `rope` is ([`super::Decoder::ropes`]).
    pub(crate) rope_index: usize,
    /// Keys a query sees at most, its own included.
    pub(crate) window: Option<usize>,
    /// Learned sink logits per head, joining every softmax row's denominator (gpt-oss).
    pub(crate) sinks: Option<&'r [f32]>,
    /// Scaled scores squashed to c · tanh(s / c) before the softmax (Gemma 2's
    /// `attn_logit_softcapping`).
    pub(crate) softcap: Option<f32>,
}

/// Squashes scaled attention scores to c · tanh(s / c), as Gemma 2 does before its mask and
/// softmax.
pub(crate) fn soft_cap(scores: &mut [f32], cap: Option<f32>) {
    if cap.is_some() {
        scores.iter_mut().for_each(|s| *s = capped(*s, cap));
    }
}

/// One score through [`soft_cap`].
pub(crate) fn capped(score: f32, cap: Option<f32>) -> f32 {
    cap.map_or(score, |c| c * (score / c).tanh())
}

/// The part of a layer where queries meet keys: given the layer's pre-RoPE q (rows, H, dh) and
/// k, v (rows, KVH, dh), return the attention output (rows, H·dh). Plain and cached runs
/// ([`SeqAttention`]) and teacher-forced policy streams (`model::policy_forward`) differ only here.
pub(crate) trait Attend {
    /// Positions of the rows, for hooks.
    fn rows(&self) -> std::ops::Range<usize>;
    fn attend(&mut self, layer: &LayerAttention, q: &Tensor, k: &Tensor, v: &Tensor, hooks: &mut dyn HookReceiver) -> Result<Tensor>;
    /// A linear-attention layer `layer` over its projections (q|k|v before the convolution, b|a):
    /// the heads' readings (rows, v_heads · d_v), each sequence continuing its own state. A run
    /// that cannot carry that state refuses the model by name (the default).
    fn recurrent(&mut self, layer: usize, _net: &GatedDeltaNet, _qkv: &Tensor, _ba: &Tensor) -> Result<Tensor> {
        Err(Error::input(format!(
            "layer {layer} is linear attention (Gated DeltaNet), whose recurrent state this run does not carry yet; a hybrid model runs plainly (analyze, capture, generate) but not under this command"
        )))
    }
    /// Called once every layer has run.
    fn finish(&mut self) {}
}

/// Causal attention for sequences stacked along rows, each with its own KV store and key mask.
pub(crate) struct SeqAttention<'s, 'a> {
    pub(crate) seqs: &'s mut [Seq<'a>],
    pub(crate) positions: Vec<Vec<usize>>,
    /// cos/sin tables per RoPE of the model, per sequence.
    pub(crate) tables: Vec<Vec<(Tensor, Tensor)>>,
    /// Rows per sequence.
    pub(crate) t: usize,
    /// Bytes of one query block's scores at most (see [`attention`]).
    pub(crate) block_bytes: usize,
}

impl Attend for SeqAttention<'_, '_> {
    fn rows(&self) -> std::ops::Range<usize> {
        let first = self.positions[0][0];
        first..first + self.t
    }

    fn attend(&mut self, layer: &LayerAttention, q: &Tensor, k: &Tensor, v: &Tensor, hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let (t, l, rope) = (self.t, layer.index, layer.rope);
        let tables = self.tables.get(layer.rope_index).ok_or_else(|| Error::Internal("a layer's RoPE has no tables".into()))?;
        let mut outs = Vec::with_capacity(self.seqs.len());
        for (s, seq) in self.seqs.iter_mut().enumerate() {
            let part = |x: &Tensor| -> Result<Tensor> { Ok(x.narrow(0, s * t, t)?.transpose(0, 1)?.contiguous()?) };
            let (cos, sin) = &tables[s];
            let q = rope.apply(&part(q)?, cos, sin)?;
            let (q, k_all, v_all) = match seq.store.as_deref_mut() {
                Some(store) => {
                    let (k_all, v_all) = store.append(l, &part(k)?, &part(v)?, rope, &self.positions[s])?;
                    (store.round_queries(&q)?, k_all, v_all)
                }
                None => (q, rope.apply(&part(k)?, cos, sin)?, part(v)?),
            };
            let past = k_all.dim(1)? - t;
            let layer_mask = seq.mask.filter(|m| m.layer == l);
            outs.push(attention(self.block_bytes, layer, &q, &k_all, &v_all, past, hooks, layer_mask)?);
        }
        Ok(if outs.len() == 1 { outs.swap_remove(0) } else { Tensor::cat(&outs, 0)? })
    }

    fn recurrent(&mut self, layer: usize, net: &GatedDeltaNet, qkv: &Tensor, ba: &Tensor) -> Result<Tensor> {
        let t = self.t;
        let mut outs = Vec::with_capacity(self.seqs.len());
        for (s, seq) in self.seqs.iter_mut().enumerate() {
            let (qkv, ba) = (qkv.narrow(0, s * t, t)?, ba.narrow(0, s * t, t)?);
            let mut own = RecurrentStates::default();
            let states = match seq.store.as_deref_mut() {
                Some(store) => store.recurrent().ok_or_else(|| {
                    Error::input(format!(
                        "layer {layer} is linear attention (Gated DeltaNet), and this cache policy does not carry its recurrent state yet"
                    ))
                })?,
                // Nothing kept: the sequence starts from zeros and its state ends with the call.
                None => &mut own,
            };
            outs.push(net.mix(&qkv, &ba, states.layer(layer, net.shape()))?);
        }
        Ok(if outs.len() == 1 { outs.swap_remove(0) } else { Tensor::cat(&outs, 0)? })
    }

    fn finish(&mut self) {
        for seq in self.seqs.iter_mut() {
            if let Some(store) = seq.store.as_deref_mut() {
                store.commit(self.t);
            }
        }
    }
}

/// Causal softmax attention for q (H, T, dh) against all visible keys k/v (KVH, past+T, dh) —
/// with the layer's window, each query sees only the last `window` keys, its own included; with
/// its learned sinks, each head's sink logit joins the softmax (the mass it takes is
/// `hook_sink_prob`) — one block of query rows at a time; within a block every head runs as its own task
/// (scores, mask and softmax while its rows are in cache, then A·V straight into its columns
/// of the output). Returns (T, H·dh).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    block_bytes: usize,
    at: &LayerAttention,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    past: usize,
    hooks: &mut dyn HookReceiver,
    mask: Option<&KeyMask>,
) -> Result<Tensor> {
    let layer = at.index;
    let (h, t, dh) = q.dims3()?;
    let shape = Shape {
        at,
        h,
        t,
        dh,
        group: h / k.dim(0)?,
        n_keys: past + t,
        past,
        scale: 1.0 / (dh as f32).sqrt(),
        want_scores: hooks.wants(&HookPoint::AttnScores(layer)),
        mask,
    };
    let want_pattern = hooks.wants(&HookPoint::Pattern(layer));
    let want_sink_prob = at.sinks.is_some() && hooks.wants(&HookPoint::SinkProb(layer));
    let per_row = h * shape.n_keys * std::mem::size_of::<f32>() * if shape.want_scores { 2 } else { 1 };
    // Small enough blocks also skip most of the masked upper triangle (keys beyond the block's
    // last query are never multiplied).
    let block = (block_bytes / per_row.max(1)).clamp(1, MAX_BLOCK_ROWS.min(t));
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let mut out = vec![0f32; t * h * dh];
    with_f32(&q, |q| {
        with_f32(&k, |k| {
            with_f32(&v, |v| -> Result<()> {
                for b0 in (0..t).step_by(block) {
                    let rows = b0..b0 + block.min(t - b0);
                    let (mut a, mut sink_mass) = shape.scores(q, k, rows.clone());
                    let (b, visible) = (rows.len(), past + rows.end);
                    let stream_rows = past + rows.start..past + rows.end;
                    if shape.want_scores {
                        let scores = Tensor::from_vec(a.clone(), (h, b, visible), &Device::Cpu)?;
                        hooks.record(&HookPoint::AttnScores(layer), stream_rows.clone(), &scores)?;
                        shape.softmax_saved(&mut a, &mut sink_mass, rows.clone());
                    }
                    if want_sink_prob {
                        hooks.record(&HookPoint::SinkProb(layer), stream_rows.clone(), &Tensor::from_vec(sink_mass, (h, b), &Device::Cpu)?)?;
                    }
                    let pattern = Tensor::from_vec(a, (h, b, visible), &Device::Cpu)?;
                    if want_pattern {
                        hooks.record(&HookPoint::Pattern(layer), stream_rows, &pattern)?;
                    }
                    with_f32(&pattern, |a| shape.values(a, v, SendPtr(out.as_mut_ptr()), rows))?;
                }
                Ok(())
            })
        })
    })????;
    Ok(Tensor::from_vec(out, (t, h * dh), &Device::Cpu)?)
}

/// One layer's attention shapes and settings, shared by every query block.
struct Shape<'a> {
    at: &'a LayerAttention<'a>,
    h: usize,
    t: usize,
    dh: usize,
    /// Query heads per KV head.
    group: usize,
    n_keys: usize,
    past: usize,
    scale: f32,
    /// Raw scores are saved (`hook_attn_scores`): the softmax waits until they are recorded.
    want_scores: bool,
    mask: Option<&'a KeyMask>,
}

impl Shape<'_> {
    /// The block `rows` of queries' scores, (b × dh) · (dh × visible) per head, scaled by the
    /// kernel; then the knocked-out keys and the softmax (or, when raw scores are saved, the
    /// causal −∞ first). Returns the (head, row, key) matrix and each (head, row)'s sink mass.
    fn scores(&self, q: &[f32], k: &[f32], rows: Range<usize>) -> (Vec<f32>, Vec<f32>) {
        let (dh, b) = (self.dh, rows.len());
        let visible = self.past + rows.end;
        let head_len = b * visible;
        let mut a = vec![0f32; self.h * head_len];
        // The sink's share of each (head, row) softmax, for hook_sink_prob.
        let mut sink_mass = vec![0f32; self.h * b];
        a.par_chunks_mut(head_len).zip(sink_mass.par_chunks_mut(b)).enumerate().for_each(|(head, (s, mass))| {
            let kv = head / self.group;
            let qh = &q[(head * self.t + rows.start) * dh..][..b * dh];
            let kh = &k[kv * self.n_keys * dh..][..visible * dh];
            // SAFETY: s is b×visible, qh b×dh, kh visible×dh (read transposed).
            // The 1/√dh scale is applied by the kernel to each finished dot product.
            unsafe {
                gemm_f32(b, visible, dh, (s.as_mut_ptr(), visible, 1), (qh.as_ptr(), dh, 1), (kh.as_ptr(), 1, dh), self.scale, Parallelism::None)
            };
            for (r, row) in s.chunks_mut(visible).enumerate() {
                let query = self.past + rows.start + r;
                soft_cap(&mut row[..query + 1], self.at.softcap);
                let first = self.first_key(query);
                // Future keys (and keys behind the window) show as −∞ in saved scores;
                // softmax ignores them anyway.
                if self.want_scores {
                    row[query + 1..].fill(f32::NEG_INFINITY);
                    row[..first].fill(f32::NEG_INFINITY);
                }
                // Knocked-out keys are hidden from the chosen heads' later queries.
                if let Some(m) = self.mask.filter(|m| m.heads.contains(&head)) {
                    row[m.hidden(query)].fill(f32::NEG_INFINITY);
                }
                // Softmax while the row is in cache, unless the raw scores are wanted first.
                if !self.want_scores {
                    mass[r] = softmax_visible(row, first, query + 1, self.at.sinks.map(|s| s[head]));
                }
            }
        });
        (a, sink_mass)
    }

    /// The softmax of saved scores, once they are recorded; rows are (head, query), as the sink
    /// masses.
    fn softmax_saved(&self, a: &mut [f32], sink_mass: &mut [f32], rows: Range<usize>) {
        let (b, visible) = (rows.len(), self.past + rows.end);
        a.par_chunks_mut(visible).zip(sink_mass.par_iter_mut()).enumerate().for_each(|(row, (s, mass))| {
            let query = self.past + rows.start + row % b;
            *mass = softmax_visible(s, self.first_key(query), query + 1, self.at.sinks.map(|s| s[row / b]));
        });
    }

    /// The first key a query sees: behind it, the layer's window hides the rest.
    fn first_key(&self, query: usize) -> usize {
        self.at.window.map_or(0, |w| (query + 1).saturating_sub(w))
    }

    /// The block's output: (b × visible) · (visible × dh) per head, into its columns of `out`
    /// (t, h·dh).
    fn values(&self, a: &[f32], v: &[f32], out: SendPtr, rows: Range<usize>) {
        let (dh, b, width) = (self.dh, rows.len(), self.h * self.dh);
        let visible = self.past + rows.end;
        let head_len = b * visible;
        (0..self.h).into_par_iter().for_each(|head| {
            let kv = head / self.group;
            let ah = &a[head * head_len..][..head_len];
            let vh = &v[kv * self.n_keys * dh..][..visible * dh];
            // SAFETY: each head writes rows b0..b0+b, columns head·dh..(head+1)·dh of the
            // (t, h·dh) output: disjoint across heads.
            unsafe {
                gemm_f32(
                    b,
                    dh,
                    visible,
                    (out.at(rows.start * width + head * dh), width, 1),
                    (ah.as_ptr(), visible, 1),
                    (vh.as_ptr(), dh, 1),
                    1.0,
                    Parallelism::None,
                )
            };
        })
    }
}

/// Softmax over keys `first..end` of a score row, with a learned sink logit in the denominator
/// where the head has one; every other entry becomes exactly 0. Returns the sink's mass.
fn softmax_visible(row: &mut [f32], first: usize, end: usize, sink: Option<f32>) -> f32 {
    if let Some(s) = sink {
        #[allow(clippy::single_range_in_vec_init)]
        return softmax_segments_with_sink(row, &[first..end], s);
    }
    if first == 0 {
        softmax_prefix(row, end);
    } else {
        #[allow(clippy::single_range_in_vec_init)]
        softmax_segments(row, &[first..end]);
    }
    0.0
}
