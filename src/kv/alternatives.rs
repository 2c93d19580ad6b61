//! The cache policies an engine may really run when it says it runs another: the near misses of a
//! declared policy (position handling, the pinned count ± 1, the budget ± 1, how much a full cache
//! discards, no eviction at all), each with the engine bug it stands for. `verify` replays every
//! one and ranks them by how well each explains a trace.

use serde::{Deserialize, Serialize};

use super::policy::{Eviction, Policy, PositionMode};
use crate::model::cache_rounding::CacheRounding;
use crate::numerics::cache_formats::CacheFormat;

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

/// The cache formats an engine may really store when it declares `declared`, the declared one
/// first: unquantized (f16), only the keys quantized, the values quantized like the keys,
/// llama.cpp's Hadamard rotation the other way, the exact first entries not kept, and (declaring
/// f16) the common quantized caches.
pub fn format_near_misses(declared: CacheRounding) -> Vec<(CacheRounding, String)> {
    let mut out = vec![(declared, "as declared".to_string())];
    let mut add = |r: CacheRounding, cause: String| {
        if !out.iter().any(|(o, _)| *o == r) {
            out.push((r, cause));
        }
    };
    let (k, v) = (declared.keys, declared.values);
    let plain = CacheRounding { keys: CacheFormat::F16, values: CacheFormat::F16, exact_first: 0, ..declared };
    if declared.is_exact() || (k == CacheFormat::F16 && v == CacheFormat::F16) {
        for f in [CacheFormat::Q8_0, CacheFormat::Q4_0] {
            add(CacheRounding { keys: f, values: f, ..plain }, format!("keys and values stored as {}", f.name()));
        }
        return out;
    }
    add(plain, "keys and values stored unquantized (f16)".into());
    if !k.is_exact() && v != CacheFormat::F16 {
        add(CacheRounding { values: CacheFormat::F16, ..declared }, format!("only the keys stored as {} (values f16)", k.name()));
    }
    if !k.is_exact() && v != k {
        add(CacheRounding { values: k, ..declared }, format!("the values stored as {} too", k.name()));
    }
    if declared.has_block() {
        let hadamard = !declared.hadamard;
        let cause = if hadamard { "llama.cpp's Hadamard rotation on" } else { "no Hadamard rotation (LLAMA_ATTN_ROT_DISABLE)" };
        add(CacheRounding { hadamard, ..declared }, cause.into());
    }
    if declared.exact_first > 0 {
        add(CacheRounding { exact_first: 0, ..declared }, "the first entries quantized too".into());
    }
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
    fn a_quantized_declaration_has_its_format_near_misses() {
        let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, exact_first: 4, ..CacheRounding::default() };
        let labels: Vec<String> =
            format_near_misses(q4).iter().map(|(r, _)| format!("{}{}", r.label(), if r.hadamard { "" } else { " unrotated" })).collect();
        assert_eq!(
            labels,
            ["K q4_0 · V q4_0 · 4 exact", "K f16 · V f16", "K q4_0 · V f16 · 4 exact", "K q4_0 · V q4_0 · 4 exact unrotated", "K q4_0 · V q4_0"]
        );
        let f16 = CacheRounding { keys: CacheFormat::F16, values: CacheFormat::F16, ..CacheRounding::default() };
        assert_eq!(format_near_misses(f16).len(), 3);
    }

    #[test]
    fn scored_policies_stand_alone() {
        let declared = Policy::new(Eviction::Scored { sinks: 4, scorer: Scorer::Tova }, 64, PositionMode::Slot);
        assert_eq!(near_misses(&declared).len(), 1);
    }
}
