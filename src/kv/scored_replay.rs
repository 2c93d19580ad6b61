//! A score-based cache fed a block of tokens at a time, with the arithmetic of decoding them one
//! by one. A layer's evictions depend only on that layer's own attention, so the block runs layer
//! after layer: projections and MLPs on all its tokens at once (the weights read once per block,
//! not once per token), and inside each layer's attention the tokens one after another — append
//! the key, attend over the kept keys, score them, evict — exactly as token-by-token decoding does.

use candle_core::{Device, Tensor};

use super::head_set::evict_layer_if_full;
use super::policy::PositionMode;
use super::scored::ScoredCache;
use crate::error::{Error, Result};
use crate::model::decoder::attention::{capped, Attend, LayerAttention};
use crate::model::decoder::{Decoder, GatedDeltaNet};
use crate::model::receiver::{HookReceiver, NoCapture};
use crate::model::rope::Rope;
use crate::numerics::tensor::with_f32;

impl ScoredCache {
    /// Runs the stream's next tokens and returns their final-norm hidden states and, per token,
    /// the keys its query saw. A layer with its own sliding window hides the kept keys a window
    /// or more slots from the query, as decoding through the cache does.
    pub fn forward_block(&mut self, model: &Decoder, tokens: &[u32]) -> Result<(Tensor, Vec<usize>)> {
        if model.has_sliding_window() && self.policy.positions == PositionMode::Original && !self.windows_by_position {
            return Err(Error::Internal("a windowed model's scored cache runs at slot positions".into()));
        }
        let start = self.next_stream;
        let b = tokens.len();
        // Where each token sits when it is appended: its slot (the set is full at W − 1 after
        // the first eviction; a paged one drops to W − B and fills again), or its stream position.
        let (held, cache) = (self.len(), self.policy.cache);
        let positions: Vec<usize> = match (self.policy.positions, self.policy.page) {
            (PositionMode::Original, _) => (start..start + b).collect(),
            (_, None) => (0..b).map(|r| (held + r).min(cache - 1)).collect(),
            (_, Some(page)) => (0..b)
                .scan(held, |size, _| {
                    let slot = *size;
                    *size = if slot + 1 >= cache { slot + 1 - page } else { slot + 1 };
                    Some(slot)
                })
                .collect(),
        };
        let span = positions.iter().copied().max().unwrap_or(0).max(self.policy.cache).max(start + b) + 1;
        let table = |rope: &Rope| -> Result<(Vec<f32>, Vec<f32>)> {
            let (cos, sin) = rope.tables(&(0..span).collect::<Vec<_>>(), &Device::Cpu)?;
            Ok((cos.flatten_all()?.to_vec1::<f32>()?, sin.flatten_all()?.to_vec1::<f32>()?))
        };
        let tables = model.ropes().iter().map(table).collect::<Result<Vec<_>>>()?;
        let x = model.embed_tokens(tokens, &positions)?;
        let mut lens = Vec::with_capacity(b);
        // A hybrid's first layers may be linear (no keys): the first attending layer counts.
        let first = model.cfg.attention_layers().first().copied().unwrap_or(0);
        let mut attend = BlockAttention { cache: self, start, b, tables, lens: &mut lens, first };
        let hidden = model.run_blocks(x, 0, &mut attend, &mut NoCapture)?;
        Ok((hidden, lens))
    }
}

/// The attention of a block of stream tokens through a [`ScoredCache`].
struct BlockAttention<'a> {
    cache: &'a mut ScoredCache,
    start: usize,
    b: usize,
    /// cos/sin rows for positions 0.., rot_dims/2 wide, per RoPE of the model (Gemma 3's
    /// windowed layers have their own).
    tables: Vec<(Vec<f32>, Vec<f32>)>,
    /// Keys each token's query saw (filled by layer `first`).
    lens: &'a mut Vec<usize>,
    /// The first layer that attends.
    first: usize,
}

impl Attend for BlockAttention<'_> {
    fn rows(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.b
    }

    fn recurrent(&mut self, layer: usize, net: &GatedDeltaNet, qkv: &Tensor, ba: &Tensor) -> Result<Tensor> {
        // The block's rows continue the stream: the cache's state moves on past them, whole.
        net.mix(qkv, ba, self.cache.recurrent.layer(layer, net.shape()))
    }

    fn attend(&mut self, at: &LayerAttention, q: &Tensor, k: &Tensor, v: &Tensor, _hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let (b, h, dh) = q.dims3()?;
        let kvh = k.dim(1)?;
        let (l, policy, scorer, group) = (at.index, self.cache.policy, self.cache.scorer, self.cache.group);
        let rope = at.rope;
        let half = rope.rot_dims / 2;
        let Some((cos, sin)) = self.tables.get(at.rope_index) else { return Err(Error::Internal("a layer's RoPE has no tables".into())) };
        let scale = 1.0 / (dh as f32).sqrt();
        let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
        let mut out = vec![0f32; b * h * dh];
        // Per query head, the attention on the first positions (queries past them), for the tally.
        let sinks_at = self.cache.head_tally.as_ref().map(|t| t.sink_positions);
        // Keys stored rotated at their stream positions are read as they are.
        let rotated = self.cache.stores_rotated();
        let (mut sink_mass, mut counted) = (vec![0f64; h], 0usize);
        with_f32(&q, |q| {
            with_f32(&k, |k| {
                with_f32(&v, |v| -> Result<()> {
                    let mut q_rot = vec![0f32; dh];
                    let mut keys: Vec<f32> = Vec::new();
                    for r in 0..b {
                        let step = self.start + r;
                        for kv in 0..kvh {
                            let at_kv = (r * kvh + kv) * dh;
                            let rotation = (rope, &cos[step * half..], &sin[step * half..]);
                            self.cache.store((l, kv, step), &k[at_kv..at_kv + dh], &v[at_kv..at_kv + dh], Some(rotation))?;
                        }
                        if l == self.first {
                            self.lens.push(self.cache.sets[l].iter().map(|s| s.pos.len()).max().unwrap_or(0));
                        }
                        let tallied = sinks_at.filter(|&n| step >= n);
                        counted += usize::from(tallied.is_some());
                        for kv in 0..kvh {
                            let set = &self.cache.sets[l][kv];
                            // Sets of a per-head policy hold different numbers of keys.
                            let n = set.pos.len();
                            // Keys at their slots 0..n or their stream positions; the query at its own.
                            let key_pos = |i: usize| if policy.positions == PositionMode::Original { set.pos[i] } else { i };
                            let q_pos = if policy.positions == PositionMode::Original { step } else { n - 1 };
                            keys.resize(n * dh, 0.0);
                            for i in 0..n {
                                let out = &mut keys[i * dh..(i + 1) * dh];
                                match rotated {
                                    true => out.copy_from_slice(&set.k[i * dh..(i + 1) * dh]),
                                    false => rope.rotate_row(&set.k[i * dh..(i + 1) * dh], &cos[key_pos(i) * half..], &sin[key_pos(i) * half..], out),
                                }
                            }
                            let mut summed = vec![0f32; n];
                            let mut p = vec![0f32; n];
                            for g in 0..group {
                                let head = kv * group + g;
                                let qh = &q[(r * h + head) * dh..][..dh];
                                rope.rotate_row(qh, &cos[q_pos * half..], &sin[q_pos * half..], &mut q_rot);
                                self.cache.rounding.query_row(&mut q_rot);
                                for (i, s) in p.iter_mut().enumerate() {
                                    // Keys a window or more slots back are hidden on windowed layers.
                                    let hidden = at.window.is_some_and(|w| q_pos - key_pos(i) >= w);
                                    *s =
                                        if hidden { f32::NEG_INFINITY } else { capped(dot(&q_rot, &keys[i * dh..(i + 1) * dh]) * scale, at.softcap) };
                                }
                                softmax(&mut p, at.sinks.map(|s| s[head]));
                                if let Some(n) = tallied {
                                    sink_mass[head] += p.iter().zip(&set.pos).filter(|(_, &pos)| pos < n).map(|(&w, _)| w as f64).sum::<f64>();
                                }
                                let o = &mut out[(r * h + head) * dh..][..dh];
                                for (i, &w) in p.iter().enumerate() {
                                    o.iter_mut().zip(&set.v[i * dh..(i + 1) * dh]).for_each(|(o, &x)| *o += w * x);
                                }
                                summed.iter_mut().zip(&p).for_each(|(s, &x)| *s += x);
                            }
                            let set = &mut self.cache.sets[l][kv];
                            set.observe(&policy, scorer, &summed);
                            self.cache.tally.count(set, step, policy.cache);
                        }
                        evict_layer_if_full(&mut self.cache.sets[l], &policy, scorer, dh);
                    }
                    Ok(())
                })
            })
        })????;
        if let Some(t) = self.cache.head_tally.as_mut() {
            let at = t.layer(l, h, kvh);
            at.sink_mass.iter_mut().zip(&sink_mass).for_each(|(s, m)| *s += m);
            *at.queries += counted;
        }
        Ok(Tensor::from_vec(out, (b, h * dh), &Device::Cpu)?)
    }

    fn finish(&mut self) {
        self.cache.next_stream += self.b;
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Softmax in place, with a learned sink logit in the denominator where the head has one.
fn softmax(row: &mut [f32], sink: Option<f32>) {
    let max = row.iter().copied().fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
    let mut sum = sink.map_or(0.0, |s| (s - max).exp());
    for x in row.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    row.iter_mut().for_each(|x| *x /= sum);
}
