//! Where attention keys and values live between forward calls (`KvStore`, the plain `KvCache`),
//! with a hybrid model's linear-attention state beside them, and the key mask behind the causal
//! sweep.

use candle_core::Tensor;

use super::delta_net::RecurrentStates;
use crate::error::Result;
use crate::model::rope::Rope;

/// Which keys a [`KeyMask`] hides from which queries.
#[derive(Debug, Clone, PartialEq)]
pub enum Hidden {
    /// Key `key`, from every query after it.
    Key(usize),
    /// Every key from `sinks` up to the query's `recent`-th most recent: the heads then see only
    /// the first `sinks` positions and their last `recent` — a streaming head's cache.
    Streaming { sinks: usize, recent: usize },
    /// The keys `keys`, from query `from` on (a needle's keys from the answer's queries only).
    Span { keys: std::ops::Range<usize>, from: usize },
}

/// Hides keys from `heads` of `layer` (softmax renormalises over the remaining keys): the
/// intervention behind "this head depends on those positions".
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMask {
    pub layer: usize,
    pub heads: Vec<usize>,
    pub hide: Hidden,
}

impl KeyMask {
    /// Hides the one key `key`.
    pub fn key(layer: usize, heads: Vec<usize>, key: usize) -> Self {
        KeyMask { layer, heads, hide: Hidden::Key(key) }
    }

    /// Leaves the heads the first `sinks` keys and the last `recent` (`recent` ≥ 1: its own key).
    pub fn streaming(layer: usize, heads: Vec<usize>, sinks: usize, recent: usize) -> Self {
        KeyMask { layer, heads, hide: Hidden::Streaming { sinks, recent: recent.max(1) } }
    }

    /// Hides `keys` from the queries from `from` on (`from` ≥ `keys.end`: no query sees a key
    /// after itself anyway).
    pub fn span(layer: usize, heads: Vec<usize>, keys: std::ops::Range<usize>, from: usize) -> Self {
        KeyMask { layer, heads, hide: Hidden::Span { from: from.max(keys.end), keys } }
    }

    /// The first query whose row the mask changes.
    pub fn first_query(&self) -> usize {
        match self.hide {
            Hidden::Key(key) => key + 1,
            Hidden::Streaming { sinks, recent } => sinks + recent,
            Hidden::Span { from, .. } => from,
        }
    }

    /// The keys hidden from `query`'s row (empty before [`KeyMask::first_query`]).
    pub fn hidden(&self, query: usize) -> std::ops::Range<usize> {
        match &self.hide {
            _ if query < self.first_query() => 0..0,
            &Hidden::Key(key) => key..key + 1,
            &Hidden::Streaming { sinks, recent } => sinks..query + 1 - recent,
            Hidden::Span { keys, .. } => keys.clone(),
        }
    }
}

/// Where attention keys and values live between forward calls, and at which rotary positions new
/// queries and cached keys are placed. The forward pass hands each layer its new keys *before*
/// RoPE, so a store can rotate by absolute position, by cache slot, or keep rotated keys and shift
/// them (the KV-cache policies of `kv`).
pub trait KvStore {
    /// Rotary positions of the `t` tokens about to be appended (their queries use these).
    fn next_positions(&self, t: usize) -> Vec<usize>;
    /// Appends layer `layer`'s new keys (pre-RoPE, (KVH, t, dh)) and values, and returns every key
    /// the new queries may see, rotated for attention, with the values — both (KVH, n, dh), the new
    /// tokens last.
    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)>;
    /// The rotated queries (H, t, dh) as they meet this store's keys: the format a quantized
    /// cache takes its dot product in (unchanged by default).
    fn round_queries(&self, q: &Tensor) -> Result<Tensor> {
        Ok(q.clone())
    }
    /// Called once every layer has seen the `t` new tokens.
    fn commit(&mut self, t: usize);
    /// The recurrent state of a hybrid model's linear-attention layers, carried whole from call
    /// to call (no policy evicts or rounds it); `None`: this store does not carry one, and a model
    /// with such layers is refused on it.
    fn recurrent(&mut self) -> Option<&mut RecurrentStates> {
        None
    }
}

/// Which model layer each stored layer of a cache is, in the order they first stored: every
/// layer of a plain model, a hybrid's attention layers only (its linear layers store nothing).
#[derive(Clone, Debug, Default)]
pub struct LayerSlots(Vec<usize>);

impl LayerSlots {
    /// The stored layer of model layer `layer`, a new one after the others on its first store.
    pub fn slot(&mut self, layer: usize) -> usize {
        match self.stored(layer) {
            Some(slot) => slot,
            None => {
                self.0.push(layer);
                self.0.len() - 1
            }
        }
    }

    /// The stored layer of model layer `layer`, once it has stored something.
    pub fn stored(&self, layer: usize) -> Option<usize> {
        self.0.iter().position(|&l| l == layer)
    }

    /// The model layer stored at `slot`.
    pub fn layer(&self, slot: usize) -> Option<usize> {
        self.0.get(slot).copied()
    }
}

/// The ordinary cache: keys rotated at their absolute positions, nothing ever evicted.
#[derive(Default)]
pub struct KvCache {
    /// Per layer, its keys and values (`None`: a linear-attention layer, or not reached yet).
    layers: Vec<Option<(Tensor, Tensor)>>,
    recurrent: RecurrentStates,
    len: usize,
}

impl KvCache {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The linear-attention layers' state after what the cache has seen.
    pub fn recurrent_states(&self) -> &RecurrentStates {
        &self.recurrent
    }
}

impl KvStore for KvCache {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        (self.len..self.len + t).collect()
    }

    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let k = rope.rotate(k_pre, positions)?;
        if self.layers.len() <= layer {
            self.layers.resize(layer + 1, None);
        }
        let kv = match self.layers[layer].take() {
            Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, v], 1)?),
            None => (k, v.clone()),
        };
        self.layers[layer] = Some(kv.clone());
        Ok(kv)
    }

    fn commit(&mut self, t: usize) {
        self.len += t;
    }

    fn recurrent(&mut self) -> Option<&mut RecurrentStates> {
        Some(&mut self.recurrent)
    }
}

/// A cache read without growing it: each call's new keys join the keys the cache holds for that
/// call only, so many variants of the same next tokens run over one shared prefix (a hybrid's
/// linear-attention state continues from the prefix's, in a copy of the view's own).
pub struct PrefixView<'a> {
    prefix: &'a KvCache,
    recurrent: RecurrentStates,
}

impl<'a> PrefixView<'a> {
    pub fn new(prefix: &'a KvCache) -> Self {
        PrefixView { prefix, recurrent: prefix.recurrent.clone() }
    }
}

impl KvStore for PrefixView<'_> {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        self.prefix.next_positions(t)
    }

    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let k = rope.rotate(k_pre, positions)?;
        match self.prefix.layers.get(layer) {
            Some(Some((pk, pv))) => Ok((Tensor::cat(&[pk, &k], 1)?, Tensor::cat(&[pv, v], 1)?)),
            _ => Ok((k, v.clone())),
        }
    }

    fn commit(&mut self, _t: usize) {}

    fn recurrent(&mut self) -> Option<&mut RecurrentStates> {
        Some(&mut self.recurrent)
    }
}

#[cfg(test)]
mod tests {
    use super::KeyMask;

    #[test]
    fn masks_hide_one_key_everything_between_sinks_and_recent_or_a_span() {
        let one = KeyMask::key(0, vec![0], 2);
        assert_eq!((one.first_query(), one.hidden(2), one.hidden(3), one.hidden(9)), (3, 0..0, 2..3, 2..3));
        // S = 2, R = 3: query 5 is the first with a key (2) outside both; query 9 keeps 0, 1, 7, 8, 9.
        let streaming = KeyMask::streaming(0, vec![0], 2, 3);
        assert_eq!((streaming.first_query(), streaming.hidden(4), streaming.hidden(5), streaming.hidden(9)), (5, 0..0, 2..3, 2..7));
        // R = 0 would hide a query's own key: it is raised to 1.
        assert_eq!(KeyMask::streaming(0, vec![0], 0, 0).hidden(4), 0..4);
        // A needle at 3..5 hidden from query 8 on.
        let span = KeyMask::span(0, vec![0], 3..5, 8);
        assert_eq!((span.first_query(), span.hidden(7), span.hidden(8), span.hidden(20)), (8, 0..0, 3..5, 3..5));
    }
}
