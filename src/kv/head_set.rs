//! One KV head's kept keys under a score-based rule, and which key or page a full cache gives
//! up: each rule's scores and protected newest keys, the lowest-scored key of one KV head's set,
//! and on a paged cache the page of a layer whose summed score is lowest (a page stores every KV
//! head of its layer).

use std::collections::VecDeque;

use super::policy::{Policy, Scorer};

/// SnapKV's max-pooling kernel over neighbouring keys.
const SNAPKV_KERNEL: usize = 7;

/// One KV head's kept keys, oldest first.
#[derive(Default, Clone)]
pub(super) struct HeadSet {
    /// Stream position of each key.
    pub(super) pos: Vec<usize>,
    /// Keys before RoPE and values, `d_head` floats per key.
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    /// h2o: attention received since the key entered.
    pub(super) total: Vec<f64>,
    /// tova: attention from the latest query.
    pub(super) last: Vec<f32>,
    /// snapkv: attention from each of the latest `observe` queries, oldest first.
    pub(super) recent: Vec<VecDeque<f32>>,
    /// A retrieval head under a per-head policy: it keeps every key.
    pub(super) full: bool,
}

impl HeadSet {
    /// Takes in a new key at stream position `pos`.
    pub(super) fn push(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        self.pos.push(pos);
        self.k.extend_from_slice(k);
        self.v.extend_from_slice(v);
        self.total.push(0.0);
        self.last.push(0.0);
        self.recent.push(VecDeque::new());
    }

    /// Scores the keys with the weights `w` the step's query gave them (summed over the KV
    /// head's query heads).
    pub(super) fn observe(&mut self, policy: &Policy, scorer: Scorer, w: &[f32]) {
        match scorer {
            Scorer::H2o { .. } => self.total.iter_mut().zip(w).for_each(|(s, &x)| *s += x as f64),
            Scorer::Tova => {
                self.last.clear();
                self.last.extend_from_slice(w);
            }
            Scorer::SnapKv { .. } => {
                let observe = policy.score_window();
                for (ring, &x) in self.recent.iter_mut().zip(w) {
                    ring.push_back(x);
                    if ring.len() > observe {
                        ring.pop_front();
                    }
                }
            }
        }
    }

    /// Drops one key, as the policy chooses, when the set holds the budget.
    pub(super) fn evict_if_full(&mut self, policy: &Policy, scorer: Scorer, dh: usize) {
        if !self.full && self.pos.len() >= policy.cache {
            let i = victim(policy, scorer, self);
            self.remove(i..i + 1, dh);
        }
    }

    /// Drops the keys at `keys` (indices into the set, oldest first).
    pub(super) fn remove(&mut self, keys: std::ops::Range<usize>, dh: usize) {
        self.pos.drain(keys.clone());
        self.k.drain(keys.start * dh..keys.end * dh);
        self.v.drain(keys.start * dh..keys.end * dh);
        self.total.drain(keys.clone());
        self.last.drain(keys.clone());
        self.recent.drain(keys);
    }
}

/// SnapKV's score of each key: the largest of its observed attention and its neighbours' (a max
/// pool of [`SNAPKV_KERNEL`] keys centred on it), so a key beside a heavily attended one survives.
pub(super) fn snapkv_pooled(sums: &[f64]) -> Vec<f64> {
    let (n, half) = (sums.len(), SNAPKV_KERNEL / 2);
    (0..n).map(|i| sums[i.saturating_sub(half)..(i + half + 1).min(n)].iter().copied().fold(f64::NEG_INFINITY, f64::max)).collect()
}

/// Evicts from one layer's sets after a step's attention scored them: token by token, each
/// full set drops its own lowest-scored key; on a paged cache, once the layer holds W keys, one
/// whole page leaves every KV head of the layer (a page stores all of a layer's KV heads, so the
/// choice is the layer's: the page whose keys' scores, summed over its tokens and the KV heads,
/// are lowest; see [`page_victim`]).
pub(super) fn evict_layer_if_full(sets: &mut [HeadSet], policy: &Policy, scorer: Scorer, dh: usize) {
    let Some(b) = policy.page else {
        sets.iter_mut().for_each(|set| set.evict_if_full(policy, scorer, dh));
        return;
    };
    if sets.first().is_some_and(|s| s.pos.len() >= policy.cache) {
        let keys = page_victim(policy, scorer, sets, b);
        sets.iter_mut().for_each(|set| set.remove(keys.clone(), dh));
    }
}

/// How many of a set's newest keys the rule protects from eviction.
fn protected_tail(policy: &Policy, scorer: Scorer) -> usize {
    match scorer {
        // The next query's recent window holds R positions, its own included: R − 1 kept ones.
        Scorer::H2o { .. } => policy.score_window().saturating_sub(1),
        Scorer::SnapKv { .. } => policy.score_window(),
        Scorer::Tova => 0,
    }
}

/// Each kept key's score under the rule (lower leaves first).
fn key_scores(scorer: Scorer, set: &HeadSet) -> Vec<f64> {
    match scorer {
        Scorer::H2o { .. } => set.total.clone(),
        Scorer::Tova => set.last.iter().map(|&x| x as f64).collect(),
        Scorer::SnapKv { .. } => snapkv_pooled(&set.recent.iter().map(|r| r.iter().map(|&x| x as f64).sum()).collect::<Vec<f64>>()),
    }
}

/// The key to evict from a full set: the lowest score among the keys the policy may drop (not
/// pinned, not protected as recent), ties to the older key.
pub(super) fn victim(policy: &Policy, scorer: Scorer, set: &HeadSet) -> usize {
    let n = set.pos.len();
    let score = key_scores(scorer, set);
    let candidates = (0..n.saturating_sub(protected_tail(policy, scorer))).filter(|&i| set.pos[i] >= policy.pinned());
    let mut best: Option<usize> = None;
    for i in candidates {
        if best.is_none_or(|b| score[i] < score[b]) {
            best = Some(i);
        }
    }
    // Nothing choosable (R = W − S): the oldest key that is not pinned, as `sink` evicts.
    best.unwrap_or_else(|| set.pos.iter().position(|&p| p >= policy.pinned()).unwrap_or(0))
}

/// The page to evict from a layer's full sets (which hold the same positions: pages leave every
/// KV head together), as the indices of its keys: the lowest score summed over the page's keys
/// in each KV head, then over the KV heads in order, among the pages that are neither pinned (the
/// first [`Policy::pinned_slots`] positions) nor hold a protected recent key; ties to the older
/// page. Nothing choosable: the oldest unpinned page, as paged `sink` evicts.
pub(super) fn page_victim(policy: &Policy, scorer: Scorer, sets: &[HeadSet], page: usize) -> std::ops::Range<usize> {
    let Some(pos) = sets.first().map(|s| &s.pos) else { return 0..0 };
    let n = pos.len();
    let first_protected = n.saturating_sub(protected_tail(policy, scorer));
    let scores: Vec<Vec<f64>> = sets.iter().map(|s| key_scores(scorer, s)).collect();
    let mut pages = Vec::new();
    let mut start = 0;
    while start < n {
        let end = start + pos[start..].iter().take_while(|&&p| p / page.max(1) == pos[start] / page.max(1)).count();
        pages.push(start..end);
        start = end;
    }
    let unpinned: Vec<&std::ops::Range<usize>> = pages.iter().filter(|r| pos[r.start] >= policy.pinned_slots()).collect();
    let mut best: Option<(&std::ops::Range<usize>, f64)> = None;
    for r in unpinned.iter().copied().filter(|r| r.end <= first_protected) {
        let score: f64 = scores.iter().map(|s| s[r.clone()].iter().sum::<f64>()).sum();
        if best.is_none_or(|(_, b)| score < b) {
            best = Some((r, score));
        }
    }
    best.map(|(r, _)| r).or(unpinned.first().copied()).cloned().unwrap_or(0..0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::{Eviction, PolicyKind, PositionMode};

    fn set(pos: &[usize], total: &[f64], last: &[f32]) -> HeadSet {
        HeadSet { pos: pos.to_vec(), total: total.to_vec(), last: last.to_vec(), recent: vec![VecDeque::new(); pos.len()], ..HeadSet::default() }
    }

    fn policy(kind: PolicyKind, sinks: usize, recent: usize) -> Policy {
        Policy::new(Eviction::of_kind(kind, sinks, (recent != 0).then_some(recent)), 6, PositionMode::Slot)
    }

    fn victim_of(policy: Policy, set: &HeadSet) -> usize {
        victim(&policy, policy.scorer().unwrap(), set)
    }

    /// Ties go to the older key; pinned keys and the protected recent ones are never chosen.
    #[test]
    fn victims_follow_the_rules() {
        let s = set(&[0, 1, 5, 7, 8, 9], &[0.1, 0.5, 0.5, 0.2, 0.0, 0.0], &[0.3, 0.2, 0.2, 0.9, 0.2, 0.1]);
        // h2o, R = 3: the 2 newest kept keys (8, 9) are protected; lowest score 0.1 at position 0.
        assert_eq!(victim_of(policy(PolicyKind::H2o, 0, 3), &s), 0);
        // Pin position 0: then 0.2 at position 7 is the lowest left.
        assert_eq!(victim_of(policy(PolicyKind::H2o, 1, 3), &s), 3);
        // tova: lowest weight 0.1 (position 9, nothing protected); with ties 0.2 at 1, 5, 8 → the oldest.
        assert_eq!(victim_of(policy(PolicyKind::Tova, 0, 0), &s), 5);
        let tied = set(&[0, 1, 5, 7], &[0.0; 4], &[0.4, 0.2, 0.2, 0.2]);
        assert_eq!(victim_of(policy(PolicyKind::Tova, 0, 0), &tied), 1);
        // R = W − S leaves nothing to score: the oldest key not pinned, as `sink` evicts.
        assert_eq!(victim_of(policy(PolicyKind::H2o, 1, 6), &s), 1);
    }

    /// A paged layer drops the page whose scores, summed over its keys and KV heads, are lowest;
    /// pinned pages and pages holding a protected key stay; ties go to the older page.
    #[test]
    fn pages_leave_by_the_layers_summed_score() {
        let paged = |kind, sinks, recent| Policy::new(Eviction::of_kind(kind, sinks, recent), 8, PositionMode::Slot).paged(Some(2));
        let pos = [0, 1, 2, 3, 6, 7, 8, 9];
        let heads =
            [set(&pos, &[0.0; 8], &[0.9, 0.9, 0.3, 0.1, 0.2, 0.2, 0.5, 0.0]), set(&pos, &[0.0; 8], &[0.9, 0.9, 0.1, 0.1, 0.2, 0.1, 0.0, 0.0])];
        let victim = |p: Policy| page_victim(&p, p.scorer().unwrap(), &heads, 2);
        // tova: page sums 3.6, 0.6, 0.7, 0.5 → the newest page (positions 8, 9).
        assert_eq!(victim(paged(PolicyKind::Tova, 0, None)), 6..8);
        // h2o, R = 3 protects the 2 newest keys' page; all totals tie at 0 → the oldest page.
        assert_eq!(victim(paged(PolicyKind::H2o, 0, Some(3))), 0..2);
        // S = 1 pins the whole first page; R = 5 protects the pages of the 4 newest keys.
        assert_eq!(victim(paged(PolicyKind::H2o, 1, Some(5))), 2..4);
        // Nothing choosable (R = W − S): the oldest unpinned page.
        assert_eq!(victim(paged(PolicyKind::H2o, 1, Some(6))), 2..4);
        let mut layer = heads.to_vec();
        evict_layer_if_full(&mut layer, &paged(PolicyKind::Tova, 0, None), Scorer::Tova, 0);
        assert!(layer.iter().all(|h| h.pos == [0, 1, 2, 3, 6, 7]));
    }
}
