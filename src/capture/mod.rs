//! What a pass is reduced to as it streams by: the reducers (per-head attention statistics,
//! activations, norms, pooled heatmaps), the full-tensor collector for `--save-tensors`, the
//! memory estimate checked first, the summary records they produce, and the capture, causal
//! ablation and fake-quantization runs that drive the forward pass through them.

pub mod ablation;
pub mod collector;
pub mod gate;
pub mod heatmap;
pub mod heatmaps;
pub mod memory;
pub mod quant;
pub mod reducers;
pub mod run;
pub mod summary;
