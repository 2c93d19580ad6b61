//! The cache policy on the command line: one flag group that every command running a cache
//! flattens (`--policy`, `--sinks`, and the budget: `--cache`, `--positions`, `--recent`,
//! `--observe`), turned into a checked [`Policy`] here, once. The flag names live in this file and
//! nowhere below the CLI; a command that sweeps several rules (`recommend`, `needle`) flattens the
//! budget alone and builds each of its policies through the same [`CacheArgs::policy`].

use clap::Args;

use crate::error::{Error, Result};
use crate::kv::policy::{Eviction, Policy, PolicyKind, PositionMode};

/// The budget a policy runs under and the score windows of the rules that take one.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct CacheArgs {
    /// The cache budget W: every key a query can see, its own included.
    #[arg(long, value_name = "W", default_value_t = 256)]
    pub cache: usize,
    /// How kept keys get their RoPE positions.
    #[arg(long, value_enum, default_value_t = PositionMode::Slot)]
    pub positions: PositionMode,
    /// R for `h2o`: the most recent positions every query sees [default: W/2].
    #[arg(long, value_name = "R")]
    pub recent: Option<usize>,
    /// The observation window of `snapkv`: its last N queries score the keys, its last N keys
    /// are kept [default: 32].
    #[arg(long, value_name = "N")]
    pub observe: Option<usize>,
    /// A paged cache: slots in pages of B tokens, a page leaving whole and a pinned token keeping
    /// its page, as vLLM's 16-token pages would (window and sink: the oldest unpinned page; keep:
    /// half its unpinned pages; h2o, tova, snapkv: per layer, the page with the lowest summed
    /// score; W a multiple of B).
    #[arg(long, value_name = "B", value_parser = super::counts::at_least_one)]
    pub page: Option<usize>,
}

/// One cache policy as flags give it.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct PolicyArgs {
    /// The cache policy.
    #[arg(long, value_enum)]
    pub policy: PolicyKind,
    /// S for `sink` (kept inside the budget), N for `keep`, the pinned first tokens for `h2o`,
    /// `tova` and `snapkv` [default: 4 for sink and keep, 0 for the score-based policies].
    #[arg(long, value_name = "S")]
    pub sinks: Option<usize>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl TryFrom<&PolicyArgs> for Policy {
    type Error = Error;

    fn try_from(a: &PolicyArgs) -> Result<Policy> {
        a.cache.policy(a.policy, a.sinks)
    }
}

impl CacheArgs {
    /// The rule `kind` with `sinks` pinned first tokens (its default when `None`) under this
    /// budget, checked: a parameter the rule does not take is refused by its flag's name.
    pub fn policy(&self, kind: PolicyKind, sinks: Option<usize>) -> Result<Policy> {
        let name = kind.name();
        if sinks.is_some() && !kind.pins() {
            return Err(Error::input(format!("--policy {name} pins no tokens; --sinks is for sink, keep, h2o, tova and snapkv")));
        }
        if (self.recent.is_some() && kind != PolicyKind::H2o) || (self.observe.is_some() && kind != PolicyKind::Snapkv) {
            return Err(Error::input("--recent is for --policy h2o, --observe for --policy snapkv"));
        }
        for (given, flag) in [(self.recent, "--recent"), (self.observe, "--observe")] {
            if given == Some(0) {
                return Err(Error::input(format!("{flag} 0 is no window: it must be at least 1")));
            }
        }
        let window = if kind == PolicyKind::H2o { self.recent } else { self.observe };
        let policy = Policy::new(Eviction::of_kind(kind, sinks.unwrap_or(kind.default_pinned()), window), self.cache, self.positions);
        let policy = policy.paged(self.page);
        policy.check()?;
        Ok(policy)
    }

    /// [`CacheArgs::policy`] for one rule of a sweep over several: `--recent` reaches h2o and
    /// `--observe` snapkv only, and each must have its rule among `kinds`.
    pub fn swept_policy(&self, kinds: &[PolicyKind], kind: PolicyKind, sinks: Option<usize>) -> Result<Policy> {
        for (given, flag, rule) in [(self.recent, "--recent", PolicyKind::H2o), (self.observe, "--observe", PolicyKind::Snapkv)] {
            if given.is_some() && !kinds.contains(&rule) {
                return Err(Error::input(format!("{flag} is for --policy {}, which this sweep does not run", rule.name())));
            }
        }
        let own = CacheArgs {
            recent: self.recent.filter(|_| kind == PolicyKind::H2o),
            observe: self.observe.filter(|_| kind == PolicyKind::Snapkv),
            // A sweep's dense reference never evicts: paged or not, it is the same.
            page: self.page.filter(|_| kind != PolicyKind::Dense),
            ..self.clone()
        };
        own.policy(kind, sinks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::Scorer;

    fn args(kind: PolicyKind) -> PolicyArgs {
        PolicyArgs {
            policy: kind,
            sinks: None,
            cache: CacheArgs { cache: 64, positions: PositionMode::Slot, recent: None, observe: None, page: None },
        }
    }

    fn with(kind: PolicyKind, edit: impl FnOnce(&mut PolicyArgs)) -> Result<Policy> {
        let mut a = args(kind);
        edit(&mut a);
        Policy::try_from(&a)
    }

    #[test]
    fn flags_get_their_defaults_and_a_rule_refuses_parameters_it_does_not_take() {
        assert_eq!(with(PolicyKind::Sink, |_| ()).unwrap().eviction, Eviction::Sink { sinks: 4 });
        assert_eq!(with(PolicyKind::Tova, |_| ()).unwrap().eviction, Eviction::Scored { sinks: 0, scorer: Scorer::Tova });
        let h2o = with(PolicyKind::H2o, |a| a.cache.recent = Some(10)).unwrap();
        assert_eq!((h2o.eviction, h2o.score_window()), (Eviction::Scored { sinks: 0, scorer: Scorer::H2o { recent: Some(10) } }, 10));
        let window_with_sinks = with(PolicyKind::Window, |a| a.sinks = Some(4)).unwrap_err();
        assert!(window_with_sinks.to_string().contains("--policy window pins no tokens"), "{window_with_sinks}");
        assert!(with(PolicyKind::Snapkv, |a| a.cache.recent = Some(8)).unwrap_err().to_string().contains("--recent is for --policy h2o"));
        assert!(with(PolicyKind::H2o, |a| a.cache.observe = Some(8)).unwrap_err().to_string().contains("--recent is for --policy h2o"));
        assert!(with(PolicyKind::H2o, |a| a.cache.recent = Some(0)).is_err(), "R = 0 is no recent window");
        assert!(with(PolicyKind::H2o, |a| a.cache.positions = PositionMode::Delta).is_err());
    }

    #[test]
    fn a_sweep_hands_each_window_to_its_own_rule_and_refuses_one_without_it() {
        let cache = CacheArgs { recent: Some(10), ..args(PolicyKind::Sink).cache };
        let kinds = [PolicyKind::Sink, PolicyKind::H2o];
        assert_eq!(cache.swept_policy(&kinds, PolicyKind::Sink, Some(4)).unwrap().eviction, Eviction::Sink { sinks: 4 });
        assert_eq!(
            cache.swept_policy(&kinds, PolicyKind::H2o, Some(4)).unwrap().eviction,
            Eviction::Scored { sinks: 4, scorer: Scorer::H2o { recent: Some(10) } }
        );
        let err = cache.swept_policy(&[PolicyKind::Sink], PolicyKind::Sink, Some(4)).unwrap_err();
        assert!(err.to_string().contains("--recent is for --policy h2o"), "{err}");
    }
}
