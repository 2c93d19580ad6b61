//! Per (layer, head) of a gated-attention model: how far its output gate opens (`hook_gate`,
//! σ(gate), mean over the head's dimensions per query row) and how often it closes — below
//! [`GATE_CLOSED`], the row's attention output barely reaches the residual stream, which is the
//! gated model's way of attending to nothing.

use std::ops::Range;

use candle_core::Tensor;

use crate::error::Result;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::numerics::tensor::with_f32;

/// A row's mean σ(gate) below this counts as a closed gate (the head passes under a tenth of its
/// output).
pub const GATE_CLOSED: f64 = 0.1;

/// Running sums of each head's gate per layer.
pub struct GateStats {
    n_heads: usize,
    /// [layer][head] Σ over query rows of the row's mean σ(gate).
    sums: Vec<Vec<f64>>,
    /// [layer][head] rows whose mean σ(gate) is below [`GATE_CLOSED`].
    closed: Vec<Vec<usize>>,
    /// [layer] query rows seen.
    rows: Vec<usize>,
}

impl GateStats {
    pub fn new(n_layers: usize, n_heads: usize) -> Self {
        GateStats { n_heads, sums: vec![vec![0.0; n_heads]; n_layers], closed: vec![vec![0; n_heads]; n_layers], rows: vec![0; n_layers] }
    }

    /// Mean σ(gate) of (layer, head) over its rows, if the layer delivered a gate.
    pub fn mean(&self, layer: usize, head: usize) -> Option<f64> {
        let (rows, sum) = (*self.rows.get(layer)?, *self.sums.get(layer)?.get(head)?);
        (rows > 0).then(|| sum / rows as f64)
    }

    /// Share of (layer, head)'s rows whose gate is closed, if the layer delivered a gate.
    pub fn closed_share(&self, layer: usize, head: usize) -> Option<f64> {
        let (rows, closed) = (*self.rows.get(layer)?, *self.closed.get(layer)?.get(head)?);
        (rows > 0).then(|| closed as f64 / rows as f64)
    }
}

impl HookReceiver for GateStats {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Gate(_))
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let HookPoint::Gate(l) = *hook else { return Ok(()) };
        let (n_rows, width) = value.dims2()?;
        let dh = width / self.n_heads.max(1);
        with_f32(value, |g| {
            for row in g.chunks(width.max(1)).take(n_rows) {
                for (h, head) in row.chunks(dh.max(1)).take(self.n_heads).enumerate() {
                    let mean = head.iter().map(|&v| v as f64).sum::<f64>() / dh.max(1) as f64;
                    self.sums[l][h] += mean;
                    self.closed[l][h] += usize::from(mean < GATE_CLOSED);
                }
            }
        })?;
        self.rows[l] += rows.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn a_head_whose_gate_closes_is_counted_per_row() {
        let mut g = GateStats::new(2, 2);
        // Two rows, two heads of 2 dims: head 0 open (0.9), head 1 closed on row 0 only.
        let v = Tensor::new(&[[0.9f32, 0.9, 0.02, 0.04], [0.9, 0.9, 0.5, 0.7]], &Device::Cpu).unwrap();
        g.record(&HookPoint::Gate(1), 0..2, &v).unwrap();
        assert_eq!(g.mean(0, 0), None);
        assert!((g.mean(1, 0).unwrap() - 0.9).abs() < 1e-6 && (g.mean(1, 1).unwrap() - 0.315).abs() < 1e-6);
        assert_eq!((g.closed_share(1, 0), g.closed_share(1, 1)), (Some(0.0), Some(0.5)));
    }
}
