//! A policy's cache bookkeeping without tensors: which stream tokens it holds at every step, and
//! so which keys each query sees ([`QueryView`]) — what the block evaluator needs to replay the
//! policy exactly.

use super::policy::{Policy, PositionMode};
use crate::error::{Error, Result};
use crate::model::policy_forward::QueryView;

/// The stream indices a policy's cache holds, slot by slot.
#[derive(Debug, Clone)]
pub struct PolicyTrace {
    policy: Policy,
    slots: Vec<usize>,
}

impl PolicyTrace {
    /// The cache after the first `n` tokens ran and the policy evicted (the state at the end of
    /// a shared prefix).
    pub fn after_prefix(policy: Policy, n: usize) -> Self {
        let mut trace = PolicyTrace { policy, slots: (0..n).collect() };
        trace.evict();
        trace
    }

    /// Appends token `t` and returns what its query sees and the cache length it saw; then
    /// applies the policy.
    pub fn step(&mut self, t: usize) -> Result<(QueryView, usize)> {
        self.slots.push(t);
        let view = self.view(t)?;
        let held = self.slots.len();
        self.evict();
        Ok((view, held))
    }

    /// The share of the stream positions in `span` the cache holds now.
    pub fn held_share(&self, span: std::ops::Range<usize>) -> f64 {
        let n = span.len();
        let held = span.filter(|p| self.slots.binary_search(p).is_ok()).count();
        held as f64 / n.max(1) as f64
    }

    fn evict(&mut self) {
        let range = self.policy.evict(self.slots.len());
        self.slots.drain(range);
    }

    /// The cache (its last slot is `t`) as first tokens + one contiguous run up to `t`.
    fn view(&self, t: usize) -> Result<QueryView> {
        let pinned = self.slots.iter().enumerate().take_while(|&(i, &s)| i == s).count();
        if pinned == self.slots.len() {
            return Ok(QueryView::dense(t));
        }
        let from = self.slots[pinned];
        if t + 1 - from != self.slots.len() - pinned {
            return Err(Error::Internal(format!("{} keeps a cache that is not first tokens + a recent run", self.policy.label())));
        }
        let pinned_pos = match self.policy.positions {
            // The query's own cache slot.
            PositionMode::Slot => self.slots.len() - 1,
            PositionMode::Original => t,
            PositionMode::Delta => return Err(Error::Internal("delta positions are decoded token by token".into())),
        };
        Ok(QueryView { pinned, from, pinned_pos })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::PolicyKind;

    fn policy(kind: PolicyKind, sinks: usize, cache: usize, positions: PositionMode) -> Policy {
        Policy::new(crate::kv::policy::Eviction::of_kind(kind, sinks, None), cache, positions)
    }

    #[test]
    fn sink_views_pin_the_first_tokens_and_slide_the_rest() {
        let mut tr = PolicyTrace::after_prefix(policy(PolicyKind::Sink, 2, 5, PositionMode::Slot), 4);
        // Step 4: slots 0,1,2,3 + 4 = the whole prefix.
        assert_eq!(tr.step(4).unwrap(), (QueryView::dense(4), 5));
        // Evicted 2 → step 5 sees 0,1 | 3,4,5; the query sits at slot 4.
        assert_eq!(tr.step(5).unwrap(), (QueryView { pinned: 2, from: 3, pinned_pos: 4 }, 5));
        assert_eq!(tr.step(6).unwrap(), (QueryView { pinned: 2, from: 4, pinned_pos: 4 }, 5));
    }

    #[test]
    fn window_and_original_positions() {
        let mut tr = PolicyTrace::after_prefix(policy(PolicyKind::Window, 0, 3, PositionMode::Original), 3);
        assert_eq!(tr.step(3).unwrap(), (QueryView { pinned: 0, from: 1, pinned_pos: 3 }, 3));
        assert_eq!(tr.step(4).unwrap().0.from, 2);
    }

    #[test]
    fn keep_half_discard_jumps_the_window() {
        // keep N=1, W=6: at 6 entries discard (6−1)/2 = 2 after the first.
        let mut tr = PolicyTrace::after_prefix(policy(PolicyKind::Keep, 1, 6, PositionMode::Slot), 6);
        let (v, held) = tr.step(6).unwrap();
        assert_eq!((v, held), (QueryView { pinned: 1, from: 3, pinned_pos: 4 }, 5));
        let (v, _) = tr.step(7).unwrap();
        assert_eq!(v, QueryView { pinned: 1, from: 3, pinned_pos: 5 });
    }

    /// A paged sink's view at every step against its closed form: P = ⌈S/B⌉·B pinned, and from
    /// W on the recent run starts at the page boundary ⌈(t + 1 − (W − P))/B⌉·B, so a query sees
    /// between W − B + 1 and W keys.
    #[test]
    fn paged_views_drop_whole_pages() {
        for (sinks, cache, page, positions) in [(4, 64, 16, PositionMode::Slot), (0, 48, 8, PositionMode::Original), (17, 96, 16, PositionMode::Slot)]
        {
            let kind = if sinks == 0 { PolicyKind::Window } else { PolicyKind::Sink };
            let p = policy(kind, sinks, cache, positions).paged(Some(page));
            p.check().unwrap();
            let pinned = sinks.div_ceil(page) * page;
            let mut tr = PolicyTrace::after_prefix(p, 0);
            for t in 0..400 {
                let (view, held) = tr.step(t).unwrap();
                if t < cache {
                    assert_eq!(view, QueryView::dense(t));
                    continue;
                }
                let from = (t + 1 + pinned - cache).div_ceil(page) * page;
                let pinned_pos = if positions == PositionMode::Slot { held - 1 } else { t };
                assert_eq!(view, QueryView { pinned, from, pinned_pos }, "S={sinks} W={cache} B={page} t={t}");
                assert!(held <= cache && held > cache - page, "{held}");
            }
        }
        // Pages of 1 are token by token.
        let sink = policy(PolicyKind::Sink, 4, 32, PositionMode::Slot);
        let (mut a, mut b) = (PolicyTrace::after_prefix(sink, 40), PolicyTrace::after_prefix(sink.paged(Some(1)), 40));
        for t in 40..100 {
            assert_eq!(a.step(t).unwrap(), b.step(t).unwrap());
        }
    }

    #[test]
    fn delta_is_not_replayed_in_blocks() {
        let mut tr = PolicyTrace::after_prefix(policy(PolicyKind::Window, 0, 3, PositionMode::Delta), 3);
        assert!(tr.step(3).is_err());
    }
}
