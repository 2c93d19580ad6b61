//! Massive activations (Sun et al. 2024, "Massive Activations in Large Language Models"): elements
//! h^{(l)}_{t,c} of a layer's output that meets `metrics::massive::is_massive`.
//! Per layer top-1/2/3 and median, every massive element's (position, token, dim), the first layer
//! where they appear, and which dims recur across probes. (Their code tokenizes without BOS; ours
//! follows the model's tokenizer — probes with and without BOS show the difference.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::capture::reducers::Activation;
use crate::metrics::massive::is_massive;

/// One massive element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MassiveElement {
    pub layer: usize,
    pub pos: usize,
    pub token: String,
    pub dim: usize,
    pub value: f32,
    pub ratio_to_median: f32,
}

/// Per-layer magnitudes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerMagnitudes {
    pub layer: usize,
    /// Largest three |h| of the layer output.
    pub top: Vec<f32>,
    pub median_abs: f32,
    pub n_massive: usize,
    /// Pearson's kurtosis of the layer output's elements (`None` in runs from before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kurtosis: Option<f64>,
}

/// Massive activations of one forward pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MassiveReport {
    /// First layer with any massive element.
    pub first_layer: Option<usize>,
    /// Dims carrying massive elements, most frequent first.
    pub dims: Vec<usize>,
    /// Positions carrying massive elements, most frequent first.
    pub positions: Vec<usize>,
    pub layers: Vec<LayerMagnitudes>,
    pub elements: Vec<MassiveElement>,
}

/// Applies Sun et al.'s criterion to each layer's candidates (elements with |h| > 100, largest
/// first) given the layer's top activations and median.
pub fn find_massive(top: &[Vec<Activation>], above: &[Vec<Activation>], median: &[f32], tokens: &[String]) -> MassiveReport {
    let mut elements = Vec::new();
    let mut layers = Vec::new();
    for (l, candidates) in above.iter().enumerate() {
        let med = median.get(l).copied().unwrap_or(0.0);
        let before = elements.len();
        for a in candidates {
            if is_massive(a.value, med) {
                elements.push(MassiveElement {
                    layer: l,
                    pos: a.pos,
                    token: tokens.get(a.pos).cloned().unwrap_or_default(),
                    dim: a.dim,
                    value: a.value,
                    ratio_to_median: if med > 0.0 { a.value.abs() / med } else { f32::INFINITY },
                });
            }
        }
        let top3 = top.get(l).map(|t| t.iter().take(3).map(|a| a.value.abs()).collect()).unwrap_or_default();
        layers.push(LayerMagnitudes { layer: l, top: top3, median_abs: med, n_massive: elements.len() - before, kurtosis: None });
    }
    MassiveReport {
        first_layer: elements.iter().map(|e| e.layer).min(),
        dims: by_frequency(elements.iter().map(|e| e.dim)),
        positions: by_frequency(elements.iter().map(|e| e.pos)),
        layers,
        elements,
    }
}

/// Distinct values, most frequent first (ties by value).
pub fn by_frequency(values: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let mut v: Vec<(usize, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter().map(|(k, _)| k).collect()
}

/// For each dim massive in any probe: in how many of the probes it is massive.
pub fn recurring_dims(reports: &[&MassiveReport]) -> Vec<(usize, usize)> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for r in reports {
        for d in &r.dims {
            *counts.entry(*d).or_default() += 1;
        }
    }
    let mut v: Vec<(usize, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(pos: usize, dim: usize, value: f32) -> Activation {
        Activation { pos, dim, value }
    }

    #[test]
    fn criterion_needs_both_absolute_and_relative_size() {
        let tokens: Vec<String> = ["<s>", "The", "cat"].iter().map(|s| s.to_string()).collect();
        // Layer 0: median 1.0 → 500 is > 100 but < 1000×; layer 1: median 0.2 → 500 (2500×) and 250
        // (1250×) pass;
        // layer 2: median 0.01 → 90 fails the absolute bar even at 9000×.
        let above = vec![vec![act(0, 7, 500.0)], vec![act(0, 7, -500.0), act(2, 3, 250.0)], vec![]];
        let top = vec![vec![act(0, 7, 500.0), act(1, 1, 3.0)], vec![act(0, 7, -500.0), act(2, 3, 250.0)], vec![act(1, 2, 90.0)]];
        let r = find_massive(&top, &above, &[1.0, 0.2, 0.01], &tokens);
        assert_eq!(r.first_layer, Some(1));
        assert_eq!(r.elements.len(), 2);
        assert_eq!(r.elements[0], MassiveElement { layer: 1, pos: 0, token: "<s>".into(), dim: 7, value: -500.0, ratio_to_median: 2500.0 });
        assert_eq!(r.dims, vec![3, 7]);
        assert_eq!(r.layers[0].n_massive, 0);
        assert_eq!(r.layers[1].top, vec![500.0, 250.0]);
        assert_eq!(r.layers[2].n_massive, 0);
    }

    #[test]
    fn recurring_dims_count_probes() {
        let mk = |dims: Vec<usize>| MassiveReport { first_layer: None, dims, positions: vec![], layers: vec![], elements: vec![] };
        let (a, b) = (mk(vec![7, 3]), mk(vec![7]));
        assert_eq!(recurring_dims(&[&a, &b]), vec![(7, 2), (3, 1)]);
    }
}
