//! KV-cache eviction policies and RoPE position modes (DESIGN §7). The budget W counts every key a
//! query can see, its own included; sink tokens sit *inside* the budget (S sinks + W−S recent).
//! A policy is built from the command line's flags once (`cli::policy_args`) and checked by
//! [`Policy::check`], whose messages speak of W, S, R and the observation window, never of a
//! flag (the Python package passes the same values by other names); run files keep the flat
//! record they always had.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The name of an eviction rule, as the command line and run files spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    Dense,
    Window,
    Sink,
    Recompute,
    Keep,
    H2o,
    Tova,
    Snapkv,
}

/// One eviction rule's facts: its name on the command line and in run files, what it keeps (the
/// command line's help), whether it pins first tokens (S for sink and the score-based rules, N
/// for keep) and how many when none are asked for.
struct Rule {
    kind: PolicyKind,
    name: &'static str,
    summary: &'static str,
    pins: bool,
    default_pinned: usize,
}

/// Every rule, in [`PolicyKind`] order: a new rule is a row here, a variant there and its
/// [`Eviction`] arms (a score-based rule: its [`Scorer`] arms).
const RULES: [Rule; 8] = [
    Rule {
        kind: PolicyKind::Dense,
        name: "dense",
        summary: "Keep everything (positions are stream indices; degrades past the trained context)",
        pins: false,
        default_pinned: 0,
    },
    Rule { kind: PolicyKind::Window, name: "window", summary: "Keep the last W", pins: false, default_pinned: 0 },
    Rule { kind: PolicyKind::Sink, name: "sink", summary: "Keep the first S forever plus the last W−S (StreamingLLM)", pins: true, default_pinned: 4 },
    Rule {
        kind: PolicyKind::Recompute,
        name: "recompute",
        summary: "No cache: re-run the last W tokens from scratch at every step (the strong baseline)",
        pins: false,
        default_pinned: 0,
    },
    Rule {
        kind: PolicyKind::Keep,
        name: "keep",
        summary: "llama.cpp's `--keep N`: when full, discard half of the entries after the first N",
        pins: true,
        default_pinned: 4,
    },
    Rule {
        kind: PolicyKind::H2o,
        name: "h2o",
        summary: "H2O (Zhang et al. 2023): per KV head, the S pinned keys, the R most recent and the best-scoring rest, a key's score being all the attention it has received",
        pins: true,
        default_pinned: 0,
    },
    Rule {
        kind: PolicyKind::Tova,
        name: "tova",
        summary: "TOVA (Oren et al. 2024): per KV head, evict the key the current query attends to least",
        pins: true,
        default_pinned: 0,
    },
    Rule {
        kind: PolicyKind::Snapkv,
        name: "snapkv",
        summary: "SnapKV (Li et al. 2024), streaming: per KV head, keep the last `observe` keys and the rest that the last `observe` queries attended to most (max-pooled over 7 neighbours)",
        pins: true,
        default_pinned: 0,
    },
];

impl PolicyKind {
    /// Every rule, in declaration order (from [`RULES`]).
    pub const ALL: [PolicyKind; 8] = {
        let mut all = [PolicyKind::Dense; 8];
        let mut i = 0;
        while i < all.len() {
            all[i] = RULES[i].kind;
            i += 1;
        }
        all
    };

    fn rule(self) -> &'static Rule {
        &RULES[self as usize]
    }

    /// The name on the command line and in run files.
    pub fn name(self) -> &'static str {
        self.rule().name
    }

    /// What the rule keeps, in one line (the command line's help).
    pub fn summary(self) -> &'static str {
        self.rule().summary
    }

    /// Whether the rule pins first tokens (S for sink and the score-based rules, N for keep).
    pub fn pins(self) -> bool {
        self.rule().pins
    }

    /// Pinned first tokens when none are asked for: 4 for sink and keep, none for the score-based rules.
    pub fn default_pinned(self) -> usize {
        self.rule().default_pinned
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionMode {
    Slot,
    Original,
    Delta,
}

impl PositionMode {
    pub const ALL: [PositionMode; 3] = [Self::Slot, Self::Original, Self::Delta];

    pub fn name(self) -> &'static str {
        match self {
            Self::Slot => "slot",
            Self::Original => "original",
            Self::Delta => "delta",
        }
    }

    /// How keys get their RoPE angles, in one line (the command line's help).
    pub fn summary(self) -> &'static str {
        match self {
            Self::Slot => "Keys cached before RoPE and rotated by cache slot 0..n−1; the query at its own slot (StreamingLLM)",
            Self::Original => "Keys rotated by their absolute stream positions — the wrong way once tokens are evicted",
            Self::Delta => {
                "Keys cached after RoPE; survivors re-rotated by −Δ on each eviction (llama.cpp's K-shift, HF SinkCache): the same angles as `slot`, but rounding accumulates"
            }
        }
    }
}

/// How a score-based rule scores the keys it may evict, with the window it takes (every match on
/// it is exhaustive, so a new scorer cannot fall into another's arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    /// All the attention a key has received (H2O); R recent keys every query sees (`None`: W/2).
    H2o { recent: Option<usize> },
    /// The attention of the current query (TOVA).
    Tova,
    /// The attention of the last `observe` queries, max-pooled over neighbours (SnapKV); they
    /// also keep the last `observe` keys (`None`: [`SNAPKV_OBSERVE`]).
    SnapKv { observe: Option<usize> },
}

impl Scorer {
    pub fn kind(self) -> PolicyKind {
        match self {
            Self::H2o { .. } => PolicyKind::H2o,
            Self::Tova => PolicyKind::Tova,
            Self::SnapKv { .. } => PolicyKind::Snapkv,
        }
    }

    /// R for h2o and the observation window for snapkv under a budget of `cache`, defaults
    /// applied; 0 for tova.
    pub fn window(self, cache: usize) -> usize {
        match self {
            Self::H2o { recent } => recent.unwrap_or(cache / 2),
            Self::SnapKv { observe } => observe.unwrap_or(SNAPKV_OBSERVE),
            Self::Tova => 0,
        }
    }

    /// The window as given (`None`: the default, and for tova, which takes none).
    fn given_window(self) -> Option<usize> {
        match self {
            Self::H2o { recent } => recent,
            Self::SnapKv { observe } => observe,
            Self::Tova => None,
        }
    }
}

/// Which keys a policy keeps, each rule with the parameters it takes and no others
/// ([`PolicyKind::summary`] says what each keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    Dense,
    Window,
    /// S pinned first tokens.
    Sink {
        sinks: usize,
    },
    Recompute,
    /// N first entries never discarded.
    Keep {
        n_keep: usize,
    },
    /// S pinned keys per KV head, the rest chosen by `scorer` (h2o, tova, snapkv).
    Scored {
        sinks: usize,
        scorer: Scorer,
    },
}

/// SnapKV's observation window when none is given.
pub const SNAPKV_OBSERVE: usize = 32;

impl Eviction {
    pub fn kind(&self) -> PolicyKind {
        match self {
            Self::Dense => PolicyKind::Dense,
            Self::Window => PolicyKind::Window,
            Self::Sink { .. } => PolicyKind::Sink,
            Self::Recompute => PolicyKind::Recompute,
            Self::Keep { .. } => PolicyKind::Keep,
            Self::Scored { scorer, .. } => scorer.kind(),
        }
    }

    /// The first tokens kept forever: S, or keep's N; 0 for the rules that pin nothing.
    pub fn pinned(&self) -> usize {
        match *self {
            Self::Sink { sinks } | Self::Scored { sinks, .. } => sinks,
            Self::Keep { n_keep } => n_keep,
            Self::Dense | Self::Window | Self::Recompute => 0,
        }
    }

    /// StreamingLLM's rule with `sinks` pinned first tokens; with none it is a plain window
    /// (the S = 0 row of a sink-count sweep).
    pub fn sink_or_window(sinks: usize) -> Self {
        if sinks == 0 {
            Self::Window
        } else {
            Self::Sink { sinks }
        }
    }

    /// The rule `kind` with `pinned` first tokens (ignored by the rules that pin nothing) and the
    /// score window `window` (R for h2o, the observation window for snapkv; ignored by the rest).
    pub fn of_kind(kind: PolicyKind, pinned: usize, window: Option<usize>) -> Self {
        match kind {
            PolicyKind::Dense => Self::Dense,
            PolicyKind::Window => Self::Window,
            PolicyKind::Sink => Self::Sink { sinks: pinned },
            PolicyKind::Recompute => Self::Recompute,
            PolicyKind::Keep => Self::Keep { n_keep: pinned },
            PolicyKind::H2o => Self::Scored { sinks: pinned, scorer: Scorer::H2o { recent: window } },
            PolicyKind::Tova => Self::Scored { sinks: pinned, scorer: Scorer::Tova },
            PolicyKind::Snapkv => Self::Scored { sinks: pinned, scorer: Scorer::SnapKv { observe: window } },
        }
    }
}

/// One policy at one budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(into = "PolicyRecord", from = "PolicyRecord")]
pub struct Policy {
    pub eviction: Eviction,
    /// The budget W (ignored by `dense`).
    pub cache: usize,
    pub positions: PositionMode,
    /// A paged cache (vLLM's pages hold 16 tokens): slots come in pages of this many stream
    /// positions, a page leaves whole (the oldest unpinned first, when the cache is full), and a
    /// pinned first token keeps its whole page. `keep` discards half its unpinned slots rounded up
    /// to whole pages; score-based rules choose a layer's page (every KV head's keys of those
    /// positions) by summed score; `recompute` keeps no cache to page.
    pub page: Option<usize>,
}

/// The flat record run files have always held: `sinks` is S or N, `recent` h2o's R or snapkv's
/// observation window (0 or absent: the default).
#[derive(Serialize, Deserialize)]
struct PolicyRecord {
    kind: PolicyKind,
    sinks: usize,
    cache: usize,
    positions: PositionMode,
    #[serde(default, skip_serializing_if = "is_zero")]
    recent: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page: Option<usize>,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

impl From<Policy> for PolicyRecord {
    fn from(p: Policy) -> Self {
        let recent = p.scorer().and_then(Scorer::given_window).unwrap_or(0);
        PolicyRecord { kind: p.kind(), sinks: p.eviction.pinned(), cache: p.cache, positions: p.positions, recent, page: p.page }
    }
}

impl From<PolicyRecord> for Policy {
    fn from(r: PolicyRecord) -> Self {
        let window = (r.recent != 0).then_some(r.recent);
        Policy { eviction: Eviction::of_kind(r.kind, r.sinks, window), cache: r.cache, positions: r.positions, page: r.page }
    }
}

impl Policy {
    pub fn new(eviction: Eviction, cache: usize, positions: PositionMode) -> Self {
        Policy { eviction, cache, positions, page: None }
    }

    /// The same policy on a paged cache of `page`-token pages (`None`: token by token).
    pub fn paged(self, page: Option<usize>) -> Self {
        Policy { page, ..self }
    }

    pub fn kind(&self) -> PolicyKind {
        self.eviction.kind()
    }

    /// See [`Eviction::pinned`]: S (or N) as asked for.
    pub fn pinned(&self) -> usize {
        self.eviction.pinned()
    }

    /// The cache slots kept forever: [`Policy::pinned`], on a paged cache rounded up to whole
    /// pages (a pinned token keeps its page).
    pub fn pinned_slots(&self) -> usize {
        let s = self.eviction.pinned();
        self.page.map_or(s, |b| s.div_ceil(b.max(1)) * b)
    }

    pub fn label(&self) -> String {
        match self.page {
            Some(b) => format!("{} in {b}-token pages", self.token_label()),
            None => self.token_label(),
        }
    }

    fn token_label(&self) -> String {
        let (pos, w) = (self.positions.name(), self.cache);
        match self.eviction {
            Eviction::Dense => "dense".into(),
            Eviction::Window => format!("window W={w} ({pos})"),
            Eviction::Sink { sinks } if self.pinned_slots() != sinks => {
                format!("sink S={sinks} (its pages: {}) + {} recent, W={w} ({pos})", self.pinned_slots(), w - self.pinned_slots().min(w))
            }
            Eviction::Sink { sinks } => format!("sink S={sinks} + {} recent, W={w} ({pos})", w - sinks.min(w)),
            Eviction::Recompute => format!("recompute W={w}"),
            Eviction::Keep { n_keep } if self.pinned_slots() != n_keep => {
                format!("keep N={n_keep} (its pages: {}) half-discard, W={w} ({pos})", self.pinned_slots())
            }
            Eviction::Keep { n_keep } => format!("keep N={n_keep} half-discard, W={w} ({pos})"),
            Eviction::Scored { sinks, scorer } => {
                let pins = match self.pinned_slots() {
                    slots if slots != sinks => format!("S={sinks} (its pages: {slots})"),
                    _ => format!("S={sinks}"),
                };
                match scorer {
                    Scorer::H2o { .. } => format!("h2o {pins} R={}, W={w} ({pos})", scorer.window(w)),
                    Scorer::Tova => format!("tova {pins}, W={w} ({pos})"),
                    Scorer::SnapKv { .. } => format!("snapkv {pins} observe {}, W={w} ({pos})", scorer.window(w)),
                }
            }
        }
    }

    /// Whether the kept keys are chosen from attention scores, per KV head (h2o, tova, snapkv).
    pub fn is_scored(&self) -> bool {
        self.scorer().is_some()
    }

    /// How a score-based policy scores keys; `None` for the positional kinds.
    pub fn scorer(&self) -> Option<Scorer> {
        match self.eviction {
            Eviction::Scored { scorer, .. } => Some(scorer),
            Eviction::Dense | Eviction::Window | Eviction::Sink { .. } | Eviction::Recompute | Eviction::Keep { .. } => None,
        }
    }

    /// R for `h2o` and the observation window for `snapkv`, defaults applied; 0 for the rest.
    pub fn score_window(&self) -> usize {
        self.scorer().map_or(0, |s| s.window(self.cache))
    }

    /// Whether this policy keeps a KV cache (everything but `recompute`).
    pub fn is_cached(&self) -> bool {
        self.eviction != Eviction::Recompute
    }

    /// Refuses a budget the rule cannot keep, whatever the model and stream.
    pub fn check(&self) -> Result<()> {
        let (w, s) = (self.cache, self.pinned_slots());
        self.check_pages()?;
        if self.eviction == Eviction::Dense {
            return Ok(());
        }
        if w < 2 {
            return Err(Error::input(format!("a cache budget of W = {w} is too small: it must hold at least 2 entries")));
        }
        if self.is_scored() && self.positions == PositionMode::Delta {
            return Err(Error::input(
                "score-based policies (h2o, tova, snapkv) keep a different set of keys per KV head, which delta positions cannot re-rotate; use slot or original positions",
            ));
        }
        let r = self.score_window();
        // h2o may spend all of W − S on its recent window (that is the sink policy); snapkv
        // must leave room to choose.
        let bad = match self.scorer() {
            Some(Scorer::H2o { .. }) => (r == 0 || r + s > w).then_some(("recent window R", "at most")),
            Some(Scorer::SnapKv { .. }) => (r == 0 || r + s >= w).then_some(("observation window", "less than")),
            Some(Scorer::Tova) | None => None,
        };
        if let Some((what, bound)) = bad {
            return Err(Error::input(format!(
                "the {what} of {r} must be at least 1 and, with S = {s} pinned tokens, add up to {bound} the budget W = {w}"
            )));
        }
        if self.kind().pins() && s >= w {
            return Err(Error::input(format!(
                "S = {s} pinned tokens must be fewer than the budget W = {w}: pinned tokens are part of the budget (S pinned + W−S recent)"
            )));
        }
        Ok(())
    }

    /// Refuses pages a rule cannot evict whole, and a budget that is not whole pages or has none
    /// left beside the pinned ones.
    fn check_pages(&self) -> Result<()> {
        let Some(b) = self.page else { return Ok(()) };
        if b == 0 {
            return Err(Error::input("a page of 0 tokens: a paged cache's pages hold at least 1"));
        }
        match self.eviction {
            Eviction::Window | Eviction::Sink { .. } | Eviction::Keep { .. } | Eviction::Scored { .. } => {}
            Eviction::Dense => return Err(Error::input("dense never evicts, so its pages change nothing: pages are for the rules that evict")),
            Eviction::Recompute => return Err(Error::input("recompute keeps no cache between steps, so it has no pages to evict")),
        }
        let (w, pinned) = (self.cache, self.pinned_slots());
        if w % b != 0 {
            return Err(Error::input(format!("a paged cache holds whole pages: the budget W = {w} is not a multiple of the {b}-token page")));
        }
        if pinned + b >= w {
            return Err(Error::input(format!(
                "S = {} pinned tokens keep {} whole {b}-token pages of the W = {w} budget, leaving fewer than 2 pages for the recent tokens",
                self.eviction.pinned(),
                pinned / b
            )));
        }
        Ok(())
    }

    /// Checks the settings make sense for a stream of `n_tokens` on a model trained for
    /// `context` positions; returns warnings for runs that are legal but say little.
    pub fn validate(&self, n_tokens: usize, context: usize) -> Result<Vec<String>> {
        self.check()?;
        let w = self.cache;
        let mut warnings = Vec::new();
        if self.eviction != Eviction::Dense {
            if w > context {
                warnings.push(format!("the budget W = {w} exceeds the model's trained context of {context}: positions past it are untrained"));
            }
            if w >= n_tokens {
                warnings.push(format!(
                    "the budget W = {w} holds the whole {n_tokens}-token stream: nothing is ever evicted, so every policy equals dense"
                ));
            }
        }
        if self.pinned() > context {
            return Err(Error::input(format!("S = {} pinned tokens exceed the model's trained context of {context}", self.pinned())));
        }
        if self.eviction == Eviction::Dense && n_tokens > context {
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
        // Whole pages after the pinned ones, as many as make room for the next token.
        let over = len + 1 - self.cache;
        let over = self.page.map_or(over, |b| over.div_ceil(b.max(1)) * b);
        match self.eviction {
            // Score-based kinds choose per KV head (`kv::scored`).
            Eviction::Dense | Eviction::Recompute | Eviction::Scored { .. } => 0..0,
            Eviction::Window => 0..over,
            Eviction::Sink { .. } => {
                let pinned = self.pinned_slots();
                pinned..pinned + over
            }
            // Half the unpinned entries (llama.cpp's n_discard), on a paged cache in whole pages.
            Eviction::Keep { .. } => {
                let keep = self.pinned_slots();
                let n_discard = ((len - keep) / 2).max(len + 1 - self.cache);
                keep..keep + self.page.map_or(n_discard, |b| n_discard.div_ceil(b.max(1)) * b)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kind: PolicyKind, sinks: usize, cache: usize) -> Policy {
        Policy::new(Eviction::of_kind(kind, sinks, None), cache, PositionMode::Slot)
    }

    #[test]
    fn each_rule_s_row_is_at_its_own_index() {
        for (i, rule) in RULES.iter().enumerate() {
            assert_eq!(rule.kind as usize, i, "{}", rule.name);
        }
    }

    #[test]
    fn pages_leave_whole_and_only_where_a_rule_can_let_them() {
        let paged = |kind, sinks, cache| p(kind, sinks, cache).paged(Some(16));
        // Full at 64: one whole page after the pinned page (S = 4 keeps tokens 0..16).
        assert_eq!(paged(PolicyKind::Sink, 4, 64).evict(63), 0..0);
        assert_eq!(paged(PolicyKind::Sink, 4, 64).evict(64), 16..32);
        assert_eq!(paged(PolicyKind::Window, 0, 64).evict(64), 0..16);
        // A prefix past the budget: as many pages as make room.
        assert_eq!(paged(PolicyKind::Window, 0, 64).evict(100), 0..48);
        assert_eq!(paged(PolicyKind::Sink, 4, 64).pinned_slots(), 16);
        assert_eq!(paged(PolicyKind::Sink, 4, 64).pinned(), 4);
        assert!(paged(PolicyKind::Sink, 4, 64).label().ends_with("in 16-token pages"));
        let refused = |policy: Policy, says: &str| {
            let e = policy.check().unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        };
        refused(paged(PolicyKind::Sink, 4, 60), "not a multiple of the 16-token page");
        refused(paged(PolicyKind::Sink, 40, 64), "leaving fewer than 2 pages");
        assert!(paged(PolicyKind::H2o, 4, 64).check().is_ok());
        // keep: N = 4 keeps its page; half the 48 unpinned slots, in whole pages: 32.
        assert_eq!(paged(PolicyKind::Keep, 4, 64).evict(64), 16..48);
        assert_eq!(p(PolicyKind::Keep, 4, 64).evict(64), 4..34);
        refused(paged(PolicyKind::Recompute, 0, 64), "recompute keeps no cache");
        refused(paged(PolicyKind::Dense, 0, 64), "dense never evicts");
        refused(p(PolicyKind::Window, 0, 64).paged(Some(0)), "a page of 0 tokens");
        // The record keeps S as given and the page; what reads it back is the same policy.
        let sink = paged(PolicyKind::Sink, 4, 64);
        let json = serde_json::to_string(&sink).unwrap();
        assert!(json.contains("\"sinks\":4") && json.contains("\"page\":16"), "{json}");
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), sink);
        assert!(!serde_json::to_string(&p(PolicyKind::Sink, 4, 64)).unwrap().contains("page"));
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

    /// Run files keep the flat record: `sinks` is S or N, `recent` R or the observation window
    /// (omitted at its default), and every rule reads back as itself.
    #[test]
    fn the_record_in_run_files_is_unchanged_and_reads_back() {
        let json = |p: &Policy| serde_json::to_string(p).unwrap();
        assert_eq!(json(&p(PolicyKind::Sink, 4, 256)), r#"{"kind":"sink","sinks":4,"cache":256,"positions":"slot"}"#);
        assert_eq!(json(&p(PolicyKind::Keep, 2, 64)), r#"{"kind":"keep","sinks":2,"cache":64,"positions":"slot"}"#);
        let snap = Policy::new(Eviction::Scored { sinks: 1, scorer: Scorer::SnapKv { observe: Some(8) } }, 64, PositionMode::Original);
        assert_eq!(json(&snap), r#"{"kind":"snapkv","sinks":1,"cache":64,"positions":"original","recent":8}"#);
        for kind in PolicyKind::ALL {
            let policy = Policy::new(Eviction::of_kind(kind, usize::from(kind.pins()) * 3, kind.pins().then_some(5)), 64, PositionMode::Slot);
            let back: Policy = serde_json::from_str(&json(&policy)).unwrap();
            assert_eq!(back, policy, "{}", kind.name());
        }
    }
}
