//! A hybrid of linear attention and gated attention (Qwen3-Next) against HF transformers: from
//! the HF checkpoint and the GGUF llama.cpp's converter writes, every output the design adds
//! (gates, linear-attention readings and states, decoding), and under cache policies.

mod common;

use sinkscope::model::{load, LoadOptions};

/// Qwen3-Next's hybrid: Gated DeltaNet layers (causal convolution, L2-normalised q/k, the delta
/// rule's state, a gated RMSNorm) between gated attention layers (σ(gate) per head, partial RoPE,
/// q/k norms), zero-centred RMSNorms, normalised top-k experts with a gated shared expert:
/// logits and the attention layers' patterns, each gate, each linear layer's readings and state,
/// and decoding token by token after a prefill.
#[test]
fn qwen3_next_hybrid_matches_transformers() {
    let dir = common::fixture("arch/qwen3_next");
    // The HF checkpoint, and the GGUF llama.cpp's converter writes from it (attn_qkv / attn_gate
    // regrouped, ssm_a = −exp(A_log), the MLP norm as post_attention_norm).
    // Its twin with value heads as wide as key heads is the one held against llama.cpp
    // (tests/llama_cpp.rs).
    for family in ["qwen3_next", "qwen3_next_llama"] {
        let dir = common::fixture(&format!("arch/{family}"));
        for model in [dir.clone(), dir.join("model.gguf")] {
            common::parity::matches_transformers(family, model.to_str().unwrap());
            common::parity::hybrid_matches_transformers(family, model.to_str().unwrap());
        }
    }
    // Streamed under a policy, the linear layers' state is carried from block to block: the dense
    // stream gives the one plain forward's NLL (chunked form over every token at once).
    use sinkscope::kv::{simulate, Eviction, Policy, PositionMode};
    use sinkscope::model::receiver::NoCapture;
    let lm = load(dir.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(200).collect();
    let dense = simulate(&lm.model, &ids, &[Policy::new(Eviction::Dense, 0, PositionMode::Slot)], &mut |_, _| {}).unwrap().remove(0);
    let hidden = lm.model.forward(&ids[..ids.len() - 1], None, &mut NoCapture).unwrap();
    let plain = lm.model.next_token_nll(&hidden, &ids[1..]).unwrap();
    let worst = common::max_abs_diff("dense stream vs one forward", &dense.nll, &plain);
    assert!(worst < 1e-4, "dense stream vs one forward: {worst}");
    // Score-based policies evict from the attention layers only, in the block replay as when
    // decoding token by token.
    use sinkscope::kv::{simulate_with, PolicyKind, SimOptions};
    for kind in [PolicyKind::H2o, PolicyKind::Tova, PolicyKind::Snapkv] {
        let p = Policy::new(Eviction::of_kind(kind, 4, None), 40, PositionMode::Slot);
        let replay = simulate(&lm.model, &ids, &[p], &mut |_, _| {}).unwrap().remove(0);
        let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
        let decoded = simulate_with(&lm.model, &ids, &[p], by_token, &mut |_, _| {}).unwrap().remove(0);
        let worst = common::max_abs_diff("replay vs token by token", &replay.nll, &decoded.nll);
        assert!(worst < 1e-4 && replay.cache_len == decoded.cache_len, "{}: block replay vs token by token {worst}", replay.label);
        assert!(replay.cache_len.iter().max() == Some(&40), "{}: {:?}", replay.label, replay.cache_len);
    }
}

/// The KL divergence from the exact cache on a hybrid (an fp8 cache, a positional and a scored
/// policy): its per-head report names the attending layers' heads only, each with the queries
/// they averaged over and its sink mass where it was measured (not under another layer's index).
#[test]
fn a_hybrids_cache_error_is_reported_for_the_heads_that_attend() {
    use sinkscope::kv::divergence::divergence_from_exact;
    use sinkscope::kv::{Eviction, Policy, PolicyKind, PositionMode};
    use sinkscope::model::cache_rounding::CacheRounding;
    use sinkscope::numerics::cache_formats::CacheFormat;
    let lm = load(common::fixture("arch/qwen3_next").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(120).collect();
    let fp8 = CacheRounding { keys: CacheFormat::Fp8E4m3, values: CacheFormat::Fp8E4m3, ..CacheRounding::default() };
    for kind in [PolicyKind::Sink, PolicyKind::H2o] {
        let policy = Policy::new(Eviction::of_kind(kind, 4, None), 40, PositionMode::Slot);
        let d = divergence_from_exact(&lm.model, &ids, (policy, fp8), 4, &mut |_, _| {}).unwrap();
        let layers: std::collections::BTreeSet<usize> = d.by_head.heads.iter().map(|h| h.layer).collect();
        assert_eq!(layers.into_iter().collect::<Vec<_>>(), [1, 3], "{}", policy.label());
        assert_eq!(d.by_head.heads.len(), 8, "{}", policy.label());
        assert!(d.by_head.queries > 0 && d.kl.iter().all(|k| k.is_finite() && *k >= -1e-9), "{}", policy.label());
        // Each attending head attends: some of its mass lies on the first tokens.
        assert!(d.by_head.heads.iter().all(|h| h.sink_mass_exact > 0.0 && h.sink_mass_exact <= 1.0 + 1e-9), "{}", policy.label());
    }
}
