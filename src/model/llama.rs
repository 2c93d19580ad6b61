//! The Llama-family forward pass (Llama, Mistral, Qwen2-style, SmolLM, TinyLlama, llama2.c) with
//! capture hooks: RMSNorm, grouped-query attention computed in query blocks (no layer ever holds a
//! full T×T pattern), SwiGLU, RoPE in the weights' own layout, tied or untied output.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use rayon::prelude::*;
use serde::Serialize;

use super::matmul::gemm_f32;
use super::rope::{Rope, RopeLayout};
use gemm::Parallelism;
use crate::capture::{CaptureSink, HookPoint};
use crate::error::{Error, Result};

/// Upper bound on one query block's score matrix, so attention memory is independent of T².
const ATTENTION_BLOCK_BYTES: usize = 32 << 20;
/// Query rows per block at most.
const MAX_BLOCK_ROWS: usize = 128;
/// Logit rows materialised at once when a quantized head cannot be streamed.
const LOGIT_ROWS: usize = 128;

/// Shape and numerics of a Llama-family model.
#[derive(Debug, Clone, Serialize)]
pub struct LlamaConfig {
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    pub d_ff: usize,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub context_len: usize,
    pub rope_theta: f64,
    pub rope_layout: RopeLayout,
    pub rms_eps: f64,
}

impl LlamaConfig {
    /// Checks the numbers are usable before any tensor is read.
    pub fn validate(&self, source: &std::path::Path) -> Result<()> {
        let bad = |what: String| Error::file(source, format!("model configuration is impossible: {what}"));
        for (name, v) in [
            ("layers", self.n_layers),
            ("heads", self.n_heads),
            ("kv heads", self.n_kv_heads),
            ("d_model", self.d_model),
            ("d_head", self.d_head),
            ("d_ff", self.d_ff),
            ("vocab", self.vocab_size),
        ] {
            if v == 0 || v > 1 << 24 {
                return Err(bad(format!("{name} = {v}")));
            }
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return Err(bad(format!("{} heads are not a multiple of {} kv heads", self.n_heads, self.n_kv_heads)));
        }
        if self.d_head % 2 != 0 {
            return Err(bad(format!("head size {} is odd (RoPE needs pairs)", self.d_head)));
        }
        if !(self.rope_theta > 0.0 && self.rms_eps >= 0.0) {
            return Err(bad(format!("rope theta {} / rms eps {}", self.rope_theta, self.rms_eps)));
        }
        Ok(())
    }
}

/// A weight as a loader hands it over: plain f32, or still quantized (for `--quantized`).
pub enum Param {
    Dense(Tensor),
    Quant(Arc<QTensor>),
}

impl Param {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Param::Dense(t) => t.dims().to_vec(),
            Param::Quant(q) => q.shape().dims().to_vec(),
        }
    }

    pub fn dequantize(&self) -> Result<Tensor> {
        Ok(match self {
            Param::Dense(t) => t.clone(),
            Param::Quant(q) => q.dequantize(&Device::Cpu)?,
        })
    }
}

/// y = x Wᵀ (+ b) for x of shape (T, in).
struct Linear {
    weight: LinearWeight,
    bias: Option<Tensor>,
}

enum LinearWeight {
    /// Stored transposed, (in, out) contiguous, so gemm reads the weight row by row.
    DenseT(Tensor),
    /// (out, in) used through a transposed view: the tied output head shares the embedding.
    Dense(Tensor),
    Quant(QMatMul),
}

impl Linear {
    fn new(p: Param, bias: Option<Tensor>) -> Result<Self> {
        let weight = match p {
            Param::Dense(t) => LinearWeight::DenseT(t.t()?.contiguous()?),
            Param::Quant(q) => LinearWeight::Quant(QMatMul::from_arc(q)?),
        };
        Ok(Linear { weight, bias })
    }

    /// A linear map that reads `w` (out, in) in place, without a transposed copy.
    fn shared(w: Tensor) -> Self {
        Linear { weight: LinearWeight::Dense(w), bias: None }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            LinearWeight::DenseT(wt) => super::matmul::matmul_split_rows(x, wt, false)?,
            LinearWeight::Dense(w) => super::matmul::matmul_split_rows(x, w, true)?,
            LinearWeight::Quant(q) => q.forward(x)?,
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// Several projections of the same input. Dense weights are concatenated into one matmul at load
/// time (q|k|v, gate|up); quantized ones stay separate.
struct Projection {
    parts: Vec<Linear>,
}

impl Projection {
    fn new(params: Vec<(Param, Option<Tensor>)>) -> Result<Self> {
        let widths: Vec<usize> = params.iter().map(|(p, _)| p.shape()[0]).collect();
        if params.iter().all(|(p, _)| matches!(p, Param::Dense(_))) {
            let ws: Vec<Tensor> = params.iter().map(|(p, _)| p.dequantize()).collect::<Result<_>>()?;
            let bias = if params.iter().any(|(_, b)| b.is_some()) {
                let bs: Vec<Tensor> = params
                    .iter()
                    .zip(&widths)
                    .map(|((_, b), &w)| match b {
                        Some(b) => Ok(b.clone()),
                        None => Ok(Tensor::zeros(w, candle_core::DType::F32, &Device::Cpu)?),
                    })
                    .collect::<Result<_>>()?;
                Some(Tensor::cat(&bs, 0)?)
            } else {
                None
            };
            let fused = Linear::new(Param::Dense(Tensor::cat(&ws, 0)?), bias)?;
            Ok(Projection { parts: vec![fused] })
        } else {
            let parts = params.into_iter().map(|(p, b)| Linear::new(p, b)).collect::<Result<_>>()?;
            Ok(Projection { parts })
        }
    }

    /// All projections side by side: (T, Σ widths).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.parts.as_slice() {
            [fused] => fused.forward(x),
            parts => Ok(Tensor::cat(&parts.iter().map(|p| p.forward(x)).collect::<Result<Vec<_>>>()?, 1)?),
        }
    }
}

struct Block {
    attn_norm: Tensor,
    qkv: Projection,
    o_proj: Linear,
    ffn_norm: Tensor,
    gate_up: Projection,
    down: Linear,
}

/// Hides key position `key` from the queries after it, in `heads` of `layer` (softmax renormalises
/// over the remaining keys): the intervention behind "this head depends on that position".
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMask {
    pub layer: usize,
    pub heads: Vec<usize>,
    pub key: usize,
}

/// Where attention keys and values live between forward calls, and at which rotary positions new
/// queries and cached keys are placed. The forward pass hands each layer its new keys *before*
/// RoPE, so a store can rotate by absolute position, by cache slot, or keep rotated keys and shift
/// them (the KV-cache policies of `kv`).
pub trait KvStore {
    /// Rotary positions of the `t` tokens about to be appended (their queries use these).
    fn next_positions(&self, t: usize) -> Vec<usize>;
    /// Appends layer `layer`'s new keys (pre-RoPE, (KVH, t, dh)) and values, and returns every key
    /// the new queries may see, rotated for attention, with the values — both (KVH, n, dh), the new
    /// tokens last.
    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)>;
    /// Called once every layer has seen the `t` new tokens.
    fn commit(&mut self, t: usize);
}

/// The ordinary cache: keys rotated at their absolute positions, nothing ever evicted.
#[derive(Default)]
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
}

impl KvCache {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl KvStore for KvCache {
    fn next_positions(&self, t: usize) -> Vec<usize> {
        (self.len..self.len + t).collect()
    }

    fn append(&mut self, layer: usize, k_pre: &Tensor, v: &Tensor, rope: &Rope, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let k = rope.rotate(k_pre, positions)?;
        if self.k.len() <= layer {
            self.k.push(k);
            self.v.push(v.clone());
        } else {
            self.k[layer] = Tensor::cat(&[&self.k[layer], &k], 1)?;
            self.v[layer] = Tensor::cat(&[&self.v[layer], v], 1)?;
        }
        Ok((self.k[layer].clone(), self.v[layer].clone()))
    }

    fn commit(&mut self, t: usize) {
        self.len += t;
    }
}

/// One sequence of a (possibly stacked) forward: where its keys go, and an optional key mask.
struct Seq<'a> {
    store: Option<&'a mut dyn KvStore>,
    mask: Option<&'a KeyMask>,
}

/// The part of a layer where queries meet keys: given the layer's pre-RoPE q (rows, H, dh) and
/// k, v (rows, KVH, dh), return the attention output (rows, H·dh). Plain and cached runs
/// ([`SeqAttention`]) and teacher-forced policy streams (`model::windowed`) differ only here.
pub(crate) trait Attend {
    /// Positions of the rows, for hooks.
    fn rows(&self) -> std::ops::Range<usize>;
    fn attend(&mut self, model: &Llama, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor, sink: &mut dyn CaptureSink) -> Result<Tensor>;
    /// Called once every layer has run.
    fn finish(&mut self) {}
}

/// Causal attention for sequences stacked along rows, each with its own KV store and key mask.
struct SeqAttention<'s, 'a> {
    seqs: &'s mut [Seq<'a>],
    positions: Vec<Vec<usize>>,
    tables: Vec<(Tensor, Tensor)>,
    /// Rows per sequence.
    t: usize,
}

impl Attend for SeqAttention<'_, '_> {
    fn rows(&self) -> std::ops::Range<usize> {
        let first = self.positions[0][0];
        first..first + self.t
    }

    fn attend(&mut self, model: &Llama, l: usize, q: &Tensor, k: &Tensor, v: &Tensor, sink: &mut dyn CaptureSink) -> Result<Tensor> {
        let t = self.t;
        let mut outs = Vec::with_capacity(self.seqs.len());
        for (s, seq) in self.seqs.iter_mut().enumerate() {
            let part = |x: &Tensor| -> Result<Tensor> { Ok(x.narrow(0, s * t, t)?.transpose(0, 1)?.contiguous()?) };
            let (cos, sin) = &self.tables[s];
            let q = model.rope.apply(&part(q)?, cos, sin)?;
            let (k_all, v_all) = match seq.store.as_deref_mut() {
                Some(store) => store.append(l, &part(k)?, &part(v)?, &model.rope, &self.positions[s])?,
                None => (model.rope.apply(&part(k)?, cos, sin)?, part(v)?),
            };
            let past = k_all.dim(1)? - t;
            let layer_mask = seq.mask.filter(|m| m.layer == l);
            outs.push(model.attention(l, &q, &k_all, &v_all, past, sink, layer_mask)?);
        }
        Ok(if outs.len() == 1 { outs.swap_remove(0) } else { Tensor::cat(&outs, 0)? })
    }

    fn finish(&mut self) {
        for seq in self.seqs.iter_mut() {
            if let Some(store) = seq.store.as_deref_mut() {
                store.commit(self.t);
            }
        }
    }
}

/// A loaded Llama-family model.
pub struct Llama {
    pub cfg: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    final_norm: Tensor,
    lm_head: Linear,
    rope: Rope,
    attention_block_bytes: usize,
}

/// Fetches a weight by its GGUF-style name (`token_embd.weight`, `blk.3.attn_q.weight`, …);
/// `None` when the file has no such tensor.
pub type ParamSource<'a> = dyn FnMut(&str) -> Result<Option<Param>> + 'a;

impl Llama {
    /// Builds the model from a weight source, checking every shape against `cfg`.
    pub fn load(cfg: LlamaConfig, source_path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<Self> {
        cfg.validate(source_path)?;
        let (d, dh, h, kv, ff) = (cfg.d_model, cfg.d_head, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff);
        let embed_param = take_req(get, source_path, "token_embd.weight", &[cfg.vocab_size, d])?;
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            let attn_norm = take_req(get, source_path, &n("attn_norm.weight"), &[d])?.dequantize()?;
            let q = take_req(get, source_path, &n("attn_q.weight"), &[h * dh, d])?;
            let k = take_req(get, source_path, &n("attn_k.weight"), &[kv * dh, d])?;
            let v = take_req(get, source_path, &n("attn_v.weight"), &[kv * dh, d])?;
            let o = take_req(get, source_path, &n("attn_output.weight"), &[d, h * dh])?;
            let ffn_norm = take_req(get, source_path, &n("ffn_norm.weight"), &[d])?.dequantize()?;
            let gate = take_req(get, source_path, &n("ffn_gate.weight"), &[ff, d])?;
            let up = take_req(get, source_path, &n("ffn_up.weight"), &[ff, d])?;
            let down = take_req(get, source_path, &n("ffn_down.weight"), &[d, ff])?;
            // Qwen2-style q/k/v biases are optional.
            let mut bias = |name: &str, width: usize| -> Result<Option<Tensor>> {
                take_opt(get, source_path, &n(name), &[width])?.map(|p| p.dequantize()).transpose()
            };
            let (qb, kb, vb) = (bias("attn_q.bias", h * dh)?, bias("attn_k.bias", kv * dh)?, bias("attn_v.bias", kv * dh)?);
            blocks.push(Block {
                attn_norm,
                qkv: Projection::new(vec![(q, qb), (k, kb), (v, vb)])?,
                o_proj: Linear::new(o, None)?,
                ffn_norm,
                gate_up: Projection::new(vec![(gate, None), (up, None)])?,
                down: Linear::new(down, None)?,
            });
        }
        let final_norm = take_req(get, source_path, "output_norm.weight", &[d])?.dequantize()?;
        let embed = embed_param.dequantize()?;
        let lm_head = match take_opt(get, source_path, "output.weight", &[cfg.vocab_size, d])? {
            Some(p) => Linear::new(p, None)?,
            // Tied embeddings: the output head is the embedding matrix itself.
            None => match embed_param {
                Param::Quant(q) => Linear::new(Param::Quant(q), None)?,
                Param::Dense(_) => Linear::shared(embed.clone()),
            },
        };
        let rope = Rope { theta: cfg.rope_theta, d_head: cfg.d_head, layout: cfg.rope_layout };
        Ok(Llama { cfg, embed, blocks, final_norm, lm_head, rope, attention_block_bytes: ATTENTION_BLOCK_BYTES })
    }

    /// Runs `tokens` after whatever `cache` holds (positions continue from `cache.len()`), pushing
    /// hooks into `sink`, and returns the final-norm hidden states (T, d_model). With `cache` =
    /// `None` nothing is kept for later calls. Logits come from [`Llama::logits`].
    pub fn forward(&self, tokens: &[u32], cache: Option<&mut KvCache>, sink: &mut dyn CaptureSink) -> Result<Tensor> {
        self.forward_with(tokens, cache.map(|c| c as &mut dyn KvStore), sink)
    }

    /// [`Llama::forward`] with any [`KvStore`] (e.g. a policy-managed cache being prefilled).
    pub fn forward_with(&self, tokens: &[u32], store: Option<&mut dyn KvStore>, sink: &mut dyn CaptureSink) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(Error::input("no tokens to run: the text is empty"));
        }
        let past = store.as_ref().map_or(0, |s| s.next_positions(1)[0]);
        let rows = past..past + tokens.len();
        let x = self.embed_tokens(tokens)?;
        emit(sink, HookPoint::Embed, &rows, &x)?;
        self.run_layers(x, 0, &mut [Seq { store, mask: None }], sink)
    }

    /// Re-runs layers `layer..` from that layer's input (`resid_pre`, (T, d_model), positions
    /// 0..T) once per mask — all masks must name `layer` — and returns each variant's final-norm
    /// hidden states. Layers before the masked one cannot see a mask, so callers reuse one clean
    /// pass for every variant; the variants are stacked so projections and MLPs run as one batch.
    pub fn forward_masked(&self, resid_pre: &Tensor, masks: &[KeyMask]) -> Result<Vec<Tensor>> {
        let Some(layer) = masks.first().map(|m| m.layer) else { return Ok(Vec::new()) };
        if layer >= self.cfg.n_layers || masks.iter().any(|m| m.layer != layer) {
            return Err(Error::input(format!("masks must all name one layer below {}", self.cfg.n_layers)));
        }
        let t = resid_pre.dim(0)?;
        let x = Tensor::cat(&vec![resid_pre; masks.len()], 0)?;
        let mut seqs: Vec<Seq> = masks.iter().map(|m| Seq { store: None, mask: Some(m) }).collect();
        let hidden = self.run_layers(x, layer, &mut seqs, &mut crate::capture::NoCapture)?;
        (0..masks.len()).map(|s| Ok(hidden.narrow(0, s * t, t)?)).collect()
    }

    /// One decode step for several independent sequences: `tokens[s]` is appended to `stores[s]`
    /// (each store places and keeps keys its own way). Projections and MLPs run on all sequences
    /// as one batch — decoding is bound by reading the weights, so a batch costs little more than
    /// one. Returns the final-norm hidden states, one row per sequence.
    pub fn decode_step(&self, tokens: &[u32], stores: &mut [&mut dyn KvStore]) -> Result<Tensor> {
        if tokens.len() != stores.len() || tokens.is_empty() {
            return Err(Error::Internal("decode_step needs one token per store".into()));
        }
        let x = self.embed_tokens(tokens)?;
        let mut seqs: Vec<Seq> = stores.iter_mut().map(|s| Seq { store: Some(&mut **s), mask: None }).collect();
        self.run_layers(x, 0, &mut seqs, &mut crate::capture::NoCapture)
    }

    /// Runs blocks `first_layer..` over `x`, which holds `seqs.len()` sequences of equal length
    /// stacked along rows. Projections and MLPs run on all rows at once; RoPE, the KV store and
    /// attention (with that sequence's mask) run per sequence.
    fn run_layers(&self, x: Tensor, first_layer: usize, seqs: &mut [Seq<'_>], sink: &mut dyn CaptureSink) -> Result<Tensor> {
        let n_seq = seqs.len().max(1);
        let t = x.dim(0)? / n_seq;
        let positions: Vec<Vec<usize>> = seqs.iter().map(|s| s.store.as_ref().map_or_else(|| (0..t).collect(), |st| st.next_positions(t))).collect();
        let tables = positions.iter().map(|p| self.rope.tables(p, &Device::Cpu)).collect::<Result<Vec<_>>>()?;
        let mut attend = SeqAttention { seqs, positions, tables, t };
        self.run_blocks(x, first_layer, &mut attend, sink)
    }

    /// The layer stack over `x` (rows = tokens): RMSNorm, fused projections, `attend` for the part
    /// where queries meet keys, output projection, SwiGLU MLP, hooks at every named point.
    pub(crate) fn run_blocks(&self, mut x: Tensor, first_layer: usize, attend: &mut dyn Attend, sink: &mut dyn CaptureSink) -> Result<Tensor> {
        let total = x.dim(0)?;
        let rows = attend.rows();
        let eps = self.cfg.rms_eps as f32;
        let (h, kvh, dh) = (self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.d_head);
        for (l, block) in self.blocks.iter().enumerate().skip(first_layer) {
            emit(sink, HookPoint::ResidPre(l), &rows, &x)?;
            let xn = candle_nn::ops::rms_norm(&x, &block.attn_norm, eps)?;
            let qkv = block.qkv.forward(&xn)?;
            let (nq, nkv) = (h * dh, kvh * dh);
            let q = qkv.narrow(1, 0, nq)?.reshape((total, h, dh))?;
            let k = qkv.narrow(1, nq, nkv)?.reshape((total, kvh, dh))?;
            let v = qkv.narrow(1, nq + nkv, nkv)?.reshape((total, kvh, dh))?;
            emit(sink, HookPoint::Q(l), &rows, &q)?;
            emit(sink, HookPoint::K(l), &rows, &k)?;
            emit(sink, HookPoint::V(l), &rows, &v)?;
            let attn = attend.attend(self, l, &q, &k, &v, sink)?;
            let attn_out = block.o_proj.forward(&attn)?;
            emit(sink, HookPoint::AttnOut(l), &rows, &attn_out)?;
            x = (x + attn_out)?;
            emit(sink, HookPoint::ResidMid(l), &rows, &x)?;
            let xn = candle_nn::ops::rms_norm(&x, &block.ffn_norm, eps)?;
            let act = swiglu(&block.gate_up.forward(&xn)?)?;
            emit(sink, HookPoint::MlpPost(l), &rows, &act)?;
            x = (x + block.down.forward(&act)?)?;
            emit(sink, HookPoint::ResidPost(l), &rows, &x)?;
        }
        attend.finish();
        let out = candle_nn::ops::rms_norm(&x, &self.final_norm, eps)?;
        emit(sink, HookPoint::LnFinal, &rows, &out)?;
        Ok(out)
    }

    /// Embeds `tokens`, refusing ids outside the vocabulary.
    pub(crate) fn embed_tokens(&self, tokens: &[u32]) -> Result<Tensor> {
        self.check_ids(tokens)?;
        Ok(self.embed.index_select(&Tensor::new(tokens, &Device::Cpu)?, 0)?)
    }

    /// Refuses token ids outside the vocabulary (inputs to embed, targets to score).
    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            Some(&bad) => Err(Error::input(format!("token id {bad} is outside the model's vocabulary of {}", self.cfg.vocab_size))),
            None => Ok(()),
        }
    }

    /// The model's rotary embedding (for caches that place keys themselves).
    pub fn rope(&self) -> Rope {
        self.rope.clone()
    }

    /// Caps the bytes of one query block's scores (default 32 MiB); smaller means more, shorter
    /// blocks. Results do not depend on it.
    pub fn set_attention_block_bytes(&mut self, bytes: usize) {
        self.attention_block_bytes = bytes.max(1);
    }

    /// Logits (rows, vocab) for final-norm hidden states (rows, d_model). Callers with long inputs
    /// pass row chunks: a full T×vocab matrix can be gigabytes.
    pub fn logits(&self, normed: &Tensor) -> Result<Tensor> {
        self.lm_head.forward(normed)
    }

    /// NLL of `targets[r]` given final-norm hidden row r: a dense head is streamed in vocabulary
    /// blocks (no rows × vocab matrix); a quantized one goes through [`Llama::logits`].
    pub fn next_token_nll(&self, normed: &Tensor, targets: &[u32]) -> Result<Vec<f64>> {
        use super::scoring::{streamed_nll, token_nll, HeadWeight};
        let (rows, d) = normed.dims2()?;
        if rows != targets.len() {
            return Err(Error::Internal(format!("{rows} hidden rows for {} targets", targets.len())));
        }
        self.check_ids(targets)?;
        let vocab = self.cfg.vocab_size;
        let normed = normed.contiguous()?;
        let dense = match (&self.lm_head.weight, &self.lm_head.bias) {
            (LinearWeight::Dense(w), None) => Some((w, true)),
            (LinearWeight::DenseT(w), None) => Some((w, false)),
            _ => None,
        };
        if let Some((w, out_in)) = dense {
            let w = w.contiguous()?;
            return crate::capture::sink::with_f32(&w, |w| {
                crate::capture::sink::with_f32(&normed, |x| streamed_nll(x, d, if out_in { HeadWeight::OutIn(w) } else { HeadWeight::InOut(w) }, vocab, targets))
            })?;
        }
        // Row chunks: a full rows × vocab matrix can be gigabytes.
        let mut out = Vec::with_capacity(rows);
        for r0 in (0..rows).step_by(LOGIT_ROWS) {
            let n = LOGIT_ROWS.min(rows - r0);
            let logits = self.logits(&normed.narrow(0, r0, n)?)?;
            let ts = &targets[r0..r0 + n];
            out.extend(crate::capture::sink::with_f32(&logits, |x| x.par_chunks(vocab).zip(ts.par_iter()).map(|(row, &t)| token_nll(row, t as usize)).collect::<Vec<_>>())?);
        }
        Ok(out)
    }

    /// Causal softmax attention for q (H, T, dh) against all visible keys k/v (KVH, past+T, dh),
    /// one block of query rows at a time; within a block every head runs as its own task
    /// (scores, mask and softmax while its rows are in cache, then A·V straight into its columns
    /// of the output). Returns (T, H·dh).
    #[allow(clippy::too_many_arguments)]
    fn attention(&self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor, past: usize, sink: &mut dyn CaptureSink, mask: Option<&KeyMask>) -> Result<Tensor> {
        let (h, t, dh) = q.dims3()?;
        let kvh = k.dim(0)?;
        let group = h / kvh;
        let n_keys = past + t;
        let scale = 1.0 / (dh as f32).sqrt();
        let want_pattern = sink.wants(&HookPoint::Pattern(layer));
        let want_scores = sink.wants(&HookPoint::AttnScores(layer));
        let per_row = h * n_keys * std::mem::size_of::<f32>() * if want_scores { 2 } else { 1 };
        // Small enough blocks also skip most of the masked upper triangle (keys beyond the block's
        // last query are never multiplied).
        let block = (self.attention_block_bytes / per_row.max(1)).clamp(1, MAX_BLOCK_ROWS.min(t));
        let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
        let width = h * dh;
        let mut out = vec![0f32; t * width];
        crate::capture::sink::with_f32(&q, |q| {
            crate::capture::sink::with_f32(&k, |k| {
                crate::capture::sink::with_f32(&v, |v| -> Result<()> {
                    for b0 in (0..t).step_by(block) {
                        let b = block.min(t - b0);
                        let visible = past + b0 + b;
                        let head_len = b * visible;
                        let mut a = vec![0f32; h * head_len];
                        // Scores: (b × dh) · (dh × visible) per head, scaled by the kernel; then the
                        // knocked-out key and softmax (or, when raw scores are saved, the causal −∞ first).
                        a.par_chunks_mut(head_len).enumerate().for_each(|(head, s)| {
                            let kv = head / group;
                            let qh = &q[(head * t + b0) * dh..][..b * dh];
                            let kh = &k[kv * n_keys * dh..][..visible * dh];
                            // SAFETY: s is b×visible, qh b×dh, kh visible×dh (read transposed).
                            // The 1/√dh scale is applied by the kernel to each finished dot product.
                            unsafe { gemm_f32(b, visible, dh, (s.as_mut_ptr(), visible, 1), (qh.as_ptr(), dh, 1), (kh.as_ptr(), 1, dh), scale, Parallelism::None) };
                            for (r, row) in s.chunks_mut(visible).enumerate() {
                                let query = past + b0 + r;
                                // Future keys show as −∞ in saved scores; softmax ignores them anyway.
                                if want_scores {
                                    row[query + 1..].fill(f32::NEG_INFINITY);
                                }
                                // A knocked-out key is hidden from the chosen heads' later queries.
                                if let Some(m) = mask {
                                    if query > m.key && m.heads.contains(&head) {
                                        row[m.key] = f32::NEG_INFINITY;
                                    }
                                }
                                // Softmax while the row is in cache, unless the raw scores are wanted first.
                                if !want_scores {
                                    softmax_prefix(row, query + 1);
                                }
                            }
                        });
                        let rows = past + b0..past + b0 + b;
                        if want_scores {
                            let scores = Tensor::from_vec(a.clone(), (h, b, visible), &Device::Cpu)?;
                            sink.record(&HookPoint::AttnScores(layer), rows.clone(), &scores)?;
                            a.par_chunks_mut(visible).enumerate().for_each(|(row, s)| softmax_prefix(s, past + b0 + row % b + 1));
                        }
                        let pattern = Tensor::from_vec(a, (h, b, visible), &Device::Cpu)?;
                        if want_pattern {
                            sink.record(&HookPoint::Pattern(layer), rows, &pattern)?;
                        }
                        // Output: (b × visible) · (visible × dh) per head, into its columns.
                        let dst = SendPtr(out.as_mut_ptr());
                        crate::capture::sink::with_f32(&pattern, |a| {
                            (0..h).into_par_iter().for_each(|head| {
                                let kv = head / group;
                                let ah = &a[head * head_len..][..head_len];
                                let vh = &v[kv * n_keys * dh..][..visible * dh];
                                // SAFETY: each head writes rows b0..b0+b, columns head·dh..(head+1)·dh
                                // of the (t, h·dh) output: disjoint across heads.
                                unsafe { gemm_f32(b, dh, visible, (dst.at(b0 * width + head * dh), width, 1), (ah.as_ptr(), visible, 1), (vh.as_ptr(), dh, 1), 1.0, Parallelism::None) };
                            })
                        })?;
                    }
                    Ok(())
                })
            })
        })????;
        Ok(Tensor::from_vec(out, (t, width), &Device::Cpu)?)
    }
}

/// A raw output pointer shared by tasks that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used for disjoint writes (see its uses).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// # Safety
    /// `i` must lie inside the buffer.
    unsafe fn at(&self, i: usize) -> *mut f32 {
        unsafe { self.0.add(i) }
    }
}

/// silu(gate) · up for a (T, 2·d_ff) gate|up output, in one parallel pass over its rows.
fn swiglu(gate_up: &Tensor) -> Result<Tensor> {
    let (t, two_ff) = gate_up.dims2()?;
    let ff = two_ff / 2;
    let gate_up = gate_up.contiguous()?;
    let out = crate::capture::sink::with_f32(&gate_up, |x| {
        let mut out = vec![0f32; t * ff];
        out.par_chunks_mut(ff).zip(x.par_chunks(two_ff)).for_each(|(o, row)| {
            let (g, u) = row.split_at(ff);
            silu_times(g, u, o)
        });
        out
    })?;
    Ok(Tensor::from_vec(out, (t, ff), &Device::Cpu)?)
}

/// Softmax over the first `visible` entries; the rest become exactly 0.
fn softmax_prefix(row: &mut [f32], visible: usize) {
    let visible = visible.min(row.len());
    softmax_segments(row, &[0..visible]);
}

crate::simd::vectorized_fn! {
    /// Softmax over the entries inside `segments` (disjoint, in order); every other entry becomes
    /// exactly 0 (not e^−87: a hidden key must contribute nothing).
    pub(crate) fn softmax_segments(row: &mut [f32], segments: &[std::ops::Range<usize>]) {
        let max = segments.iter().flat_map(|r| row[r.clone()].iter().copied()).fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        let mut end = 0;
        for r in segments {
            row[end..r.start].fill(0.0);
            let seen = &mut row[r.clone()];
            seen.iter_mut().for_each(|s| *s = exp_f32(*s - max));
            // Eight partial sums so the loop vectorizes (a single f32 accumulator cannot be reordered).
            let mut lanes = [0f32; 8];
            let mut chunks = seen.chunks_exact(8);
            for c in &mut chunks {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += v;
                }
            }
            sum += lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
            end = r.end;
        }
        row[end..].fill(0.0);
        let inv = 1.0 / sum;
        for r in segments {
            row[r.clone()].iter_mut().for_each(|s| *s *= inv);
        }
    }
}

crate::simd::vectorized_fn! {
    /// out = silu(g) · u, elementwise.
    fn silu_times(g: &[f32], u: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
            *o = g / (1.0 + exp_f32(-g)) * u;
        }
    }
}

/// e^x with ≤2 ulp error for x in [−87, 88] (Cephes' expf polynomial), written branch-free so
/// loops over it vectorize; `f32::exp` is a libm call per element and dominated softmax time.
/// Arguments below −87 return e^−87 ≈ 1.6e−38, which is 0 for every use here.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2^23 rounds to the nearest integer in the default rounding mode.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
    let p = p * r * r + r + 1.0;
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

fn emit(sink: &mut dyn CaptureSink, hook: HookPoint, rows: &std::ops::Range<usize>, value: &Tensor) -> Result<()> {
    if sink.wants(&hook) {
        let value = if value.is_contiguous() { value.clone() } else { value.contiguous()? };
        sink.record(&hook, rows.clone(), &value)?;
    }
    Ok(())
}

/// Fetches a required weight and checks its shape.
fn take_req(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, shape: &[usize]) -> Result<Param> {
    take_opt(get, path, name, shape)?
        .ok_or_else(|| Error::file(path, format!("tensor {name} is missing; the file is incomplete or not a Llama-family model")))
}

/// Fetches an optional weight and checks its shape.
fn take_opt(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, shape: &[usize]) -> Result<Option<Param>> {
    match get(name)? {
        Some(p) => {
            check_shape(path, name, &p.shape(), shape)?;
            Ok(Some(p))
        }
        None => Ok(None),
    }
}

fn check_shape(path: &std::path::Path, name: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(Error::file(
            path,
            format!("tensor {name} has shape {got:?} but the model configuration implies {want:?}; the file's metadata and weights disagree"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_matches_libm() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let rel = ((exp_f32(x) as f64 - (x as f64).exp()) / (x as f64).exp()).abs();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1000.0) < 1e-37);
    }

    #[test]
    fn masked_softmax_rows() {
        // The future entry (100) is ignored, whatever it holds, and comes back as exactly 0.
        let mut row = vec![0.5, 1.0, 1.5, 100.0];
        softmax_prefix(&mut row, 3);
        let e: Vec<f32> = [0.5f32, 1.0, 1.5].iter().map(|x| x.exp()).collect();
        let z: f32 = e.iter().sum();
        for i in 0..3 {
            assert!((row[i] - e[i] / z).abs() < 1e-7);
        }
        assert_eq!(row[3], 0.0);
    }
}
