//! What a model file holds that no part of the decoder reads: every tensor the loader did not
//! ask for, every GGUF `{arch}.*` key and every `config.json` field it does not understand, each
//! with what it suggests. A file with any of them is refused (its numbers would be another
//! model's); `info` lists them instead. The tensors and fields known not to change the arithmetic
//! are listed here, each with the reason it is inert.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::family::Multipliers;

/// One thing a file holds that sinkscope does not read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unread {
    /// The tensor name, GGUF key or config.json field, as the file spells it.
    pub name: String,
    /// What it suggests the model computes.
    pub suggests: String,
}

impl Unread {
    /// The one-line refusal of a file holding `unread` (the first named, the rest counted).
    pub fn refusal(unread: &[Unread]) -> Option<String> {
        let first = unread.first()?;
        let more = match unread.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        Some(format!(
            "holds {} ({}){more}, which sinkscope does not compute; the numbers would be another model's (`sinkscope info` lists what it does not read)",
            first.name, first.suggests
        ))
    }
}

/// HF tensors (by the start of their name) that hold nothing next-token logits read, and why.
const INERT_HF_PREFIXES: &[(&str, &str)] = &[(
    "mtp.",
    "Qwen3-Next's multi-token-prediction head, for speculative drafts: transformers does not load it, and next-token logits never read it",
)];

/// HF tensors (by the end of their name) that hold nothing the model computes, and why.
const INERT_HF_TENSORS: &[(&str, &str)] = &[
    ("rotary_emb.inv_freq", "RoPE frequencies saved as a buffer: recomputed from the config, as transformers does"),
    (".attn.bias", "GPT-2's causal mask saved as a buffer"),
    (".attn.masked_bias", "GPT-2's masked-score constant saved as a buffer"),
    (".attention.bias", "GPT-NeoX's causal mask saved as a buffer"),
    (".attention.masked_bias", "GPT-NeoX's masked-score constant saved as a buffer"),
];

/// The HF tensors a loader did not ask for, less the inert ones; `lm_head.weight` is inert when
/// the config ties the head to the embeddings (transformers then ignores it too).
pub fn hf_tensors<'a>(names: impl Iterator<Item = &'a str>, read: &BTreeSet<String>, tied: bool) -> Vec<Unread> {
    let mut unread: Vec<Unread> = names
        .filter(|n| !read.contains(*n))
        .filter(|n| !(tied && *n == "lm_head.weight"))
        .filter(|n| !INERT_HF_TENSORS.iter().any(|(tail, _)| n.ends_with(tail)))
        .filter(|n| !INERT_HF_PREFIXES.iter().any(|(head, _)| n.starts_with(head)))
        .map(|n| Unread { name: n.to_owned(), suggests: suggestion(n).to_owned() })
        .collect();
    unread.sort_by(|a, b| a.name.cmp(&b.name));
    unread
}

/// The GGUF tensors a loader did not ask for.
pub fn gguf_tensors<'a>(names: impl Iterator<Item = &'a str>, read: &BTreeSet<String>) -> Vec<Unread> {
    names.filter(|n| !read.contains(*n)).map(|n| Unread { name: n.to_owned(), suggests: suggestion(n).to_owned() }).collect()
}

/// What a tensor the decoder does not read suggests, by the fragments llama.cpp's and
/// transformers' names use.
fn suggestion(name: &str) -> &'static str {
    const HINTS: &[(&str, &str)] = &[
        ("attn_gate", "an attention output gate"),
        ("self_attn.gate", "an attention output gate"),
        ("attn_output_gate", "an attention output gate"),
        ("shexp", "shared experts beside a mixture of experts"),
        ("shared_expert", "shared experts beside a mixture of experts"),
        ("_exps", "a mixture of experts"),
        ("experts", "a mixture of experts"),
        ("gate_inp", "a mixture-of-experts router"),
        ("router", "a mixture-of-experts router"),
        ("ssm_", "a state-space (Mamba) layer"),
        ("kv_a_", "latent key-value projections (multi-head latent attention)"),
        ("kv_b", "latent key-value projections (multi-head latent attention)"),
        ("q_a", "low-rank query projections (multi-head latent attention)"),
        ("rope_factors", "LongRoPE frequency factors"),
        ("rope_freqs", "RoPE frequency factors"),
        ("altup", "Gemma 3n's alternating updates"),
        ("per_layer", "per-layer inputs (Gemma 3n)"),
        ("laurel", "Gemma 3n's learned augmented residual"),
        ("linear_attn", "a linear-attention layer"),
        ("conv1d", "a convolution (a linear-attention or state-space layer)"),
        ("sinks", "learned attention-sink logits"),
        ("bias", "a bias this family's decoder does not add"),
        ("norm", "a normalisation this family's decoder does not apply"),
    ];
    hint(HINTS, name, "a tensor no part of the decoder reads")
}

/// GGUF `{arch}.*` keys every family's loader reads.
pub const GGUF_READ_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.layer_norm_epsilon",
    "attention.sliding_window",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "use_parallel_residual",
    "vocab_size",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
    "attn_logit_softcapping",
    "final_logit_softcapping",
];

/// GGUF `{arch}.*` keys that change nothing sinkscope computes, and why (the loader checks the
/// values that would: see [`gguf_keys`]).
const INERT_GGUF_KEYS: &[(&str, &str)] = &[
    ("rope.scaling.finetuned", "whether the model was fine-tuned after scaling: a note"),
    ("tensor_data_layout", "how the converter permuted q/k rows, which the RoPE layout already says"),
    ("attention.causal", "causal attention, what every family here computes (false is refused)"),
    ("expert_count", "no experts (any other count is refused)"),
    ("expert_used_count", "no experts (any other count is refused)"),
];

/// GGUF `{arch}.*` keys a mixture-of-experts family's loader reads.
pub const GGUF_MOE_KEYS: &[&str] = &["expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"];

/// The `{arch}.*` keys of latent attention and DeepSeek's mixture, read for a `deepseek2` file.
pub const GGUF_LATENT_KEYS: &[&str] = &[
    "attention.q_lora_rank",
    "attention.kv_lora_rank",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "leading_dense_block_count",
    "expert_shared_count",
    "expert_weights_scale",
    "expert_weights_norm",
    "expert_group_count",
    "expert_group_used_count",
    "rope.scaling.yarn_log_multiplier",
    "expert_gating_func",
];

/// The `{arch}.*` keys of Gated DeltaNet layers, read for a `qwen3next` file.
pub const GGUF_LINEAR_KEYS: &[&str] = &[
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "ssm.inner_size",
    "attention.recurrent_layers",
    "full_attention_interval",
];

/// The `{arch}.*` keys of a GGUF file the loader neither reads nor knows to be inert, and inert
/// keys whose value would change the arithmetic (`moe`: the family reads [`GGUF_MOE_KEYS`];
/// `family_keys`: the family's own, [`GGUF_LATENT_KEYS`] or [`GGUF_LINEAR_KEYS`]; `multipliers`:
/// the family reads their keys). `get_u64`/`get_bool`
/// read a key's value.
#[allow(clippy::too_many_arguments)]
pub fn gguf_keys<'a>(
    arch: &str,
    moe: bool,
    family_keys: &[&str],
    multipliers: Option<Multipliers>,
    keys: impl Iterator<Item = &'a str>,
    value_u64: impl Fn(&str) -> Option<u64>,
    value_bool: impl Fn(&str) -> Option<bool>,
) -> Vec<Unread> {
    let prefix = format!("{arch}.");
    let mut unread = Vec::new();
    for key in keys {
        let Some(local) = key.strip_prefix(&prefix) else { continue };
        let family_reads = (moe && GGUF_MOE_KEYS.contains(&local)) || family_keys.contains(&local);
        if GGUF_READ_KEYS.contains(&local) || family_reads || multipliers.is_some_and(|m| m.gguf_keys().contains(&local)) {
            continue;
        }
        let changes = match local {
            "expert_count" | "expert_used_count" => value_u64(key).is_none_or(|n| n > 0),
            "attention.causal" => value_bool(key) != Some(true),
            // llama.cpp reads false as "no RoPE" for Granite.
            "rope.scaling.finetuned" if multipliers == Some(Multipliers::Granite) => value_bool(key) != Some(true),
            _ => !INERT_GGUF_KEYS.iter().any(|(k, _)| *k == local),
        };
        if changes {
            unread.push(Unread { name: key.to_owned(), suggests: key_suggestion(local).to_owned() });
        }
    }
    unread
}

/// What a GGUF key sinkscope does not read suggests.
fn key_suggestion(local: &str) -> &'static str {
    const HINTS: &[(&str, &str)] = &[
        ("expert", "a mixture of experts"),
        ("ssm.", "a state-space (Mamba) layer"),
        ("softcapping", "soft-capped scores or logits"),
        ("kv_lora_rank", "latent key-value projections (multi-head latent attention)"),
        ("q_lora_rank", "low-rank query projections (multi-head latent attention)"),
        ("rope.scaling", "a RoPE scaling setting"),
        ("rope.", "a RoPE setting"),
        ("attention.causal", "non-causal attention"),
        ("attention.", "an attention setting"),
        ("logit_scale", "scaled output logits"),
        ("scale", "a scaling of activations"),
        ("shared_kv", "key-value caches shared across layers"),
    ];
    hint(HINTS, local, "a setting no part of the decoder reads")
}

/// `config.json` fields the HF reader or a family's config rewrite reads (values it cannot
/// compute are refused there).
pub const HF_READ_FIELDS: &[&str] = &[
    "model_type",
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "original_max_position_embeddings",
    "head_dim",
    "tie_word_embeddings",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "hidden_act",
    "hidden_activation",
    "activation_function",
    "activation",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rotary_emb_base",
    "rotary_pct",
    "partial_rotary_factor",
    "rope_local_base_freq",
    "sliding_window",
    "sliding_window_pattern",
    "_sliding_window_pattern",
    "use_sliding_window",
    "layer_types",
    "no_rope_layers",
    "use_parallel_residual",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "qk_layernorm",
    "scale_attn_by_inverse_layer_idx",
    "scale_attn_weights",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "norm_topk_prob",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "swiglu_alpha",
    "swiglu_limit",
    // DeepSeek's latent attention and mixture (its config rewrite maps the rest).
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "first_k_dense_replace",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "use_bidirectional_attention",
    // Qwen3-Next's Gated DeltaNet layers.
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    // GPT-2's names for the shapes (its config rewrite maps them).
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_inner",
];

/// `config.json` fields that change nothing sinkscope computes, and why.
const INERT_HF_FIELDS: &[(&str, &str)] = &[
    ("architectures", "the class name transformers instantiates"),
    ("transformers_version", "the writer's version"),
    ("torch_dtype", "the storage type; the tensors' own types are read"),
    ("dtype", "the storage type; the tensors' own types are read"),
    ("_name_or_path", "where the model was loaded from"),
    ("_model_name_or_path", "where the model was loaded from"),
    ("unk_token_id", "special token ids: the tokenizer's own are used"),
    ("is_llama_config", "a nanotron export's note; transformers ignores it"),
    ("rope_interleaved", "a nanotron export's note; transformers ignores it and rotates halves"),
    ("experts_per_token", "gpt-oss's copy of num_experts_per_tok, which is read"),
    ("router_aux_loss_coef", "training's load-balancing loss"),
    ("output_router_logits", "whether the router's logits are returned for that loss"),
    ("router_jitter_noise", "router noise, applied in training only"),
    ("qkv_bias", "q/k/v biases are read wherever the file has them"),
    ("use_cache", "whether generation keeps a KV cache"),
    ("bos_token_id", "special token ids: the tokenizer's own are used"),
    ("eos_token_id", "special token ids: the tokenizer's own are used"),
    ("pad_token_id", "special token ids: the tokenizer's own are used"),
    ("sep_token_id", "special token ids: the tokenizer's own are used"),
    ("decoder_start_token_id", "special token ids: the tokenizer's own are used"),
    ("initializer_range", "training's weight initialisation"),
    ("attention_dropout", "dropout, off in evaluation"),
    ("hidden_dropout", "dropout, off in evaluation"),
    ("residual_dropout", "dropout, off in evaluation"),
    ("model_max_length", "the context the model is meant for (Cohere's), a note transformers does not read"),
    ("embedding_dropout", "dropout, off in evaluation"),
    ("resid_pdrop", "dropout, off in evaluation"),
    ("embd_pdrop", "dropout, off in evaluation"),
    ("attn_pdrop", "dropout, off in evaluation"),
    ("classifier_dropout", "dropout, off in evaluation"),
    ("summary_type", "GPT-2's sequence-summary head, not the language model"),
    ("summary_use_proj", "GPT-2's sequence-summary head, not the language model"),
    ("summary_activation", "GPT-2's sequence-summary head, not the language model"),
    ("summary_proj_to_labels", "GPT-2's sequence-summary head, not the language model"),
    ("summary_first_dropout", "GPT-2's sequence-summary head, not the language model"),
    ("task_specific_params", "generation defaults"),
    ("n_ctx", "GPT-2's context, equal to n_positions, which is read"),
    ("reorder_and_upcast_attn", "GPT-2's float32 upcast of scores; sinkscope computes in float32"),
    ("pretraining_tp", "Llama 2's tensor-parallel slicing of the same products"),
    ("attention_bias", "q/k/v/o biases: every bias tensor is read where the family adds it, or refused"),
    ("mlp_bias", "MLP biases: every bias tensor is read where the family adds it, or refused"),
    ("use_qkv_bias", "q/k/v biases: every bias tensor is read where the family adds it, or refused"),
    ("use_bias", "biases: every bias tensor is read where the family adds it, or refused"),
    ("bias", "biases: every bias tensor is read where the family adds it, or refused"),
    ("max_window_layers", "Qwen's windowed layers, used only with use_sliding_window (refused)"),
    ("router_aux_loss_coef", "a training loss"),
    ("output_router_logits", "a training output"),
    ("cache_implementation", "which cache class generation uses"),
    ("initial_context_length", "gpt-oss's pre-YaRN context, read from its rope scaling"),
    ("id2label", "a classification head's labels"),
    ("label2id", "a classification head's labels"),
    ("output_attentions", "what transformers returns, not what it computes"),
    ("output_hidden_states", "what transformers returns, not what it computes"),
    ("return_dict", "what transformers returns, not what it computes"),
    ("is_decoder", "a decoder-only model is a decoder"),
    ("is_encoder_decoder", "false for every family here (a model type says otherwise)"),
    ("add_cross_attention", "false for every family here (a model type says otherwise)"),
    ("tie_encoder_decoder", "encoder-decoder models only"),
    ("chunk_size_feed_forward", "transformers' memory chunking of the same product"),
    ("tokenizer_class", "the tokenizer's class; tokenizer.json is read"),
    ("use_bfloat16", "a storage type"),
    ("max_length", "a generation default"),
];

/// The top-level `config.json` fields (those not null) neither read nor known to be inert
/// (`quantization_config` among them: quantized safetensors are not dequantized; `multipliers`:
/// the family reads their fields).
pub fn hf_fields<'a>(keys: impl Iterator<Item = &'a str>, multipliers: Option<Multipliers>) -> Vec<Unread> {
    keys.filter(|k| !(HF_READ_FIELDS.contains(k) || multipliers.is_some_and(|m| m.hf_fields().contains(k))))
        .filter(|k| !INERT_HF_FIELDS.iter().any(|(f, _)| f == k))
        .map(|k| Unread { name: k.to_owned(), suggests: field_suggestion(k).to_owned() })
        .collect()
}

/// What a config.json field sinkscope does not read suggests.
fn field_suggestion(field: &str) -> &'static str {
    const HINTS: &[(&str, &str)] = &[
        ("quantization_config", "quantized weights (GPTQ, AWQ, bitsandbytes, …), which sinkscope does not dequantize"),
        ("auto_map", "custom modelling code"),
        ("expert", "a mixture of experts"),
        ("softcap", "soft-capped scores or logits"),
        ("multiplier", "a scaling of embeddings, residuals, attention or logits"),
        ("logit_scale", "scaled output logits"),
        ("scale", "a scaling of activations"),
        ("rope", "a RoPE setting"),
        ("lora_rank", "low-rank (latent) projections"),
        ("gate", "a gate"),
        ("norm", "a normalisation setting"),
        ("window", "a windowed attention setting"),
        ("linear", "linear-attention layers"),
        ("conv", "a convolution"),
    ];
    hint(HINTS, field, "a setting no part of the decoder reads")
}

/// What the first of `hints` whose fragment `name` contains says, else `otherwise`.
fn hint(hints: &[(&str, &'static str)], name: &str, otherwise: &'static str) -> &'static str {
    hints.iter().find(|(fragment, _)| name.contains(fragment)).map_or(otherwise, |(_, what)| what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_tensor_is_named_for_what_it_is() {
        let read: BTreeSet<String> = ["token_embd.weight".to_owned()].into();
        let unread = gguf_tensors(["token_embd.weight", "blk.0.attn_gate.weight"].into_iter(), &read);
        assert_eq!(unread, [Unread { name: "blk.0.attn_gate.weight".into(), suggests: "an attention output gate".into() }]);
        let line = Unread::refusal(&unread).unwrap();
        assert!(line.contains("blk.0.attn_gate.weight (an attention output gate)"), "{line}");
        assert_eq!(Unread::refusal(&[]), None);
    }

    #[test]
    fn inert_hf_buffers_and_a_tied_head_pass() {
        let read = BTreeSet::new();
        let names =
            ["model.layers.0.self_attn.rotary_emb.inv_freq", "h.0.attn.bias", "mtp.fc.weight", "mtp.layers.0.mlp.gate.weight", "lm_head.weight"];
        assert!(hf_tensors(names.into_iter(), &read, true).is_empty());
        assert_eq!(hf_tensors(names.into_iter(), &read, false).len(), 1);
    }

    #[test]
    fn gguf_keys_are_read_inert_or_refused() {
        let keys = ["llama.block_count", "llama.expert_count", "llama.attention.causal", "llama.ssm.conv_kernel", "general.name"];
        let zero = |_: &str| Some(0);
        let unread = gguf_keys("llama", false, &[], None, keys.into_iter(), zero, |_| Some(true));
        assert_eq!(unread.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["llama.ssm.conv_kernel"]);
        let experts = gguf_keys("llama", false, &[], None, keys.into_iter(), |_| Some(8), |_| Some(false));
        assert_eq!(
            experts.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            ["llama.expert_count", "llama.attention.causal", "llama.ssm.conv_kernel"]
        );
        assert_eq!(experts[0].suggests, "a mixture of experts");
    }
}
