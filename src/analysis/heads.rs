//! Head classes from pattern statistics, with the numbers behind each label:
//! - `sink`: the head puts most of its attention on sink positions (max α_k over the discovered
//!   sink positions ≥ 0.5);
//! - `previous_token`: mean A[i, i−1] ≥ 0.4 (a local / induction-precursor head);
//! - `broad`: attention spread out — mean row entropy ≥ 60% of the entropy of a uniform row over the
//!   visible keys;
//! - `content`: none of the above (attention follows what the tokens say).
//!
//! Rules are applied in that order; thresholds are constants below.

use serde::{Deserialize, Serialize};

pub const SINK_ALPHA: f64 = 0.5;
pub const PREV_TOKEN_MASS: f64 = 0.4;
pub const BROAD_ENTROPY: f64 = 0.6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadClass {
    Sink,
    PreviousToken,
    Broad,
    Content,
}

impl HeadClass {
    /// Every class, in the order summaries list them.
    pub const ALL: [HeadClass; 4] = [HeadClass::Sink, HeadClass::PreviousToken, HeadClass::Broad, HeadClass::Content];
}

impl std::fmt::Display for HeadClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadClass::Sink => "sink",
            HeadClass::PreviousToken => "previous_token",
            HeadClass::Broad => "broad",
            HeadClass::Content => "content",
        })
    }
}

/// The statistics a class is decided from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadEvidence {
    /// Largest α over the sink positions, and which position.
    pub sink_alpha: f64,
    pub sink_pos: Option<usize>,
    pub prev_token_mass: f64,
    pub self_mass: f64,
    /// Mean row entropy divided by the mean of ln(visible keys) over the same rows (0 = one key,
    /// 1 = uniform).
    pub normalized_entropy: f64,
}

pub fn classify(e: &HeadEvidence) -> HeadClass {
    if e.sink_alpha >= SINK_ALPHA {
        HeadClass::Sink
    } else if e.prev_token_mass >= PREV_TOKEN_MASS {
        HeadClass::PreviousToken
    } else if e.normalized_entropy >= BROAD_ENTROPY {
        HeadClass::Broad
    } else {
        HeadClass::Content
    }
}

/// Mean of ln(i+1) over query rows i sampled every `stride` rows of T — the entropy of a uniform
/// causal row, averaged like the sampled entropies.
pub fn uniform_entropy(t: usize, stride: usize) -> f64 {
    let rows: Vec<usize> = (0..t).step_by(stride.max(1)).collect();
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|&i| ((i + 1) as f64).ln()).sum::<f64>() / rows.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(sink: f64, prev: f64, ent: f64) -> HeadEvidence {
        HeadEvidence { sink_alpha: sink, sink_pos: Some(0), prev_token_mass: prev, self_mass: 0.0, normalized_entropy: ent }
    }

    #[test]
    fn rules_apply_in_order() {
        assert_eq!(classify(&ev(0.8, 0.9, 0.9)), HeadClass::Sink);
        assert_eq!(classify(&ev(0.2, 0.6, 0.9)), HeadClass::PreviousToken);
        assert_eq!(classify(&ev(0.2, 0.1, 0.7)), HeadClass::Broad);
        assert_eq!(classify(&ev(0.2, 0.1, 0.3)), HeadClass::Content);
    }

    #[test]
    fn uniform_entropy_of_causal_rows() {
        assert!((uniform_entropy(3, 1) - (0.0 + 2f64.ln() + 3f64.ln()) / 3.0).abs() < 1e-12);
        assert_eq!(uniform_entropy(0, 1), 0.0);
    }
}
