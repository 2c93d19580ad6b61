//! Teacher-forced streaming under a KV-cache policy, a block of queries at a time. Every cache
//! policy here leaves a query the same shape of context: the stream's first few tokens (pinned)
//! and a contiguous run of recent ones ending at the query ([`QueryView`]). Keys and values never
//! change once computed, so a block of consecutive queries can run as one batched forward with
//! a per-query mask instead of one decode step per token — the same arithmetic as decoding token
//! by token (to float rounding), at matrix-multiply speed instead of weight-streaming speed.
//!
//! Positions: RoPE scores depend only on the query–key distance. A recent key sits as far from
//! its query in the cache as in the stream (t − j, under `slot` and `original` alike), so recent
//! keys and queries are rotated at stream positions; a pinned key s sits at slot s, so the query
//! meets pinned keys at its own cache slot (`slot`) or stream position (`original`).

use std::ops::Range;

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::cache_rounding::CacheRounding;
use super::decoder::attention::{soft_cap, Attend, LayerAttention};
use super::decoder::{Decoder, DeltaState, GatedDeltaNet, LayerSlots, RecurrentStates};
use super::head_tally::{add_errors, HeadTally};
use super::kivi_stream::{self, Kivi, Layout};
use super::receiver::{HookReceiver, NoCapture};
use crate::error::{Error, Result};
use crate::numerics::kernels::{softmax_segments, softmax_segments_with_sink};

/// The keys one query at stream position t sees: tokens `0..pinned` and `from..=t`
/// (`pinned ≤ from`; `pinned = 0, from = 0` is the whole prefix). `pinned_pos` is the rotary
/// position at which the query meets the pinned keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryView {
    pub pinned: usize,
    pub from: usize,
    pub pinned_pos: usize,
}

impl QueryView {
    /// The full causal prefix of the query at `t`.
    pub fn dense(t: usize) -> Self {
        QueryView { pinned: 0, from: 0, pinned_pos: t }
    }

    /// Keys visible to the query at `t` (its own included).
    pub fn visible(&self, t: usize) -> usize {
        self.pinned + (t + 1 - self.from)
    }
}

/// Keys (rotated at their stream positions) and values of every layer for the tokens a stream's
/// later queries may still see: the first `pin` tokens and a window of recent ones. Cloning is
/// cheap (tensors are shared), which is how policies share a prefix.
#[derive(Clone, Default)]
pub struct StreamKv {
    /// First tokens kept however far the window moves on.
    pin: usize,
    /// Stream index of the first windowed entry.
    base: usize,
    /// Tokens run so far (stream index of the next one).
    len: usize,
    /// The model layer each stored layer is.
    layers: LayerSlots,
    /// Per stored layer (KVH, len − base, dh).
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Per layer (KVH, pin, dh), saved when the window first moves past them.
    pin_k: Vec<Tensor>,
    pin_v: Vec<Tensor>,
    /// What the cache's format does to keys, values and queries (exact by default).
    rounding: CacheRounding,
    /// A hybrid's linear-attention state, carried whole whatever the window keeps.
    recurrent: RecurrentStates,
}

impl StreamKv {
    /// An empty stream that keeps its first `pin` tokens.
    pub fn new(pin: usize) -> Self {
        StreamKv { pin, ..Default::default() }
    }

    /// An empty stream whose cache stores keys and values as `rounding` says.
    pub fn with_rounding(mut self, rounding: CacheRounding) -> Self {
        self.rounding = rounding;
        self
    }

    /// The same entries, keeping the first `pin` tokens from now on (they must still be held).
    pub fn pinning(&self, pin: usize) -> Result<Self> {
        if pin > 0 && self.base > 0 && pin > self.pin {
            return Err(Error::Internal(format!("cannot pin {pin} tokens: the window already moved past them")));
        }
        Ok(StreamKv { pin, ..self.clone() })
    }

    /// How the cache stores keys and values.
    pub fn rounding(&self) -> CacheRounding {
        self.rounding
    }

    /// Tokens run so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries held per layer (pinned and windowed): the memory a block evaluation needs.
    pub fn held(&self) -> usize {
        self.len - self.base + if self.base > 0 { self.pin } else { 0 }
    }

    /// Forgets windowed entries before stream index `to` (pinned ones are saved first).
    fn forget_before(&mut self, to: usize) -> Result<()> {
        if to <= self.base || self.k.is_empty() {
            return Ok(());
        }
        if self.pin_k.is_empty() && self.pin > 0 {
            if self.base > 0 || self.len < self.pin {
                return Err(Error::Internal("pinned tokens were dropped before they were saved".into()));
            }
            self.pin_k = self.k.iter().map(|k| k.narrow(1, 0, self.pin)).collect::<candle_core::Result<_>>()?;
            self.pin_v = self.v.iter().map(|v| v.narrow(1, 0, self.pin)).collect::<candle_core::Result<_>>()?;
        }
        let (skip, keep) = (to - self.base, self.len - to);
        for t in self.k.iter_mut().chain(self.v.iter_mut()) {
            *t = t.narrow(1, skip, keep)?;
        }
        self.base = to;
        Ok(())
    }

    /// Appends a block's stored keys and values (heads first) to `layer`'s.
    fn store(&mut self, layer: usize, k: Tensor, v: Tensor) -> Result<()> {
        if self.k.len() <= layer {
            self.k.push(k);
            self.v.push(v);
        } else {
            self.k[layer] = Tensor::cat(&[&self.k[layer], &k], 1)?;
            self.v[layer] = Tensor::cat(&[&self.v[layer], &v], 1)?;
        }
        Ok(())
    }

    /// The first `n` pinned keys and values of stored layer `layer`.
    fn pinned(&self, layer: usize, n: usize) -> Result<(Tensor, Tensor)> {
        if self.base == 0 {
            Ok((self.k[layer].narrow(1, 0, n)?, self.v[layer].narrow(1, 0, n)?))
        } else {
            Ok((self.pin_k[layer].narrow(1, 0, n)?, self.pin_v[layer].narrow(1, 0, n)?))
        }
    }
}

/// cos and sin tables of one RoPE at some positions.
type Tables = (Tensor, Tensor);

/// One RoPE's tables at the rows' stream positions and, when any view pins keys, at their pinned
/// positions.
type ViewTables = (Tables, Option<Tables>);

/// One layer's block of queries (before and after RoPE at the rows' stream positions), new keys
/// (rotated) and values, heads first, with the block's shape and the layer's tables for pinned
/// keys (when any view pins some).
struct HeadsFirst<'t> {
    q_heads: Tensor,
    q_stream: Tensor,
    k: Tensor,
    v: Tensor,
    at_pinned: Option<&'t Tables>,
    rows: usize,
    heads: usize,
    d_head: usize,
    kv_heads: usize,
}

impl HeadsFirst<'_> {
    /// Query heads per KV head.
    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// The block's new rows (at stream `positions`) heads first, keys and values as the cache stores
/// them and queries as they meet the keys (both under `rounding`).
fn heads_first<'t>(
    at: &LayerAttention,
    tables: &'t [(Tables, Option<Tables>)],
    rounding: &CacheRounding,
    positions: &[usize],
    (q, k, v): (&Tensor, &Tensor, &Tensor),
) -> Result<HeadsFirst<'t>> {
    let Some(((cos, sin), at_pinned)) = tables.get(at.rope_index) else { return Err(Error::Internal("a layer's RoPE has no tables".into())) };
    let (rows, heads, d_head) = q.dims3()?;
    let first = |x: &Tensor| -> Result<Tensor> { Ok(x.transpose(0, 1)?.contiguous()?) };
    let q_heads = first(q)?;
    // KIVI's copies are made as the rows join the layer's store (`kivi_stream`).
    let k = match (rounding.is_kivi(), rounding.before_rope) {
        (true, _) => at.rope.apply(&first(k)?, cos, sin)?,
        (false, true) => at.rope.apply(&rounding.keys(&first(k)?, positions)?, cos, sin)?,
        (false, false) => rounding.keys(&at.rope.apply(&first(k)?, cos, sin)?, positions)?,
    };
    let v = if rounding.is_kivi() { first(v)? } else { rounding.values(&first(v)?, positions)? };
    let kv_heads = k.dim(0)?;
    Ok(HeadsFirst {
        q_stream: rounding.queries(&at.rope.apply(&q_heads, cos, sin)?)?,
        k,
        v,
        q_heads,
        at_pinned: at_pinned.as_ref(),
        rows,
        heads,
        d_head,
        kv_heads,
    })
}

/// The keys a layer with its own window of `window` keys still shows the query at stream position
/// `t` under `view`: (first pinned key, first recent key). A pinned key s sits `pinned_pos − s`
/// from the query, a recent key j sits `t − j`.
fn within_window(view: &QueryView, t: usize, window: Option<usize>) -> (usize, usize) {
    match window {
        Some(w) => (((view.pinned_pos + 1).saturating_sub(w)).min(view.pinned), view.from.max((t + 1).saturating_sub(w))),
        None => (0, view.from),
    }
}

/// Scales (and soft-caps, where the layer does) the `segments` of one score row and turns them
/// into softmax weights (zero elsewhere), with the head's learned sink logit when the layer has one.
fn softmax_row(s: &mut [f32], segments: &[Range<usize>], scale: f32, softcap: Option<f32>, sink: Option<f32>) {
    for seg in segments {
        s[seg.clone()].iter_mut().for_each(|x| *x *= scale);
        soft_cap(&mut s[seg.clone()], softcap);
    }
    match sink {
        Some(logit) => {
            softmax_segments_with_sink(s, segments, logit);
        }
        None => softmax_segments(s, segments),
    }
}

/// Adds the rounding error of a block's stored keys and values (against the same rows unrounded,
/// `k` and `v` as the layer computed them) to the tally; nothing for an exact cache.
fn tally_errors(
    tally: Option<&mut HeadTally>,
    at: &LayerAttention,
    (tables, rounding, positions): (&[ViewTables], &CacheRounding, &[usize]),
    (k, v): (&Tensor, &Tensor),
    (k_stored, v_stored): (&Tensor, &Tensor),
    (heads, kv_heads): (usize, usize),
) -> Result<()> {
    let (Some(tally), false) = (tally, rounding.is_exact()) else { return Ok(()) };
    let Some(((cos, sin), _)) = tables.get(at.rope_index) else { return Err(Error::Internal("a layer's RoPE has no tables".into())) };
    let first = |x: &Tensor| -> Result<Tensor> { Ok(x.transpose(0, 1)?.contiguous()?) };
    let flat = |x: &Tensor| -> Result<Vec<f32>> { Ok(x.flatten_all()?.to_vec1::<f32>()?) };
    let k_exact = flat(&at.rope.apply(&first(k)?, cos, sin)?)?;
    let d_head = k_stored.dim(2)?;
    let layer = tally.layer(at.index, heads, kv_heads);
    let sinks = layer.sink_positions;
    add_errors(layer.key_error, &k_exact, &flat(k_stored)?, positions, d_head, sinks);
    add_errors(layer.value_error, &flat(&first(v)?)?, &flat(v_stored)?, positions, d_head, sinks);
    Ok(())
}

/// Attention of a block of consecutive stream queries, each with its own [`QueryView`].
struct ViewAttention<'a> {
    kv: &'a mut StreamKv,
    views: &'a [QueryView],
    /// Stream position of the block's first query.
    start: usize,
    /// Per RoPE of the model (Gemma 3's local layers have their own): tables at the queries'
    /// stream positions and at their pinned positions.
    tables: Vec<(Tables, Option<Tables>)>,
    /// Per-head sums of sink attention and rounding error, when asked for.
    tally: Option<&'a mut HeadTally>,
}

impl ViewAttention<'_> {
    /// Adds each counted query's attention on the sink positions to its head's sum: `weights`
    /// holds rows (KV head, group member, query r) over `pinned` pinned columns (stream positions
    /// 0…) and the window's columns (stream positions `base`…).
    fn tally_sink_mass(&mut self, layer: usize, weights: &[f32], (heads, kv_heads): (usize, usize), (pinned, base): (usize, usize)) {
        let (start, b) = (self.start, self.views.len());
        let Some(tally) = self.tally.as_deref_mut() else { return };
        let layer = tally.layer(layer, heads, kv_heads);
        let sinks = layer.sink_positions;
        let cols = weights.len() / (heads * b).max(1);
        let sink_cols: Vec<usize> = (0..pinned.min(sinks)).chain((base..sinks).map(|p| pinned + p - base)).filter(|&c| c < cols).collect();
        let mass: Vec<f64> = weights.par_chunks(cols).map(|row| sink_cols.iter().map(|&c| row[c] as f64).sum()).collect();
        let counted = (0..b).filter(|r| start + r >= sinks).count();
        for (row, m) in mass.iter().enumerate() {
            if start + row % b >= sinks {
                layer.sink_mass[row / b] += m;
            }
        }
        *layer.queries += counted;
    }
}

/// Stores a block's keys and values (starting at stream position `start`) with KIVI's copies
/// beside them (`kivi_stream`), tallying the rounding error of every key group the block
/// completed and of its values.
fn store_kivi(
    (kv, tally, start): (&mut StreamKv, Option<&mut HeadTally>, usize),
    at: &LayerAttention,
    (k, v): (&Tensor, &Tensor),
    positions: &[usize],
    (kivi, (heads, kv_heads)): (&Kivi, (usize, usize)),
) -> Result<()> {
    let layer = kv.layers.slot(at.index);
    let (keys, rows) = kivi_stream::append_keys(kv.k.get(layer), kv.base, k, start, kivi)?;
    let (values, rounded_values) = kivi_stream::paired_values(v, positions, kivi)?;
    if let Some(tally) = tally {
        let layer = tally.layer(at.index, heads, kv_heads);
        let (sinks, dh) = (layer.sink_positions, k.dim(2)?);
        add_errors(layer.key_error, &rows.exact, &rows.rounded, &rows.positions, dh, sinks);
        add_errors(layer.value_error, &v.flatten_all()?.to_vec1::<f32>()?, &rounded_values, positions, dh, sinks);
    }
    if kv.k.len() <= layer {
        kv.k.push(keys);
        kv.v.push(values);
    } else {
        kv.k[layer] = keys;
        kv.v[layer] = Tensor::cat(&[&kv.v[layer], &values], 1)?;
    }
    Ok(())
}

/// KIVI's setting when the cache is stored by its scheme.
fn kivi_of(rounding: &CacheRounding) -> Option<Kivi> {
    let window = rounding.kivi_window()?;
    Some(Kivi { window, key_bits: rounding.keys.kivi_bits()?, value_bits: rounding.values.kivi_bits()? })
}

impl Attend for ViewAttention<'_> {
    fn rows(&self) -> Range<usize> {
        self.start..self.start + self.views.len()
    }

    fn attend(&mut self, at: &LayerAttention, q: &Tensor, k: &Tensor, v: &Tensor, _hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let (rope, layer, rounding) = (at.rope, self.kv.layers.slot(at.index), self.kv.rounding);
        let positions: Vec<usize> = self.rows().collect();
        let block = heads_first(at, &self.tables, &rounding, &positions, (q, k, v))?;
        let (b, h, dh, kvh, group, at_pinned) = (block.rows, block.heads, block.d_head, block.kv_heads, block.group(), block.at_pinned);
        let HeadsFirst { q_heads, q_stream, k: k_new, v: v_new, .. } = block;
        let kivi = kivi_of(&rounding);
        match kivi {
            Some(kivi) => store_kivi((self.kv, self.tally.as_deref_mut(), self.start), at, (&k_new, &v_new), &positions, (&kivi, (h, kvh)))?,
            None => {
                tally_errors(self.tally.as_deref_mut(), at, (&self.tables, &rounding, &positions), (k, v), (&k_new, &v_new), (h, kvh))?;
                self.kv.store(layer, k_new, v_new)?;
            }
        }
        let kv = &*self.kv;
        let (base, n_window) = (kv.base, kv.k[layer].dim(1)?);
        let pinned = self.views.iter().map(|v| v.pinned).max().unwrap_or(0);
        let flat = |x: &Tensor| -> Result<Tensor> { Ok(x.reshape((kvh, group * b, dh))?) };
        let product = |q: &Tensor, keys: &Tensor| -> Result<Tensor> {
            match kivi {
                Some(_) => kivi_stream::paired_scores(&flat(q)?, keys),
                None => Ok(flat(q)?.matmul(&keys.t()?)?),
            }
        };
        let window_scores = product(&q_stream, &kv.k[layer])?;
        let (scores, values) = match (at_pinned, pinned) {
            (Some((cos, sin)), p) if p > 0 => {
                let (pk, pv) = kv.pinned(layer, p)?;
                let (pk, pv) = (pk.contiguous()?, pv.contiguous()?);
                let q_pinned = rounding.queries(&rope.apply(&q_heads, cos, sin)?)?;
                (Tensor::cat(&[&product(&q_pinned, &pk)?, &window_scores], 2)?, Tensor::cat(&[&pv, &kv.v[layer]], 1)?)
            }
            _ => (window_scores, kv.v[layer].clone()),
        };
        let cols = pinned + n_window;
        let layout = Layout { start: self.start, queries: b, pinned, base, cols };
        let mut a = scores.flatten_all()?.to_vec1::<f32>()?;
        if let Some(kivi) = &kivi {
            a = kivi_stream::chosen_scores(&a, layout, &kivi.window);
        }
        let scale = 1.0 / (dh as f32).sqrt();
        let (views, start, window, sinks) = (self.views, self.start, at.window, at.sinks);
        // Rows are (kv head, group member, query r).
        a.par_chunks_mut(cols).enumerate().for_each(|(row, s)| {
            let r = row % b;
            let (view, t) = (views[r], start + r);
            // A layer with its own window also hides what the policy keeps but lies further
            // back than the window, at the positions the policy gives.
            let (pinned_from, from) = within_window(&view, t, window);
            let segments = [pinned_from..view.pinned, pinned + from - base..pinned + t + 1 - base];
            // Row (kv head, member, r) belongs to head row / b.
            softmax_row(s, &segments, scale, at.softcap, sinks.map(|logits| logits[row / b]));
        });
        // The tallies are by model layer (the stored slot is `layer`).
        self.tally_sink_mass(at.index, &a, (h, kvh), (pinned, base));
        let out = match &kivi {
            Some(kivi) => kivi_stream::chosen_values(&a, &values, layout, &kivi.window)?,
            None => Tensor::from_vec(a, (kvh, group * b, cols), &Device::Cpu)?.matmul(&values)?,
        };
        let out = out.reshape((h, b, dh))?;
        Ok(out.transpose(0, 1)?.contiguous()?.reshape((b, h * dh))?)
    }

    fn recurrent(&mut self, layer: usize, net: &GatedDeltaNet, qkv: &Tensor, ba: &Tensor) -> Result<Tensor> {
        // The block's rows continue the stream in order: its state moves on past them.
        net.mix(qkv, ba, self.kv.recurrent.layer(layer, net.shape()))
    }

    fn finish(&mut self) {
        self.kv.len += self.views.len();
    }
}

/// Attention of several equally long continuations of one stream ("branches"), stacked along
/// rows branch after branch: query r of every branch sees what `views[r]` names of the stream
/// (which is left as it was) and its own branch's tokens up to itself.
struct BranchAttention<'a> {
    kv: &'a StreamKv,
    views: &'a [QueryView],
    branches: usize,
    tables: Vec<(Tables, Option<Tables>)>,
}

impl Attend for BranchAttention<'_> {
    fn rows(&self) -> Range<usize> {
        self.kv.len..self.kv.len + self.views.len()
    }

    fn recurrent(&mut self, layer: usize, net: &GatedDeltaNet, qkv: &Tensor, ba: &Tensor) -> Result<Tensor> {
        // Each branch continues the stream's state in a copy of its own (the stream is left as it was).
        let len = self.views.len() / self.branches.max(1);
        let outs = (0..self.branches.max(1))
            .map(|b| {
                let mut own = self.kv.recurrent.get(layer).cloned().unwrap_or_else(|| DeltaState::new(net.shape()));
                net.mix(&qkv.narrow(0, b * len, len)?, &ba.narrow(0, b * len, len)?, &mut own)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&outs, 0)?)
    }

    fn attend(&mut self, at: &LayerAttention, q: &Tensor, k: &Tensor, v: &Tensor, _hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let layer = self.kv.layers.stored(at.index).ok_or_else(|| Error::Internal("branches need a stream that has run".into()))?;
        let (rope, rounding) = (at.rope, self.kv.rounding);
        let len = self.views.len() / self.branches.max(1);
        let positions: Vec<usize> = (0..self.views.len()).map(|r| self.kv.len + r % len.max(1)).collect();
        let block = heads_first(at, &self.tables, &rounding, &positions, (q, k, v))?;
        let (rows, h, dh, kvh, group, at_pinned) = (block.rows, block.heads, block.d_head, block.kv_heads, block.group(), block.at_pinned);
        let HeadsFirst { q_heads, q_stream, k: k_new, v: v_new, .. } = block;
        let kv = self.kv;
        let (Some(k_old), Some(v_old)) = (kv.k.get(layer), kv.v.get(layer)) else {
            return Err(Error::Internal("branches need a stream that has run".into()));
        };
        let (base, start, n_window) = (kv.base, kv.len, k_old.dim(1)?);
        let pinned = self.views.iter().map(|v| v.pinned).max().unwrap_or(0);
        let flat = |x: &Tensor| -> Result<Tensor> { Ok(x.reshape((kvh, group * rows, dh))?) };
        let keys = Tensor::cat(&[k_old, &k_new], 1)?;
        let mut values = Tensor::cat(&[v_old, &v_new], 1)?;
        let mut scores = flat(&q_stream)?.matmul(&keys.t()?)?;
        if let (Some((cos, sin)), true) = (at_pinned, pinned > 0) {
            let (pk, pv) = kv.pinned(layer, pinned)?;
            let q_pinned = rounding.queries(&rope.apply(&q_heads, cos, sin)?)?;
            let pinned_scores = flat(&q_pinned)?.matmul(&pk.contiguous()?.t()?)?;
            scores = Tensor::cat(&[&pinned_scores, &scores], 2)?;
            values = Tensor::cat(&[&pv.contiguous()?, &values], 1)?;
        }
        let p = if at_pinned.is_some() { pinned } else { 0 };
        let cols = p + n_window + rows;
        let scale = 1.0 / (dh as f32).sqrt();
        let mut a = scores.flatten_all()?.to_vec1::<f32>()?;
        let (views, window, sinks) = (self.views, at.window, at.sinks);
        a.par_chunks_mut(cols).enumerate().for_each(|(row, s)| {
            let r = row % rows;
            let (branch, j) = (r / len.max(1), r % len.max(1));
            let (view, t) = (views[r], start + j);
            let (pinned_from, from) = within_window(&view, t, window);
            // The stream's keys before the branch, then the branch's own up to the query.
            let own_from = from.max(start) - start;
            let segments = [
                pinned_from..view.pinned.min(p),
                p + from.min(start) - base..p + n_window,
                p + n_window + branch * len + own_from..p + n_window + branch * len + j + 1,
            ];
            softmax_row(s, &segments, scale, at.softcap, sinks.map(|logits| logits[row / rows]));
        });
        let pattern = Tensor::from_vec(a, (kvh, group * rows, cols), &Device::Cpu)?;
        let out = pattern.matmul(&values.contiguous()?)?.reshape((h, rows, dh))?;
        Ok(out.transpose(0, 1)?.contiguous()?.reshape((rows, h * dh))?)
    }
}

impl Decoder {
    /// Runs the stream's next tokens (`tokens[r]` at stream position `kv.len() + r`), query r
    /// seeing the keys `views[r]` names, and returns their final-norm hidden states. Views must
    /// only move forward (`from` never decreases), never reach past the query, and pin at most
    /// the tokens `kv` keeps pinned; keys no later query can see are dropped as the window moves.
    pub fn forward_windowed(&self, tokens: &[u32], views: &[QueryView], kv: &mut StreamKv) -> Result<Tensor> {
        self.forward_windowed_tallied(tokens, views, kv, None)
    }

    /// [`Decoder::forward_windowed`], adding each head's sink attention and rounding error to
    /// `tally` when given.
    pub fn forward_windowed_tallied(&self, tokens: &[u32], views: &[QueryView], kv: &mut StreamKv, tally: Option<&mut HeadTally>) -> Result<Tensor> {
        if tokens.is_empty() || tokens.len() != views.len() {
            return Err(Error::Internal("forward_windowed needs one view per token".into()));
        }
        let start = kv.len;
        for (r, v) in views.iter().enumerate() {
            let t = start + r;
            let pinned_ok = v.pinned == 0 || (v.pinned <= kv.pin && v.pinned < v.from);
            if v.from > t || !pinned_ok || v.from < kv.base {
                return Err(Error::Internal(format!("query {t} has an impossible view {v:?} (window starts at {}, {} pinned)", kv.base, kv.pin)));
            }
        }
        if let Some(window) = kv.rounding.kivi_window() {
            kivi_stream::check_chunks_held(views.iter().enumerate().map(|(r, v)| (start + r, v.from, v.pinned)), &window)?;
        }
        let oldest = views.iter().map(|v| v.from).min().unwrap_or(start);
        kv.forget_before(oldest)?;
        let positions: Vec<usize> = (start..start + tokens.len()).collect();
        let tables = self.view_tables(&positions, views)?;
        let x = self.embed_tokens(tokens, &positions)?;
        let mut attend = ViewAttention { kv, views, start, tables, tally };
        self.run_blocks(x, 0, &mut attend, &mut NoCapture)
    }

    /// Per RoPE of the model: cos/sin at the rows' stream `positions`, and at their views'
    /// pinned positions when any view pins keys.
    fn view_tables(&self, positions: &[usize], views: &[QueryView]) -> Result<Vec<(Tables, Option<Tables>)>> {
        let dev = Device::Cpu;
        let pinned_positions: Vec<usize> = views.iter().map(|v| v.pinned_pos).collect();
        let any_pinned = views.iter().any(|v| v.pinned > 0);
        self.ropes()
            .iter()
            .map(|rope| Ok((rope.tables(positions, &dev)?, any_pinned.then(|| rope.tables(&pinned_positions, &dev)).transpose()?)))
            .collect()
    }

    /// Runs `branches` (each as long as `views`) as continuations of the stream `kv` holds, all
    /// as one batch: token r of every branch at stream position `kv.len() + r`, seeing the keys
    /// `views[r]` names and its own branch's earlier tokens. `kv` is left as it was (branches are
    /// what-ifs: candidate answers after one prompt). Returns the final-norm hidden states,
    /// branch after branch along rows — those [`Decoder::forward_windowed`] gives each branch on
    /// a copy of `kv`.
    pub fn forward_branches(&self, branches: &[&[u32]], views: &[QueryView], kv: &StreamKv) -> Result<Tensor> {
        let len = views.len();
        if len == 0 || branches.is_empty() || branches.iter().any(|b| b.len() != len) {
            return Err(Error::Internal("forward_branches needs branches as long as the views".into()));
        }
        kv.rounding.refuse_kivi("needle's candidate answers")?;
        let start = kv.len;
        for (r, v) in views.iter().enumerate() {
            let t = start + r;
            let pinned_ok = v.pinned == 0 || (v.pinned <= kv.pin && v.pinned < v.from);
            if v.from > start || !pinned_ok || v.from < kv.base || kv.is_empty() {
                return Err(Error::Internal(format!(
                    "branch query {t} has an impossible view {v:?} (window starts at {}, {} pinned)",
                    kv.base, kv.pin
                )));
            }
        }
        let positions: Vec<usize> = (0..branches.len()).flat_map(|_| start..start + len).collect();
        let all_views: Vec<QueryView> = (0..branches.len()).flat_map(|_| views.iter().copied()).collect();
        let tables = self.view_tables(&positions, &all_views)?;
        let x = self.embed_tokens(&branches.concat(), &positions)?;
        let mut attend = BranchAttention { kv, views: &all_views, branches: branches.len(), tables };
        self.run_blocks(x, 0, &mut attend, &mut NoCapture)
    }
}
