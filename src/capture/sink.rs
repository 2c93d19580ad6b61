//! The capture interface the forward pass pushes into: `CaptureSink` (ask first with `wants`, so
//! unwanted hooks cost nothing), a fan-out over several sinks, and `TensorCollector`, which keeps
//! full tensors of selected hooks and saves them as safetensors keyed by hook name.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use candle_core::{Storage, Tensor};

use super::hook::{HookFilter, HookPoint};
use crate::error::Result;

/// Receives tensors from the forward pass.
pub trait CaptureSink {
    /// Whether `record` should be called for this hook; the forward pass skips work otherwise.
    fn wants(&self, hook: &HookPoint) -> bool;

    /// One tensor of `hook` (shapes in [`HookPoint`]'s docs). `rows` are the absolute positions
    /// covered along the position axis — the query axis for attention maps, which arrive in
    /// query blocks whose key axis spans every visible key (0..rows.end).
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()>;
}

/// Captures nothing (plain inference).
pub struct NoCapture;

impl CaptureSink for NoCapture {
    fn wants(&self, _: &HookPoint) -> bool {
        false
    }
    fn record(&mut self, _: &HookPoint, _: Range<usize>, _: &Tensor) -> Result<()> {
        Ok(())
    }
}

/// Forwards each hook to every sink that wants it.
pub struct FanOut<'a>(pub Vec<&'a mut dyn CaptureSink>);

impl CaptureSink for FanOut<'_> {
    fn wants(&self, hook: &HookPoint) -> bool {
        self.0.iter().any(|s| s.wants(hook))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        for sink in self.0.iter_mut() {
            if sink.wants(hook) {
                sink.record(hook, rows.clone(), value)?;
            }
        }
        Ok(())
    }
}

/// Runs `f` on the tensor's f32 data without copying when it is a contiguous CPU tensor.
pub fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            if let Ok(all) = cpu.as_slice::<f32>() {
                return Ok(f(&all[start..end]));
            }
        }
    }
    let owned = t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?;
    Ok(f(&owned))
}

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
        crate::report::arrays::write_safetensors_f32(path, &tensors, metadata)
    }
}

impl CaptureSink for TensorCollector {
    fn wants(&self, hook: &HookPoint) -> bool {
        self.filter.matches(hook)
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let dims = value.dims().to_vec();
        let n = self.n_positions;
        if hook.is_attention_map() {
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
