//! Llama (and the `model_type`s that are Llama under another name: SmolLM; TinyLlama and
//! llama2.c checkpoints are `llama` too): the decoder's defaults, nothing to set apart.

use super::spec::{FamilySpec, BASE};

pub const SPEC: FamilySpec = FamilySpec {
    name: "llama",
    hf_types: &["llama", "smollm"],
    gguf_archs: &["llama"],
    // A `llama` GGUF with experts is Mixtral (llama.cpp's converter writes it so).
    gguf_experts: Some(&super::mixtral::SPEC),
    ..BASE
};
