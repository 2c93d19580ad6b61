//! What is known about a loaded model and a text under it, as serializable records: the facts
//! `sinkscope info` shows, the tokens of a text, and its next-token loss.

use serde::{Deserialize, Serialize};

use super::rope::RopeLayout;

/// What `sinkscope info` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    pub source: String,
    pub format: String,
    pub architecture: String,
    pub name: Option<String>,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    pub d_ff: usize,
    pub context_len: usize,
    pub vocab_size: usize,
    pub tokenizer: String,
    pub adds_bos: bool,
    /// Storage types of the weights in the file, e.g. "Q4_1 ×210, F32 ×61, Q8_0 ×1".
    pub quantization: String,
    /// Whether matmuls run on quantized weights (`--quantized`), f32, or f32 over half-stored
    /// matrices (`--dtype`).
    pub compute: String,
    /// Bytes the weights occupy in memory as loaded (see `--dtype`); 0 in records from before it.
    #[serde(default)]
    pub weight_bytes: u64,
    pub rope_layout: RopeLayout,
    pub rope_theta: f64,
    pub rms_eps: f64,
    pub tied_embeddings: bool,
    pub n_params: usize,
    /// Keys a query sees on the windowed layers (sliding-window attention), if any layer has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// The layers that attend through `window`; the others are global.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windowed_layers: Vec<usize>,
    /// Each head has a learned sink logit in its softmax (gpt-oss).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned_sinks: bool,
    /// SHA-256 of the weight files (set by the commands that write runs; see [`LoadedModel::fingerprint`]).
    #[serde(default)]
    pub sha256: Option<String>,
}

impl ModelInfo {
    /// The name figures, reports and surveys title the model by: its catalog alias when the file
    /// is a catalog model's (`smollm2-135m`), else its file or directory name — never the GGUF's
    /// free-form `general.name`, which can be anything ("Smollm2 135M 8k Lc100K Mix1 Ep2").
    pub fn display_name(&self) -> String {
        let path = std::path::Path::new(&self.source);
        let file = path.file_name().map_or(self.source.clone(), |n| n.to_string_lossy().into_owned());
        super::catalog::CATALOG.iter().find(|e| e.file == file).map_or(file, |e| e.alias.to_string())
    }

    /// Layer `l`'s own sliding window, if it has one.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        self.window.filter(|_| self.windowed_layers.contains(&l))
    }

    /// The mean of per-head values (layer, value) over global layers and over windowed ones, each
    /// with its count; `None` for a kind with no values.
    pub fn mean_by_layer_kind(&self, values: impl Iterator<Item = (usize, f64)>) -> [Option<(f64, usize)>; 2] {
        let mut sums = [(0.0, 0usize); 2];
        for (layer, v) in values {
            let side = &mut sums[self.layer_window(layer).is_some() as usize];
            side.0 += v;
            side.1 += 1;
        }
        sums.map(|(sum, n)| (n > 0).then(|| (sum / n as f64, n)))
    }

    /// Every layer's own window.
    pub fn layer_windows(&self) -> Vec<Option<usize>> {
        (0..self.n_layers).map(|l| self.layer_window(l)).collect()
    }
}

/// One token of the captured text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenInfo {
    pub pos: usize,
    pub id: u32,
    /// The vocabulary entry (e.g. "Ġthe", "▁Once", "<s>").
    pub piece: String,
}

/// Next-token loss of the captured text under the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NllSummary {
    /// Mean negative log-likelihood in nats over `scored` predictions (each token from its prefix).
    pub mean_nll: f64,
    pub perplexity: f64,
    pub scored: usize,
}
