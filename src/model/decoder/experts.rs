//! The shape of a mixture-of-experts MLP as a configuration states it: how many experts, how a
//! token's are chosen and weighed, what each computes, and the optional parts some families add
//! (a shared expert, dense first layers, grouped routing, scaled weights).

use serde::{Deserialize, Serialize};

/// A mixture-of-experts MLP: its shape, how the chosen experts are weighed, what each computes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// The chosen experts' softmax weights divided by their sum (a softmax over the chosen
    /// logits: Mixtral, gpt-oss, Qwen3-MoE); otherwise each keeps its softmax over all experts
    /// (`norm_topk_prob` false: Qwen2-MoE, OLMoE).
    pub norm_top_k: bool,
    pub expert: ExpertAct,
    /// Width of a shared SwiGLU expert every token also goes through, its output weighed by
    /// σ(x · g) (Qwen2-MoE's `shared_expert`) or added as it is (`ungated_shared`); 0: none.
    pub shared_ff: usize,
    /// The shared expert's output joins unweighed (DeepSeek's `shared_experts`, their widths
    /// summed into `shared_ff`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ungated_shared: bool,
    /// The first this many layers run a dense SwiGLU of `dense_ff` instead of the experts
    /// (DeepSeek's `first_k_dense_replace`, its `intermediate_size`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dense_layers: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dense_ff: usize,
    /// Experts form this many groups, and a token's experts come from the `top_groups` groups
    /// whose best expert scores highest (DeepSeek-V2's `group_limited_greedy`), or whose two best
    /// experts' probabilities sum highest (`groups_by_top_two`: llama.cpp's rule for every
    /// `deepseek2` file, DeepSeek-V3's); 0: no groups.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub groups: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub top_groups: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub groups_by_top_two: bool,
    /// The chosen experts' weights multiplied by this (DeepSeek's `routed_scaling_factor`);
    /// `None`: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_scale: Option<f64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Moe {
    /// A mixture of `experts` SwiGLU-like experts, `top_k` per token, weighed as `norm_top_k`
    /// says, with none of the optional parts (shared expert, dense layers, groups, scaling).
    pub const fn plain(experts: usize, top_k: usize, norm_top_k: bool, expert: ExpertAct) -> Moe {
        Moe {
            experts,
            top_k,
            norm_top_k,
            expert,
            shared_ff: 0,
            ungated_shared: false,
            dense_layers: 0,
            dense_ff: 0,
            groups: 0,
            top_groups: 0,
            groups_by_top_two: false,
            routed_scale: None,
        }
    }
}

/// What one expert computes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertAct {
    /// down(silu(gate(x)) · up(x)), no biases (Mixtral, Qwen-MoE, OLMoE).
    SwiGlu,
    /// A SwiGLU with biases whose gate and up are clamped (gate ≤ limit, up to [−limit, limit]),
    /// (up + 1) · gate · σ(α · gate) (gpt-oss).
    ClampedSwiGlu { alpha: f64, limit: f64 },
}
