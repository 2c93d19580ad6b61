//! Granite (IBM Granite 3.x dense): Llama's block with four scalings — embeddings ×
//! `embedding_multiplier`, each attention and MLP output × `residual_multiplier` before the
//! residual add, attention scores × `attention_multiplier` (instead of 1/√d_head) and logits ÷
//! `logits_scaling`; llama.cpp writes them as `embedding_scale`, `residual_scale`,
//! `attention.scale` and `logit_scale`.

use super::spec::{FamilySpec, Multipliers, BASE};

pub const SPEC: FamilySpec =
    FamilySpec { name: "granite", hf_types: &["granite"], gguf_archs: &["granite"], multipliers: Some(Multipliers::Granite), ..BASE };
