//! The cache policies an engine may really run when it says it runs another: the near misses of a
//! declared policy (position handling, the pinned count ± 1, the budget ± 1, how much a full cache
//! discards, no eviction at all), each with the engine bug it stands for. `verify` replays every
//! one and ranks them by how well each explains a trace.

use serde::{Deserialize, Serialize};

use super::policy::{Eviction, Policy, PositionMode};

/// One candidate: a policy and the engine behaviour it models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub policy: Policy,
    /// What an engine running this policy instead of the declared one gets wrong, in words.
    pub cause: String,
}

/// The declared policy first (cause "as declared"), then its near misses, each distinct and
/// valid. Score-based and `recompute` policies have none (the trace is held against the declared
/// policy alone).
pub fn near_misses(declared: &Policy) -> Vec<Alternative> {
    let mut out = vec![Alternative { policy: *declared, cause: "as declared".into() }];
    let mut add = |policy: Policy, cause: String| {
        if policy.check().is_ok() && !out.iter().any(|a| a.policy == policy) {
            out.push(Alternative { policy, cause });
        }
    };
    let (w, pos) = (declared.cache, declared.positions);
    let with = |eviction: Eviction, cache: usize, positions: PositionMode| Policy::new(eviction, cache, positions);
    match declared.eviction {
        Eviction::Window | Eviction::Sink { .. } | Eviction::Keep { .. } => {}
        Eviction::Dense | Eviction::Recompute | Eviction::Scored { .. } => return out,
    }
    for p in PositionMode::ALL.into_iter().filter(|&p| p != pos) {
        add(with(declared.eviction, w, p), position_cause(p).into());
    }
    let pinned = declared.pinned();
    let pinned_as = |n: usize| match declared.eviction {
        Eviction::Keep { .. } => Eviction::Keep { n_keep: n },
        _ if n == 0 => Eviction::Window,
        _ => Eviction::Sink { sinks: n },
    };
    if pinned > 0 {
        add(with(pinned_as(pinned - 1), w, pos), format!("one fewer pinned entry ({}): BOS not counted, or evicted", pinned - 1));
    }
    add(with(pinned_as(pinned + 1), w, pos), format!("one more pinned entry ({}): BOS counted twice", pinned + 1));
    add(with(declared.eviction, w - 1, pos), format!("a budget one short (W = {}): the cache is full one token early", w - 1));
    add(with(declared.eviction, w + 1, pos), format!("a budget one over (W = {}): the query's own entry not counted", w + 1));
    match declared.eviction {
        Eviction::Keep { n_keep } => add(
            with(if n_keep == 0 { Eviction::Window } else { Eviction::Sink { sinks: n_keep } }, w, pos),
            "discards just enough for the next token, not half of the unpinned entries".into(),
        ),
        _ => {
            add(with(Eviction::Keep { n_keep: pinned }, w, pos), "discards half of the unpinned entries when full (llama.cpp's context shift)".into())
        }
    }
    add(Policy::new(Eviction::Dense, w, pos), "no eviction at all: the cache grows past its budget".into());
    out
}

fn position_cause(p: PositionMode) -> &'static str {
    match p {
        PositionMode::Original => "positions never shifted: kept keys keep their rotation and new tokens their stream index",
        PositionMode::Slot => "positions by cache slot with keys rotated afresh (no re-rotation rounding)",
        PositionMode::Delta => "kept keys re-rotated by the shift (llama.cpp's seq_add / HF SinkCache)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::Scorer;

    #[test]
    fn keep_has_every_near_miss_once() {
        let declared = Policy::new(Eviction::Keep { n_keep: 1 }, 255, PositionMode::Delta);
        let alts = near_misses(&declared);
        assert_eq!(alts[0].policy, declared);
        let labels: Vec<String> = alts.iter().map(|a| a.policy.label()).collect();
        for want in [
            "keep N=1 half-discard, W=255 (slot)",
            "keep N=1 half-discard, W=255 (original)",
            "keep N=0 half-discard, W=255 (delta)",
            "keep N=2 half-discard, W=255 (delta)",
            "keep N=1 half-discard, W=254 (delta)",
            "keep N=1 half-discard, W=256 (delta)",
            "sink S=1 + 254 recent, W=255 (delta)",
            "dense",
        ] {
            assert!(labels.iter().any(|l| l == want), "{want} missing from {labels:?}");
        }
        assert_eq!(labels.len(), 9, "{labels:?}");
    }

    #[test]
    fn scored_policies_stand_alone() {
        let declared = Policy::new(Eviction::Scored { sinks: 4, scorer: Scorer::Tova }, 64, PositionMode::Slot);
        assert_eq!(near_misses(&declared).len(), 1);
    }
}
