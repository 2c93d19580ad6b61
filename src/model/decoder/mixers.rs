//! The shapes of the token mixers other than plain attention heads: multi-head latent attention
//! (DeepSeek's MLA) and Gated DeltaNet linear attention (Qwen3-Next), as configurations state them.

use serde::{Deserialize, Serialize};

/// Multi-head latent attention (DeepSeek-V2/V3's MLA): each token caches one latent of
/// `kv_lora_rank` (normalised) and one RoPE key of `qk_rope` shared by every head; per head, keys
/// are [k_nope | k_rope] (`qk_nope` + `qk_rope` wide) and values `v_head` wide, both expanded from
/// the latent by `kv_b_proj`. Run absorbed, as llama.cpp does: one KV head of
/// `qk_rope + kv_lora_rank` ([k_rope | latent], RoPE on the leading `qk_rope`), values the latent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the queries' low-rank path (`q_a_proj` → norm → `q_b_proj`); 0: one `q_proj`.
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    pub qk_nope: usize,
    pub qk_rope: usize,
    pub v_head: usize,
}

impl Mla {
    /// Width of the one cached row per token and layer: the RoPE key, then the latent.
    pub fn cached_width(&self) -> usize {
        self.qk_rope + self.kv_lora_rank
    }
}

/// Gated DeltaNet layers (Qwen3-Next's `linear_attention`): `k_heads` key heads of `k_dim` and
/// `v_heads` value heads of `v_dim` (each key head shared by v_heads / k_heads value heads), a
/// causal depthwise convolution of `conv_kernel` taps over q|k|v. Each value head carries a
/// k_dim × v_dim state instead of a KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaNetShape {
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
    pub conv_kernel: usize,
}

impl DeltaNetShape {
    /// Channels the convolution runs over: q and k of every key head, v of every value head.
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.value_width()
    }

    /// Width of the heads' readings side by side (what the gated norm and `out_proj` read).
    pub fn value_width(&self) -> usize {
        self.v_heads * self.v_dim
    }

    /// Elements of one sequence's recurrent state in one layer: every value head's k_dim × v_dim
    /// matrix.
    pub fn state_elements(&self) -> usize {
        self.v_heads * self.k_dim * self.v_dim
    }

    /// [`DeltaNetShape::state_elements`] plus the convolution window.
    pub fn carried_elements(&self) -> usize {
        self.state_elements() + (self.conv_kernel.saturating_sub(1)) * self.conv_dim()
    }
}
