//! What is known about a loaded model and a text under it, as serializable records: the facts
//! `sinkscope info` shows, the tokens of a text, and its next-token loss.

use serde::{Deserialize, Serialize};

use super::decoder::config::{ArchSwitches, DecoderConfig, LayerAttn, LLAMA, MAX_SIZE};
use super::decoder::finite::NonFiniteWeight;
use super::rope::{FreqFactors, RopeLayout};
use super::unread::Unread;

/// What `sinkscope info` reports: where the model came from and how it was loaded, around the
/// decoder's configuration itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "ModelInfoRecord", try_from = "ModelInfoRecord")]
pub struct ModelInfo {
    pub source: String,
    pub format: String,
    pub architecture: String,
    pub name: Option<String>,
    /// The decoder's configuration. Read back from a run file it holds what run files record
    /// (shapes, RoPE, which layers are windowed, learned sinks); the family's other switches are
    /// not recorded and read back as Llama's.
    pub config: DecoderConfig,
    pub tokenizer: String,
    pub adds_bos: bool,
    /// Storage types of the weights in the file, e.g. "Q4_1 ×210, F32 ×61, Q8_0 ×1".
    pub quantization: String,
    /// Whether matmuls run on quantized weights (`--quantized`), f32, or f32 over half-stored
    /// matrices (`--dtype`).
    pub compute: String,
    /// Bytes the weights occupy in memory as loaded (see `--dtype`); 0 in records from before it.
    pub weight_bytes: u64,
    pub tied_embeddings: bool,
    pub n_params: usize,
    /// SHA-256 of the weight files (set by the commands that write runs; see [`LoadedModel::fingerprint`]).
    pub sha256: Option<String>,
    /// The weights holding NaN or ∞, when the loader was asked to search them (`info`); not
    /// kept in run files (a run is never made from such a model).
    pub non_finite_weights: Option<Vec<NonFiniteWeight>>,
    /// What the file holds that sinkscope does not read (tensors, GGUF keys, config fields);
    /// only `info` loads such a file, to list them.
    pub unread: Vec<Unread>,
    /// Why the weights are kept otherwise than asked (they did not fit in memory); not kept in
    /// run files (the `compute` field says how they were kept).
    pub memory_note: Option<String>,
}

impl ModelInfo {
    /// The description of a model just built from `cfg`; the loader fills in the rest.
    pub fn new(source: String, format: String, architecture: String, config: DecoderConfig) -> Self {
        ModelInfo {
            source,
            format,
            architecture,
            name: None,
            config,
            tokenizer: String::new(),
            adds_bos: false,
            quantization: String::new(),
            compute: "f32 (dequantized)".into(),
            weight_bytes: 0,
            tied_embeddings: false,
            n_params: 0,
            sha256: None,
            non_finite_weights: None,
            unread: Vec::new(),
            memory_note: None,
        }
    }

    /// The name figures, reports and surveys title the model by: its catalog alias when the file
    /// is a catalog model's (`smollm2-135m`), else its file or directory name — never the GGUF's
    /// free-form `general.name`, which can be anything ("Smollm2 135M 8k Lc100K Mix1 Ep2").
    pub fn display_name(&self) -> String {
        let path = std::path::Path::new(&self.source);
        let file = path.file_name().map_or(self.source.clone(), |n| n.to_string_lossy().into_owned());
        super::catalog::CATALOG.iter().find(|e| e.file == file).map_or(file, |e| e.alias.to_string())
    }

    /// The mean of per-head values (layer, value) over global layers and over windowed ones, each
    /// with its count; `None` for a kind with no values.
    pub fn mean_by_layer_kind(&self, values: impl Iterator<Item = (usize, f64)>) -> [Option<(f64, usize)>; 2] {
        let mut sums = [(0.0, 0usize); 2];
        for (layer, v) in values {
            let side = &mut sums[self.config.layer_window(layer).is_some() as usize];
            side.0 += v;
            side.1 += 1;
        }
        sums.map(|(sum, n)| (n > 0).then(|| (sum / n as f64, n)))
    }
}

/// The flat record run files have always held for a model: the configuration's numbers beside
/// the loading facts, the per-layer attention as one window and the list of windowed layers.
#[derive(Serialize, Deserialize)]
struct ModelInfoRecord {
    source: String,
    format: String,
    architecture: String,
    name: Option<String>,
    n_layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    d_model: usize,
    d_head: usize,
    d_ff: usize,
    context_len: usize,
    vocab_size: usize,
    tokenizer: String,
    adds_bos: bool,
    quantization: String,
    compute: String,
    #[serde(default)]
    weight_bytes: u64,
    rope_layout: RopeLayout,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rope_freq_factors: Option<FreqFactors>,
    rope_theta: f64,
    rms_eps: f64,
    tied_embeddings: bool,
    n_params: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    windowed_layers: Vec<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    nope_layers: Vec<usize>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    learned_sinks: bool,
    #[serde(default)]
    sha256: Option<String>,
    /// Only `info` fills it (see [`ModelInfo::non_finite_weights`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    non_finite_weights: Option<Vec<NonFiniteWeight>>,
    /// Only `info` fills it (see [`ModelInfo::unread`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unread: Vec<Unread>,
}

impl From<ModelInfo> for ModelInfoRecord {
    fn from(m: ModelInfo) -> Self {
        let c = &m.config;
        ModelInfoRecord {
            n_layers: c.n_layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            d_model: c.d_model,
            d_head: c.d_head,
            d_ff: c.d_ff,
            context_len: c.context_len,
            vocab_size: c.vocab_size,
            rope_layout: c.rope_layout,
            rope_freq_factors: c.rope_freq_factors.clone(),
            rope_theta: c.rope_theta,
            rms_eps: c.rms_eps,
            window: c.window(),
            windowed_layers: c.windowed_layers(),
            nope_layers: c.nope_layers(),
            learned_sinks: c.arch.learned_sinks,
            source: m.source,
            format: m.format,
            architecture: m.architecture,
            name: m.name,
            tokenizer: m.tokenizer,
            adds_bos: m.adds_bos,
            quantization: m.quantization,
            compute: m.compute,
            weight_bytes: m.weight_bytes,
            tied_embeddings: m.tied_embeddings,
            n_params: m.n_params,
            sha256: m.sha256,
            non_finite_weights: m.non_finite_weights,
            unread: m.unread,
        }
    }
}

impl TryFrom<ModelInfoRecord> for ModelInfo {
    type Error = String;

    fn try_from(r: ModelInfoRecord) -> Result<Self, String> {
        if r.n_layers > MAX_SIZE || r.windowed_layers.iter().chain(&r.nope_layers).any(|&l| l >= r.n_layers) {
            return Err(format!("the model record's {} layers (windowed: {:?}) are impossible", r.n_layers, r.windowed_layers));
        }
        let layer = |l: usize| LayerAttn {
            window: r.window.filter(|_| r.windowed_layers.contains(&l)),
            rope_theta: r.rope_theta,
            nope: r.nope_layers.contains(&l),
            // The record keeps no YaRN: no layer has a scaling to go without.
            unscaled: false,
        };
        let config = DecoderConfig {
            n_layers: r.n_layers,
            n_heads: r.n_heads,
            n_kv_heads: r.n_kv_heads,
            d_model: r.d_model,
            d_head: r.d_head,
            d_ff: r.d_ff,
            vocab_size: r.vocab_size,
            context_len: r.context_len,
            rope_theta: r.rope_theta,
            rope_layout: r.rope_layout,
            rope_freq_factors: r.rope_freq_factors,
            rms_eps: r.rms_eps,
            arch: ArchSwitches { learned_sinks: r.learned_sinks, ..LLAMA },
            layers: (0..r.n_layers).map(layer).collect(),
        };
        Ok(ModelInfo {
            source: r.source,
            format: r.format,
            architecture: r.architecture,
            name: r.name,
            config,
            tokenizer: r.tokenizer,
            adds_bos: r.adds_bos,
            quantization: r.quantization,
            compute: r.compute,
            weight_bytes: r.weight_bytes,
            tied_embeddings: r.tied_embeddings,
            n_params: r.n_params,
            sha256: r.sha256,
            non_finite_weights: r.non_finite_weights,
            unread: r.unread,
            memory_note: None,
        })
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
    /// Each scored token's NLL in nats, position 1 first (position 0 has no prefix); empty in
    /// captures from before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_token: Vec<f64>,
}
