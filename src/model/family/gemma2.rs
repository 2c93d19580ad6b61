//! Gemma 2: Gemma 3's sandwich of RMSNorms (weights stored as w − 1), GeGLU (tanh) and
//! embeddings × √d_model, without q/k norms; attention scores and final logits soft-capped
//! (c · tanh(x / c)); windowed and global layers alternating, windowed first, one RoPE base.

use super::gemma3::{norm_plus_one, GEMMA_NAMES};
use super::spec::{alternating_layer_types, FamilySpec, GgufWindows, BASE};
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormPlacement, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gemma2",
    hf_types: &["gemma2"],
    gguf_archs: &["gemma2"],
    gguf_rope: RopeLayout::HalfSplit,
    // The soft-caps come from the config (`attn_logit_softcapping`, `final_logit_softcapping`).
    switches: ArchSwitches { norm_placement: NormPlacement::Sandwich, mlp: MlpKind::GeGluTanh, embed_scale: true, ..LLAMA },
    hf_names: GEMMA_NAMES,
    hf_config: alternating_layer_types,
    hf_tensor: norm_plus_one,
    // What llama.cpp fixes for `gemma2`: every 2nd layer global, the local layers rotated with the
    // model's own base, a window of 4,096 where the file states none.
    gguf_windows: Some(GgufWindows { global_every: 2, local_rope_theta: None, default_window: Some(4096), local_scaled: true }),
    // Gemma 2 27B.
    gguf_attn_scale_layers: &[46],
    ..BASE
};
