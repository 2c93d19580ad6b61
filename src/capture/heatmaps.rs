//! Per-head attention maps small enough to keep for any text length: the query × key pattern
//! pooled onto at most G×G bins, plus every query bin's attention on each of the first K keys at
//! full key resolution. Pure data (no model code), saved as `heatmaps.safetensors`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::io::arrays::{write_safetensors_f32, Arrays};

/// Pooled attention maps for every (layer, head) of one capture.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmaps {
    pub n_layers: usize,
    pub n_heads: usize,
    /// T, the captured text's length.
    pub n_tokens: usize,
    /// Bin i covers positions `edges[i]..edges[i+1]` (on both axes); one bin per token when T ≤ G.
    pub edges: Vec<usize>,
    /// K: keys 0..K get their own column in `early`.
    pub first_keys: usize,
    /// [layer, head, query bin, key bin]: mean over the bin's query rows of the attention mass on
    /// the bin's keys (a row of bins sums to 1, like a row of the pattern).
    pub grid: Vec<f32>,
    /// [layer, head, query bin, k]: mean over the bin's query rows of A[q, k], k < K.
    pub early: Vec<f32>,
}

/// Bin edges pooling `n` positions onto at most `max_bins` nearly equal bins.
pub fn bin_edges(n: usize, max_bins: usize) -> Vec<usize> {
    let bins = n.min(max_bins.max(1));
    (0..=bins).map(|i| i * n / bins.max(1)).collect()
}

impl Heatmaps {
    pub fn bins(&self) -> usize {
        self.edges.len().saturating_sub(1)
    }

    /// Whether every bin holds exactly one token (the maps are the exact patterns).
    pub fn exact(&self) -> bool {
        self.bins() == self.n_tokens
    }

    /// The G×G grid of one head, row-major (query bin, key bin).
    pub fn head(&self, layer: usize, head: usize) -> &[f32] {
        let g = self.bins();
        let at = (layer * self.n_heads + head) * g * g;
        &self.grid[at..at + g * g]
    }

    /// The G×K early-key map of one head, row-major (query bin, key).
    pub fn head_early(&self, layer: usize, head: usize) -> &[f32] {
        let (g, k) = (self.bins(), self.first_keys);
        let at = (layer * self.n_heads + head) * g * k;
        &self.early[at..at + g * k]
    }

    /// The bin holding position `pos`.
    pub fn bin_of(&self, pos: usize) -> usize {
        self.edges.partition_point(|&e| e <= pos).saturating_sub(1).min(self.bins().saturating_sub(1))
    }

    pub fn save(&self, path: &Path, metadata: BTreeMap<String, String>) -> Result<()> {
        let (g, k) = (self.bins(), self.first_keys);
        let edges: Vec<f32> = self.edges.iter().map(|&e| e as f32).collect();
        let edge_shape = [edges.len()];
        let grid_shape = [self.n_layers, self.n_heads, g, g];
        let early_shape = [self.n_layers, self.n_heads, g, k];
        let mut meta = metadata;
        meta.insert("n_tokens".into(), self.n_tokens.to_string());
        let tensors: Vec<(String, &[usize], &[f32])> =
            vec![("edges".into(), &edge_shape, &edges), ("grid".into(), &grid_shape, &self.grid), ("early".into(), &early_shape, &self.early)];
        write_safetensors_f32(path, &tensors, meta)
    }

    pub fn load(path: &Path) -> Result<Heatmaps> {
        let file = Arrays::read(path, "capture")?;
        let bad = |what: &str| Error::file(path, format!("is not a sinkscope heatmaps file ({what}); re-run `sinkscope capture`"));
        let n_tokens: usize = file.metadata.get("n_tokens").and_then(|v| v.parse().ok()).ok_or_else(|| bad("no n_tokens"))?;
        let (_, edges) = file.get("edges", 1).ok_or_else(|| bad("no edges"))?;
        let (gs, grid) = file.get("grid", 4).ok_or_else(|| bad("no grid"))?;
        let (es, early) = file.get("early", 4).ok_or_else(|| bad("no early map"))?;
        let edges: Vec<usize> = edges.iter().map(|&e| e as usize).collect();
        let g = edges.len().saturating_sub(1);
        if gs[2] != g || gs[3] != g || es[2] != g || gs[..2] != es[..2] || edges.last() != Some(&n_tokens) {
            return Err(bad("array shapes disagree"));
        }
        Ok(Heatmaps { n_layers: gs[0], n_heads: gs[1], n_tokens, edges, first_keys: es[3], grid: grid.to_vec(), early: early.to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_every_position_once() {
        assert_eq!(bin_edges(5, 128), vec![0, 1, 2, 3, 4, 5]);
        let e = bin_edges(1000, 128);
        assert_eq!(e.len(), 129);
        assert_eq!((e[0], e[128]), (0, 1000));
        assert!(e.windows(2).all(|w| w[1] - w[0] >= 7 && w[1] - w[0] <= 8));
    }

    #[test]
    fn bin_of_finds_the_bin() {
        let h = Heatmaps { n_layers: 1, n_heads: 1, n_tokens: 10, edges: bin_edges(10, 4), first_keys: 1, grid: vec![0.0; 16], early: vec![0.0; 4] };
        assert_eq!(h.edges, vec![0, 2, 5, 7, 10]);
        let bins: Vec<usize> = (0..10).map(|p| h.bin_of(p)).collect();
        assert_eq!(bins, vec![0, 0, 1, 1, 1, 2, 2, 3, 3, 3]);
    }
}
