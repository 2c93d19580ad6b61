//! The reducer behind `heatmaps.safetensors`: pools every head's attention pattern onto at most
//! G×G bins (and keeps the first K keys at full resolution) as query blocks stream past, so even an
//! 8k-token capture keeps a browsable map of every head in O(layers·heads·G²) memory.

use std::ops::Range;

use candle_core::Tensor;

use super::heatmaps::{bin_edges, Heatmaps};
use super::reducers::record_pattern;
use crate::error::Result;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::numerics::kernels::sum_lanes;

pub struct HeatmapReducer {
    maps: Heatmaps,
    /// Bin of every position.
    bin: Vec<usize>,
}

impl HeatmapReducer {
    pub fn new(n_layers: usize, n_heads: usize, n_tokens: usize, max_bins: usize, first_keys: usize) -> Self {
        let edges = bin_edges(n_tokens, max_bins);
        let g = edges.len() - 1;
        let k = first_keys.min(n_tokens);
        let bin = (0..n_tokens).map(|p| edges.partition_point(|&e| e <= p) - 1).collect();
        let maps = Heatmaps {
            n_layers,
            n_heads,
            n_tokens,
            edges,
            first_keys: k,
            grid: vec![0.0; n_layers * n_heads * g * g],
            early: vec![0.0; n_layers * n_heads * g * k],
        };
        HeatmapReducer { maps, bin }
    }

    /// Turns the sums into means over each bin's query rows.
    pub fn finish(mut self) -> Heatmaps {
        let (g, k) = (self.maps.bins(), self.maps.first_keys);
        let rows: Vec<f32> = self.maps.edges.windows(2).map(|w| (w[1] - w[0]).max(1) as f32).collect();
        for (i, v) in self.maps.grid.iter_mut().enumerate() {
            *v /= rows[(i / g) % g];
        }
        for (i, v) in self.maps.early.iter_mut().enumerate() {
            *v /= rows[(i / k.max(1)) % g];
        }
        self.maps
    }

    fn add_block(&mut self, layer: usize, rows: Range<usize>, keys: usize, a: &[f32]) {
        use rayon::prelude::*;
        let (g, k, h_n) = (self.maps.bins(), self.maps.first_keys, self.maps.n_heads);
        let block = rows.len();
        let (bin, edges) = (&self.bin, &self.maps.edges);
        let grid = &mut self.maps.grid[layer * h_n * g * g..(layer + 1) * h_n * g * g];
        let early = &mut self.maps.early[layer * h_n * g * k..(layer + 1) * h_n * g * k];
        grid.par_chunks_mut(g * g).zip(early.par_chunks_mut(g * k.max(1))).enumerate().for_each(|(h, (grid, early))| {
            for r in 0..block {
                let q = rows.start + r;
                let row = &a[(h * block + r) * keys..(h * block + r + 1) * keys];
                let visible = (q + 1).min(keys).min(bin.len());
                let qb = bin[q.min(bin.len() - 1)];
                let out = &mut grid[qb * g..(qb + 1) * g];
                // Bins are runs of consecutive keys: one vectorized sum per bin.
                for (o, w) in out.iter_mut().zip(edges.windows(2)).take_while(|(_, w)| w[0] < visible) {
                    *o += sum_lanes(&row[w[0]..w[1].min(visible)]);
                }
                if k > 0 {
                    for (e, &v) in early[qb * k..(qb + 1) * k].iter_mut().zip(&row[..visible.min(k)]) {
                        *e += v;
                    }
                }
            }
        });
    }
}

impl HookReceiver for HeatmapReducer {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Pattern(_))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        record_pattern(hook, rows, value, |l, rows, keys, a| self.add_block(l, rows, keys, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-token causal pattern, one layer, one head, pooled to 2 bins.
    #[test]
    fn pools_rows_and_keys() {
        let a: Vec<f32> = vec![
            1.0, 0.0, 0.0, 0.0, //
            0.5, 0.5, 0.0, 0.0, //
            0.2, 0.2, 0.6, 0.0, //
            0.1, 0.2, 0.3, 0.4,
        ];
        let mut r = HeatmapReducer::new(1, 1, 4, 2, 1);
        r.add_block(0, 0..2, 4, &a[..8]);
        r.add_block(0, 2..4, 4, &a[8..]);
        let m = r.finish();
        let want_grid = [1.0, 0.0, 0.35, 0.65];
        for (g, w) in m.head(0, 0).iter().zip(want_grid) {
            assert!((g - w).abs() < 1e-6, "{:?}", m.grid);
        }
        let want_early = [0.75, 0.15];
        for (e, w) in m.head_early(0, 0).iter().zip(want_early) {
            assert!((e - w).abs() < 1e-6, "{:?}", m.early);
        }
        for row in m.head(0, 0).chunks(2) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn exact_when_short() {
        let a = [1.0f32, 0.0, 0.3, 0.7];
        let mut r = HeatmapReducer::new(1, 1, 2, 128, 16);
        r.add_block(0, 0..2, 2, &a);
        let m = r.finish();
        assert!(m.exact());
        assert_eq!(m.head(0, 0), &a);
        assert_eq!(m.first_keys, 2);
        assert_eq!(m.head_early(0, 0), &a);
    }
}
