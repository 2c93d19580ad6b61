//! Attention designs sinkscope knows by name but does not compute yet, each with the parts it
//! lacks: a model of one of these is refused saying what is missing (issue 46), not called an
//! unknown architecture, and never run as if those parts were not there.

/// One design: its HF `model_type`s, its GGUF `general.architecture`s, and the parts sinkscope
/// does not compute.
pub struct Beyond {
    pub hf_types: &'static [&'static str],
    pub gguf_archs: &'static [&'static str],
    pub missing: &'static str,
}

/// The designs, newest kinds of attention first.
pub const BEYOND: &[Beyond] = &[
    Beyond {
        hf_types: &["deepseek_v3", "kimi_k2"],
        gguf_archs: &[],
        missing: "DeepSeek-V3's router (sigmoid scores with a learned score-correction bias, `noaux_tc` group routing, normalised top-k weights); DeepSeek-V2's latent attention and experts are read",
    },
    Beyond {
        hf_types: &["qwen3_5", "qwen3_5_moe"],
        gguf_archs: &["qwen35", "qwen35moe"],
        missing: "Qwen3.5's layout (its value heads reordered for llama.cpp, its own config); Qwen3-Next's Gated DeltaNet and gated attention are read",
    },
    Beyond {
        hf_types: &["gemma3n", "gemma3n_text", "gemma4", "gemma4_text"],
        gguf_archs: &["gemma3n", "gemma4"],
        missing: "KV caches shared across layers (later layers attend over an earlier layer's keys, so an eviction belongs to the layer that owns the cache) and per-layer inputs (with Gemma 3n's AltUp and LAuReL blocks)",
    },
    Beyond {
        hf_types: &["jamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "lfm2", "mamba", "mamba2", "minimax", "recurrent_gemma", "rwkv"],
        gguf_archs: &["jamba", "falcon-h1", "granitehybrid", "nemotron_h", "nemotron_h_moe", "lfm2", "mamba", "mamba2", "rwkv6", "rwkv7"],
        missing: "recurrent layers (state-space, short convolutions or linear attention) whose state no KV-cache policy can evict",
    },
];

/// What a known design of this HF `model_type` lacks, if it is one.
pub fn hf(model_type: &str) -> Option<&'static str> {
    BEYOND.iter().find(|b| b.hf_types.contains(&model_type)).map(|b| b.missing)
}

/// What a known design of this GGUF architecture lacks, if it is one.
pub fn gguf(arch: &str) -> Option<&'static str> {
    BEYOND.iter().find(|b| b.gguf_archs.contains(&arch)).map(|b| b.missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::family::Family;

    #[test]
    fn no_design_here_is_a_family_sinkscope_runs() {
        for b in BEYOND {
            assert!(b.hf_types.iter().all(|t| Family::from_hf(t).is_none()), "{:?}", b.hf_types);
            assert!(b.gguf_archs.iter().all(|a| Family::from_gguf(a).is_none()), "{:?}", b.gguf_archs);
        }
        assert!(hf("deepseek_v3").is_some_and(|m| m.contains("latent attention")));
        assert!(gguf("qwen35").is_some_and(|m| m.contains("Gated DeltaNet")));
        assert_eq!(hf("llama"), None);
    }
}
