//! Pass-key retrieval's findings: each prompt's scores as a trial record, and per policy ×
//! length × depth the accuracy two ways (the key ranked first among its distractors; greedy
//! decoding reproducing it) with Wilson intervals, the mean answer NLL, and how far the needle
//! lay from the answer and how much of it the cache still held.

use serde::{Deserialize, Serialize};

use crate::kv::per_head::{gates_by_share, ranked};
use crate::kv::policy::Policy;
use crate::kv::retrieval::heads::HeadEffects;
use crate::kv::retrieval::Compression;
use crate::metrics::proportion::{wilson, Z95};
use crate::metrics::rank::spearman;
use crate::model::cache_rounding::CacheRounding;
use crate::model::info::ModelInfo;

/// How the prompts were made and scored (what a resumed sweep must share with its parts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedleSettings {
    /// The filler's file, or "repeated" for the classic repeated sentences.
    pub filler: String,
    pub lengths: Vec<usize>,
    pub depths: Vec<f64>,
    pub trials: usize,
    pub distractors: usize,
    pub seed: u64,
    /// The cache's storage formats when they round (absent: exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_rounding: Option<CacheRounding>,
}

/// A policy of the sweep, with the budget its `within_budget` is measured against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedlePolicy {
    pub label: String,
    pub policy: Policy,
    /// Whether the question was known while the prompt was compressed.
    pub compression: Compression,
    /// W; `None` for dense, and for a budget that depends on the length (each trial has its own).
    pub budget: Option<usize>,
    /// Wall time of its prompts and candidates, every length (as first run, for reused parts).
    pub seconds: f64,
}

/// `needle.json`: a whole pass-key sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NeedleReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub settings: NeedleSettings,
    pub policies: Vec<NeedlePolicy>,
    pub trials: Vec<NeedleTrial>,
    pub cells: Vec<NeedleCell>,
    /// Which heads retrieve, when measured (`--retrieval-heads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<NeedleHeads>,
    /// Tokens run through the model (prompt prefixes shared between prompts counted once).
    pub tokens_run: usize,
    /// Tokens running each prompt on its own would take (each prompt whole, then its candidates).
    pub tokens_separate: usize,
    pub wall_seconds: f64,
}

impl NeedleReport {
    /// The budget of the policy labelled `label` (`None`: dense, or unknown).
    pub fn budget(&self, label: &str) -> Option<usize> {
        self.policies.iter().find(|p| p.label == label).and_then(|p| p.budget)
    }

    /// When the policy labelled `label` compressed the prompt (`streamed` if unknown).
    pub fn mode(&self, label: &str) -> &'static str {
        self.policies.iter().find(|p| p.label == label).map_or(Compression::Streamed, |p| p.compression).name()
    }
}

/// One prompt under one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedleTrial {
    /// The policy's label (`sink S=4, W=256 (slot)`).
    pub policy: String,
    pub length: usize,
    /// The depth asked for and where the needle went (its filler index over the filler's length).
    pub depth: f64,
    pub depth_actual: f64,
    pub trial: usize,
    pub key: u32,
    /// −log p(answer | prompt), nats, summed over the answer's tokens.
    pub answer_nll: f64,
    /// The key's rank among it and its distractors (1: first).
    pub rank: usize,
    pub candidates: usize,
    /// Greedy decoding reproduces the answer; else its first wrong token and what it picked there.
    pub exact: bool,
    pub first_wrong: Option<usize>,
    pub predicted: Option<String>,
    /// Tokens from the needle's first token to the answer.
    pub distance: usize,
    /// The share of the needle's tokens the cache held when the answer began.
    pub needle_kept: f64,
    /// The cache budget W the prompt ran under (`None`: dense).
    #[serde(default)]
    pub budget: Option<usize>,
    /// Under a rounding cache: the mean over the answer's tokens of KL(P_exact ‖ P_rounded),
    /// against the same policy with an exact cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_from_exact: Option<f64>,
}

/// Every trial of one policy × length × depth, summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedleCell {
    pub policy: String,
    pub length: usize,
    pub depth: f64,
    pub depth_actual: f64,
    pub trials: usize,
    /// Share of trials whose key ranked first, and its 95% Wilson interval.
    pub rank_accuracy: f64,
    pub rank_ci: [f64; 2],
    /// Share of trials greedy decoding answered exactly, and its 95% Wilson interval.
    pub exact_accuracy: f64,
    pub exact_ci: [f64; 2],
    pub mean_rank: f64,
    pub answer_nll: f64,
    pub distance: f64,
    pub needle_kept: f64,
    /// The cache budget W of its trials (`None`: dense).
    pub budget: Option<usize>,
    /// The needle lay less than the cache budget W from the answer (always, with no eviction).
    pub within_budget: bool,
    /// Under a rounding cache: the trials' mean answer KL from the exact cache's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_from_exact: Option<f64>,
}

/// Cells of `trials` in their first-seen order of (policy, length, depth).
pub fn cells(trials: &[NeedleTrial]) -> Vec<NeedleCell> {
    let mut keys: Vec<(&str, usize, u64)> = Vec::new();
    for t in trials {
        let k = (t.policy.as_str(), t.length, t.depth.to_bits());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(policy, length, depth)| {
            let group: Vec<&NeedleTrial> =
                trials.iter().filter(|t| (t.policy.as_str(), t.length, t.depth.to_bits()) == (policy, length, depth)).collect();
            let n = group.len();
            let mean = |f: &dyn Fn(&NeedleTrial) -> f64| group.iter().map(|t| f(t)).sum::<f64>() / n as f64;
            let (rank_accuracy, rank_ci) = wilson(group.iter().filter(|t| t.rank == 1).count(), n, Z95);
            let (exact_accuracy, exact_ci) = wilson(group.iter().filter(|t| t.exact).count(), n, Z95);
            let distance = mean(&|t| t.distance as f64);
            let budget = group[0].budget;
            NeedleCell {
                policy: policy.to_string(),
                length,
                depth: f64::from_bits(depth),
                depth_actual: mean(&|t| t.depth_actual),
                trials: n,
                rank_accuracy,
                rank_ci,
                exact_accuracy,
                exact_ci,
                mean_rank: mean(&|t| t.rank as f64),
                answer_nll: mean(&|t| t.answer_nll),
                distance,
                needle_kept: mean(&|t| t.needle_kept),
                budget,
                within_budget: budget.is_none_or(|w| distance < w as f64),
                kl_from_exact: group.iter().map(|t| t.kl_from_exact).sum::<Option<f64>>().map(|sum| sum / n as f64),
            }
        })
        .collect()
}

/// Which heads retrieve (causal evidence on pass-key prompts), beside the heads `heads` would
/// keep whole (attention paid outside S sinks + R recent keys), per KV head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedleHeads {
    /// The calibration prompts: their length, and trials per depth (the sweep's depths, keys
    /// drawn apart from the sweep's so that the heads are not chosen on the prompts they are
    /// judged on).
    pub length: usize,
    pub trials: usize,
    pub effects: HeadEffects,
    /// [layer][kv head]: the largest mean attention of its query heads outside `sinks` + `recent`
    /// keys, over `outside_tokens` tokens of a calibration prompt.
    pub outside: Vec<Vec<f64>>,
    pub outside_tokens: usize,
    pub sinks: usize,
    pub recent: usize,
    /// The share of KV heads each evidence keeps whole, and which.
    pub share: f64,
    pub full_by_needle: Vec<Vec<bool>>,
    pub full_by_outside: Vec<Vec<bool>>,
    /// KV heads both keep whole.
    pub overlap: usize,
    /// Spearman's ρ between the two evidences over every KV head (`None`: one is constant).
    pub rank_correlation: Option<f64>,
}

impl NeedleHeads {
    /// The findings from both evidences, keeping the `share` of KV heads each ranks highest.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        length: usize,
        trials: usize,
        effects: HeadEffects,
        outside: Vec<Vec<f64>>,
        outside_tokens: usize,
        sinks: usize,
        recent: usize,
        share: f64,
    ) -> Self {
        let full_by_needle = gates_by_share(&effects.kv, share);
        let full_by_outside = gates_by_share(&outside, share);
        let overlap = full_by_needle.iter().flatten().zip(full_by_outside.iter().flatten()).filter(|(a, b)| **a && **b).count();
        let flat = |m: &[Vec<f64>]| m.iter().flatten().copied().collect::<Vec<f64>>();
        let rank_correlation = spearman(&flat(&effects.kv), &flat(&outside));
        NeedleHeads {
            length,
            trials,
            effects,
            outside,
            outside_tokens,
            sinks,
            recent,
            share,
            full_by_needle,
            full_by_outside,
            overlap,
            rank_correlation,
        }
    }

    /// KV heads kept whole by each evidence.
    pub fn kept(&self) -> usize {
        self.full_by_needle.iter().flatten().filter(|&&f| f).count()
    }

    /// The `n` KV heads whose loss of the needle costs the answer most: (layer, kv head, ΔNLL,
    /// its rank by attention outside S + R, 1 = first).
    pub fn leaders(&self, n: usize) -> Vec<(usize, usize, f64, usize)> {
        let by_outside = ranked(&self.outside);
        ranked(&self.effects.kv)
            .into_iter()
            .take(n)
            .map(|(l, kv)| (l, kv, self.effects.kv[l][kv], 1 + by_outside.iter().position(|&x| x == (l, kv)).unwrap_or(by_outside.len())))
            .collect()
    }
}

/// Accuracy of one policy over its cells within and beyond the budget: (trials, rank accuracy,
/// exact accuracy) each, `None` where no cell falls on that side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BudgetSplit {
    pub within: Option<(usize, f64, f64)>,
    pub beyond: Option<(usize, f64, f64)>,
}

/// [`BudgetSplit`] of `policy`'s cells, trials weighted equally.
pub fn budget_split(cells: &[NeedleCell], policy: &str) -> BudgetSplit {
    let side = |within: bool| {
        let group: Vec<&NeedleCell> = cells.iter().filter(|c| c.policy == policy && c.within_budget == within).collect();
        let n: usize = group.iter().map(|c| c.trials).sum();
        (n > 0).then(|| {
            let share = |f: &dyn Fn(&NeedleCell) -> f64| group.iter().map(|c| f(c) * c.trials as f64).sum::<f64>() / n as f64;
            (n, share(&|c| c.rank_accuracy), share(&|c| c.exact_accuracy))
        })
    };
    BudgetSplit { within: side(true), beyond: side(false) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(policy: &str, depth: f64, rank: usize, exact: bool, distance: usize) -> NeedleTrial {
        NeedleTrial {
            policy: policy.into(),
            length: 512,
            depth,
            depth_actual: depth,
            trial: 0,
            key: 12345,
            answer_nll: rank as f64,
            rank,
            candidates: 10,
            exact,
            first_wrong: (!exact).then_some(0),
            predicted: None,
            distance,
            needle_kept: 1.0,
            budget: (policy != "dense").then_some(64),
            kl_from_exact: None,
        }
    }

    #[test]
    fn cells_count_each_group_and_split_at_the_budget() {
        let trials = vec![
            trial("window W=64", 0.0, 1, true, 500),
            trial("window W=64", 0.0, 3, false, 500),
            trial("window W=64", 1.0, 1, true, 20),
            trial("window W=64", 1.0, 1, false, 20),
            trial("dense", 0.0, 1, true, 500),
        ];
        let c = cells(&trials);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].trials, c[0].rank_accuracy, c[0].exact_accuracy, c[0].mean_rank), (2, 0.5, 0.5, 2.0));
        assert!(!c[0].within_budget && c[1].within_budget && c[2].within_budget);
        assert_eq!((c[1].rank_accuracy, c[1].exact_accuracy), (1.0, 0.5));
        assert!(c[0].rank_ci[0] < 0.5 && c[0].rank_ci[1] > 0.5);
        let split = budget_split(&c, "window W=64");
        assert_eq!(split.within, Some((2, 1.0, 0.5)));
        assert_eq!(split.beyond, Some((2, 0.5, 0.5)));
        assert_eq!(budget_split(&c, "dense").beyond, None);
    }

    #[test]
    fn heads_compare_the_two_evidences_on_the_heads_each_keeps_whole() {
        // 2 layers × 2 KV heads: the needle names L1.kv0 first, attention L0.kv1.
        let effects =
            HeadEffects { kv: vec![vec![0.1, 0.0], vec![4.0, 0.5]], query: vec![vec![0.1, 0.0], vec![4.0, 0.5]], prompts: 3, answer_nll: 1.0 };
        let outside = vec![vec![0.2, 0.9], vec![0.1, 0.6]];
        let h = NeedleHeads::new(512, 1, effects, outside, 1024, 4, 124, 0.5);
        assert_eq!(h.kept(), 2);
        assert_eq!(h.full_by_needle, vec![vec![false, false], vec![true, true]]);
        assert_eq!(h.full_by_outside, vec![vec![false, true], vec![false, true]]);
        assert_eq!(h.overlap, 1, "L1.kv1 is in both");
        // (L1.kv0, 4.0) ranks 4th by attention; (L1.kv1, 0.5) 2nd.
        assert_eq!(h.leaders(2), vec![(1, 0, 4.0, 4), (1, 1, 0.5, 2)]);
        // Ranks (2, 1, 4, 3) by the needle against (2, 4, 1, 3) by attention: Σd² = 18, ρ = 1 − 6·18/60.
        assert!((h.rank_correlation.unwrap() - (1.0 - 6.0 * 18.0 / 60.0)).abs() < 1e-12);
    }
}
