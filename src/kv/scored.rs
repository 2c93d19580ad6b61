//! Score-based eviction (H2O, TOVA, SnapKV) and per-head policies: every (layer, KV head) keeps
//! its own keys, chosen from the attention they have received (for GQA, summed over the query
//! heads that share the KV head). Decoding token by token goes through [`KvStore`] here (all sets
//! the same size, so a layer's keys still form one (KV heads, n, d_head) tensor); `scored_replay`
//! runs a block of tokens at a time, and sets of different sizes; `head_set` holds one KV head's
//! keys and chooses what a full cache gives up.

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::head_set::{evict_layer_if_full, HeadSet};
use super::policy::{Policy, PositionMode, Scorer};
use crate::error::{Error, Result};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::{KvStore, RecurrentStates};
use crate::model::head_tally::HeadTally;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::model::rope::{Rope, RopeTables};
use crate::numerics::tensor::with_f32;

/// One stream position's rotation of a key row: the layer's RoPE and its cos and sin rows.
pub(super) type KeyRotation<'a> = (&'a Rope, &'a [f32], &'a [f32]);

/// Early positions whose survival `kept_first_share` reports.
pub const KEPT_FIRST: usize = 4;

/// What a score-based policy kept, over every (layer, KV head, step after its first eviction).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KeptStats {
    /// For k < 4: the share of (layer, KV head, step) whose kept set contains position k.
    pub kept_first_share: [f64; KEPT_FIRST],
    /// Mean age t − position of the kept keys at step t.
    pub mean_age: f64,
    /// (layer, KV head, step) triples counted.
    pub samples: usize,
}

/// Running sums behind [`KeptStats`].
#[derive(Default, Clone)]
pub(super) struct Tally {
    first_hits: [usize; KEPT_FIRST],
    age_sum: f64,
    age_keys: usize,
    samples: usize,
}

impl Tally {
    /// Counts one (layer, KV head) at `step`, if the step comes after the first eviction (which
    /// every set makes at the end of step W − 1).
    pub(super) fn count(&mut self, set: &HeadSet, step: usize, cache: usize) {
        if step < cache {
            return;
        }
        for (k, hit) in self.first_hits.iter_mut().enumerate() {
            *hit += set.pos.contains(&k) as usize;
        }
        self.age_sum += set.pos.iter().map(|&p| (step - p) as f64).sum::<f64>();
        self.age_keys += set.pos.len();
        self.samples += 1;
    }

    fn stats(&self) -> Option<KeptStats> {
        (self.samples > 0).then(|| KeptStats {
            kept_first_share: std::array::from_fn(|k| self.first_hits[k] as f64 / self.samples as f64),
            mean_age: self.age_sum / self.age_keys.max(1) as f64,
            samples: self.samples,
        })
    }
}

/// The cache of one stream under a score-based policy (a clone is an independent copy: how
/// candidate continuations branch off one prompt).
#[derive(Clone)]
pub struct ScoredCache {
    pub(super) policy: Policy,
    pub(super) scorer: Scorer,
    n_kv: usize,
    pub(super) d_head: usize,
    pub(super) group: usize,
    /// [layer][kv head]
    pub(super) sets: Vec<Vec<HeadSet>>,
    pub(super) next_stream: usize,
    tables: RopeTables,
    pub(super) tally: Tally,
    /// How the cache stores keys and values (exact unless [`ScoredCache::with_rounding`]).
    pub(super) rounding: CacheRounding,
    /// A key and a value row being rounded.
    scratch: (Vec<f32>, Vec<f32>),
    /// Per head, the attention on the first positions and the rounding error of what is stored
    /// (the block replay fills it; see [`ScoredCache::with_head_tally`]).
    pub(super) head_tally: Option<HeadTally>,
    /// A windowed layer's window counts stream positions at original positions (a cache that
    /// never evicts: a press's); streaming policies count it in slots.
    pub(super) windows_by_position: bool,
    /// A hybrid's linear-attention state, carried whole (no score evicts it).
    pub(super) recurrent: RecurrentStates,
}

impl ScoredCache {
    pub fn new(policy: Policy, n_layers: usize, n_heads: usize, n_kv: usize, d_head: usize) -> Result<Self> {
        let scorer = match policy.scorer() {
            Some(scorer) if policy.positions != PositionMode::Delta => scorer,
            _ => return Err(Error::Internal(format!("ScoredCache cannot run {}", policy.label()))),
        };
        Ok(ScoredCache {
            policy,
            scorer,
            n_kv,
            d_head,
            group: n_heads / n_kv.max(1),
            sets: vec![vec![HeadSet::default(); n_kv]; n_layers],
            next_stream: 0,
            tables: RopeTables::new(d_head),
            tally: Tally::default(),
            rounding: CacheRounding::default(),
            scratch: (Vec::new(), Vec::new()),
            head_tally: None,
            windows_by_position: false,
            recurrent: RecurrentStates::default(),
        })
    }

    /// The same (empty) cache whose windowed layers, at original positions, hide keys a window
    /// or more positions back (a cache a press filled once; see `kv::press`).
    pub(super) fn windows_by_position(mut self) -> Self {
        self.windows_by_position = true;
        self
    }

    /// The same (empty) cache tallying, per head, the attention its queries past the first
    /// `sink_positions` positions pay them and the rounding error of the keys and values stored
    /// (`kv::divergence`; the block replay fills it).
    pub fn with_head_tally(mut self, sink_positions: usize) -> Self {
        self.head_tally = Some(HeadTally::new(sink_positions));
        self
    }

    /// The tally so far (empty without [`ScoredCache::with_head_tally`]).
    pub fn head_tally(&self) -> HeadTally {
        self.head_tally.clone().unwrap_or_default()
    }

    /// The same (empty) cache storing keys and values as `rounding` says, each rounded once as
    /// it enters: at slot positions keys are kept before RoPE (an engine that rotates them by
    /// slot when read), at original positions rotated at their stream positions, as an engine
    /// that keeps them rotated stores them ([`ScoredCache::stores_rotated`]).
    pub fn with_rounding(mut self, rounding: CacheRounding) -> Result<Self> {
        Self::refuse_unmodelled(&self.policy, &rounding, self.d_head)?;
        self.rounding = rounding;
        Ok(self)
    }

    /// Refuses what [`ScoredCache::with_rounding`] does not model: KIVI's schemes, and a block
    /// format wider than the heads.
    pub fn refuse_unmodelled(policy: &Policy, rounding: &CacheRounding, d_head: usize) -> Result<()> {
        rounding.refuse_kivi(&format!("the score-based {} policy", policy.eviction.kind().name()))?;
        rounding.check(d_head)
    }

    /// Whether keys are stored rotated at their stream positions and rounded after RoPE (original
    /// positions under a rounding key format); else they are kept before RoPE.
    pub(super) fn stores_rotated(&self) -> bool {
        self.policy.positions == PositionMode::Original && !self.rounding.keys.is_exact() && !self.rounding.before_rope
    }

    /// Appends a key (before RoPE) and its value at stream position `pos` to (layer, KV head),
    /// rounded as the cache stores them; `rotation` turns the key to its stream position where
    /// the cache [stores keys rotated](ScoredCache::stores_rotated).
    pub(super) fn store(&mut self, (layer, kv, pos): (usize, usize, usize), k: &[f32], v: &[f32], rotation: Option<KeyRotation>) -> Result<()> {
        let rotated = self.stores_rotated();
        let set = &mut self.sets[layer][kv];
        if self.rounding.is_exact() {
            set.push(pos, k, v);
            return Ok(());
        }
        let (kr, vr) = &mut self.scratch;
        kr.clear();
        kr.extend_from_slice(k);
        if rotated {
            let Some((rope, cos, sin)) = rotation else { return Err(Error::Internal("a rotated key store without its rotation".into())) };
            rope.rotate_row(k, cos, sin, kr);
        }
        let exact_key = self.head_tally.is_some().then(|| kr.clone());
        vr.clear();
        vr.extend_from_slice(v);
        self.rounding.key_row(kr, pos);
        self.rounding.value_row(vr, pos);
        set.push(pos, kr, vr);
        if let (Some(t), Some(exact_key)) = (self.head_tally.as_mut(), exact_key) {
            let sinks = t.sink_positions;
            let at = t.layer(layer, self.group * self.n_kv, self.n_kv);
            at.key_error[kv].add(&exact_key, kr, pos < sinks);
            at.value_error[kv].add(v, vr, pos < sinks);
        }
        Ok(())
    }

    /// Keys held per (layer, KV head) — the most any set holds, under a per-head policy.
    pub fn len(&self) -> usize {
        // The first layer holding keys (a hybrid's first layers may be linear: they hold none).
        let layer = self.sets.iter().find(|l| l.iter().any(|h| !h.pos.is_empty()));
        layer.map_or(0, |l| l.iter().map(|h| h.pos.len()).max().unwrap_or(0))
    }

    /// Keys held over every (layer, KV head): the cache's size in entries of one head.
    pub fn entries(&self) -> usize {
        self.sets.iter().flatten().map(|h| h.pos.len()).sum()
    }

    /// Of [`ScoredCache::entries`], those at stream positions below `n`.
    pub fn entries_before(&self, n: usize) -> usize {
        self.sets.iter().flatten().map(|h| h.pos.iter().filter(|&&p| p < n).count()).sum()
    }

    /// Marks the (layer, KV head) sets that keep every key (`full[l][kv]`; the retrieval heads
    /// of a per-head policy). Only the block replay runs sets of different sizes.
    pub fn with_full_heads(mut self, full: &[Vec<bool>]) -> Result<Self> {
        if self.policy.page.is_some() && full.iter().flatten().any(|&g| g) {
            return Err(Error::input(format!(
                "{}: a paged cache evicts a layer's KV heads together, so no head can keep every key",
                self.policy.label()
            )));
        }
        if full.len() != self.sets.len() || full.iter().zip(&self.sets).any(|(f, s)| f.len() != s.len()) {
            return Err(Error::input(format!(
                "head gates name {} layers × {} KV heads; the model has {} × {}",
                full.len(),
                full.first().map_or(0, Vec::len),
                self.sets.len(),
                self.n_kv
            )));
        }
        for (layer, gates) in self.sets.iter_mut().zip(full) {
            for (set, &g) in layer.iter_mut().zip(gates) {
                set.full = g;
            }
        }
        Ok(self)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives (layer, KV head) the keys `keys` (stream position, key before RoPE, value), in
    /// stream order (a cache compressed at once; see `kv::retrieval::compress`), stored as
    /// [`ScoredCache::store`] does; `tables` holds the layer's rope and its cos/sin rows (half
    /// of its rotated dimensions each) for positions 0… past the last key.
    pub(super) fn fill(
        &mut self,
        (layer, kv): (usize, usize),
        keys: &[(usize, Vec<f32>, Vec<f32>)],
        tables: (&Rope, &(Vec<f32>, Vec<f32>, usize)),
    ) -> Result<()> {
        let dh = self.d_head;
        if self.sets.get(layer).and_then(|l| l.get(kv)).is_none() {
            return Err(Error::Internal("no such (layer, KV head)".into()));
        }
        let (rope, (cos, sin, half)) = tables;
        for (p, k, v) in keys {
            if k.len() != dh || v.len() != dh || cos.len() < (p + 1) * half {
                return Err(Error::Internal("a key of the wrong width, or past the rotation tables".into()));
            }
            self.store((layer, kv, *p), k, v, Some((rope, &cos[p * half..], &sin[p * half..])))?;
        }
        Ok(())
    }

    /// Marks the first `n` stream tokens as run (after [`ScoredCache::fill`]).
    pub(super) fn set_stream_len(&mut self, n: usize) {
        self.next_stream = n;
    }

    /// The share of the stream positions in `span` held now, over every (layer, KV head) set.
    pub fn held_share(&self, span: std::ops::Range<usize>) -> f64 {
        // The layers holding keys (not a hybrid's linear layers).
        let sets: Vec<&HeadSet> = self.sets.iter().filter(|l| l.iter().any(|h| !h.pos.is_empty())).flatten().collect();
        let held: usize = sets.iter().map(|s| span.clone().filter(|p| s.pos.contains(p)).count()).sum();
        held as f64 / (sets.len() * span.len()).max(1) as f64
    }

    /// What was kept so far (`None` before the first eviction).
    pub fn stats(&self) -> Option<KeptStats> {
        self.tally.stats()
    }

    /// Takes in the step's attention (`attention[l]`: the query's weights, H × n, as the
    /// [`StepAttention`] sink recorded them), then evicts one key per (layer, KV head) if the
    /// budget is full. Keys are scored after the step's attention, so the step's own weights count.
    pub fn observe_and_evict(&mut self, attention: &[Vec<f32>]) -> Result<()> {
        let n = self.len();
        let (group, dh, policy, scorer) = (self.group, self.d_head, self.policy, self.scorer);
        let step = self.next_stream.saturating_sub(1);
        for (l, layer) in self.sets.iter_mut().enumerate() {
            if layer.iter().all(|h| h.pos.is_empty()) {
                // A hybrid's linear-attention layer: no keys, no attention.
                continue;
            }
            let a = attention
                .get(l)
                .filter(|a| a.len() == layer.len() * group * n)
                .ok_or_else(|| Error::Internal(format!("no attention of layer {l} for the scored cache")))?;
            for (kv, set) in layer.iter_mut().enumerate() {
                // The KV head's weights: the sum over its query heads, in head order.
                let mut w = vec![0f32; n];
                for g in 0..group {
                    w.iter_mut().zip(&a[(kv * group + g) * n..][..n]).for_each(|(s, &x)| *s += x);
                }
                set.observe(&policy, scorer, &w);
                self.tally.count(set, step, policy.cache);
            }
            evict_layer_if_full(layer, &policy, scorer, dh);
        }
        Ok(())
    }
}

impl KvStore for ScoredCache {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        match self.policy.positions {
            PositionMode::Original => (self.next_stream..self.next_stream + t).collect(),
            _ => (self.len()..self.len() + t).collect(),
        }
    }

    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, _positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let (kvh, t, dh) = k_pre.dims3()?;
        if kvh != self.n_kv || dh != self.d_head || layer >= self.sets.len() {
            return Err(Error::Internal("scored cache: unexpected key shape".into()));
        }
        let (k_new, v_new) = (k_pre.contiguous()?, v.contiguous()?);
        let first = self.next_stream;
        // The new keys' rotations at their stream positions, for a cache that stores them rotated.
        let (cos, sin) = match self.stores_rotated() {
            true => {
                let (cos, sin) = rope.tables(&(first..first + t).collect::<Vec<_>>(), &Device::Cpu)?;
                (cos.flatten_all()?.to_vec1::<f32>()?, sin.flatten_all()?.to_vec1::<f32>()?)
            }
            false => (Vec::new(), Vec::new()),
        };
        let half = if cos.is_empty() { 0 } else { rope.rot_dims / 2 };
        with_f32(&k_new, |k| {
            with_f32(&v_new, |v| -> Result<()> {
                for h in 0..kvh {
                    for r in 0..t {
                        let at = (h * t + r) * dh;
                        let rotation = (rope, &cos[r * half..], &sin[r * half..]);
                        self.store((layer, h, first + r), &k[at..at + dh], &v[at..at + dh], Some(rotation))?;
                    }
                }
                Ok(())
            })
        })???;
        let n = self.sets[layer][0].pos.len();
        let gather = |f: &dyn Fn(&HeadSet) -> &[f32]| -> Result<Tensor> {
            let all: Vec<f32> = self.sets[layer].iter().flat_map(|s| f(s).iter().copied()).collect();
            Ok(Tensor::from_vec(all, (kvh, n, dh), &Device::Cpu)?)
        };
        let (keys_pre, values) = (gather(&|s| &s.k)?, gather(&|s| &s.v)?);
        let keys = match self.policy.positions {
            // Every head's i-th key sits at slot i.
            PositionMode::Slot => rope.rotate_cached(&keys_pre, &(0..n).collect::<Vec<_>>(), self.tables.of(rope)?)?,
            // Stored rotated at their stream positions already.
            _ if self.stores_rotated() => keys_pre,
            // Each head's keys at their own stream positions.
            _ => {
                let heads: Vec<Tensor> =
                    (0..kvh).map(|h| rope.rotate(&keys_pre.narrow(0, h, 1)?, &self.sets[layer][h].pos)).collect::<Result<_>>()?;
                Tensor::cat(&heads, 0)?
            }
        };
        Ok((keys, values))
    }

    fn round_queries(&self, q: &Tensor) -> Result<Tensor> {
        self.rounding.queries(q)
    }

    fn commit(&mut self, t: usize) {
        self.next_stream += t;
    }

    fn recurrent(&mut self) -> Option<&mut RecurrentStates> {
        Some(&mut self.recurrent)
    }
}

/// Records each layer's attention weights of a one-token step (`hook_pattern`, H × n), for
/// [`ScoredCache::observe_and_evict`].
pub struct StepAttention {
    pub rows: Vec<Vec<f32>>,
}

impl StepAttention {
    pub fn new(n_layers: usize) -> Self {
        StepAttention { rows: vec![Vec::new(); n_layers] }
    }
}

impl HookReceiver for StepAttention {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Pattern(_))
    }

    fn record(&mut self, hook: &HookPoint, rows: std::ops::Range<usize>, value: &Tensor) -> Result<()> {
        if let HookPoint::Pattern(l) = *hook {
            if rows.len() != 1 {
                return Err(Error::Internal("scored caches decode one token per step".into()));
            }
            self.rows[l] = value.flatten_all()?.to_vec1::<f32>()?;
        }
        Ok(())
    }
}
