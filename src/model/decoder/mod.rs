//! The one configurable decoder every family runs on (TransformerLens-style: one model, switches
//! and a weight map per family in `model::family`): embeddings (learned positions where a family
//! has them), the block stack — RMSNorm or LayerNorm before, after or around each sublayer,
//! grouped-query attention computed in query blocks (no layer ever holds a full T×T pattern) with
//! each layer's own window and RoPE, a dense, gated or mixture-of-experts MLP, sequential or
//! parallel residuals — and the tied or untied output head, pushing every hook into a
//! [`HookReceiver`].

pub mod attention;
mod block;
pub mod config;
mod delta_net;
mod experts;
pub mod finite;
pub mod kv;
mod latent;
pub mod linear;
mod mixers;
mod moe;

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::hook::HookPoint;
use crate::model::receiver::{HookReceiver, NoCapture};
use crate::model::rope::Rope;
use crate::model::scoring::{streamed_nll, token_nll, HeadWeight};
use crate::numerics::tensor::with_f32;
use attention::{Attend, LayerAttention, Seq, SeqAttention, ATTENTION_BLOCK_BYTES};
use block::{Block, Norm, Qkv, QkvSource};
use config::{take_opt, take_opt_vector, take_req};
pub use config::{ArchSwitches, DecoderConfig, LayerAttn, MlpKind, Moe, NormKind, NormPlacement, Param, ParamSource, QkNorm, WeightDtype, LLAMA};
pub(crate) use delta_net::GatedDeltaNet;
pub use delta_net::{DeltaState, RecurrentStates};
use finite::{refuse_non_finite, refuse_non_finite_nll};
pub use kv::{Hidden, KeyMask, KvCache, KvStore, LayerSlots, PrefixView};
use linear::{Linear, LinearWeight};

/// Logit rows materialised at once when a quantized head cannot be streamed.
const LOGIT_ROWS: usize = 128;

/// A loaded decoder-only transformer of any supported family.
pub struct Decoder {
    pub cfg: DecoderConfig,
    /// The embedding table; `None` where it is the packed tied head (`--quantized`), whose rows
    /// are unpacked per lookup.
    embed: Option<Tensor>,
    /// Learned absolute position embeddings (context_len, d_model), added to the input (GPT-2).
    pos_embed: Option<Tensor>,
    blocks: Vec<Block>,
    final_norm: Norm,
    lm_head: Linear,
    /// Each distinct RoPE the layers rotate with, the model's own (`cfg.rope_theta`) first
    /// (Gemma 3's local layers have a second).
    ropes: Vec<Rope>,
    /// Which of `ropes` each layer rotates with.
    layer_ropes: Vec<usize>,
    attention_block_bytes: usize,
    /// Bytes the weights occupy as kept (half matrices count 2 per element).
    weight_bytes: u64,
    /// The type of the weight matrices kept in bf16/f16, if any are.
    half_matrices: Option<DType>,
}

impl Decoder {
    /// Builds the model from a weight source, checking every shape against `cfg`; matrices are
    /// kept as `dtype` says (see [`WeightDtype`]).
    pub fn load(cfg: DecoderConfig, source_path: &std::path::Path, dtype: WeightDtype, get: &mut ParamSource<'_>) -> Result<Self> {
        cfg.validate(source_path)?;
        let d = cfg.d_model;
        let (mut weight_bytes, mut half_matrices) = (0u64, None);
        let mut stored = |name: &str| -> Result<Option<Param>> {
            let Some(p) = get(name)? else { return Ok(None) };
            // A learned position table is added to the embeddings, not multiplied: kept f32.
            let p = p.store_as(if name == "position_embd.weight" { WeightDtype::F32 } else { dtype })?;
            weight_bytes += p.bytes();
            if let Param::Dense(t) = &p {
                if t.rank() == 2 && t.dtype() != DType::F32 {
                    half_matrices.get_or_insert(t.dtype());
                }
            }
            Ok(Some(p))
        };
        let get: &mut ParamSource<'_> = &mut stored;
        let embed_param = take_req(get, source_path, "token_embd.weight", &[cfg.vocab_size, d])?;
        let blocks = (0..cfg.n_layers).map(|l| Block::load(&cfg, l, source_path, get)).collect::<Result<Vec<_>>>()?;
        let final_norm = Norm::load(&cfg, source_path, get, "output_norm", d)?;
        let pos_embed = match cfg.arch.learned_positions {
            true => Some(take_req(get, source_path, "position_embd.weight", &[cfg.context_len, d])?.dequantize()?),
            false => None,
        };
        let lm_bias = take_opt_vector(get, source_path, "output.bias", cfg.vocab_size)?;
        // Kept as stored: a half table is widened per looked-up row (and per head block when tied).
        // A quantized table is dequantized for lookups, unless it is the tied head and packed:
        // then lookups unpack its rows.
        let (embed, lm_head, lookup_copy) = match take_opt(get, source_path, "output.weight", &[cfg.vocab_size, d])? {
            Some(p) => {
                let embed = embed_param.stored()?;
                let copy = if let Param::Quant(_) = embed_param { (embed.elem_count() * embed.dtype().size_in_bytes()) as u64 } else { 0 };
                (Some(embed), Linear::new(p, lm_bias)?, copy)
            }
            // Tied embeddings: the output head is the embedding matrix itself.
            None => match embed_param {
                Param::Quant(q) => {
                    let head = Linear::new(Param::Quant(q.clone()), None)?;
                    if matches!(head.weight, LinearWeight::Packed(_)) {
                        (None, head, 0)
                    } else {
                        let embed = q.dequantize(&Device::Cpu)?;
                        let copy = (embed.elem_count() * embed.dtype().size_in_bytes()) as u64;
                        (Some(embed), head, copy)
                    }
                }
                Param::Dense(ref t) => (Some(t.clone()), Linear::shared(t.clone()), 0),
            },
        };
        let rope = Rope {
            theta: cfg.rope_theta,
            d_head: cfg.d_head,
            rot_dims: cfg.arch.rotary_dims.unwrap_or(cfg.d_head),
            layout: cfg.rope_layout,
            yarn: cfg.arch.rope_yarn,
            freq_factors: cfg.rope_freq_factors.as_ref().map(|f| f.factors.as_slice().into()),
        };
        let mut ropes = vec![rope];
        let mut layer_ropes = Vec::with_capacity(cfg.n_layers);
        for layer in &cfg.layers {
            // A NoPE layer's rope rotates no dimension: every rotation (re-rotation by a cache
            // included) is the identity there, and YaRN's attention factor is not applied.
            let rot_dims = if layer.nope { 0 } else { ropes[0].rot_dims };
            // Layers marked unscaled (Gemma 3's and OLMo 3's windowed ones, whose own RoPE
            // parameters are plain) rotate without the model's scaling.
            let (yarn, freq_factors) = if layer.unscaled { (None, None) } else { (ropes[0].yarn, ropes[0].freq_factors.clone()) };
            let same = |r: &Rope| {
                r.theta == layer.rope_theta
                    && r.rot_dims == rot_dims
                    && r.yarn.is_some() == yarn.is_some()
                    && r.freq_factors.is_some() == freq_factors.is_some()
            };
            let index = match ropes.iter().position(same) {
                Some(i) => i,
                None => {
                    ropes.push(Rope { theta: layer.rope_theta, rot_dims, yarn, freq_factors, ..ropes[0].clone() });
                    ropes.len() - 1
                }
            };
            layer_ropes.push(index);
        }
        Ok(Decoder {
            cfg,
            embed,
            pos_embed,
            blocks,
            final_norm,
            lm_head,
            ropes,
            layer_ropes,
            attention_block_bytes: ATTENTION_BLOCK_BYTES,
            weight_bytes: weight_bytes + lookup_copy,
            half_matrices,
        })
    }

    /// Runs `tokens` after whatever `cache` holds (positions continue from `cache.len()`), pushing
    /// hooks into `hooks`, and returns the final-norm hidden states (T, d_model). With `cache` =
    /// `None` nothing is kept for later calls. Logits come from [`Decoder::logits`].
    pub fn forward(&self, tokens: &[u32], cache: Option<&mut KvCache>, hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        self.forward_with(tokens, cache.map(|c| c as &mut dyn KvStore), hooks)
    }

    /// [`Decoder::forward`] with any [`KvStore`] (e.g. a policy-managed cache being prefilled).
    pub fn forward_with(&self, tokens: &[u32], store: Option<&mut dyn KvStore>, hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        if tokens.is_empty() {
            return Err(Error::input("no tokens to run: the text is empty"));
        }
        let positions = store.as_ref().map_or_else(|| (0..tokens.len()).collect::<Vec<_>>(), |s| s.next_positions(tokens.len()));
        let rows = positions[0]..positions[0] + tokens.len();
        let x = self.embed_tokens(tokens, &positions)?;
        emit(hooks, HookPoint::Embed, &rows, &x)?;
        self.run_layers(x, 0, &mut [Seq { store, mask: None }], hooks)
    }

    /// Re-runs layers `layer..` from that layer's input (`resid_pre`, (T, d_model), positions
    /// 0..T) once per mask — all masks must name `layer` — and returns each variant's final-norm
    /// hidden states. Layers before the masked one cannot see a mask, so callers reuse one clean
    /// pass for every variant; the variants are stacked so projections and MLPs run as one batch.
    pub fn forward_masked(&self, resid_pre: &Tensor, masks: &[KeyMask]) -> Result<Vec<Tensor>> {
        let t = resid_pre.dim(0)?;
        let hidden = self.forward_masked_stacked(resid_pre, masks)?;
        (0..masks.len()).map(|s| Ok(hidden.narrow(0, s * t, t)?)).collect()
    }

    /// [`Decoder::forward_masked`]'s variants as one (masks · T, d_model) tensor, variant after
    /// variant along rows.
    pub fn forward_masked_stacked(&self, resid_pre: &Tensor, masks: &[KeyMask]) -> Result<Tensor> {
        let Some(layer) = masks.first().map(|m| m.layer) else { return Ok(Tensor::zeros((0, self.cfg.d_model), DType::F32, &Device::Cpu)?) };
        if layer >= self.cfg.n_layers || masks.iter().any(|m| m.layer != layer) {
            return Err(Error::input(format!("masks must all name one layer below {}", self.cfg.n_layers)));
        }
        let x = Tensor::cat(&vec![resid_pre; masks.len()], 0)?;
        let mut seqs: Vec<Seq> = masks.iter().map(|m| Seq { store: None, mask: Some(m) }).collect();
        self.run_layers(x, layer, &mut seqs, &mut NoCapture)
    }

    /// [`Decoder::forward_masked_stacked`] for rows that follow what `prefix` holds (positions
    /// `prefix.len()..`): each variant's rows see the prefix's keys and their own, the prefix
    /// unchanged — the few rows a mask changes (an answer's), without re-running the rest.
    /// `resid_pre` is the rows' input to the masks' layer, from a clean pass over a [`PrefixView`].
    pub fn forward_masked_after(&self, prefix: &KvCache, resid_pre: &Tensor, masks: &[KeyMask]) -> Result<Tensor> {
        let Some(layer) = masks.first().map(|m| m.layer) else { return Ok(Tensor::zeros((0, self.cfg.d_model), DType::F32, &Device::Cpu)?) };
        if layer >= self.cfg.n_layers || masks.iter().any(|m| m.layer != layer) {
            return Err(Error::input(format!("masks must all name one layer below {}", self.cfg.n_layers)));
        }
        let x = Tensor::cat(&vec![resid_pre; masks.len()], 0)?;
        let mut views: Vec<PrefixView> = masks.iter().map(|_| PrefixView::new(prefix)).collect();
        let mut seqs: Vec<Seq> = views.iter_mut().zip(masks).map(|(v, m)| Seq { store: Some(v as &mut dyn KvStore), mask: Some(m) }).collect();
        self.run_layers(x, layer, &mut seqs, &mut NoCapture)
    }

    /// Runs independent token windows of equal length, each from position 0 with nothing cached
    /// (what `recompute` re-runs at every step), stacked so projections and MLPs run as one batch
    /// while each window attends only within itself. Returns the final-norm hidden states,
    /// window after window along rows. Equal to one [`Decoder::forward`] per window.
    pub fn forward_windows(&self, windows: &[&[u32]]) -> Result<Tensor> {
        let Some(len) = windows.first().map(|w| w.len()) else { return Err(Error::Internal("forward_windows needs a window".into())) };
        if len == 0 || windows.iter().any(|w| w.len() != len) {
            return Err(Error::Internal("forward_windows needs non-empty windows of one length".into()));
        }
        let positions: Vec<usize> = windows.iter().flat_map(|w| 0..w.len()).collect();
        let x = self.embed_tokens(&windows.concat(), &positions)?;
        let mut seqs: Vec<Seq> = windows.iter().map(|_| Seq { store: None, mask: None }).collect();
        self.run_layers(x, 0, &mut seqs, &mut NoCapture)
    }

    /// One decode step for several independent sequences: `tokens[s]` is appended to `stores[s]`
    /// (each store places and keeps keys its own way). Projections and MLPs run on all sequences
    /// as one batch — decoding is bound by reading the weights, so a batch costs little more than
    /// one. Returns the final-norm hidden states, one row per sequence.
    pub fn decode_step(&self, tokens: &[u32], stores: &mut [&mut dyn KvStore]) -> Result<Tensor> {
        if tokens.len() != stores.len() || tokens.is_empty() {
            return Err(Error::Internal("decode_step needs one token per store".into()));
        }
        let positions: Vec<usize> = stores.iter().map(|s| s.next_positions(1)[0]).collect();
        let x = self.embed_tokens(tokens, &positions)?;
        let mut seqs: Vec<Seq> = stores.iter_mut().map(|s| Seq { store: Some(&mut **s), mask: None }).collect();
        self.run_layers(x, 0, &mut seqs, &mut NoCapture)
    }

    /// Runs blocks `first_layer..` over `x`, which holds `seqs.len()` sequences of equal length
    /// stacked along rows. Projections and MLPs run on all rows at once; RoPE, the KV store and
    /// attention (with that sequence's mask) run per sequence.
    fn run_layers(&self, x: Tensor, first_layer: usize, seqs: &mut [Seq<'_>], hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let n_seq = seqs.len().max(1);
        let t = x.dim(0)? / n_seq;
        let positions: Vec<Vec<usize>> = seqs.iter().map(|s| s.store.as_ref().map_or_else(|| (0..t).collect(), |st| st.next_positions(t))).collect();
        let tables = self
            .ropes
            .iter()
            .map(|rope| positions.iter().map(|p| rope.tables(p, &Device::Cpu)).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        let mut attend = SeqAttention { seqs, positions, tables, t, block_bytes: self.attention_block_bytes };
        self.run_blocks(x, first_layer, &mut attend, hooks)
    }

    /// The layer stack over `x` (rows = tokens): the family's norms, fused projections, `attend` for the
    /// part where queries meet keys, output projection, the MLP, hooks at every named point.
    pub(crate) fn run_blocks(&self, mut x: Tensor, first_layer: usize, attend: &mut dyn Attend, hooks: &mut dyn HookReceiver) -> Result<Tensor> {
        let rows = attend.rows();
        let eps = self.cfg.rms_eps as f32;
        refuse_non_finite(if first_layer == 0 { HookPoint::Embed } else { HookPoint::ResidPre(first_layer) }, &x, &[], &rows)?;
        for (l, block) in self.blocks.iter().enumerate().skip(first_layer) {
            emit(hooks, HookPoint::ResidPre(l), &rows, &x)?;
            let norm = |n: &Option<Norm>, x: &Tensor| -> Result<Tensor> { n.as_ref().map_or_else(|| Ok(x.clone()), |n| n.forward(x, eps)) };
            let block_in = x.clone();
            let attn_in_raw = norm(&block.attn_in, &x)?;
            let attn_in = intervene(hooks, HookPoint::AttnIn(l), &rows, attn_in_raw.clone())?;
            let (o_in, steps) = self.mix_tokens(block, l, &attn_in, attend, hooks)?;
            let attn_out = self.to_residual(norm(&block.attn_out, &block.o_proj.forward(&o_in)?)?)?;
            emit(hooks, HookPoint::AttnOut(l), &rows, &attn_out)?;
            x = (&x + &attn_out)?;
            let mut attention_steps: Vec<(HookPoint, &Tensor)> = vec![(HookPoint::AttnIn(l), &attn_in)];
            attention_steps.extend(steps.iter().map(|(h, t)| (*h, t)));
            attention_steps.push((HookPoint::AttnOut(l), &attn_out));
            refuse_non_finite(HookPoint::ResidMid(l), &x, &attention_steps, &rows)?;
            emit(hooks, HookPoint::ResidMid(l), &rows, &x)?;
            // Under a parallel residual the MLP reads the block's input, not x + attn — through
            // the attention's own norm where the family shares one (before that hook's rewrite:
            // each projection input is rewritten once, at its own hook).
            let xn = match self.cfg.arch.norm_placement {
                NormPlacement::Shared => attn_in_raw,
                _ => norm(&block.mlp_in, if self.cfg.arch.parallel_residual { &block_in } else { &x })?,
            };
            let xn = intervene(hooks, HookPoint::MlpIn(l), &rows, xn)?;
            let mlp_out = block.mlp.forward(&xn, &mut |act| intervene(hooks, HookPoint::MlpPost(l), &rows, act))?;
            x = (x + self.to_residual(norm(&block.mlp_out, &mlp_out)?)?)?;
            refuse_non_finite(HookPoint::ResidPost(l), &x, &[(HookPoint::MlpIn(l), &xn)], &rows)?;
            emit(hooks, HookPoint::ResidPost(l), &rows, &x)?;
        }
        attend.finish();
        let out = self.final_norm.forward(&x, eps)?;
        refuse_non_finite(HookPoint::LnFinal, &out, &[], &rows)?;
        emit(hooks, HookPoint::LnFinal, &rows, &out)?;
        Ok(out)
    }

    /// Layer `l`'s token mixing of its normalised input: attention (queries, keys and values, the
    /// store, the heads' outputs, a gated model's gate) or a linear-attention layer's recurrence.
    /// Returns what the output projection reads and the named steps on the way (for the finite check).
    fn mix_tokens(
        &self,
        block: &Block,
        l: usize,
        attn_in: &Tensor,
        attend: &mut dyn Attend,
        hooks: &mut dyn HookReceiver,
    ) -> Result<(Tensor, Vec<(HookPoint, Tensor)>)> {
        let rows = attend.rows();
        if let QkvSource::Linear(net) = &block.qkv {
            let (qkv, z_gate, ba) = net.project(attn_in)?;
            let core = attend.recurrent(l, net, &qkv, &ba)?;
            let z = intervene(hooks, HookPoint::Z(l), &rows, net.gated_norm(&core, &z_gate, self.cfg.rms_eps as f32)?)?;
            return Ok((z.clone(), vec![(HookPoint::Z(l), z)]));
        }
        let Qkv { mut q, k, v, gate } = block.qkv(&self.cfg, attn_in)?;
        emit(hooks, HookPoint::Q(l), &rows, &q)?;
        let k = intervene(hooks, HookPoint::K(l), &rows, k)?;
        let v = intervene(hooks, HookPoint::V(l), &rows, v)?;
        let layer = self.layer_attention(l);
        if let Some(scale) = self.cfg.arch.attn_scale {
            // The kernels scale scores by 1/√d_head; this family wants `scale` instead.
            q = (q * (scale * (self.cfg.d_head as f64).sqrt()))?;
        }
        let z = attend.attend(&layer, &q, &k, &v, hooks)?;
        let z = intervene(hooks, HookPoint::Z(l), &rows, z)?;
        let gate = match gate {
            Some(g) => Some(intervene(hooks, HookPoint::Gate(l), &rows, candle_nn::ops::sigmoid(&g)?)?),
            None => None,
        };
        let o_in = block.o_proj_input(&z, gate.as_ref())?;
        let mut steps = vec![(HookPoint::Q(l), q), (HookPoint::K(l), k), (HookPoint::V(l), v), (HookPoint::Z(l), z)];
        steps.extend(gate.map(|g| (HookPoint::Gate(l), g)));
        Ok((o_in, steps))
    }

    /// A sublayer's output as it joins the residual stream (scaled where the family does).
    fn to_residual(&self, out: Tensor) -> Result<Tensor> {
        match self.cfg.arch.residual_multiplier {
            Some(m) => Ok((out * m)?),
            None => Ok(out),
        }
    }

    /// Embeds `tokens` at `positions` (scaled by √d_model where the family does; plus the learned
    /// position rows where it has them), refusing ids outside the vocabulary and positions past
    /// a learned table.
    pub(crate) fn embed_tokens(&self, tokens: &[u32], positions: &[usize]) -> Result<Tensor> {
        self.check_ids(tokens)?;
        let x = match (&self.embed, &self.lm_head.weight) {
            (Some(table), _) => table.index_select(&Tensor::new(tokens, &Device::Cpu)?, 0)?.to_dtype(DType::F32)?,
            (None, LinearWeight::Packed(head)) => Tensor::from_vec(head.rows(tokens), (tokens.len(), self.cfg.d_model), &Device::Cpu)?,
            (None, _) => return Err(Error::Internal("no embedding table and no packed tied head".into())),
        };
        if let Some(table) = &self.pos_embed {
            let n = table.dim(0)?;
            if let Some(&p) = positions.iter().find(|&&p| p >= n) {
                return Err(Error::input(format!(
                    "position {p} is past the {n} positions this model learned (it has no RoPE to extrapolate with); use fewer tokens, or a KV-cache budget of at most {n} with slot positions"
                )));
            }
            let ids: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
            return Ok((x + table.index_select(&Tensor::new(ids.as_slice(), &Device::Cpu)?, 0)?)?);
        }
        if self.cfg.arch.embed_scale {
            // As the reference computes it: √d_model rounded to f32 once.
            let scale = (self.cfg.d_model as f64).sqrt() as f32;
            return Ok((x * scale as f64)?);
        }
        match self.cfg.arch.embed_multiplier {
            Some(m) => Ok((x * m)?),
            None => Ok(x),
        }
    }

    /// Layer `l`'s RoPE and window.
    fn layer_attention(&self, l: usize) -> LayerAttention<'_> {
        let rope_index = self.layer_ropes[l];
        LayerAttention {
            index: l,
            rope: &self.ropes[rope_index],
            rope_index,
            window: self.cfg.layer_window(l),
            sinks: self.blocks[l].sinks.as_deref(),
            softcap: self.cfg.arch.attn_logit_softcap.map(|c| c as f32),
        }
    }

    /// Layer `l`'s RoPE.
    pub fn layer_rope(&self, l: usize) -> Rope {
        self.layer_attention(l).rope.clone()
    }

    /// Every distinct RoPE the layers rotate with, the model's own first; a layer's index into
    /// them is its [`LayerAttention`]'s `rope_index`.
    pub fn ropes(&self) -> &[Rope] {
        &self.ropes
    }

    /// Whether some layer attends through a sliding window of the model's own.
    pub fn has_sliding_window(&self) -> bool {
        !self.cfg.windowed_layers().is_empty()
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
        self.ropes[0].clone()
    }

    /// Bytes the weights occupy in memory as loaded.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// The type weight matrices are kept in: bf16/f16 when any is (under `--dtype`, or as the file
    /// stores them), else f32.
    pub fn matrix_dtype(&self) -> DType {
        self.half_matrices.unwrap_or(DType::F32)
    }

    /// Caps the bytes of one query block's scores (default 32 MiB); smaller means more, shorter
    /// blocks. Results do not depend on it.
    pub fn set_attention_block_bytes(&mut self, bytes: usize) {
        self.attention_block_bytes = bytes.max(1);
    }

    /// Logits (rows, vocab) for final-norm hidden states (rows, d_model). Callers with long inputs
    /// pass row chunks: a full T×vocab matrix can be gigabytes.
    pub fn logits(&self, normed: &Tensor) -> Result<Tensor> {
        let mut logits = self.lm_head.forward(normed)?;
        if let Some(d) = self.cfg.arch.logit_divisor {
            logits = (logits / d)?;
        }
        Ok(match self.cfg.arch.final_logit_softcap {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        })
    }

    /// NLL of `targets[r]` given final-norm hidden row r: a dense head is streamed in vocabulary
    /// blocks (no rows × vocab matrix); a quantized one goes through [`Decoder::logits`].
    pub fn next_token_nll(&self, normed: &Tensor, targets: &[u32]) -> Result<Vec<f64>> {
        let (rows, d) = normed.dims2()?;
        if rows != targets.len() {
            return Err(Error::Internal(format!("{rows} hidden rows for {} targets", targets.len())));
        }
        self.check_ids(targets)?;
        let vocab = self.cfg.vocab_size;
        let normed = normed.contiguous()?;
        // The streamed head needs plain logits; a soft-capped or divided one goes through `logits`.
        let plain = self.cfg.arch.final_logit_softcap.is_none() && self.cfg.arch.logit_divisor.is_none();
        let dense = match (&self.lm_head.weight, &self.lm_head.bias) {
            (LinearWeight::Dense(w), None) if plain => Some((w, true)),
            (LinearWeight::DenseT(w), None) if plain => Some((w, false)),
            _ => None,
        };
        if let Some((w, out_in)) = dense {
            let w = w.contiguous()?;
            let nll = with_f32(&w, |w| {
                with_f32(&normed, |x| streamed_nll(x, d, if out_in { HeadWeight::OutIn(w) } else { HeadWeight::InOut(w) }, vocab, targets))
            })??;
            return refuse_non_finite_nll(nll);
        }
        // Row chunks: a full rows × vocab matrix can be gigabytes.
        let mut out = Vec::with_capacity(rows);
        for r0 in (0..rows).step_by(LOGIT_ROWS) {
            let n = LOGIT_ROWS.min(rows - r0);
            let logits = self.logits(&normed.narrow(0, r0, n)?)?;
            let ts = &targets[r0..r0 + n];
            out.extend(with_f32(&logits, |x| {
                x.par_chunks(vocab).zip(ts.par_iter()).map(|(row, &t)| token_nll(row, t as usize)).collect::<Vec<_>>()
            })?);
        }
        refuse_non_finite_nll(out)
    }
}

/// Lets `hooks` replace the tensor at `hook` (see [`HookReceiver::rewrite`]), records what the
/// forward pass will use, and returns it.
fn intervene(hooks: &mut dyn HookReceiver, hook: HookPoint, rows: &std::ops::Range<usize>, value: Tensor) -> Result<Tensor> {
    if !hooks.wants(&hook) {
        return Ok(value);
    }
    let value = if value.is_contiguous() { value } else { value.contiguous()? };
    let value = hooks.rewrite(&hook, rows.clone(), &value)?.unwrap_or(value);
    hooks.record(&hook, rows.clone(), &value)?;
    Ok(value)
}

fn emit(hooks: &mut dyn HookReceiver, hook: HookPoint, rows: &std::ops::Range<usize>, value: &Tensor) -> Result<()> {
    if hooks.wants(&hook) {
        let value = if value.is_contiguous() { value.clone() } else { value.contiguous()? };
        hooks.record(&hook, rows.clone(), &value)?;
    }
    Ok(())
}
