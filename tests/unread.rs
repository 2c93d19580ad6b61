//! Nothing a model file holds is silently ignored: tensors, GGUF keys and config.json fields
//! injected into real and tiny files of every family, in both formats, are refused by name (one
//! line, exit 2 from the binary) or known to be inert; `info` lists them instead. And the RoPE
//! scaling Llama 3 ships — which a loader that ignored `rope_freqs.weight` got wrong — matters on
//! the fixture: plain RoPE is far from transformers.

mod common;

use std::path::{Path, PathBuf};

use sinkscope::model::gguf::{GgufFile, Value};
use sinkscope::model::{load, LoadOptions};

/// The GGUF fixtures of every family that has a GGUF layout (tiny, and the real stories260K).
fn gguf_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "llama3",
        "gemma2",
        "phi3",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "olmoe",
        "smollm3",
        "granite",
        "stablelm",
        "starcoder2",
        "olmo3",
        "cohere",
        "falcon",
        "qwen3",
        "olmo2",
        "gpt_neox",
        "phi",
        "gpt2",
    ]
    .iter()
    .map(|f| common::fixture(&format!("arch/{f}/model.gguf")))
    .collect();
    files.push(common::data_dir().join("models/stories260K.gguf"));
    files
}

/// GGUF architectures whose files may hold experts (`llama`: Mixtral).
const MOE_ARCHS: &[&str] = &["llama", "qwen2moe", "qwen3moe", "olmoe"];

/// GGUF architectures that read Granite's scales (`logit_scale` among them), and Cohere's one.
const MULTIPLIER_ARCHS: &[&str] = &["granite"];
const LOGIT_SCALE_ARCHS: &[&str] = &["command-r"];

/// The HF fixtures of every family.
fn hf_dirs() -> Vec<PathBuf> {
    [
        "llama3",
        "gemma2",
        "phi3",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "olmoe",
        "smollm3",
        "granite",
        "stablelm",
        "starcoder2",
        "olmo3",
        "cohere",
        "falcon",
        "llama_f32",
        "mistral",
        "qwen3",
        "olmo2",
        "gpt_neox",
        "gemma3",
        "phi",
        "gpt2",
        "gpt_oss",
    ]
    .iter()
    .map(|f| common::fixture(&format!("arch/{f}")))
    .collect()
}

/// ggml's type id of a tensor type this test copies.
fn ggml_id(dtype: candle_core::quantized::GgmlDType) -> u32 {
    use candle_core::quantized::GgmlDType::*;
    match dtype {
        F32 => 0,
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q5_0 => 6,
        Q5_1 => 7,
        Q8_0 => 8,
        Q4K => 12,
        Q5K => 13,
        Q6K => 14,
        BF16 => 30,
        other => panic!("the test writer does not copy {other:?}"),
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::Str(s) => put_str(out, s),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
        Value::Array(items) => {
            out.extend(items.first().map_or(0, value_type).to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| put_value(out, i));
        }
    }
}

/// An edit of a GGUF file: keys set (added or replaced), f32 tensors added, tensors dropped.
#[derive(Default)]
struct Edit<'a> {
    keys: Vec<(String, Value)>,
    tensors: Vec<(&'a str, Vec<usize>, Vec<f32>)>,
    drop: Vec<&'a str>,
}

/// Writes `src` with `edit` applied to `dst` (GGUF v3, alignment 32).
fn rewrite_gguf(src: &Path, dst: &Path, edit: &Edit) {
    rewrite_gguf_from(&GgufFile::open(src).unwrap(), src, dst, edit);
}

/// [`rewrite_gguf`] from `file` as read from `src` (its metadata perhaps changed).
fn rewrite_gguf_from(file: &GgufFile, src: &Path, dst: &Path, edit: &Edit) {
    let bytes = std::fs::read(src).unwrap();
    let mut metadata = file.metadata.clone();
    metadata.remove("general.alignment");
    for (k, v) in &edit.keys {
        metadata.insert(k.clone(), v.clone());
    }
    // (name, ggml shape, type id, bytes)
    let mut tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)> = file
        .tensors
        .iter()
        .filter(|(n, _)| !edit.drop.contains(&n.as_str()))
        .map(|(n, t)| (n.clone(), t.shape.iter().rev().map(|&d| d as u64).collect(), ggml_id(t.dtype), bytes[t.start..t.start + t.n_bytes].to_vec()))
        .collect();
    for (name, shape, values) in &edit.tensors {
        assert_eq!(shape.iter().product::<usize>(), values.len());
        tensors.push(((*name).to_owned(), shape.iter().rev().map(|&d| d as u64).collect(), 0, values.iter().flat_map(|v| v.to_le_bytes()).collect()));
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in &metadata {
        put_str(&mut out, k);
        out.extend(value_type(v).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0u64;
    for (name, ne, ty, data) in &tensors {
        put_str(&mut out, name);
        out.extend((ne.len() as u32).to_le_bytes());
        ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    for (_, _, _, data) in &tensors {
        out.extend(data);
        out.resize(out.len().div_ceil(32) * 32, 0);
    }
    std::fs::write(dst, out).unwrap();
}

fn arch_of(path: &Path) -> String {
    GgufFile::open(path).unwrap().architecture().unwrap().to_owned()
}

fn load_err(path: &Path) -> String {
    match load(path.to_str().unwrap(), &LoadOptions::default()) {
        Ok(_) => panic!("{}: loaded although it holds what sinkscope does not compute", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gguf_tensors_and_keys_no_decoder_reads_are_refused_by_name() {
    let dir = common::temp_dir("unread-gguf");
    for src in gguf_files() {
        let arch = arch_of(&src);
        let d = GgufFile::open(&src).unwrap().get(&format!("{arch}.embedding_length")).and_then(Value::as_u64).unwrap() as usize;
        let name = src.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        let dst = dir.join(format!("{name}.gguf"));
        // The file as it is loads; the rewriter itself changes nothing.
        rewrite_gguf(&src, &dst, &Edit::default());
        load(dst.to_str().unwrap(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A gated-attention model's extra tensor.
        let gate = Edit { tensors: vec![("blk.0.attn_gate.weight", vec![d, d], vec![0.5; d * d])], ..Edit::default() };
        rewrite_gguf(&src, &dst, &gate);
        let err = load_err(&dst);
        assert!(err.contains("blk.0.attn_gate.weight (an attention output gate)") && err.contains("does not compute"), "{name}: {err}");
        // info loads it and lists it.
        let listed = load(dst.to_str().unwrap(), &LoadOptions { report_unread: true, ..LoadOptions::default() }).unwrap();
        assert_eq!(listed.info.unread.len(), 1, "{name}");
        // Keys that change the arithmetic, each refused by its name.
        // (Experts: the families that read them get their own checks below.)
        let moe = MOE_ARCHS.contains(&arch.as_str());
        let mut keys = vec![
            if MULTIPLIER_ARCHS.contains(&arch.as_str()) {
                // llama.cpp reads it as "no RoPE" for Granite.
                ("rope.scaling.finetuned", Value::Bool(false), "a RoPE scaling setting")
            } else if LOGIT_SCALE_ARCHS.contains(&arch.as_str()) {
                ("residual_scale", Value::F32(0.5), "a scaling of activations")
            } else {
                ("logit_scale", Value::F32(8.0), "scaled output logits")
            },
            ("ssm.conv_kernel", Value::U32(4), "state-space"),
            ("attention.causal", Value::Bool(false), "non-causal"),
        ];
        if !moe {
            keys.push(("expert_count", Value::U32(8), "mixture of experts"));
        }
        for (key, value, says) in keys {
            let key = format!("{arch}.{key}");
            rewrite_gguf(&src, &dst, &Edit { keys: vec![(key.clone(), value)], ..Edit::default() });
            let err = load_err(&dst);
            assert!(err.contains(&key) && err.contains(says), "{name} {key}: {err}");
        }
        // Inert values of the same keys load.
        let mut inert = Edit { keys: vec![(format!("{arch}.attention.causal"), Value::Bool(true))], ..Edit::default() };
        if !moe {
            inert.keys.push((format!("{arch}.expert_count"), Value::U32(0)));
        }
        rewrite_gguf(&src, &dst, &inert);
        load(dst.to_str().unwrap(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{name} with inert keys: {e}"));
        // A RoPE scaling sinkscope does not compute for GGUF; YaRN without its factor; a YaRN
        // setting it does not read (DeepSeek's attention-factor multiplier).
        let scaling = |kind: &str| (format!("{arch}.rope.scaling.type"), Value::Str(kind.into()));
        rewrite_gguf(&src, &dst, &Edit { keys: vec![scaling("longrope")], ..Edit::default() });
        let err = load_err(&dst);
        assert!(err.contains("RoPE scaling 'longrope'"), "{name}: {err}");
        if GgufFile::open(&src).unwrap().get(&format!("{arch}.rope.scaling.factor")).is_none() {
            rewrite_gguf(&src, &dst, &Edit { keys: vec![scaling("yarn")], ..Edit::default() });
            let err = load_err(&dst);
            assert!(err.contains("is yarn but") && err.contains("rope.scaling.factor is missing"), "{name}: {err}");
        }
        let log_mul = format!("{arch}.rope.scaling.yarn_log_multiplier");
        rewrite_gguf(&src, &dst, &Edit { keys: vec![(log_mul.clone(), Value::F32(0.1))], ..Edit::default() });
        let err = load_err(&dst);
        assert!(err.contains(&log_mul) && err.contains("a RoPE scaling setting"), "{name}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_real_smollm2_gguf_with_an_injected_tensor_is_refused_and_listed_by_the_binary() {
    let Some(smollm) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let dir = common::temp_dir("unread-smollm2");
    let dst = dir.join("smollm2-gated.gguf");
    rewrite_gguf(&smollm, &dst, &Edit { tensors: vec![("blk.3.attn_gate.weight", vec![576, 576], vec![0.1; 576 * 576])], ..Edit::default() });
    let text = common::fixture("texts/tinystories.txt");
    let out_dir = dir.join("run");
    let run = common::sinkscope(&["capture", "-m", dst.to_str().unwrap(), "-f", text.to_str().unwrap(), "-o", out_dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("blk.3.attn_gate.weight (an attention output gate)") && stderr.contains("sinkscope info"), "{stderr}");
    assert!(!out_dir.exists(), "a refused model left a run directory");
    let info = common::sinkscope(&["info", dst.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&info.stdout);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    assert!(stdout.contains("not read") && stdout.contains("blk.3.attn_gate.weight: an attention output gate"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hf_fields_and_tensors_no_decoder_reads_are_refused_by_name() {
    use serde_json::json;
    let dir = common::temp_dir("unread-hf");
    for src in hf_dirs() {
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let dst = dir.join(&name);
        common::edited_hf(&src, &dst, |_| {});
        load(dst.to_str().unwrap(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Granite's multipliers, a field sinkscope reads for Granite only (there, MiniCPM's).
        let (field, says) = match name.as_str() {
            "granite" => ("scale_emb", "scale_emb (a scaling of activations)"),
            _ => ("residual_multiplier", "residual_multiplier (a scaling of embeddings, residuals, attention or logits)"),
        };
        common::edited_hf(&src, &dst, |c| {
            c.insert(field.into(), json!(0.22));
        });
        let err = load_err(&dst);
        assert!(err.contains(says), "{name}: {err}");
        // A RoPE scaling whose base changes with the sequence length.
        common::edited_hf(&src, &dst, |c| {
            c.insert("rope_scaling".into(), json!({"rope_type": "dynamic", "factor": 2.0}));
        });
        let err = load_err(&dst);
        assert!(err.contains("RoPE scaling 'dynamic'"), "{name}: {err}");
        // Another activation than the family's MLP computes.
        common::edited_hf(&src, &dst, |c| {
            c.insert("hidden_act".into(), json!("relu"));
        });
        let err = load_err(&dst);
        assert!(err.contains("hidden_act = \"relu\""), "{name}: {err}");
        // Inert fields load.
        common::edited_hf(&src, &dst, |c| {
            c.insert("attention_dropout".into(), json!(0.1));
            c.insert("transformers_version".into(), json!("4.0.0"));
        });
        load(dst.to_str().unwrap(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{name} with inert fields: {e}"));
    }
    // Cohere's logit scale is read for Cohere only; Command R+'s per-head q/k norms are refused.
    let dst = dir.join("scales");
    common::edited_hf(&common::fixture("arch/llama3"), &dst, |c| {
        c.insert("logit_scale".into(), json!(0.0625));
    });
    let err = load_err(&dst);
    assert!(err.contains("logit_scale (scaled output logits)"), "{err}");
    common::edited_hf(&common::fixture("arch/cohere"), &dst, |c| {
        c.insert("use_qk_norm".into(), json!(true));
    });
    let err = load_err(&dst);
    assert!(err.contains("use_qk_norm = true") && err.contains("does not compute"), "{err}");
    // Fields the released configs carry that transformers never reads load (StarCoder2 3B's,
    // Falcon 7B's and Falcon2 11B's, Command R's).
    let released: [(&str, serde_json::Value); 3] = [
        (
            "starcoder2",
            json!({"activation_function": "gelu", "mlp_type": "default", "norm_type": "layer_norm", "attention_softmax_in_fp32": true, "scale_attention_softmax_in_fp32": true, "layer_norm_epsilon": 1e-5}),
        ),
        ("falcon", json!({"apply_residual_connection_post_layernorm": false, "ff_factor": 4, "multi_query": true})),
        ("cohere", json!({"model_max_length": 131072, "use_qk_norm": false})),
    ];
    for (family, fields) in released {
        common::edited_hf(&common::fixture(&format!("arch/{family}")), &dst, |c| c.extend(fields.as_object().unwrap().clone()));
        load(dst.to_str().unwrap(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{family} with its released config's fields: {e}"));
    }
    // Falcon's blocks other than the one computed: ALiBi, Falcon-40B's two norms, sequential.
    for (field, value, says) in [
        ("alibi", json!(true), "alibi = true"),
        ("num_ln_in_parallel_attn", json!(2), "2 LayerNorms per block"),
        ("parallel_attn", json!(false), "parallel_attn = false"),
    ] {
        common::edited_hf(&common::fixture("arch/falcon"), &dst, |c| {
            c.insert(field.into(), value);
        });
        let err = load_err(&dst);
        assert!(err.contains(says) && err.contains("does not compute"), "{err}");
    }
    // An extra tensor in the safetensors file, named for what it suggests.
    let src = common::fixture("arch/llama3");
    let dst = dir.join("llama3-gated");
    common::edited_hf(&src, &dst, |_| {});
    let st_path = dst.join("model.safetensors");
    let bytes = std::fs::read(&st_path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let gate: Vec<u8> = vec![0.5f32; 64 * 64].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st.tensors();
    views.push((
        "model.layers.1.self_attn.gate.weight".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![64, 64], &gate).unwrap(),
    ));
    safetensors::tensor::serialize_to_file(views, None, &st_path).unwrap();
    let err = load_err(&dst);
    assert!(err.contains("model.layers.1.self_attn.gate.weight (an attention output gate)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fixture's scaling matters: without `rope_freqs.weight` (plain RoPE, what sinkscope ran
/// before) the patterns are far from transformers', with it they match (tests/architectures.rs).
#[test]
fn llama3_rope_scaling_matters_on_the_fixture() {
    use sinkscope::capture::collector::TensorCollector;
    use sinkscope::model::hook::{HookFilter, HookPoint};
    let dir = common::temp_dir("unread-llama3-plain");
    let src = common::fixture("arch/llama3/model.gguf");
    let plain = dir.join("plain-rope.gguf");
    rewrite_gguf(&src, &plain, &Edit { drop: vec!["rope_freqs.weight"], ..Edit::default() });
    let fx = common::Fixture::open(&common::fixture("arch/llama3/reference.safetensors"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let mut worst = 0f64;
    for (path, scaled) in [(&src, true), (&plain, false)] {
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        assert_eq!(lm.model.cfg.rope_freq_factors.is_some(), scaled);
        let mut sink = TensorCollector::new(HookFilter::parse("hook_pattern", 2).unwrap(), tokens.len());
        lm.model.forward(&tokens, None, &mut sink).unwrap();
        let (_, ours) = sink.get(&HookPoint::Pattern(1)).unwrap();
        let (_, reference) = fx.f32("pattern.1");
        let diff = common::max_abs_diff("llama3 pattern 1", ours, &reference);
        if scaled {
            assert!(diff < 1e-4, "scaled: {diff}");
        } else {
            worst = diff;
        }
    }
    eprintln!("llama3 fixture under plain RoPE: max |Δpattern| {worst:.3} against transformers");
    assert!(worst > 0.05, "the fixture's RoPE scaling barely matters ({worst}); it tests nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Phi-3's sliding window is read in both formats, not dropped: the GGUF with
/// `phi3.attention.sliding_window` = 16 computes what the HF directory with `sliding_window` 16
/// computes (transformers windows every layer), which is not the unwindowed model's output; 0 —
/// what llama.cpp's converter writes for a config without a window — is no window.
#[test]
fn phi3_window_is_read_from_both_formats() {
    use sinkscope::model::receiver::NoCapture;
    let dir = common::temp_dir("unread-phi3-window");
    let (hf, gguf) = (dir.join("phi3-hf"), dir.join("phi3.gguf"));
    common::edited_hf(&common::fixture("arch/phi3"), &hf, |c| {
        c.insert("sliding_window".into(), serde_json::json!(16));
    });
    let src = common::fixture("arch/phi3/model.gguf");
    rewrite_gguf(&src, &gguf, &Edit { keys: vec![("phi3.attention.sliding_window".into(), Value::U32(16))], ..Edit::default() });
    let fx = common::Fixture::open(&common::fixture("arch/phi3/reference.safetensors"));
    let tokens: Vec<u32> = fx.i64("tokens").iter().map(|&t| t as u32).collect();
    let logits = |path: &Path| -> Vec<f32> {
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        let hidden = lm.model.forward(&tokens, None, &mut NoCapture).unwrap();
        lm.model.logits(&hidden).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    };
    let (windowed_hf, windowed_gguf, plain) = (logits(&hf), logits(&gguf), logits(&src));
    let formats = common::max_abs_diff("phi3 windowed HF vs GGUF", &windowed_gguf, &windowed_hf);
    let window = common::max_abs_diff("phi3 windowed vs not", &windowed_gguf, &plain);
    assert!(formats < 1e-4 && window > 1e-2, "phi3 window: formats differ by {formats}, the window changes logits by {window}");
    let lm = load(src.to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert!(lm.model.cfg.windowed_layers().is_empty(), "sliding_window 0 windowed layers");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A GGUF whose tensors say it is another family than its architecture key: llama.cpp writes
/// Mixtral as `llama` with `llama.expert_count` and stacked `ffn_*_exps`, which is read as
/// Mixtral; the same tensors without the count are refused for what they are (a dense Llama
/// block would call them a missing `ffn_down`), and a count on a file without experts names the
/// router it lacks.
#[test]
fn a_llama_gguf_with_experts_is_mixtral() {
    let dir = common::temp_dir("unread-mixtral");
    let src = common::fixture("arch/mixtral/model.gguf");
    let lm = load(src.to_str().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(arch_of(&src), "llama");
    assert!(matches!(lm.model.cfg.arch.mlp, sinkscope::model::decoder::MlpKind::Moe(m) if m.experts == 4 && m.top_k == 2 && m.norm_top_k));
    let no_count = dir.join("no-count.gguf");
    let mut file = GgufFile::open(&src).unwrap();
    file.metadata.remove("llama.expert_count");
    rewrite_gguf_from(&file, &src, &no_count, &Edit::default());
    let err = load_err(&no_count);
    assert!(err.contains("_exps.weight (a mixture of experts) but no llama.expert_count > 0"), "{err}");
    let dense = dir.join("dense-with-count.gguf");
    let keys = vec![("llama.expert_count".to_owned(), Value::U32(8)), ("llama.expert_used_count".to_owned(), Value::U32(2))];
    rewrite_gguf(&common::fixture("arch/llama3/model.gguf"), &dense, &Edit { keys, ..Edit::default() });
    let err = load_err(&dense);
    assert!(err.contains("ffn_gate_inp.weight is missing"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The GGUF settings of the newer designs that sinkscope does not compute are refused by name:
/// DeepSeek's YaRN without its log multiplier (mscale_all_dim) or beside an attention factor of
/// its own, a Qwen3-Next file with multi-token-prediction layers or a recurrent-layer list that
/// is not one flag per layer.
#[test]
fn latent_and_hybrid_gguf_settings_not_computed_are_refused_by_name() {
    let dir = common::temp_dir("unread-designs");
    let dst = dir.join("edited.gguf");
    let yarn = common::fixture("arch/deepseek_v2_yarn/model.gguf");
    let mut file = GgufFile::open(&yarn).unwrap();
    file.metadata.remove("deepseek2.rope.scaling.yarn_log_multiplier");
    rewrite_gguf_from(&file, &yarn, &dst, &Edit::default());
    let err = load_err(&dst);
    assert!(err.contains("deepseek2.rope.scaling.yarn_log_multiplier") && err.contains("mscale_all_dim"), "{err}");
    rewrite_gguf(&yarn, &dst, &Edit { keys: vec![("deepseek2.rope.scaling.yarn_attn_factor".into(), Value::F32(1.2))], ..Edit::default() });
    assert!(load_err(&dst).contains("yarn_attn_factor"));
    let hybrid = common::fixture("arch/qwen3_next/model.gguf");
    rewrite_gguf(&hybrid, &dst, &Edit { keys: vec![("qwen3next.nextn_predict_layers".into(), Value::U32(1))], ..Edit::default() });
    let err = load_err(&dst);
    assert!(err.contains("nextn_predict_layers") && err.contains("--no-mtp"), "{err}");
    rewrite_gguf(
        &hybrid,
        &dst,
        &Edit { keys: vec![("qwen3next.attention.recurrent_layers".into(), Value::Array(vec![Value::Bool(true)]))], ..Edit::default() },
    );
    assert!(load_err(&dst).contains("not one flag per layer"));
    std::fs::remove_dir_all(&dir).unwrap();
}
