//! What a compression reads from a prompt's prefill (`press`, `retrieval::compress`), reduced as
//! the attention rows arrive (never the layers × heads × n² patterns): per layer the keys before
//! RoPE and the values, and per query head each key's attention summed over the queries from a
//! given one on (every query for ObservedAttention and H2O, the last window for SnapKV, the last
//! query for TOVA).

use std::ops::Range;

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
use crate::model::decoder::DecoderConfig;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::model::rope::Rope;

/// The prefill's keys, values and attention sums, per layer.
pub struct PrefillCapture {
    n: usize,
    kv_heads: usize,
    d_head: usize,
    /// The first query whose attention is summed (`None`: no attention read).
    from: Option<usize>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Per layer, per query head × position: the summed attention.
    sums: Vec<Vec<f64>>,
    /// Per layer, the queries before RoPE ([position][head][d_head]), when asked for.
    q: Option<Vec<Vec<f32>>>,
}

/// One layer's prefill (`capture`), with its keys rotated at their positions (as a cache holds them).
pub struct LayerCapture<'a> {
    pub n: usize,
    pub kv_heads: usize,
    pub d_head: usize,
    k_pre: &'a [f32],
    v: &'a [f32],
    /// Keys after RoPE, [position][kv head][d_head].
    pub k_rot: Vec<f32>,
    /// Per query head × position: the summed attention.
    pub sums: &'a [f64],
    /// The queries before RoPE, [position][head][d_head] (empty unless captured).
    pub q: &'a [f32],
    /// The layer's cos and sin rows at positions 0…n, and their width.
    pub tables: (Vec<f32>, Vec<f32>, usize),
}

impl LayerCapture<'_> {
    pub fn key_pre(&self, p: usize, kv: usize) -> &[f32] {
        &self.k_pre[(p * self.kv_heads + kv) * self.d_head..][..self.d_head]
    }

    pub fn key(&self, p: usize, kv: usize) -> &[f32] {
        &self.k_rot[(p * self.kv_heads + kv) * self.d_head..][..self.d_head]
    }

    pub fn value(&self, p: usize, kv: usize) -> &[f32] {
        &self.v[(p * self.kv_heads + kv) * self.d_head..][..self.d_head]
    }
}

impl PrefillCapture {
    /// A capture of a prompt of `n` tokens summing the attention of its queries from `from` on.
    pub fn new(cfg: &DecoderConfig, n: usize, from: Option<usize>) -> Result<Self> {
        cfg.refuse_linear_layers("compressing a prompt once (press, tasks, a needle's compressed prompt)")?;
        let sums = if from.is_some() { vec![vec![0.0; cfg.n_heads * n]; cfg.n_layers] } else { vec![Vec::new(); cfg.n_layers] };
        Ok(PrefillCapture {
            n,
            kv_heads: cfg.n_kv_heads,
            d_head: cfg.d_head,
            from,
            k: vec![Vec::new(); cfg.n_layers],
            v: vec![Vec::new(); cfg.n_layers],
            sums,
            q: None,
        })
    }

    /// The same capture keeping every query too.
    pub fn with_queries(mut self) -> Self {
        self.q = Some(vec![Vec::new(); self.k.len()]);
        self
    }

    /// The prompt's length in tokens.
    pub fn tokens(&self) -> usize {
        self.n
    }

    /// Layer `l`'s capture, its keys rotated by `rope` at positions 0…n.
    pub fn layer(&self, l: usize, rope: &Rope) -> Result<LayerCapture<'_>> {
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
        let q = self.q.as_ref().map_or(&[][..], |q| &q[l]);
        Ok(LayerCapture { n, kv_heads: kvh, d_head: dh, k_pre: &self.k[l], v: &self.v[l], k_rot, sums: &self.sums[l], q, tables: (cos, sin, half) })
    }

    /// Layer `l`'s summed attention, per query head × position (empty when none was summed).
    pub fn attention_sums(&self, l: usize) -> &[f64] {
        &self.sums[l]
    }

    /// Adds a block of attention rows (heads × rows × keys, at stream rows `rows`) to layer `l`'s
    /// sums, those from the first summed query on.
    fn add_rows(&mut self, l: usize, rows: Range<usize>, pattern: &[f32], (heads, r, keys): (usize, usize, usize)) {
        let (n, from) = (self.n, self.from.unwrap_or(usize::MAX));
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
            HookPoint::Q(_) => self.q.is_some(),
            HookPoint::Pattern(_) => self.from.is_some(),
            _ => false,
        }
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let flat = value.flatten_all()?.to_vec1::<f32>()?;
        match *hook {
            HookPoint::K(l) => self.k[l].extend(flat),
            HookPoint::V(l) => self.v[l].extend(flat),
            HookPoint::Q(l) => {
                if let Some(q) = self.q.as_mut() {
                    q[l].extend(flat);
                }
            }
            HookPoint::Pattern(l) => {
                let shape = value.dims3()?;
                self.add_rows(l, rows, &flat, shape);
            }
            _ => {}
        }
        Ok(())
    }
}
