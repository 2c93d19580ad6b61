//! KV-cache eviction policies and RoPE position modes (DESIGN §7). The budget W counts every key a
//! query can see, its own included; sink tokens sit *inside* the budget (S sinks + W−S recent).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Keep everything (positions are stream indices; degrades past the trained context).
    Dense,
    /// Keep the last W.
    Window,
    /// Keep the first S forever plus the last W−S (StreamingLLM).
    Sink,
    /// No cache: re-run the last W tokens from scratch at every step (the strong baseline).
    Recompute,
    /// llama.cpp's `--keep N`: when full, discard half of the entries after the first N.
    Keep,
    /// H2O (Zhang et al. 2023): per KV head, the S pinned keys, the R most recent and the
    /// best-scoring rest, a key's score being all the attention it has received.
    H2o,
    /// TOVA (Oren et al. 2024): per KV head, evict the key the current query attends to least.
    Tova,
    /// SnapKV (Li et al. 2024), streaming: per KV head, keep the last `observe` keys and the rest
    /// that the last `observe` queries attended to most (max-pooled over 7 neighbours).
    Snapkv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum PositionMode {
    /// Keys cached before RoPE and rotated by cache slot 0..n−1; the query at its own slot
    /// (StreamingLLM).
    Slot,
    /// Keys rotated by their absolute stream positions — the wrong way once tokens are evicted.
    Original,
    /// Keys cached after RoPE; survivors re-rotated by −Δ on each eviction (llama.cpp's K-shift,
    /// HF SinkCache): the same angles as `slot`, but rounding accumulates.
    Delta,
}

/// How a score-based policy scores the keys it may evict (every match on it is exhaustive, so a
/// new scorer cannot fall into another's arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    /// All the attention a key has received (H2O).
    H2o,
    /// The attention of the current query (TOVA).
    Tova,
    /// The attention of the last `observe` queries, max-pooled over neighbours (SnapKV).
    SnapKv,
}

/// One policy at one budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub kind: PolicyKind,
    /// S for `sink`, N for `keep`; 0 otherwise.
    pub sinks: usize,
    /// The budget W (ignored by `dense`).
    pub cache: usize,
    pub positions: PositionMode,
    /// R for `h2o` (its recent window; 0: W/2) and the observation window for `snapkv` (0: 32);
    /// unused by the other kinds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recent: usize,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

/// SnapKV's observation window when none is given.
pub const SNAPKV_OBSERVE: usize = 32;

impl Policy {
    pub fn label(&self) -> String {
        let pos = match self.positions {
            PositionMode::Slot => "slot",
            PositionMode::Original => "original",
            PositionMode::Delta => "delta",
        };
        match self.kind {
            PolicyKind::Dense => "dense".into(),
            PolicyKind::Window => format!("window W={} ({pos})", self.cache),
            PolicyKind::Sink => format!("sink S={} + {} recent, W={} ({pos})", self.sinks, self.cache - self.sinks.min(self.cache), self.cache),
            PolicyKind::Recompute => format!("recompute W={}", self.cache),
            PolicyKind::Keep => format!("keep N={} half-discard, W={} ({pos})", self.sinks, self.cache),
            PolicyKind::H2o => format!("h2o S={} R={}, W={} ({pos})", self.sinks, self.recent_window(), self.cache),
            PolicyKind::Tova => format!("tova S={}, W={} ({pos})", self.sinks, self.cache),
            PolicyKind::Snapkv => format!("snapkv S={} observe {}, W={} ({pos})", self.sinks, self.recent_window(), self.cache),
        }
    }

    /// Whether the kept keys are chosen from attention scores, per KV head (h2o, tova, snapkv).
    pub fn is_scored(&self) -> bool {
        self.scorer().is_some()
    }

    /// How a score-based policy scores keys; `None` for the positional kinds.
    pub fn scorer(&self) -> Option<Scorer> {
        match self.kind {
            PolicyKind::H2o => Some(Scorer::H2o),
            PolicyKind::Tova => Some(Scorer::Tova),
            PolicyKind::Snapkv => Some(Scorer::SnapKv),
            PolicyKind::Dense | PolicyKind::Window | PolicyKind::Sink | PolicyKind::Recompute | PolicyKind::Keep => None,
        }
    }

    /// R for `h2o` and the observation window for `snapkv`, defaults applied.
    pub fn recent_window(&self) -> usize {
        match (self.kind, self.recent) {
            (PolicyKind::H2o, 0) => self.cache / 2,
            (PolicyKind::Snapkv, 0) => SNAPKV_OBSERVE,
            (_, r) => r,
        }
    }

    /// Whether this policy keeps a KV cache (everything but `recompute`).
    pub fn is_cached(&self) -> bool {
        self.kind != PolicyKind::Recompute
    }

    /// Checks the settings make sense for a stream of `n_tokens` on a model trained for
    /// `context` positions; returns warnings for runs that are legal but say little.
    pub fn validate(&self, n_tokens: usize, context: usize) -> Result<Vec<String>> {
        let w = self.cache;
        let mut warnings = Vec::new();
        if self.kind != PolicyKind::Dense {
            if w < 2 {
                return Err(Error::input(format!("--cache {w} is too small: the budget must hold at least 2 entries")));
            }
            if self.is_scored() && self.positions == PositionMode::Delta {
                return Err(Error::input(
                    "score-based policies (h2o, tova, snapkv) keep a different set of keys per KV head; use --positions slot or original",
                ));
            }
            let (r, s) = (self.recent_window(), self.sinks);
            // h2o may spend all of W − S on its recent window (that is the sink policy); snapkv
            // must leave room to choose.
            let bad = match self.kind {
                PolicyKind::H2o => (r == 0 || r + s > w).then_some(("recent window", "--recent", "at most")),
                PolicyKind::Snapkv => (r == 0 || r + s >= w).then_some(("observation window", "--observe", "less than")),
                _ => None,
            };
            if let Some((what, flag, bound)) = bad {
                return Err(Error::input(format!("the {what} ({flag} {r}) must be at least 1 and, with --sinks {s}, add up to {bound} --cache {w}")));
            }
            if matches!(self.kind, PolicyKind::Sink | PolicyKind::Keep | PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv) && self.sinks >= w {
                return Err(Error::input(format!(
                    "--sinks {} must be smaller than --cache {w}: sink tokens are part of the budget (S sinks + W−S recent)",
                    self.sinks
                )));
            }
            if w > context {
                warnings.push(format!("--cache {w} exceeds the model's trained context of {context}: positions past it are untrained"));
            }
            if w >= n_tokens {
                warnings.push(format!("--cache {w} holds the whole {n_tokens}-token stream: nothing is ever evicted, so every policy equals dense"));
            }
        }
        if self.sinks > context {
            return Err(Error::input(format!("--sinks {} exceeds the model's trained context of {context}", self.sinks)));
        }
        if self.kind == PolicyKind::Dense && n_tokens > context {
            warnings.push(format!("dense attention over {n_tokens} tokens goes past the trained context of {context}: expect it to degrade"));
        }
        Ok(warnings)
    }

    /// Slots to evict from a cache holding `len` entries so the next token fits the budget
    /// (empty when there is room or the policy never evicts).
    pub fn evict(&self, len: usize) -> std::ops::Range<usize> {
        if len < self.cache || !self.is_cached() {
            return 0..0;
        }
        match self.kind {
            // Score-based kinds choose per KV head (`kv::scored`).
            PolicyKind::Dense | PolicyKind::Recompute | PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv => 0..0,
            PolicyKind::Window => 0..len + 1 - self.cache,
            PolicyKind::Sink => self.sinks..self.sinks + len + 1 - self.cache,
            PolicyKind::Keep => {
                let n_discard = ((len - self.sinks) / 2).max(len + 1 - self.cache);
                self.sinks..self.sinks + n_discard
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kind: PolicyKind, sinks: usize, cache: usize) -> Policy {
        Policy { kind, sinks, cache, positions: PositionMode::Slot, recent: 0 }
    }

    #[test]
    fn evictions_keep_the_budget() {
        assert_eq!(p(PolicyKind::Window, 0, 4).evict(3), 0..0);
        assert_eq!(p(PolicyKind::Window, 0, 4).evict(4), 0..1);
        assert_eq!(p(PolicyKind::Sink, 2, 4).evict(4), 2..3);
        assert_eq!(p(PolicyKind::Dense, 0, 4).evict(100), 0..0);
        // llama.cpp: n_left = 10 − 2 = 8, n_discard = 4.
        assert_eq!(p(PolicyKind::Keep, 2, 10).evict(10), 2..6);
    }

    #[test]
    fn bad_budgets_are_errors_or_warnings() {
        assert!(p(PolicyKind::Sink, 4, 4).validate(100, 512).is_err());
        assert!(p(PolicyKind::Window, 0, 1).validate(100, 512).is_err());
        assert!(p(PolicyKind::Sink, 600, 1000).validate(2000, 512).is_err());
        assert_eq!(p(PolicyKind::Sink, 4, 256).validate(100, 512).unwrap().len(), 1);
        assert!(p(PolicyKind::Dense, 0, 0).validate(1000, 512).unwrap()[0].contains("past the trained context"));
    }
}
