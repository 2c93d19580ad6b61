//! What the presses read from the context's prefill, reduced as the attention rows arrive (never
//! the layers × heads × n² patterns): per layer the keys before RoPE and the values, and per query
//! head the attention sums a press scores by (every query's column sums for ObservedAttention,
//! the last `window` queries' for SnapKV, the last query's row for TOVA).

use std::ops::Range;

use candle_core::{Device, Tensor};

use super::scores::{LayerCapture, PressKind};
use crate::error::{Error, Result};
use crate::model::decoder::DecoderConfig;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::model::rope::Rope;

/// The prefill's keys, values and attention sums, per layer.
pub(super) struct PrefillCapture {
    n: usize,
    kv_heads: usize,
    d_head: usize,
    kind: PressKind,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Per layer, per query head × position: the attention sums the press reads.
    sums: Vec<Vec<f64>>,
}

impl PrefillCapture {
    pub(super) fn new(cfg: &DecoderConfig, n: usize, kind: PressKind) -> Self {
        let sums = if kind.reads_attention() { vec![vec![0.0; cfg.n_heads * n]; cfg.n_layers] } else { vec![Vec::new(); cfg.n_layers] };
        PrefillCapture {
            n,
            kv_heads: cfg.n_kv_heads,
            d_head: cfg.d_head,
            kind,
            k: vec![Vec::new(); cfg.n_layers],
            v: vec![Vec::new(); cfg.n_layers],
            sums,
        }
    }

    /// The context's length.
    pub(super) fn len(&self) -> usize {
        self.n
    }

    /// Layer `l`'s capture, its keys rotated by `rope` at positions 0…n.
    pub(super) fn layer(&self, l: usize, rope: &Rope) -> Result<LayerCapture<'_>> {
        let (n, kvh, dh) = (self.n, self.kv_heads, self.d_head);
        if self.k[l].len() != n * kvh * dh || self.v[l].len() != n * kvh * dh {
            return Err(Error::Internal(format!("layer {l}'s keys and values did not arrive whole")));
        }
        let (cos, sin) = rope.tables(&(0..n).collect::<Vec<_>>(), &Device::Cpu)?;
        let (cos, sin, half) = (cos.flatten_all()?.to_vec1::<f32>()?, sin.flatten_all()?.to_vec1::<f32>()?, rope.rot_dims / 2);
        let mut k_rot = vec![0f32; n * kvh * dh];
        for p in 0..n {
            for kv in 0..kvh {
                let at = (p * kvh + kv) * dh;
                rope.rotate_row(&self.k[l][at..at + dh], &cos[p * half..], &sin[p * half..], &mut k_rot[at..at + dh]);
            }
        }
        Ok(LayerCapture { n, kv_heads: kvh, d_head: dh, k_pre: &self.k[l], v: &self.v[l], k_rot, sums: &self.sums[l], tables: (cos, sin, half) })
    }

    /// Adds a block of attention rows (heads × rows × keys, at stream rows `rows`) to layer `l`'s
    /// sums: every row (ObservedAttention), the last `window` (SnapKV) or the last (TOVA).
    fn add_rows(&mut self, l: usize, rows: Range<usize>, pattern: &[f32], (heads, r, keys): (usize, usize, usize)) {
        let n = self.n;
        let from = match self.kind.score_window() {
            Some(w) => n.saturating_sub(w),
            None => 0,
        };
        let sums = &mut self.sums[l];
        for head in 0..heads {
            for i in 0..r {
                if rows.start + i < from {
                    continue;
                }
                let row = &pattern[(head * r + i) * keys..][..keys];
                sums[head * n..head * n + keys.min(n)].iter_mut().zip(row).for_each(|(s, &w)| *s += w as f64);
            }
        }
    }
}

impl HookReceiver for PrefillCapture {
    fn wants(&self, hook: &HookPoint) -> bool {
        match hook {
            HookPoint::K(_) | HookPoint::V(_) => true,
            HookPoint::Pattern(_) => self.kind.reads_attention(),
            _ => false,
        }
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let flat = value.flatten_all()?.to_vec1::<f32>()?;
        match *hook {
            HookPoint::K(l) => self.k[l].extend(flat),
            HookPoint::V(l) => self.v[l].extend(flat),
            HookPoint::Pattern(l) => {
                let shape = value.dims3()?;
                self.add_rows(l, rows, &flat, shape);
            }
            _ => {}
        }
        Ok(())
    }
}
