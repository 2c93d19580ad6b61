//! What is known about a loaded model and a text under it, as serializable records: the facts
//! `sinkscope info` shows, the tokens of a text, and its next-token loss.

use serde::{Deserialize, Serialize};

use super::decoder::config::{DecoderConfig, LayerAttn, MAX_SIZE};
use super::decoder::finite::NonFiniteWeight;
use super::unread::Unread;

/// What `sinkscope info` reports: where the model came from and how it was loaded, around the
/// decoder's configuration itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    pub source: String,
    pub format: String,
    pub architecture: String,
    pub name: Option<String>,
    /// The decoder's configuration, its fields beside the loading facts in run files.
    #[serde(flatten, deserialize_with = "read_config")]
    pub config: DecoderConfig,
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
    pub tied_embeddings: bool,
    pub n_params: usize,
    /// SHA-256 of the weight files (set by the commands that write runs; see [`LoadedModel::fingerprint`]).
    #[serde(default)]
    pub sha256: Option<String>,
    /// The weights holding NaN or ∞, when the loader was asked to search them (`info`); not
    /// kept in run files (a run is never made from such a model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_finite_weights: Option<Vec<NonFiniteWeight>>,
    /// What the file holds that sinkscope does not read (tensors, GGUF keys, config fields);
    /// only `info` loads such a file, to list them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<Unread>,
    /// Why the weights are kept otherwise than asked (they did not fit in memory); not kept in
    /// run files (the `compute` field says how they were kept).
    #[serde(skip)]
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

/// The model's configuration as run files hold it: the decoder's own fields, or in files written
/// before those recorded `arch` and `layers`, the flat fields from which the layers are rebuilt
/// (one window for the windowed layers, the NoPE layers, learned sinks; the other switches
/// Llama's, as those files assumed).
#[derive(Deserialize)]
struct RecordedConfig {
    #[serde(flatten)]
    config: DecoderConfig,
    #[serde(default)]
    window: Option<usize>,
    #[serde(default)]
    windowed_layers: Vec<usize>,
    #[serde(default)]
    nope_layers: Vec<usize>,
    #[serde(default)]
    learned_sinks: bool,
}

/// Reads the configuration of a model record, rebuilding the layers of an older one, and
/// refuses one the decoder could not have run.
fn read_config<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<DecoderConfig, D::Error> {
    let RecordedConfig { mut config, window, windowed_layers, nope_layers, learned_sinks } = RecordedConfig::deserialize(deserializer)?;
    if config.layers.is_empty() && config.n_layers <= MAX_SIZE {
        if windowed_layers.iter().chain(&nope_layers).any(|&l| l >= config.n_layers) {
            let msg = format!("the model record's {} layers (windowed: {windowed_layers:?}) are impossible", config.n_layers);
            return Err(serde::de::Error::custom(msg));
        }
        let layer = |l: usize| LayerAttn {
            window: window.filter(|_| windowed_layers.contains(&l)),
            rope_theta: config.rope_theta,
            nope: nope_layers.contains(&l),
            // Those records kept no RoPE scaling: no layer has one to go without.
            unscaled: false,
            linear: false,
        };
        config.layers = (0..config.n_layers).map(layer).collect();
        config.arch.learned_sinks = learned_sinks;
    }
    config.validate(std::path::Path::new("the model record")).map_err(serde::de::Error::custom)?;
    Ok(config)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::config::{ArchSwitches, NormPlacement, LLAMA};

    /// A Gemma-3-like model: sandwich norms, scaled embeddings, local layers with their own RoPE
    /// base, and (beyond Gemma) two window sizes.
    fn gemma_like() -> ModelInfo {
        let mut layers = LayerAttn::every_nth_global(6, 3, 512, 1e6, 1e4);
        layers[0].window = Some(128);
        let arch = ArchSwitches { norm_placement: NormPlacement::Sandwich, embed_scale: true, attn_scale: Some(0.25), ..LLAMA };
        let config = DecoderConfig { arch, ..DecoderConfig::tiny(1e6, layers) };
        ModelInfo::new("m.gguf".into(), "gguf".into(), "gemma3".into(), config)
    }

    #[test]
    fn the_model_record_reads_back_as_it_was_written() {
        let info = gemma_like();
        let json = serde_json::to_string(&info).unwrap();
        let back: ModelInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back.config.arch, info.config.arch, "the family's switches");
        assert_eq!(back.config.layers, info.config.layers, "each layer's window and RoPE base");
        assert_eq!(back.config.windows(), [128, 512]);
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    /// Run files written before `arch` and `layers` were recorded keep opening: the layers are
    /// rebuilt from their flat window fields, the switches are Llama's but for learned sinks.
    #[test]
    fn an_older_record_rebuilds_its_layers() {
        let mut json: serde_json::Value = serde_json::to_value(gemma_like()).unwrap();
        let record = json.as_object_mut().unwrap();
        record.remove("arch");
        record.remove("layers");
        record.insert("window".into(), 512.into());
        record.insert("windowed_layers".into(), serde_json::json!([0, 1, 3, 4]));
        record.insert("nope_layers".into(), serde_json::json!([5]));
        record.insert("learned_sinks".into(), true.into());
        let back: ModelInfo = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.config.layer_windows(), [Some(512), Some(512), None, Some(512), Some(512), None]);
        assert_eq!(back.config.nope_layers(), [5]);
        assert!(back.config.layers.iter().all(|l| l.rope_theta == 1e6));
        assert_eq!(back.config.arch, ArchSwitches { learned_sinks: true, ..LLAMA });
        json["windowed_layers"] = serde_json::json!([6]);
        let err = serde_json::from_value::<ModelInfo>(json).unwrap_err().to_string();
        assert!(err.contains("impossible"), "{err}");
    }

    #[test]
    fn a_record_the_decoder_could_not_run_is_refused() {
        let mut json = serde_json::to_value(gemma_like()).unwrap();
        json["layers"].as_array_mut().unwrap().pop();
        let err = serde_json::from_value::<ModelInfo>(json).unwrap_err().to_string();
        assert!(err.contains("6 layers but attention settings for 5"), "{err}");
    }
}
