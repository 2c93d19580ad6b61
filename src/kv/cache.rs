//! A policy-managed KV cache for one stream: keys kept before RoPE (and, for `delta`, also after
//! it), values, and each slot's stream index; exact memory accounting is its length. A hybrid's
//! linear-attention state rides along whole: no policy evicts or rounds it.

use candle_core::Tensor;

use super::policy::{Eviction, Policy, PositionMode};
use crate::error::Result;
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::{Decoder, KvStore, LayerSlots, RecurrentStates};
use crate::model::receiver::NoCapture;
use crate::model::rope::{Rope, RopeTables};

/// Runs each window from scratch (positions 0…), as into a fresh dense cache storing keys and values
/// as `rounding` says (an engine that recomputes its window fills a new cache of that format; the
/// window's own first tokens are the ones `exact_first` keeps); hidden states stacked window after
/// window. An exact cache runs them as one batch.
pub fn prefill_windows(model: &Decoder, windows: &[&[u32]], rounding: CacheRounding) -> Result<Tensor> {
    if rounding.is_exact() {
        return model.forward_windows(windows);
    }
    let hidden = windows
        .iter()
        .map(|w| {
            let mut cache = PolicyCache::new(Policy::new(Eviction::Dense, 0, PositionMode::Slot), model.cfg.d_head)?.with_rounding(rounding)?;
            model.forward_with(w, Some(&mut cache), &mut NoCapture)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Tensor::cat(&hidden, 0)?)
}

/// Keys/values of every layer for the entries a policy has kept. Cloning is cheap (tensors are
/// shared), which is how policies share the stream before their first eviction.
#[derive(Clone)]
pub struct PolicyCache {
    pub policy: Policy,
    /// The model layer each stored layer is.
    layers: LayerSlots,
    /// Per stored layer (KVH, n, dh): keys before RoPE.
    k_pre: Vec<Tensor>,
    /// Per layer (KVH, n, dh): keys rotated at their current slot, shifted on eviction (`delta`).
    k_rot: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Stream index of each slot's token.
    pub stream_pos: Vec<usize>,
    next_stream: usize,
    /// Evictions so far.
    pub evictions: usize,
    /// Precomputed rotations per RoPE base (a model with local layers has two).
    tables: RopeTables,
    /// Whether `k_rot` is maintained: for `delta`, for a shared prefix that may become one, and
    /// for a cache that stores keys rotated and rounded.
    keep_rotated: bool,
    /// What the cache's format does to the keys and values it stores and to the queries.
    rounding: CacheRounding,
    /// A hybrid's linear-attention state, carried whole.
    recurrent: RecurrentStates,
}

impl PolicyCache {
    pub fn new(policy: Policy, d_head: usize) -> Result<Self> {
        Ok(PolicyCache {
            policy,
            layers: LayerSlots::default(),
            k_pre: Vec::new(),
            k_rot: Vec::new(),
            v: Vec::new(),
            stream_pos: Vec::new(),
            next_stream: 0,
            evictions: 0,
            tables: RopeTables::new(d_head),
            keep_rotated: policy.positions == PositionMode::Delta,
            rounding: CacheRounding::default(),
            recurrent: RecurrentStates::default(),
        })
    }

    /// The same (empty) cache storing keys and values as `rounding` says: rounded after RoPE
    /// unless `rounding.before_rope`, so rotated keys are kept. KIVI's schemes are refused (this
    /// cache stores rows one at a time).
    pub fn with_rounding(mut self, rounding: CacheRounding) -> Result<Self> {
        rounding.refuse_kivi("a policy's own cache, decoded token by token (delta positions, --token-by-token, canary, verify)")?;
        self.rounding = rounding;
        self.keep_rotated |= self.rounds_rotated();
        Ok(self)
    }

    /// Whether the cache holds rounded rotated keys (and reads keys from `k_rot`).
    fn rounds_rotated(&self) -> bool {
        !self.rounding.keys.is_exact() && !self.rounding.before_rope
    }

    /// Also maintains rotated keys, so that [`PolicyCache::with_policy`] can hand the entries to a
    /// `delta` policy.
    pub fn keeping_rotated(mut self) -> Self {
        self.keep_rotated = true;
        self
    }

    /// Entries held (one per kept token, in every layer).
    pub fn len(&self) -> usize {
        self.stream_pos.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stream_pos.is_empty()
    }

    /// The same entries under another policy (used when the shared prefix ends).
    pub fn with_policy(&self, policy: Policy) -> Self {
        let keep_rotated = policy.positions == PositionMode::Delta || self.rounds_rotated();
        let mut c = PolicyCache { policy, keep_rotated, ..self.clone() };
        if !keep_rotated {
            c.k_rot.clear();
        }
        c
    }

    /// Applies the policy after a step; returns how many entries were evicted. `rope_of(l)` is
    /// layer l's RoPE (local layers may have their own), for the `delta` re-rotation.
    pub fn evict(&mut self, rope_of: &dyn Fn(usize) -> Rope) -> Result<usize> {
        let range = self.policy.evict(self.len());
        if range.is_empty() {
            return Ok(0);
        }
        let (a, b) = (range.start, range.end);
        let n = self.len();
        let cut = |t: &Tensor| -> Result<Tensor> {
            let parts: Vec<Tensor> =
                [(0, a), (b, n - b)].iter().filter(|(_, len)| *len > 0).map(|&(s, len)| t.narrow(1, s, len)).collect::<candle_core::Result<_>>()?;
            Ok(Tensor::cat(&parts, 1)?)
        };
        for l in 0..self.k_pre.len() {
            let layer = self.layers.layer(l).ok_or_else(|| crate::error::Error::Internal("a stored layer without its model layer".into()))?;
            self.k_pre[l] = cut(&self.k_pre[l])?;
            self.v[l] = cut(&self.v[l])?;
            if !self.keep_rotated {
                continue;
            }
            let rot = cut(&self.k_rot[l])?;
            self.k_rot[l] = if self.policy.positions == PositionMode::Delta && n > b {
                // Survivors after the hole move Δ slots left: rotate them back by −Δ (in f32,
                // so rounding accumulates over evictions, as in llama.cpp's K-shift).
                let delta = (b - a) as i64;
                let head = rot.narrow(1, 0, a)?;
                let tail = rot.narrow(1, a, n - b)?;
                let shifted = rope_of(layer).rotate_by(&tail, &vec![-delta; n - b])?;
                // A quantized cache stores the shifted key again (llama.cpp: dequantize, rotate,
                // quantize back).
                let shifted = self.rounding.keys(&shifted, &self.stream_pos[b..])?;
                if a > 0 {
                    Tensor::cat(&[&head, &shifted], 1)?
                } else {
                    shifted
                }
            } else {
                rot
            };
        }
        self.stream_pos.drain(a..b);
        self.evictions += 1;
        Ok(b - a)
    }
}

impl KvStore for PolicyCache {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        match self.policy.positions {
            PositionMode::Original => (self.next_stream..self.next_stream + t).collect(),
            PositionMode::Slot | PositionMode::Delta => (self.len()..self.len() + t).collect(),
        }
    }

    fn append(&mut self, model_layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let layer = self.layers.slot(model_layer);
        let stream: Vec<usize> = (self.next_stream..self.next_stream + positions.len()).collect();
        let v = &self.rounding.values(v, &stream)?;
        let k_pre = &match self.rounding.before_rope {
            true => self.rounding.keys(k_pre, &stream)?,
            false => k_pre.clone(),
        };
        if self.k_pre.len() <= layer {
            self.k_pre.push(k_pre.clone());
            self.v.push(v.clone());
        } else {
            self.k_pre[layer] = Tensor::cat(&[&self.k_pre[layer], k_pre], 1)?;
            self.v[layer] = Tensor::cat(&[&self.v[layer], v], 1)?;
        }
        if self.keep_rotated {
            let k_rot = rope.rotate_cached(k_pre, positions, self.tables.of(rope)?)?;
            let k_rot = if self.rounds_rotated() { self.rounding.keys(&k_rot, &stream)? } else { k_rot };
            if self.k_rot.len() <= layer {
                self.k_rot.push(k_rot);
            } else {
                self.k_rot[layer] = Tensor::cat(&[&self.k_rot[layer], &k_rot], 1)?;
            }
        }
        let n = self.k_pre[layer].dim(1)?;
        let keys = match self.policy.positions {
            PositionMode::Delta => self.k_rot[layer].clone(),
            // Stored rotated and rounded: read as stored (under `slot`, only before the first
            // eviction, while slots are stream positions: the shared dense prefix).
            PositionMode::Original if self.rounds_rotated() => self.k_rot[layer].clone(),
            PositionMode::Slot if self.rounds_rotated() => {
                if self.evictions > 0 {
                    return Err(crate::error::Error::Internal("a cache under slot positions stores keys before RoPE".into()));
                }
                self.k_rot[layer].clone()
            }
            // Rotate every kept key afresh from its pre-RoPE value: by slot, or by stream index.
            PositionMode::Slot => {
                let k_pre = self.k_pre[layer].clone();
                rope.rotate_cached(&k_pre, &(0..n).collect::<Vec<_>>(), self.tables.of(rope)?)?
            }
            PositionMode::Original => {
                let mut pos = self.stream_pos.clone();
                pos.extend_from_slice(positions);
                let k_pre = self.k_pre[layer].clone();
                rope.rotate_cached(&k_pre, &pos, self.tables.of(rope)?)?
            }
        };
        Ok((keys, self.v[layer].clone()))
    }

    fn round_queries(&self, q: &Tensor) -> Result<Tensor> {
        self.rounding.queries(q)
    }

    fn commit(&mut self, t: usize) {
        self.stream_pos.extend(self.next_stream..self.next_stream + t);
        self.next_stream += t;
    }

    fn recurrent(&mut self) -> Option<&mut RecurrentStates> {
        Some(&mut self.recurrent)
    }
}
