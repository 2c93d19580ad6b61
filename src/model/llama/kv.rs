//! Where attention keys and values live between forward calls (`KvStore`, the plain `KvCache`),
//! and the key mask behind the causal sweep.

use candle_core::Tensor;

use crate::error::Result;
use crate::model::rope::Rope;

/// Hides key position `key` from the queries after it, in `heads` of `layer` (softmax renormalises
/// over the remaining keys): the intervention behind "this head depends on that position".
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMask {
    pub layer: usize,
    pub heads: Vec<usize>,
    pub key: usize,
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
    /// Called once every layer has seen the `t` new tokens.
    fn commit(&mut self, t: usize);
}

/// The ordinary cache: keys rotated at their absolute positions, nothing ever evicted.
#[derive(Default)]
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
}

impl KvCache {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl KvStore for KvCache {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        (self.len..self.len + t).collect()
    }

    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let k = rope.rotate(k_pre, positions)?;
        if self.k.len() <= layer {
            self.k.push(k);
            self.v.push(v.clone());
        } else {
            self.k[layer] = Tensor::cat(&[&self.k[layer], &k], 1)?;
            self.v[layer] = Tensor::cat(&[&self.v[layer], v], 1)?;
        }
        Ok((self.k[layer].clone(), self.v[layer].clone()))
    }

    fn commit(&mut self, t: usize) {
        self.len += t;
    }
}
