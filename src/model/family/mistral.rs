//! Mistral: Llama's block with a sliding window on every layer (`sliding_window`, which the
//! generic reader applies to every layer when no `layer_types` say otherwise).

use super::spec::{FamilySpec, BASE};

pub const SPEC: FamilySpec = FamilySpec { name: "mistral", hf_types: &["mistral"], gguf_archs: &["mistral"], ..BASE };
