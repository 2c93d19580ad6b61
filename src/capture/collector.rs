//! `TensorCollector`: keeps the full tensors of the hooks a filter selects (`--save-tensors`) and
//! saves them as safetensors keyed by hook name.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use candle_core::Tensor;

use crate::error::Result;
use crate::io::arrays::write_safetensors_f32;
use crate::model::hook::{HookFilter, HookPoint};
use crate::model::receiver::HookReceiver;
use crate::numerics::tensor::with_f32;

/// Keeps the full tensors of the hooks a filter selects, for `--save-tensors`.
pub struct TensorCollector {
    filter: HookFilter,
    n_positions: usize,
    tensors: BTreeMap<HookPoint, (Vec<usize>, Vec<f32>)>,
}

impl TensorCollector {
    /// `n_positions`: the number of positions the forward pass will cover (attention maps are
    /// assembled into [head, n_positions, n_positions]).
    pub fn new(filter: HookFilter, n_positions: usize) -> Self {
        TensorCollector { filter, n_positions, tensors: BTreeMap::new() }
    }

    pub fn get(&self, hook: &HookPoint) -> Option<(&[usize], &[f32])> {
        self.tensors.get(hook).map(|(s, d)| (s.as_slice(), d.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Writes every collected tensor to a safetensors file (F32, keyed by hook name), atomically.
    pub fn save(&self, path: &Path, metadata: BTreeMap<String, String>) -> Result<()> {
        let tensors: Vec<(String, &[usize], &[f32])> =
            self.tensors.iter().map(|(hook, (shape, data))| (hook.to_string(), shape.as_slice(), data.as_slice())).collect();
        write_safetensors_f32(path, &tensors, metadata)
    }
}

impl HookReceiver for TensorCollector {
    fn wants(&self, hook: &HookPoint) -> bool {
        self.filter.matches(hook)
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let dims = value.dims().to_vec();
        let n = self.n_positions;
        if let HookPoint::SinkProb(_) = hook {
            // [head, query] delivered in query blocks: columns rows.start.. of a [head, n] map.
            let (heads, block) = (dims[0], dims[1]);
            let entry = self.tensors.entry(*hook).or_insert_with(|| (vec![heads, n], vec![0.0; heads * n]));
            with_f32(value, |src| {
                for h in 0..heads {
                    for r in (0..block).filter(|r| rows.start + r < n) {
                        entry.1[h * n + rows.start + r] = src[h * block + r];
                    }
                }
            })?;
        } else if hook.is_attention_map() {
            let (heads, block, keys) = (dims[0], dims[1], dims[2]);
            let entry = self.tensors.entry(*hook).or_insert_with(|| (vec![heads, n, n], vec![0.0; heads * n * n]));
            let fill = if matches!(hook, HookPoint::AttnScores(_)) { f32::NEG_INFINITY } else { 0.0 };
            with_f32(value, |src| {
                for h in 0..heads {
                    for r in 0..block {
                        let q = rows.start + r;
                        if q >= n {
                            continue;
                        }
                        let dst = &mut entry.1[(h * n + q) * n..(h * n + q + 1) * n];
                        let k = keys.min(n);
                        dst[..k].copy_from_slice(&src[(h * block + r) * keys..(h * block + r) * keys + k]);
                        dst[k..].fill(fill);
                    }
                }
            })?;
        } else {
            let entry = self.tensors.entry(*hook).or_insert_with(|| {
                let mut shape = dims.clone();
                shape[0] = 0;
                (shape, Vec::new())
            });
            entry.0[0] += rows.len();
            with_f32(value, |src| entry.1.extend_from_slice(src))?;
        }
        Ok(())
    }
}
