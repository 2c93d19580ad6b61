//! llama2.c checkpoints (the legacy `.bin`: a 7×i32 header, then f32 weights in a fixed order).
//! candle-transformers' reader assumes n_kv_heads == n_heads and mis-reads negative vocab sizes,
//! so this one is written from the format: shared classifier when vocab_size > 0, RoPE tables to skip.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use super::decoder::{ArchSwitches, DecoderConfig, LayerAttn, Param};
use super::rope::RopeLayout;
use crate::error::{Error, IoContext, Result};

/// A parsed checkpoint: its configuration and every weight under GGUF-style canonical names.
pub struct Llama2cFile {
    pub cfg: DecoderConfig,
    pub shared_classifier: bool,
    weights: HashMap<String, Tensor>,
}

impl Llama2cFile {
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = crate::io::regular::read(path).with_file(path)?;
        let bad = |what: String| Error::file(path, format!("{what}. Is this a llama2.c model .bin (legacy format)? Re-export or re-download it."));
        if bytes.len() < 28 {
            return Err(bad(format!("file is only {} bytes, shorter than the 28-byte header", bytes.len())));
        }
        let header: Vec<i32> = bytes[..28].chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let [dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len] = header[..] else { unreachable!("7 header fields") };
        if [dim, hidden, n_layers, n_heads, n_kv_heads, seq_len].iter().any(|&v| v <= 0 || v > 1 << 20)
            || vocab == 0
            || vocab.unsigned_abs() > 1 << 22
        {
            return Err(bad(format!("header is impossible (dim {dim}, hidden {hidden}, layers {n_layers}, heads {n_heads}, kv heads {n_kv_heads}, vocab {vocab}, seq_len {seq_len})")));
        }
        let (d, ff, l, h, kvh, seq) = (dim as usize, hidden as usize, n_layers as usize, n_heads as usize, n_kv_heads as usize, seq_len as usize);
        if d % h != 0 || h % kvh != 0 {
            return Err(bad(format!("dim {d} / heads {h} / kv heads {kvh} do not divide")));
        }
        let shared = vocab > 0;
        let v = vocab.unsigned_abs() as usize;
        let dh = d / h;
        let kv_dim = kvh * dh;
        // (name, per-layer shape or global shape, is per-layer)
        let layout: Vec<(&str, Vec<usize>, bool)> = vec![
            ("token_embd.weight", vec![v, d], false),
            ("attn_norm.weight", vec![d], true),
            ("attn_q.weight", vec![d, d], true),
            ("attn_k.weight", vec![kv_dim, d], true),
            ("attn_v.weight", vec![kv_dim, d], true),
            ("attn_output.weight", vec![d, d], true),
            ("ffn_norm.weight", vec![d], true),
            ("ffn_gate.weight", vec![ff, d], true),
            ("ffn_down.weight", vec![d, ff], true),
            ("ffn_up.weight", vec![ff, d], true),
            ("output_norm.weight", vec![d], false),
            ("freq_cis_real", vec![seq, dh / 2], false),
            ("freq_cis_imag", vec![seq, dh / 2], false),
            ("output.weight", vec![v, d], false),
        ];
        let n_floats: usize = layout
            .iter()
            .filter(|(name, _, _)| !(shared && *name == "output.weight"))
            .map(|(_, s, per_layer)| s.iter().product::<usize>() * if *per_layer { l } else { 1 })
            .sum();
        let need = 28 + 4 * n_floats;
        if bytes.len() < need {
            return Err(Error::file(
                path,
                format!("llama2.c checkpoint is truncated: its header implies {need} bytes but the file has {}. Re-download it.", bytes.len()),
            ));
        }
        if bytes.len() > need {
            return Err(bad(format!("file has {} bytes but its header implies {need}; this is not a legacy-format checkpoint", bytes.len())));
        }
        let mut weights = HashMap::new();
        let mut offset = 28;
        let mut read = |shape: &[usize]| -> Result<Tensor> {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = bytes[offset..offset + 4 * n].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            offset += 4 * n;
            Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
        };
        for (name, shape, per_layer) in &layout {
            if *name == "output.weight" && shared {
                continue;
            }
            if *per_layer {
                for layer in 0..l {
                    weights.insert(format!("blk.{layer}.{name}"), read(shape)?);
                }
            } else {
                weights.insert(name.to_string(), read(shape)?);
            }
        }
        let cfg = DecoderConfig {
            n_layers: l,
            n_heads: h,
            n_kv_heads: kvh,
            d_model: d,
            d_head: dh,
            d_ff: ff,
            vocab_size: v,
            context_len: seq,
            // run.c hard-codes these: base 10000, eps 1e-5, RoPE on adjacent pairs.
            rope_theta: 10000.0,
            rope_layout: RopeLayout::Interleaved,
            rope_freq_factors: None,
            rms_eps: 1e-5,
            arch: ArchSwitches::default(),
            layers: vec![LayerAttn::global(10000.0); l],
        };
        Ok(Llama2cFile { cfg, shared_classifier: shared, weights })
    }

    pub fn param(&mut self, name: &str) -> Option<Param> {
        self.weights.remove(name).map(Param::Dense)
    }

    /// The tokenizer beside the checkpoint: `tok{vocab}.bin`, else `tokenizer.bin`.
    pub fn find_tokenizer(&self, model: &Path) -> Result<std::path::PathBuf> {
        let dir = model.parent().unwrap_or(Path::new("."));
        let candidates = [dir.join(format!("tok{}.bin", self.cfg.vocab_size)), dir.join("tokenizer.bin")];
        candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
            Error::file(
                model,
                format!(
                    "a llama2.c model needs its tokenizer: none of {} exists; pass --tokenizer FILE",
                    candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }
}
