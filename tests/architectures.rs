//! Families beyond Llama against HF transformers: each tests/fixtures/arch/<family>/ holds a tiny
//! random-weight model (config.json + model.safetensors + tokenizer.json) and HF's eager float32
//! outputs on 48 tokens (made by tests/fixtures/make_arch_fixtures.py), and where llama.cpp defines
//! the family's GGUF layout the same weights as model.gguf. Loaded through the same paths a
//! user's files take; logits ≤ 1e-3 and every layer's pattern ≤ 1e-4 (abs).

mod common;

use common::parity::{matches_transformers, LOGIT_TOL, PATTERN_TOL};
use common::Fixture;
use sinkscope::capture::collector::TensorCollector;
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::{load, LoadOptions};

/// Qwen3: per-head RMSNorm of q and k before RoPE, head_dim wider than hidden/heads, tied output.
#[test]
fn qwen3_matches_transformers() {
    matches_transformers("qwen3", common::fixture("arch/qwen3").to_str().unwrap());
}

/// The same weights as llama.cpp lays out a `qwen3` GGUF (tensor names, metadata keys, NEOX RoPE,
/// the tokenizer embedded).
#[test]
fn qwen3_gguf_matches_transformers() {
    matches_transformers("qwen3", common::fixture("arch/qwen3/model.gguf").to_str().unwrap());
}

/// Llama 3.x: Llama's block with Llama 3.1's RoPE scaling (`rope_type: llama3`, frequencies in all
/// three of its bands), the head tied to the embeddings as in Llama 3.2 — from the HF directory
/// and from the GGUF llama.cpp's own converter wrote from it (`rope_freqs.weight`).
#[test]
fn llama3_matches_transformers() {
    matches_transformers("llama3", common::fixture("arch/llama3").to_str().unwrap());
    matches_transformers("llama3", common::fixture("arch/llama3/model.gguf").to_str().unwrap());
}

/// Gemma 2: Gemma's sandwich norms (w − 1), GeGLU and √d embedding scale without q/k norms;
/// attention scores and final logits soft-capped (caps that bind on the fixture), windowed
/// (16 keys) and global layers alternating — from the HF directory and from the GGUF llama.cpp's
/// converter wrote from it.
#[test]
fn gemma2_matches_transformers() {
    matches_transformers("gemma2", common::fixture("arch/gemma2").to_str().unwrap());
    matches_transformers("gemma2", common::fixture("arch/gemma2/model.gguf").to_str().unwrap());
    let lm = load(common::fixture("arch/gemma2/model.gguf").to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!((lm.model.cfg.arch.attn_logit_softcap, lm.model.cfg.arch.final_logit_softcap), (Some(5.0), Some(3.0)));
    assert_eq!(lm.model.cfg.windowed_layers(), [0, 2]);
}

/// Phi-3 / 3.5 / 4-mini: q|k|v and gate|up each one matrix (gates first), RoPE on 3/4 of each
/// head as in Phi-4-mini — from the HF directory and from the GGUF llama.cpp's converter wrote
/// from it (`attn_qkv`, and `ffn_up` of 2·d_ff rows).
#[test]
fn phi3_matches_transformers() {
    matches_transformers("phi3", common::fixture("arch/phi3").to_str().unwrap());
    matches_transformers("phi3", common::fixture("arch/phi3/model.gguf").to_str().unwrap());
    let lm = load(common::fixture("arch/phi3/model.gguf").to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(lm.model.cfg.arch.rotary_dims, Some(12));
}

/// SmolLM3: no RoPE on every 4th layer (layer 3 of 4) — from the HF directory (`no_rope_layers`)
/// and from the GGUF llama.cpp's converter wrote, which stores no key for it (llama.cpp fixes
/// the step at 4).
#[test]
fn smollm3_matches_transformers() {
    for path in [common::fixture("arch/smollm3"), common::fixture("arch/smollm3/model.gguf")] {
        matches_transformers("smollm3", path.to_str().unwrap());
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        assert_eq!(lm.model.cfg.nope_layers(), [3], "{}", path.display());
    }
}

/// Granite: embeddings × 12, each sublayer's output × 0.22 on its way to the residual, scores ×
/// 1/16 (1/head_dim, not 1/√head_dim) and logits ÷ 8 — from the HF directory and from the GGUF
/// llama.cpp's converter wrote (`granite.embedding_scale`, `residual_scale`, `attention.scale`,
/// `logit_scale`).
#[test]
fn granite_matches_transformers() {
    for path in [common::fixture("arch/granite"), common::fixture("arch/granite/model.gguf")] {
        matches_transformers("granite", path.to_str().unwrap());
        let arch = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap().model.cfg.arch;
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
        assert!(close(arch.embed_multiplier, 12.0) && close(arch.residual_multiplier, 0.22), "{}: {arch:?}", path.display());
        assert!(close(arch.attn_scale, 0.0625) && close(arch.logit_divisor, 8.0), "{}: {arch:?}", path.display());
    }
    // The NLL every analysis reads divides the logits too (not the streamed head's plain ones).
    use sinkscope::model::receiver::NoCapture;
    let fx = Fixture::open(&common::fixture("arch/granite/reference.safetensors"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let lm = load(common::fixture("arch/granite").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let hidden = lm.model.forward(&tokens, None, &mut NoCapture).unwrap();
    let ours = lm.model.next_token_nll(&hidden.narrow(0, 0, tokens.len() - 1).unwrap(), &tokens[1..]).unwrap();
    let (_, logits) = fx.f32("logits");
    let reference: Vec<f64> = logits
        .chunks(lm.model.cfg.vocab_size)
        .zip(&tokens[1..])
        .map(|(row, &next)| {
            let max = common::finite_max("granite logits", row);
            max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() - row[next as usize] as f64
        })
        .collect();
    assert!(common::max_abs_diff("granite nll", &ours, &reference) < 1e-5);
}

/// From the HF directory and the converter's GGUF: StableLM 2 (LayerNorm with biases, RoPE on a
/// quarter of each head, q/k/v biases); StarCoder2 (biases everywhere, c_fc → GELU (tanh) →
/// c_proj); Command R (one bias-free LayerNorm read by attention and MLP in parallel, RoPE on
/// interleaved pairs in both formats, logits × 1/16); Falcon (one shared LayerNorm, q|k|v fused
/// per key-value group in the HF file, exact GELU).
#[test]
fn stablelm_starcoder2_cohere_and_falcon_match_transformers() {
    for family in ["stablelm", "starcoder2", "cohere", "falcon"] {
        matches_transformers(family, common::fixture(&format!("arch/{family}")).to_str().unwrap());
        matches_transformers(family, common::fixture(&format!("arch/{family}/model.gguf")).to_str().unwrap());
    }
}

/// OLMo 2: RMSNorm after attention and MLP instead of before, q/k RMSNorm across heads, GQA.
/// OLMo 3: the same with a window on three layers of four and YaRN on the global one only (GGUF:
/// `olmo2` with `attention.sliding_window`, one flag per layer, `rope.scaling.*`).
#[test]
fn olmo2_and_olmo3_match_transformers() {
    for family in ["olmo2", "olmo3"] {
        matches_transformers(family, common::fixture(&format!("arch/{family}")).to_str().unwrap());
        matches_transformers(family, common::fixture(&format!("arch/{family}/model.gguf")).to_str().unwrap());
    }
    // As transformers 4 wrote OLMo 3's configs: one `rope_scaling` (for the global layers only).
    let dir = common::temp_dir("olmo3-flat");
    let flat = dir.join("olmo3");
    common::edited_hf(&common::fixture("arch/olmo3"), &flat, |c| {
        let mut scaling = c.remove("rope_parameters").unwrap()["full_attention"].take();
        c.insert("rope_theta".into(), scaling.as_object_mut().unwrap().remove("rope_theta").unwrap());
        c.insert("rope_scaling".into(), scaling);
    });
    matches_transformers("olmo3", flat.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Mixtures of experts beyond gpt-oss, from the HF checkpoints' layout (one matrix per expert)
/// and from the GGUF llama.cpp's converter wrote (stacked `ffn_*_exps`): Mixtral (a `llama` GGUF
/// with experts, weights renormalised over the chosen two), Qwen2-MoE (q/k/v biases, weights kept
/// as their softmax over all experts, a shared expert gated by σ(x·g)), Qwen3-MoE (per-head q/k
/// norms, renormalised) and OLMoE (q/k norms across heads, not renormalised).
#[test]
fn mixtures_of_experts_match_transformers() {
    for family in ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"] {
        matches_transformers(family, common::fixture(&format!("arch/{family}")).to_str().unwrap());
        matches_transformers(family, common::fixture(&format!("arch/{family}/model.gguf")).to_str().unwrap());
    }
}

/// DeepSeek-V2's multi-head latent attention, run absorbed (one cached [RoPE key | latent] row
/// per token, values the latent, each head brought up to its value width after attention)
/// against transformers' expanded heads: queries through the low-rank path or one projection,
/// keys 24 and values 12 or 16 wide; and DeepSeek's experts (a dense first layer, ungated shared
/// experts, greedy or group-limited routing, weights scaled); from the HF checkpoints, and from
/// the GGUF llama.cpp's converter writes (kv_b_proj split into attn_k_b / attn_v_b) where the
/// two engines route alike.
#[test]
fn deepseek_v2_latent_attention_matches_transformers() {
    // deepseek_v2_yarn: its YaRN on the RoPE key as transformers computes it (cos/sin × the mscale
    // ratio, the softmax scale plain); its GGUF runs llama.cpp's rule (tests/llama_cpp.rs).
    for family in ["deepseek_v2", "deepseek_v2_lite", "deepseek_v2_yarn"] {
        matches_transformers(family, common::fixture(&format!("arch/{family}")).to_str().unwrap());
    }
    // A deepseek2 GGUF routes as llama.cpp does, which ranks expert groups otherwise than
    // transformers: V2's grouped GGUF is held against llama.cpp (tests/llama_cpp.rs), V2-Lite's
    // (no groups) against transformers here.
    matches_transformers("deepseek_v2_lite", common::fixture("arch/deepseek_v2_lite/model.gguf").to_str().unwrap());
}

/// GPT-NeoX (Pythia): LayerNorm with biases, RoPE on a quarter of each head, attention and MLP
/// in parallel off the block input, exact-GELU MLP with biases, q|k|v fused per head in the file.
#[test]
fn gpt_neox_matches_transformers() {
    matches_transformers("gpt_neox", common::fixture("arch/gpt_neox").to_str().unwrap());
    matches_transformers("gpt_neox", common::fixture("arch/gpt_neox/model.gguf").to_str().unwrap());
}

/// Phi (Phi-2's layout): one LayerNorm read by attention and MLP in parallel, RoPE on 40% of each
/// head, biases on q/k/v, the output projection, both MLP layers and the output head, GQA.
#[test]
fn phi_matches_transformers() {
    matches_transformers("phi", common::fixture("arch/phi").to_str().unwrap());
    matches_transformers("phi", common::fixture("arch/phi/model.gguf").to_str().unwrap());
}

/// GPT-2: learned absolute positions added to the embeddings and no RoPE at all, LayerNorm with
/// biases, Conv1D weights stored (in, out) (transposed in the GGUF, as llama.cpp writes them),
/// fused q|k|v, GELU (tanh) MLP, tied output head.
#[test]
fn gpt2_matches_transformers() {
    matches_transformers("gpt2", common::fixture("arch/gpt2").to_str().unwrap());
    matches_transformers("gpt2", common::fixture("arch/gpt2/model.gguf").to_str().unwrap());
}

/// gpt-oss: a learned sink logit per head joining every softmax (of both signs, some taking
/// most of a row), a mixture of clamped-SwiGLU experts (top 2 of 4) with biases, q/k/v/o
/// biases, windowed layers (16 keys) between global ones, YaRN RoPE; `hook_sink_prob` against
/// the mass transformers' rows are missing.
#[test]
fn gpt_oss_matches_transformers() {
    matches_transformers("gpt_oss", common::fixture("arch/gpt_oss").to_str().unwrap());
    let lm = load(common::fixture("arch/gpt_oss").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let fx = Fixture::open(&common::fixture("arch/gpt_oss/reference.safetensors"));
    // The sinks matter here: some heads give them most of some rows.
    let (_, mass) = fx.f32("sink_prob.1");
    assert!(mass.iter().any(|&m| m > 0.5) && mass.iter().any(|&m| m < 0.05), "the fixture's sinks are bland");
    assert!(
        lm.model.cfg.arch.rope_yarn.is_some()
            && matches!(lm.model.cfg.arch.mlp, sinkscope::model::decoder::MlpKind::Moe(m) if m.experts == 4 && m.top_k == 2)
    );
}

/// GPT-2 has no positions past its learned table: a longer run is refused with the reason, and
/// a cache that reuses slots streams past it.
#[test]
fn gpt2_refuses_positions_past_its_table_and_streams_by_slot() {
    use sinkscope::kv::{simulate, Eviction, Policy, PositionMode};
    use sinkscope::model::receiver::NoCapture;
    let lm = load(common::fixture("arch/gpt2").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap().repeat(4);
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap();
    let n = lm.model.cfg.context_len;
    assert!(ids.len() > n + 10, "text too short: {}", ids.len());
    let ids = &ids[..n + 10];
    let err = lm.model.forward(ids, None, &mut NoCapture).expect_err("ran past the learned positions");
    assert!(err.to_string().contains("positions this model learned"), "{err}");
    let sink = Policy::new(Eviction::Sink { sinks: 4 }, 64, PositionMode::Slot);
    let out = simulate(&lm.model, ids, &[sink], &mut |_, _| {}).unwrap().remove(0);
    assert!(out.ppl.is_finite() && out.nll.len() == ids.len() - 1);
    let original = Policy { positions: PositionMode::Original, ..sink };
    assert!(simulate(&lm.model, ids, &[original], &mut |_, _| {}).is_err_and(|e| e.to_string().contains("positions this model learned")));
}

/// Gemma 3: sandwich norms stored as w − 1, per-head q/k norms, GeGLU, √d embedding scale,
/// query_pre_attn_scalar, and windowed local layers (16 keys, their own RoPE base) between
/// global ones, on a text three windows long.
#[test]
fn gemma3_matches_transformers() {
    matches_transformers("gemma3", common::fixture("arch/gemma3").to_str().unwrap());
}

/// Mistral with a sliding window of 16 keys on every layer, on a 48-token text: the window
/// issue 13 found ignored is now computed (it used to differ from transformers by up to 1.0 in
/// the patterns).
#[test]
fn mistral_sliding_window_matches_transformers() {
    matches_transformers("mistral", common::fixture("arch/mistral").to_str().unwrap());
}

/// The same weights with the q/k norms dropped from the file are refused, not run without them.
#[test]
fn a_qwen3_without_its_qk_norms_is_refused() {
    let dir = common::temp_child("qwen3-no-qk-norm", "model");
    std::fs::create_dir_all(&dir).unwrap();
    let src = common::fixture("arch/qwen3");
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st.tensors().into_iter().filter(|(n, _)| !n.contains("k_norm")).collect();
    safetensors::serialize_to_file(kept, None, &dir.join("model.safetensors")).unwrap();
    let err = load(dir.to_str().unwrap(), &LoadOptions::default()).err().expect("loads without its k norms");
    assert!(err.to_string().contains("attn_k_norm"), "{err}");
}

/// The streaming machinery is family-agnostic: on each family, the block replay of every cached
/// policy equals true token-by-token decoding through the policy cache (RoPE in the family's
/// layout and rotary width, post-norms, parallel residuals and all), within 1e-4 nats per token.
/// (GPT-2's learned positions: `original` is replayed, `slot` is decoded in both runs.)
#[test]
fn every_family_streams_like_token_by_token_decoding() {
    use sinkscope::kv::{simulate, simulate_with, Eviction, Policy, PositionMode, SimOptions};
    // Gemma 3 and Mistral attend through their own windows: see the next test.
    for family in [
        "llama3",
        "phi3",
        "mixtral",
        "qwen2_moe",
        "qwen3",
        "olmo2",
        "smollm3",
        "granite",
        "stablelm",
        "starcoder2",
        "cohere",
        "gpt_neox",
        "phi",
        "gpt2",
        "deepseek_v2",
        // A hybrid: the policies apply to its attention layers, its linear layers' state rides along.
        "qwen3_next",
    ] {
        let lm = load(common::fixture(&format!("arch/{family}")).to_str().unwrap(), &LoadOptions::default()).unwrap();
        let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
        let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(160).collect();
        let mut policies = vec![Policy::new(Eviction::Dense, 0, PositionMode::Slot)];
        for positions in [PositionMode::Slot, PositionMode::Original] {
            policies.push(Policy::new(Eviction::Window, 40, positions));
            policies.push(Policy::new(Eviction::Sink { sinks: 4 }, 40, positions));
        }
        let blocks = simulate(&lm.model, &ids, &policies, &mut |_, _| {}).unwrap();
        let decoded =
            simulate_with(&lm.model, &ids, &policies, SimOptions { token_by_token: true, ..SimOptions::default() }, &mut |_, _| {}).unwrap();
        for (a, b) in blocks.iter().zip(&decoded) {
            let worst = common::max_abs_diff("a.nll", &a.nll, &b.nll);
            assert_eq!(a.cache_len, b.cache_len, "{family} {}", a.label);
            assert!(worst < 1e-4, "{family} {}: block replay vs token by token {worst}", a.label);
        }
        // Delta rotation re-rotates kept keys (partial rotary included); it matches slot closely.
        let delta = Policy::new(Eviction::Sink { sinks: 4 }, 40, PositionMode::Delta);
        let d = simulate(&lm.model, &ids, &[delta], &mut |_, _| {}).unwrap().remove(0);
        let slot = &blocks[2];
        let drift = common::max_abs_diff("d.nll", &d.nll, &slot.nll);
        assert!(drift < 1e-3, "{family}: delta vs slot {drift}");
    }
}

/// The prompt of tests/fixtures/make_gemma3_reference.py's greedy continuation.
const GEMMA_PROMPT: &str = "The capital of France is";

/// Models with their own sliding windows (Gemma 3: local layers with their own RoPE base;
/// Mistral: every layer) in the KV-cache simulator's block replay: the dense stream equals the
/// plain forward (itself checked against transformers) token by token, and with a budget no
/// smaller than the text every policy equals dense exactly; decoding token by token through a
/// policy cache equals the replay under `slot`.
#[test]
fn windowed_models_stream_like_their_forward() {
    use sinkscope::kv::{simulate, simulate_with, Eviction, Policy, PositionMode, SimOptions};
    use sinkscope::model::receiver::NoCapture;
    for family in ["gemma2", "gemma3", "mistral", "gpt_oss", "olmo3"] {
        let lm = load(common::fixture(&format!("arch/{family}")).to_str().unwrap(), &LoadOptions::default()).unwrap();
        let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
        let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(150).collect();
        let hidden = lm.model.forward(&ids, None, &mut NoCapture).unwrap();
        let want = lm.model.next_token_nll(&hidden.narrow(0, 0, ids.len() - 1).unwrap(), &ids[1..]).unwrap();
        let dense = Policy::new(Eviction::Dense, 0, PositionMode::Slot);
        let got = simulate(&lm.model, &ids, &[dense], &mut |_, _| {}).unwrap().remove(0);
        let worst = common::max_abs_diff("got.nll", &got.nll, &want);
        assert!(worst < 1e-4, "{family}: dense replay vs forward {worst}");
        let mut all = vec![dense];
        for positions in [PositionMode::Slot, PositionMode::Original] {
            all.push(Policy::new(Eviction::Window, 200, positions));
            all.push(Policy::new(Eviction::Sink { sinks: 4 }, 200, positions));
        }
        let out = simulate(&lm.model, &ids, &all, &mut |_, _| {}).unwrap();
        for o in &out[1..] {
            assert_eq!(o.nll, out[0].nll, "{family} {}: no eviction, yet not dense", o.label);
        }
        // Evicting policies run (budget 24 > the fixtures' 12- and 16-key windows).
        let sink = Policy::new(Eviction::Sink { sinks: 2 }, 24, PositionMode::Slot);
        let o = simulate(&lm.model, &ids, &[sink], &mut |_, _| {}).unwrap().remove(0);
        assert!(o.ppl.is_finite() && o.first_eviction_step == Some(24), "{family}");
        // Its memory: windowed layers hold a window of the 24 entries, global layers (if any) all 24.
        let m = o.kv_memory;
        let per_entry = 2 * 2 * (lm.model.cfg.n_kv_heads * lm.model.cfg.d_head) as u64;
        let &[window] = lm.model.cfg.windows().as_slice() else { panic!("{family}: one window size") };
        assert!(window < 24, "{family}");
        assert_eq!(m.windowed_entries, Some(window), "{family}");
        assert_eq!(m.bytes, (m.global_layers * 24 + m.windowed_layers * window) as u64 * per_entry, "{family}");
        assert_eq!(m.bytes_without_windows, (lm.model.cfg.n_layers * 24) as u64 * per_entry, "{family}");
        // Decoding token by token through the policy cache (the window measured in cache slots,
        // local layers with their own RoPE) equals the replay under `slot`; `delta` re-rotates
        // each layer's keys with its own RoPE and stays close; `original` cannot be decoded so.
        let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
        let decoded = simulate_with(&lm.model, &ids, &[sink], by_token, &mut |_, _| {}).unwrap().remove(0);
        let worst = common::max_abs_diff("decoded.nll", &decoded.nll, &o.nll);
        assert!(worst < 1e-4, "{family}: token by token vs block replay under a window {worst}");
        let delta = Policy { positions: PositionMode::Delta, ..sink };
        let d = simulate(&lm.model, &ids, &[delta], &mut |_, _| {}).unwrap().remove(0);
        let drift = common::max_abs_diff("d.nll", &d.nll, &o.nll);
        assert!(drift < 1e-3, "{family}: delta vs slot under a window {drift}");
        let original = Policy { positions: PositionMode::Original, ..sink };
        let refused = simulate_with(&lm.model, &ids, &[original], by_token, &mut |_, _| {});
        assert!(refused.is_err_and(|e| e.to_string().contains("sliding window")), "{family}: token-by-token `original` must refuse the window");
    }
}

/// The real Gemma 3 270M (`sinkscope fetch gemma3-270m`; CI fetches it) against transformers on
/// 640 tokens of a book — past its 512-key local window — loaded from the same Q4_K_M GGUF
/// (tests/fixtures/make_gemma3_reference.py): the same token ids, logits ≤ 1e-3 (64 sampled
/// columns and the log-sum-exp at every position), every layer's pattern ≤ 1e-4 at query rows
/// either side of the window's edge, perplexity within 0.1%, and the same greedy continuation.
#[test]
fn gemma3_270m_matches_transformers() {
    // Not committed (253 MB): found on the model path or in the user cache, else fetched.
    let path = model_or_skip!(sinkscope::model::catalog::lookup("gemma3-270m").unwrap().file);
    let fx = Fixture::open(&common::fixture("ref_gemma3_270m.safetensors"));
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let t = tokens.len();
    let book = std::fs::read_to_string(common::corpora_dir().join("pg1342_pride_and_prejudice.txt")).unwrap();
    let text: String = book.chars().skip(249_383).collect();
    assert_eq!(&lm.tokenizer.encode(&text).unwrap()[..t], &tokens[..], "token ids differ from transformers'");
    let cfg = &lm.model.cfg;
    let mut sink = TensorCollector::new(HookFilter::parse("hook_pattern", cfg.n_layers).unwrap(), t);
    let hidden = lm.model.forward(&tokens, None, &mut sink).unwrap();
    let (v, ids) = (cfg.vocab_size, fx.i64("logits_vocab_ids"));
    let ((_, sel), (_, lse)) = (fx.f32("logits_sel"), fx.f32("logits_lse"));
    let mut worst_logit = 0f32;
    let mut nll = 0f64;
    for r0 in (0..t).step_by(128) {
        let rows = 128.min(t - r0);
        let logits: Vec<f32> = lm.model.logits(&hidden.narrow(0, r0, rows).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for r in 0..rows {
            let (p, row) = (r0 + r, &logits[r * v..(r + 1) * v]);
            let picked: Vec<f32> = ids.iter().map(|&id| row[id as usize]).collect();
            worst_logit = worst_logit.max(common::max_abs_diff("sampled logits", &picked, &sel[p * ids.len()..][..ids.len()]) as f32);
            let max = common::finite_max("logits row", row);
            let ours_lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
            worst_logit = worst_logit.max(common::max_abs_diff("logsumexp", &[ours_lse as f32], &lse[p..p + 1]) as f32);
            if p + 1 < t {
                nll += ours_lse - row[tokens[p + 1] as usize] as f64;
            }
        }
    }
    let ppl = (nll / (t - 1) as f64).exp();
    let ref_ppl = fx.f64("ppl")[0];
    let qpos = fx.i64("pattern_query_pos");
    let mut worst_pattern = 0f32;
    for l in 0..cfg.n_layers {
        let (_, reference) = fx.f32(&format!("pattern.{l}"));
        let (_, ours) = sink.get(&HookPoint::Pattern(l)).unwrap();
        for h in 0..cfg.n_heads {
            for (qi, &q) in qpos.iter().enumerate() {
                let r = &reference[(h * qpos.len() + qi) * t..][..t];
                let o = &ours[(h * t + q as usize) * t..][..t];
                worst_pattern = worst_pattern.max(common::max_abs_diff("pattern", o, r) as f32);
            }
        }
    }
    let prompt: Vec<u32> = fx.i64("greedy_prompt").iter().map(|&x| x as u32).collect();
    assert_eq!(lm.tokenizer.encode(GEMMA_PROMPT).unwrap(), prompt, "prompt token ids");
    let want: Vec<u32> = fx.i64("greedy_ids").iter().map(|&x| x as u32).collect();
    let (_, got) = sinkscope::pipeline::generate::generate_text(&lm, GEMMA_PROMPT, want.len()).unwrap();
    eprintln!("gemma3-270m: T={t} max |Δlogit| {worst_logit:.2e}, max |Δpattern| {worst_pattern:.2e}, ppl {ppl:.4} vs {ref_ppl:.4}");
    assert!(worst_logit <= LOGIT_TOL, "logits differ by {worst_logit}");
    assert!(worst_pattern <= PATTERN_TOL, "patterns differ by {worst_pattern}");
    assert!(((ppl - ref_ppl) / ref_ppl).abs() < 1e-3, "perplexity {ppl} vs transformers' {ref_ppl}");
    assert_eq!(got, want, "greedy continuation differs from transformers'");
}

/// The analyzers on windowed layers and learned sinks, against transformers' own patterns: α_0 on
/// a windowed layer averages over the queries within the window of position 0 (on a global
/// layer, over every query), the layer summary names its window, and each head's mean
/// learned-sink mass equals the mean of what transformers' rows are missing.
#[test]
fn analyzers_know_windows_and_learned_sinks() {
    use sinkscope::capture::summary::StandardReducers;
    for family in ["gemma3", "gpt_oss"] {
        let fx = Fixture::open(&common::fixture(&format!("arch/{family}/reference.safetensors")));
        let lm = load(common::fixture(&format!("arch/{family}")).to_str().unwrap(), &LoadOptions::default()).unwrap();
        let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
        let (t, cfg) = (tokens.len(), &lm.model.cfg);
        let mut reducers = StandardReducers::new(cfg, t, 4, 8, false);
        lm.model.forward(&tokens, None, &mut reducers).unwrap();
        let summary = reducers.summarize();
        let mut windowed = 0;
        for l in 0..cfg.n_layers {
            let window = cfg.layer_window(l);
            windowed += window.is_some() as usize;
            assert_eq!(summary.layers[l].window, window, "{family} layer {l}");
            let (_, pattern) = fx.f32(&format!("pattern.{l}"));
            let seeing = window.map_or(t, |w| w.min(t));
            for h in 0..cfg.n_heads {
                let want = (0..seeing).map(|q| pattern[(h * t + q) * t] as f64).sum::<f64>() / seeing as f64;
                let got = &summary.heads[l * cfg.n_heads + h];
                assert!((got.alpha[0] - want).abs() < 1e-5, "{family} L{l}H{h}: α_0 {} vs {want}", got.alpha[0]);
                match family {
                    "gpt_oss" => {
                        let (_, mass) = fx.f32(&format!("sink_prob.{l}"));
                        let want = mass[h * t..(h + 1) * t].iter().map(|&m| m as f64).sum::<f64>() / t as f64;
                        let got = got.sink_mass.expect("a learned-sink model reports its sink mass");
                        assert!((got - want).abs() < 1e-5, "{family} L{l}H{h}: sink mass {got} vs {want}");
                    }
                    _ => assert_eq!(got.sink_mass, None),
                }
            }
        }
        assert!(windowed > 0 && windowed < cfg.n_layers, "{family}: windowed and global layers both");
    }
}

/// Final logit soft-capping (Gemma 2's `final_logit_softcapping`): the Gemma 3 fixture with a cap
/// of 2 gives transformers' logits squashed as transformers squashes them, c · tanh(x / c), and
/// the next-token NLL is scored from the capped logits (not the streamed plain head).
#[test]
fn final_logit_softcapping_squashes_the_logits() {
    use sinkscope::model::receiver::NoCapture;
    let dir = common::temp_child("gemma3-softcap", "model");
    std::fs::create_dir_all(&dir).unwrap();
    let src = common::fixture("arch/gemma3");
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["final_logit_softcapping"] = 2.0.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let lm = load(dir.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let fx = Fixture::open(&common::fixture("arch/gemma3/reference.safetensors"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let (t, v) = (tokens.len(), lm.model.cfg.vocab_size);
    let hidden = lm.model.forward(&tokens, None, &mut NoCapture).unwrap();
    let ours: Vec<f32> = lm.model.logits(&hidden).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let (_, plain) = fx.f32("logits");
    let capped: Vec<f32> = plain.iter().map(|&x| 2.0 * (x / 2.0).tanh()).collect();
    let worst = common::max_abs_diff("soft-capped logits", &ours, &capped) as f32;
    assert!(worst <= LOGIT_TOL, "capped logits differ by {worst}");
    assert!(plain.iter().zip(&capped).any(|(a, b)| (a - b).abs() > 0.1), "the cap does not bite on this fixture");
    let nll = lm.model.next_token_nll(&hidden.narrow(0, 0, t - 1).unwrap(), &tokens[1..]).unwrap();
    for (r, got) in nll.iter().enumerate() {
        let row = &capped[r * v..(r + 1) * v];
        let max = common::finite_max("logits row", row);
        let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        let want = lse - row[tokens[r + 1] as usize] as f64;
        assert!((got - want).abs() < 1e-3, "row {r}: nll {got} vs {want}");
    }
}

/// Streaming models with their own windows (Gemma 3: local layers with their own RoPE base;
/// Mistral: every layer; gpt-oss: learned sinks too) under cache policies, against an independent
/// PyTorch loop (tests/fixtures/make_window_stream_reference.py: HF modules for the pieces, the
/// cache, eviction, RoPE, window mask and softmax by hand), 119 steps at W = 24 and 12, `slot` and
/// `original`: the block replay within 1e-4 nats per token, and token-by-token decoding too
/// under `slot`.
#[test]
fn windowed_streams_match_a_pytorch_loop() {
    use sinkscope::kv::{simulate, simulate_with, Eviction, Policy, PolicyKind, PositionMode, SimOptions};
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("window_stream_reference.json")).unwrap()).unwrap();
    for (family, data) in reference["families"].as_object().unwrap() {
        let lm = load(common::fixture(&format!("arch/{family}")).to_str().unwrap(), &LoadOptions::default()).unwrap();
        let ids: Vec<u32> = data["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        for run in data["runs"].as_array().unwrap() {
            let kind = match run["policy"].as_str().unwrap() {
                "dense" => PolicyKind::Dense,
                "window" => PolicyKind::Window,
                _ => PolicyKind::Sink,
            };
            let positions = if run["positions"] == "slot" { PositionMode::Slot } else { PositionMode::Original };
            let policy = Policy::new(
                Eviction::of_kind(kind, run["sinks"].as_u64().unwrap() as usize, None),
                run["cache"].as_u64().unwrap() as usize,
                positions,
            );
            let want: Vec<f64> = run["nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            let mut outs = vec![("replay", simulate(&lm.model, &ids, &[policy], &mut |_, _| {}).unwrap().remove(0))];
            if positions == PositionMode::Slot {
                let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
                outs.push(("token by token", simulate_with(&lm.model, &ids, &[policy], by_token, &mut |_, _| {}).unwrap().remove(0)));
            }
            for (how, o) in outs {
                assert_eq!(o.nll.len(), want.len(), "{family} {}", o.label);
                let worst = common::max_abs_diff("o.nll", &o.nll, &want);
                eprintln!("{family} {} ({how}): max |ΔNLL| {worst:.2e} vs the PyTorch loop", o.label);
                assert!(worst < 1e-4, "{family} {} ({how}): {worst} nats from the PyTorch loop", o.label);
            }
        }
    }
}

/// Score-based policies on models with their own windows and learned sinks: the block replay
/// (local RoPE on windowed layers, kept keys a window or more slots back hidden, sink logits in
/// the softmax) equals decoding token by token through the same cache.
#[test]
fn score_policies_on_windowed_models_replay_like_decoding() {
    use sinkscope::kv::{simulate, simulate_with, Eviction, Policy, PolicyKind, PositionMode, SimOptions};
    for family in ["gemma2", "gemma3", "mistral", "gpt_oss"] {
        let lm = load(common::fixture(&format!("arch/{family}")).to_str().unwrap(), &LoadOptions::default()).unwrap();
        let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
        let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(120).collect();
        for kind in [PolicyKind::H2o, PolicyKind::Tova, PolicyKind::Snapkv] {
            let p = Policy::new(Eviction::of_kind(kind, 2, Some(8)), 24, PositionMode::Slot);
            let block = simulate(&lm.model, &ids, &[p], &mut |_, _| {}).unwrap().remove(0);
            let by_token = SimOptions { token_by_token: true, ..SimOptions::default() };
            let decoded = simulate_with(&lm.model, &ids, &[p], by_token, &mut |_, _| {}).unwrap().remove(0);
            let worst = common::max_abs_diff("block.nll", &block.nll, &decoded.nll);
            assert!(worst < 1e-4, "{family} {}: block replay vs token by token {worst}", block.label);
            assert_eq!(block.kept, decoded.kept, "{family} {}: different keys kept", block.label);
        }
    }
}
