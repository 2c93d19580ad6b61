//! A GGUF file's metadata as the decoder's configuration: llama.cpp's `{arch}.*` keys, what the
//! family fixes for the architecture instead of storing it (window layout, NoPE layers, Gemma's
//! 27B query scale), and every value sinkscope does not compute refused by name.

use super::decoder::config::{ArchSwitches, DeltaNetShape, Mla, MAX_SIZE};
use super::decoder::{DecoderConfig, LayerAttn, MlpKind};
use super::family::{beyond, Family, Multipliers};
use super::gguf::{self, GgufFile};
use super::rope::{FreqFactors, Yarn};
use super::setting_rules::{Expect, Seen};
use super::unread::{self, Unread};
use crate::error::{Error, Result};

/// What a GGUF file says the model is.
pub struct GgufModel {
    /// `general.architecture`.
    pub arch: String,
    pub cfg: DecoderConfig,
    /// Metadata keys no part of the decoder reads.
    pub unread: Vec<Unread>,
}

/// The shape a GGUF file states, checked.
struct Shape {
    n_layers: usize,
    n_heads: usize,
    d_model: usize,
    d_head: usize,
    vocab_size: usize,
}

/// Every `{arch}.*` setting the decoder reads and the kind of value it must hold: a present one
/// outside its range is refused by key before any is used; an absent one takes its default.
pub const GGUF_KEYS: &[(&str, Expect)] = &[
    ("block_count", Expect::Count),
    ("context_length", Expect::Count),
    ("embedding_length", Expect::Count),
    ("feed_forward_length", Expect::Count),
    ("vocab_size", Expect::Count),
    ("attention.head_count", Expect::Count),
    ("attention.head_count_kv", Expect::Count),
    ("attention.key_length", Expect::Count),
    ("attention.value_length", Expect::Count),
    ("attention.layer_norm_rms_epsilon", Expect::NonNegative),
    ("attention.layer_norm_epsilon", Expect::NonNegative),
    ("attention.sliding_window", Expect::Size),
    ("attention.scale", Expect::Finite),
    ("rope.dimension_count", Expect::Size),
    ("rope.freq_base", Expect::Positive),
    ("rope.freq_base_swa", Expect::Positive),
    ("rope.scaling.factor", Expect::Positive),
    ("rope.scaling.original_context_length", Expect::Positive),
    ("rope.scaling.yarn_beta_fast", Expect::Positive),
    ("rope.scaling.yarn_beta_slow", Expect::Positive),
    ("rope.scaling.yarn_attn_factor", Expect::Positive),
    ("expert_count", Expect::Size),
    ("expert_used_count", Expect::Count),
    ("expert_feed_forward_length", Expect::Count),
    ("expert_shared_feed_forward_length", Expect::Size),
    ("embedding_scale", Expect::Finite),
    ("residual_scale", Expect::Finite),
    ("logit_scale", Expect::Finite),
    ("attn_logit_softcapping", Expect::NonNegative),
    ("final_logit_softcapping", Expect::NonNegative),
    ("use_parallel_residual", Expect::Flag),
    ("attention.q_lora_rank", Expect::Size),
    ("attention.kv_lora_rank", Expect::Count),
    ("attention.key_length_mla", Expect::Count),
    ("attention.value_length_mla", Expect::Count),
    ("leading_dense_block_count", Expect::Size),
    ("expert_shared_count", Expect::Size),
    ("expert_weights_scale", Expect::Positive),
    ("expert_weights_norm", Expect::Flag),
    ("expert_group_count", Expect::Size),
    ("expert_group_used_count", Expect::Size),
    ("expert_gating_func", Expect::Size),
];

/// A GGUF value as the setting rules see it.
pub fn seen(v: &gguf::Value) -> Seen {
    use gguf::Value as V;
    match v {
        V::U8(x) => Seen::Int(i128::from(*x)),
        V::I8(x) => Seen::Int(i128::from(*x)),
        V::U16(x) => Seen::Int(i128::from(*x)),
        V::I16(x) => Seen::Int(i128::from(*x)),
        V::U32(x) => Seen::Int(i128::from(*x)),
        V::I32(x) => Seen::Int(i128::from(*x)),
        V::U64(x) => Seen::Int(i128::from(*x)),
        V::I64(x) => Seen::Int(i128::from(*x)),
        V::F32(x) => Seen::Float(f64::from(*x)),
        V::F64(x) => Seen::Float(*x),
        V::Bool(x) => Seen::Bool(*x),
        V::Str(s) => Seen::Other(format!("the string {s:?}")),
        V::Array(a) => Seen::Other(format!("a list of {} values", a.len())),
    }
}

/// Refuses the first `{arch}.*` setting of [`GGUF_KEYS`] whose value is not of its kind.
fn check_keys(file: &GgufFile, arch: &str) -> Result<()> {
    check_metadata(&file.metadata, arch)
        .map_err(|why| Error::file(&file.path, format!("{why}; the file is corrupt, or not of a kind sinkscope reads")))
}

/// [`check_keys`] on a file's metadata: the words of the first refusal.
fn check_metadata(metadata: &std::collections::BTreeMap<String, gguf::Value>, arch: &str) -> std::result::Result<(), String> {
    for &(suffix, expect) in GGUF_KEYS {
        let key = format!("{arch}.{suffix}");
        if let Some(v) = metadata.get(&key) {
            expect.check(&key, &seen(v))?;
        }
    }
    Ok(())
}

/// Reads the decoder's configuration from `file`'s metadata.
pub fn read_config(file: &GgufFile) -> Result<GgufModel> {
    let (arch, family, experts) = family_of(file)?;
    check_keys(file, &arch)?;
    let key = |k: &str| format!("{arch}.{k}");
    let family_keys = match (family.switches.mla, family.switches.delta_net) {
        (Some(_), _) => unread::GGUF_LATENT_KEYS,
        (_, Some(_)) => unread::GGUF_LINEAR_KEYS,
        _ => &[],
    };
    let unread = unread::gguf_keys(
        &arch,
        family.is_moe(),
        family_keys,
        family.multipliers,
        file.metadata.keys().map(String::as_str),
        |k| file.get(k).and_then(gguf::Value::as_u64),
        |k| file.get(k).and_then(gguf::Value::as_bool),
    );
    let shape = shape_of(file, &arch, family.switches.mla.is_some())?;
    let rope_theta = file.opt_f64(&key("rope.freq_base")).unwrap_or(10000.0);
    let mut layers = gguf_layers(file, &arch, family, shape.n_layers, rope_theta)?;
    if family.gguf_nope_every > 0 {
        layers.iter_mut().skip(family.gguf_nope_every - 1).step_by(family.gguf_nope_every).for_each(|layer| layer.nope = true);
    }
    let mut switches = switches_of(file, &arch, family, &shape);
    let rope_freq_factors = gguf_freq_factors(file, &arch, switches.rotary_dims.unwrap_or(shape.d_head))?;
    let context_len = file.req_u64(&key("context_length"))? as usize;
    switches.rope_yarn = gguf_yarn(file, &arch, context_len)?;
    let dense_ff = file.req_u64(&key("feed_forward_length"))? as usize;
    let d_ff = experts_of(file, &arch, experts, &mut switches)?.unwrap_or(dense_ff);
    if switches.mla.is_some() {
        latent_of(file, &arch, &shape, dense_ff, &mut switches)?;
    }
    if switches.delta_net.is_some() {
        switches.delta_net = Some(linear_of(file, &arch, &mut layers)?);
    }
    let cfg = DecoderConfig {
        n_layers: shape.n_layers,
        n_heads: shape.n_heads,
        n_kv_heads: file.get(&key("attention.head_count_kv")).and_then(gguf::Value::as_u64).map_or(shape.n_heads, |v| v as usize),
        d_model: shape.d_model,
        d_head: shape.d_head,
        d_ff,
        vocab_size: shape.vocab_size,
        context_len,
        rope_theta,
        rope_layout: family.gguf_rope,
        rope_freq_factors,
        rms_eps: file
            .opt_f64(&key("attention.layer_norm_rms_epsilon"))
            .or_else(|| file.opt_f64(&key("attention.layer_norm_epsilon")))
            .unwrap_or(1e-5),
        arch: switches,
        layers,
    };
    Ok(GgufModel { arch, cfg, unread })
}

/// The file's architecture, its family (a `llama` file with experts is Mixtral) and its expert
/// count; experts without a count are refused (loading them as a dense block would call the MLP
/// missing).
fn family_of(file: &GgufFile) -> Result<(String, Family, u64)> {
    let arch = file.architecture()?.to_owned();
    let family = Family::from_gguf(&arch).ok_or_else(|| match beyond::gguf(&arch) {
        Some(missing) => Error::file(
            &file.path,
            format!(
                "architecture '{arch}' has {missing}, which sinkscope does not compute yet; it supports GGUF models of the architectures {}",
                Family::gguf_supported()
            ),
        ),
        None => Error::file(
            &file.path,
            format!("unknown architecture '{arch}'; sinkscope supports GGUF models of the architectures {}", Family::gguf_supported()),
        ),
    })?;
    let count_key = format!("{arch}.expert_count");
    let experts = file.get(&count_key).and_then(gguf::Value::as_u64).unwrap_or(0);
    let family = family.with_gguf_experts(experts);
    if let Some(t) = file.tensors.keys().find(|n| n.contains("_exps.")).filter(|_| !family.is_moe()) {
        return Err(Error::file(
            &file.path,
            format!("holds {t} (a mixture of experts) but no {count_key} > 0, which sinkscope needs to compute it; the file is incomplete"),
        ));
    }
    Ok((arch, family, experts))
}

/// Layers, heads, widths and vocabulary, with the value length and stated vocabulary held
/// against them.
fn shape_of(file: &GgufFile, arch: &str, latent: bool) -> Result<Shape> {
    let key = |k: &str| format!("{arch}.{k}");
    let path = &file.path;
    let n_heads = file.req_u64(&key("attention.head_count"))? as usize;
    let d_model = file.req_u64(&key("embedding_length"))? as usize;
    let vocab_size = file
        .tensors
        .get("token_embd.weight")
        .map(|t| t.shape[0])
        .ok_or_else(|| Error::file(path, "tensor token_embd.weight is missing; the GGUF file is incomplete"))?;
    let d_head = file.get(&key("attention.key_length")).and_then(gguf::Value::as_u64).map_or(d_model / n_heads.max(1), |v| v as usize);
    // Latent attention's values are the latent part of the cached row (`latent_of` checks them).
    if let Some(v) = file.get(&key("attention.value_length")).and_then(gguf::Value::as_u64).filter(|&v| v as usize != d_head && !latent) {
        return Err(Error::file(
            path,
            format!(
                "{} = {v} differs from the key length {d_head}, which sinkscope does not compute yet; the numbers would be another model's",
                key("attention.value_length")
            ),
        ));
    }
    if let Some(v) = file.get(&key("vocab_size")).and_then(gguf::Value::as_u64).filter(|&v| v as usize != vocab_size) {
        return Err(Error::file(path, format!("{} = {v} but token_embd.weight has {vocab_size} rows; the file is inconsistent", key("vocab_size"))));
    }
    let n_layers = file.req_u64(&key("block_count"))? as usize;
    if n_layers == 0 || n_layers > MAX_SIZE {
        return Err(Error::file(path, format!("model configuration is impossible: layers = {n_layers}")));
    }
    Ok(Shape { n_layers, n_heads, d_model, d_head, vocab_size })
}

/// The family's switches as the file adjusts them: rotary dims, a parallel residual, Gemma's
/// 27B query scale, the family's multipliers, soft-caps.
fn switches_of(file: &GgufFile, arch: &str, family: Family, shape: &Shape) -> ArchSwitches {
    let key = |k: &str| format!("{arch}.{k}");
    let Shape { n_layers, n_heads, d_model, d_head, .. } = *shape;
    let mut switches = family.switches;
    if let Some(r) = file.get(&key("rope.dimension_count")).and_then(gguf::Value::as_u64) {
        switches.rotary_dims = Some(r as usize).filter(|&r| r != d_head);
    }
    if let Some(parallel) = file.get(&key("use_parallel_residual")).and_then(gguf::Value::as_bool) {
        switches.parallel_residual = parallel;
    }
    // llama.cpp's rule for some sizes of a family (Gemma's 27B): queries scaled by
    // (d_model / heads)^−½ instead of d_head^−½, as the HF configs' query_pre_attn_scalar says.
    if family.gguf_attn_scale_layers.contains(&n_layers) && d_model / n_heads.max(1) != d_head {
        switches.attn_scale = Some(1.0 / ((d_model / n_heads.max(1)) as f64).sqrt());
    }
    // llama.cpp's reading: 0 or absent means "not scaled" (the attention's 1/√d_head).
    let factor = |k: &str| file.opt_f64(&key(k)).filter(|&f| f != 0.0 && f != 1.0);
    match family.multipliers {
        Some(Multipliers::Granite) => {
            switches.attn_scale = file.opt_f64(&key("attention.scale")).filter(|&s| s != 0.0 && s != 1.0 / (d_head as f64).sqrt());
            switches.embed_multiplier = factor("embedding_scale");
            switches.residual_multiplier = factor("residual_scale");
            switches.logit_divisor = factor("logit_scale");
        }
        Some(Multipliers::LogitScale) => switches.logit_divisor = factor("logit_scale").map(|s| 1.0 / s),
        None => {}
    }
    switches.attn_logit_softcap = file.opt_f64(&key("attn_logit_softcapping")).filter(|&c| c != 0.0);
    switches.final_logit_softcap = file.opt_f64(&key("final_logit_softcapping")).filter(|&c| c != 0.0);
    switches
}

/// A mixture of experts' counts into `switches` (`experts` of them, the used and shared ones);
/// the width of one expert when the file states it.
fn experts_of(file: &GgufFile, arch: &str, experts: u64, switches: &mut ArchSwitches) -> Result<Option<usize>> {
    let MlpKind::Moe(moe) = &mut switches.mlp else { return Ok(None) };
    let key = |k: &str| format!("{arch}.{k}");
    let count = |k: &str| -> Result<Option<usize>> {
        match file.get(&key(k)) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| Error::file(&file.path, format!("{} is not one count (a count per layer is not computed yet)", key(k)))),
        }
    };
    moe.experts = experts as usize;
    moe.top_k = file.req_u64(&key("expert_used_count"))? as usize;
    moe.shared_ff = count("expert_shared_feed_forward_length")?.unwrap_or(0);
    count("expert_feed_forward_length")
}

/// Latent attention's shape and DeepSeek's mixture as a `deepseek2` file states them (llama.cpp's
/// converter: key_length = the cached row, value_length = the latent, `*_mla` the expanded
/// widths), refusing what is not computed: a RoPE scaling other than YaRN with its log multiplier,
/// a sigmoid router.
fn latent_of(file: &GgufFile, arch: &str, shape: &Shape, dense_ff: usize, switches: &mut ArchSwitches) -> Result<()> {
    let key = |k: &str| format!("{arch}.{k}");
    let count = |k: &str| file.get(&key(k)).and_then(gguf::Value::as_u64).map(|v| v as usize);
    let (kv_lora_rank, qk_rope) = (file.req_u64(&key("attention.kv_lora_rank"))? as usize, file.req_u64(&key("rope.dimension_count"))? as usize);
    let (key_mla, v_head) = (file.req_u64(&key("attention.key_length_mla"))? as usize, file.req_u64(&key("attention.value_length_mla"))? as usize);
    let refuse = |what: String| {
        Error::file(&file.path, format!("{what}, which sinkscope does not compute for latent attention yet; the numbers would be another model's"))
    };
    if shape.d_head != kv_lora_rank + qk_rope || count("attention.value_length").is_some_and(|v| v != kv_lora_rank) || key_mla <= qk_rope {
        return Err(Error::file(
            &file.path,
            format!(
                "{} and {} disagree with a latent of {kv_lora_rank} and a RoPE key of {qk_rope}; the file is inconsistent",
                key("attention.key_length"),
                key("attention.value_length")
            ),
        ));
    }
    if let Some(kind) = file.get(&key("rope.scaling.type")).and_then(gguf::Value::as_str).filter(|&k| k != "none" && k != "yarn") {
        return Err(refuse(format!("{} = {kind} (a RoPE scaling other than YaRN)", key("rope.scaling.type"))));
    }
    if let Some(g) = count("expert_gating_func").filter(|&g| g != 1) {
        return Err(refuse(format!("{} = {g} (a router other than a softmax)", key("expert_gating_func"))));
    }
    let mla = Mla { q_lora_rank: count("attention.q_lora_rank").unwrap_or(0), kv_lora_rank, qk_nope: key_mla - qk_rope, qk_rope, v_head };
    switches.set_latent(mla);
    if let Some(yarn) = switches.rope_yarn.as_mut() {
        // llama.cpp's deepseek2 YaRN: the RoPE key's cos/sin unscaled (its attention factor
        // cancels ggml's), the scores × mscale² with mscale = 1 + 0.1 · mscale_all_dim · ln(factor)
        // (the converter stores 0.1 · mscale_all_dim as the log multiplier).
        let log_mul = file
            .opt_f64(&key("rope.scaling.yarn_log_multiplier"))
            .ok_or_else(|| refuse(format!("YaRN without {} (DeepSeek's mscale_all_dim)", key("rope.scaling.yarn_log_multiplier"))))?;
        if file.get(&key("rope.scaling.yarn_attn_factor")).is_some() {
            return Err(refuse(format!("{} beside DeepSeek's YaRN", key("rope.scaling.yarn_attn_factor"))));
        }
        let mscale = 1.0 + log_mul * yarn.factor.ln();
        yarn.attention_factor = 1.0;
        switches.attn_scale = switches.attn_scale.map(|s| s * mscale * mscale);
    }
    if let MlpKind::Moe(moe) = &mut switches.mlp {
        let expert_ff = count("expert_feed_forward_length").unwrap_or(0);
        moe.shared_ff = count("expert_shared_count").unwrap_or(0) * expert_ff;
        moe.dense_layers = count("leading_dense_block_count").unwrap_or(0);
        moe.dense_ff = if moe.dense_layers > 0 { dense_ff } else { 0 };
        (moe.groups, moe.top_groups) = (count("expert_group_count").unwrap_or(0), count("expert_group_used_count").unwrap_or(0));
        // llama.cpp ranks a deepseek2 file's groups by their two best experts (DeepSeek-V3's
        // rule) whatever the model: what an engine running this file computes.
        moe.groups_by_top_two = moe.groups > 1;
        moe.routed_scale = file.opt_f64(&key("expert_weights_scale")).filter(|&s| s != 1.0 && s != 0.0);
        moe.norm_top_k = file.get(&key("expert_weights_norm")).and_then(gguf::Value::as_bool).unwrap_or(false);
    }
    Ok(())
}

/// How each layer of a GGUF file attends: through `{arch}.attention.sliding_window` keys (or the
/// window llama.cpp assumes for the family) on the layers `attention.sliding_window_pattern` says
/// (every Nth layer global, or one flag per layer) or the family fixes, rotated with
/// `rope.freq_base_swa` or the family's local base; every layer global otherwise.
fn gguf_layers(file: &GgufFile, arch: &str, family: Family, n_layers: usize, theta: f64) -> Result<Vec<LayerAttn>> {
    let key = |k: &str| format!("{arch}.{k}");
    // llama.cpp's converter writes 0 for "no window" (Phi-3's config without one).
    let window = file.get(&key("attention.sliding_window")).and_then(gguf::Value::as_u64).filter(|&w| w > 0).map(|w| w as usize);
    let layout = match (window, family.gguf_windows) {
        (Some(w), None) => {
            return Err(Error::file(
                &file.path,
                format!("the model attends through a sliding window of {w} keys ({}), which sinkscope computes for {} only so far; the numbers would be another model's", key("attention.sliding_window"), Family::gguf_windowed_supported()),
            ))
        }
        (_, None) => return Ok(vec![LayerAttn::global(theta); n_layers]),
        (_, Some(layout)) => layout,
    };
    let Some(window) = window.or(layout.default_window) else { return Ok(vec![LayerAttn::global(theta); n_layers]) };
    let local = LayerAttn {
        window: Some(window),
        rope_theta: file.opt_f64(&key("rope.freq_base_swa")).or(layout.local_rope_theta).unwrap_or(theta),
        nope: false,
        unscaled: !layout.local_scaled,
        linear: false,
    };
    let pattern_key = key("attention.sliding_window_pattern");
    let windowed: Vec<bool> = match file.get(&pattern_key) {
        Some(gguf::Value::Array(flags)) => {
            let flags: Option<Vec<bool>> = flags.iter().map(gguf::Value::as_bool).collect();
            flags
                .filter(|f| f.len() == n_layers)
                .ok_or_else(|| Error::file(&file.path, format!("{pattern_key} is not one flag per layer ({n_layers}); the file is corrupt")))?
        }
        Some(v) => {
            let every = v
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::file(&file.path, format!("{pattern_key} is not a positive count; the file is corrupt")))?;
            (0..n_layers as u64).map(|l| l % every < every - 1).collect()
        }
        None => (0..n_layers).map(|l| layout.global_every == 0 || (l + 1) % layout.global_every != 0).collect(),
    };
    Ok(windowed.into_iter().map(|w| if w { local } else { LayerAttn::global(theta) }).collect())
}

/// Gated DeltaNet's shape as a `qwen3next` file states it (llama.cpp's converter: `ssm.group_count`
/// key heads of `ssm.state_size`, `ssm.time_step_rank` value heads sharing `ssm.inner_size`, a
/// `ssm.conv_kernel`-tap convolution), marking the linear layers (`attention.recurrent_layers`,
/// else all but every `full_attention_interval`-th, 4 unless stated, as llama.cpp reads it).
fn linear_of(file: &GgufFile, arch: &str, layers: &mut [LayerAttn]) -> Result<DeltaNetShape> {
    let key = |k: &str| format!("{arch}.{k}");
    let count = |k: &str| -> Result<usize> { Ok(file.req_u64(&key(k))? as usize) };
    if let Some(n) = file.get(&key("nextn_predict_layers")).and_then(gguf::Value::as_u64).filter(|&n| n > 0) {
        return Err(Error::file(
            &file.path,
            format!(
                "holds {n} multi-token-prediction layer(s) ({}), which sinkscope does not lay out yet; convert with --no-mtp",
                key("nextn_predict_layers")
            ),
        ));
    }
    let (v_heads, inner) = (count("ssm.time_step_rank")?, count("ssm.inner_size")?);
    let shape = DeltaNetShape {
        k_heads: count("ssm.group_count")?,
        v_heads,
        k_dim: count("ssm.state_size")?,
        v_dim: inner / v_heads.max(1),
        conv_kernel: count("ssm.conv_kernel")?,
    };
    if v_heads == 0 || !inner.is_multiple_of(v_heads) {
        return Err(Error::file(
            &file.path,
            format!("{} = {inner} is not a multiple of {v_heads} value heads; the file is inconsistent", key("ssm.inner_size")),
        ));
    }
    let n = layers.len();
    let linear: Vec<bool> = match file.get(&key("attention.recurrent_layers")) {
        Some(gguf::Value::Array(flags)) => {
            flags.iter().map(gguf::Value::as_bool).collect::<Option<Vec<bool>>>().filter(|f| f.len() == n).ok_or_else(|| {
                Error::file(&file.path, format!("{} is not one flag per layer ({n}); the file is corrupt", key("attention.recurrent_layers")))
            })?
        }
        _ => {
            let every = file.get(&key("full_attention_interval")).and_then(gguf::Value::as_u64).unwrap_or(4).max(1) as usize;
            (0..n).map(|l| (l + 1) % every != 0).collect()
        }
    };
    for (layer, linear) in layers.iter_mut().zip(linear) {
        layer.linear = linear;
    }
    Ok(shape)
}

/// YaRN as a GGUF file states it (`rope.scaling.type` yarn): `rope.scaling.factor`, the
/// original context (`rope.scaling.original_context_length`, else the training context, as
/// llama.cpp reads it), the ramp's betas (`yarn_beta_fast`, `yarn_beta_slow`: 32 and 1 unless
/// stated) and the attention factor the converter copies from the HF config
/// (`yarn_attn_factor`; else 1 + 0.1·ln(factor), which llama.cpp computes in any case).
fn gguf_yarn(file: &GgufFile, arch: &str, context_len: usize) -> Result<Option<Yarn>> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    if file.get(&key("type")).and_then(gguf::Value::as_str) != Some("yarn") {
        return Ok(None);
    }
    let positive = |k: &str| -> Result<Option<f64>> {
        match file.opt_f64(&key(k)) {
            None => Ok(None),
            Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
            Some(v) => Err(Error::file(&file.path, format!("{} = {v} is not a positive number; the file is corrupt", key(k)))),
        }
    };
    let factor = positive("factor")?
        .ok_or_else(|| Error::file(&file.path, format!("{} is yarn but {} is missing; the file is incomplete", key("type"), key("factor"))))?;
    Ok(Some(Yarn {
        factor,
        original_context: positive("original_context_length")?.unwrap_or(context_len as f64),
        beta_fast: positive("yarn_beta_fast")?.unwrap_or(32.0),
        beta_slow: positive("yarn_beta_slow")?.unwrap_or(1.0),
        truncate: true,
        attention_factor: positive("yarn_attn_factor")?.unwrap_or(if factor <= 1.0 { 1.0 } else { 1.0 + 0.1 * factor.ln() }),
    }))
}

/// The RoPE frequency factors of a GGUF file: llama.cpp's `rope_freqs.weight` (what its
/// converter writes for Llama 3's scaling) and a linear `rope.scaling.type`, which llama.cpp
/// applies together; YaRN is [`gguf_yarn`]'s, any other scaling type is refused by name.
fn gguf_freq_factors(file: &GgufFile, arch: &str, rot_dims: usize) -> Result<Option<FreqFactors>> {
    let path = &file.path;
    let scaling_key = format!("{arch}.rope.scaling.type");
    let linear = match file.get(&scaling_key).and_then(gguf::Value::as_str) {
        None | Some("none") | Some("yarn") => None,
        Some("linear") => {
            let key = format!("{arch}.rope.scaling.factor");
            let factor = file.opt_f64(&key).filter(|f| f.is_finite() && *f > 0.0);
            Some(factor.ok_or_else(|| Error::file(path, format!("{scaling_key} is linear but {key} is missing or not positive; the file is incomplete")))?)
        }
        Some(kind) => {
            return Err(Error::file(path, format!("{scaling_key} = {kind}: RoPE scaling '{kind}', which sinkscope does not compute for GGUF files yet; the numbers would be another model's")))
        }
    };
    let tensor = match file.tensors.get("rope_freqs.weight") {
        None => None,
        Some(t) if t.shape.iter().product::<usize>() == rot_dims / 2 => {
            let values = file.qtensor("rope_freqs.weight")?.dequantize(&candle_core::Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
            Some(values.into_iter().map(f64::from).collect::<Vec<_>>())
        }
        Some(t) => {
            return Err(Error::file(
                path,
                format!(
                    "tensor rope_freqs.weight has shape {:?} but the model rotates {} pairs of dimensions; the file is inconsistent",
                    t.shape,
                    rot_dims / 2
                ),
            ))
        }
    };
    Ok(match (tensor, linear) {
        (None, None) => None,
        (None, Some(f)) => Some(FreqFactors::linear(f, rot_dims / 2)),
        (Some(factors), None) => Some(FreqFactors { source: "rope_freqs.weight".into(), factors }),
        (Some(factors), Some(f)) => {
            Some(FreqFactors { source: format!("rope_freqs.weight, linear ×{f}"), factors: factors.iter().map(|x| x * f).collect() })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::Value as V;

    /// A value each kind admits and one it refuses, as a GGUF writer would store them.
    fn admitted_and_refused(kind: Expect) -> (V, V) {
        match kind {
            Expect::Count => (V::U32(8), V::U32(0)),
            Expect::Size => (V::U32(0), V::I32(-1)),
            Expect::Positive => (V::F32(1e-5), V::F32(0.0)),
            Expect::NonNegative => (V::F32(0.0), V::F32(-1.0)),
            Expect::Finite => (V::F32(-3.0), V::F32(f32::NAN)),
            Expect::Fraction => (V::F32(0.5), V::F32(1.5)),
            Expect::Flag => (V::Bool(true), V::U32(1)),
        }
    }

    /// Row by row: each setting of the table is read under its architecture's prefix, admits a
    /// value of its kind and refuses one outside it, naming the key and the value.
    #[test]
    fn every_gguf_setting_is_checked_by_its_own_rule() {
        for &(suffix, kind) in GGUF_KEYS {
            let (good, bad) = admitted_and_refused(kind);
            for arch in ["llama", "qwen3"] {
                let key = format!("{arch}.{suffix}");
                let with = |v: &V| [(key.clone(), v.clone())].into_iter().collect();
                assert_eq!(check_metadata(&with(&good), arch), Ok(()), "{key} = {}", seen(&good));
                let why = check_metadata(&with(&bad), arch).unwrap_err();
                assert!(why.starts_with(&format!("{key} = {} is not ", seen(&bad))), "{key}: {why}");
                assert_eq!(check_metadata(&with(&bad), "gemma3"), Ok(()), "{key} belongs to {arch} only");
            }
        }
        // A string where a number belongs (a hand-edited file) is refused by what it is.
        let key = "llama.rope.freq_base".to_string();
        let why = check_metadata(&[(key, V::Str("10000".into()))].into_iter().collect(), "llama").unwrap_err();
        assert_eq!(why, "llama.rope.freq_base = the string \"10000\" is not a finite number above 0");
    }
}
