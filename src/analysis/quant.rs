//! What fake activation quantization did to a model: per setting, perplexity and the NLL at the
//! first (sink) positions and at the rest against the unquantized model, the noise per layer and
//! site; and whether a calibration set without the first positions breaks the model at exactly
//! those tokens.

use serde::{Deserialize, Serialize};

use crate::capture::quant::{QuantScore, QuantSetting, QuantSite};
use crate::metrics::quant::QuantScheme;
use crate::model::info::ModelInfo;

/// A sink-position NLL increase this much larger (nats) with the first positions left out of
/// calibration than with them in breaks the model at those tokens: only there when it is also
/// [`BREAK_RATIO`]× what the other positions gained; spreading beyond them when those gained at
/// least [`SPREAD_NATS`] (through the attention the sinks anchor, or at other tokens with large
/// activations the same scales clip).
pub const BREAK_NATS: f64 = 0.5;
pub const BREAK_RATIO: f64 = 5.0;
pub const SPREAD_NATS: f64 = 0.1;

/// What leaving the first positions out of calibration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipVerdict {
    /// The sink positions broke, the others barely moved.
    BreaksSinksOnly,
    /// The sink positions broke and the damage reached the other positions too.
    BreaksSinksAndBeyond,
    /// No sink-specific damage.
    NotAtSinks,
}

/// Mean NLL over all scored rows, over the rows predicted from the first positions and over the
/// others; `ppl` = exp(mean).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NllSplit {
    pub ppl: f64,
    pub nll_mean: f64,
    pub sink_nll: f64,
    pub rest_nll: f64,
}

impl NllSplit {
    /// Row r of each sequence predicts token r + 1; rows r < `sink_positions` are the sink side.
    pub fn of(nll: &[Vec<f64>], sink_positions: usize) -> NllSplit {
        let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
        let all: Vec<f64> = nll.iter().flatten().copied().collect();
        let sink: Vec<f64> = nll.iter().flat_map(|s| s.iter().take(sink_positions)).copied().collect();
        let rest: Vec<f64> = nll.iter().flat_map(|s| s.iter().skip(sink_positions)).copied().collect();
        let nll_mean = mean(&all);
        NllSplit { ppl: nll_mean.exp(), nll_mean, sink_nll: mean(&sink), rest_nll: mean(&rest) }
    }
}

/// The mean NLL at each position over the sequences (positions only some sequences reach are
/// averaged over those).
pub fn nll_by_position(nll: &[Vec<f64>]) -> Vec<f64> {
    let len = nll.iter().map(Vec::len).max().unwrap_or(0);
    (0..len)
        .map(|r| {
            let v: Vec<f64> = nll.iter().filter_map(|s| s.get(r).copied()).collect();
            v.iter().sum::<f64>() / v.len() as f64
        })
        .collect()
}

/// One site's noise over the evaluated text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteNoise {
    pub layer: usize,
    pub site: QuantSite,
    /// None when quantization changed nothing.
    pub sqnr_db: Option<f64>,
    pub zero_share: f64,
}

/// One setting's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantCase {
    pub setting: QuantSetting,
    pub label: String,
    pub nll: NllSplit,
    /// NLL increase over the unquantized model at the sink positions and at the rest.
    pub delta_sink: f64,
    pub delta_rest: f64,
    pub nll_by_position: Vec<f64>,
    pub sites: Vec<SiteNoise>,
}

impl QuantCase {
    pub fn new(setting: QuantSetting, score: &QuantScore, baseline: &NllSplit, sink_positions: usize) -> QuantCase {
        let nll = NllSplit::of(&score.nll, sink_positions);
        let sites =
            score.noise.iter().map(|(&(layer, site), n)| SiteNoise { layer, site, sqnr_db: n.sqnr_db(), zero_share: n.zero_share() }).collect();
        QuantCase {
            setting,
            label: setting.label(),
            nll,
            delta_sink: nll.sink_nll - baseline.sink_nll,
            delta_rest: nll.rest_nll - baseline.rest_nll,
            nll_by_position: nll_by_position(&score.nll),
            sites,
        }
    }

    /// The share of nonzero inputs rounded to 0, averaged over the sites.
    pub fn mean_zero_share(&self) -> f64 {
        self.sites.iter().map(|s| s.zero_share).sum::<f64>() / self.sites.len().max(1) as f64
    }

    /// The site with the lowest SQNR (the one quantization hurts most).
    pub fn worst_site(&self) -> Option<&SiteNoise> {
        self.sites
            .iter()
            .filter(|s| s.sqnr_db.is_some())
            .min_by(|a, b| a.sqnr_db.unwrap_or(f64::INFINITY).total_cmp(&b.sqnr_db.unwrap_or(f64::INFINITY)))
    }
}

/// Where the static scales came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationInfo {
    /// The calibration text (a file, or the evaluated file's tokens after the evaluated ones).
    pub source: String,
    pub sequences: usize,
    pub tokens_per_sequence: usize,
    /// Leading positions of each calibration sequence left out, one calibration per value.
    pub skips: Vec<usize>,
    /// Whether the calibration text is the evaluated text itself (scales then fit it in-sample).
    pub in_sample: bool,
}

/// Left-out first positions vs all positions for one static scheme and bit width.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkipComparison {
    pub scheme: QuantScheme,
    pub bits: u32,
    pub kv: bool,
    pub skip: usize,
    /// NLL increase at the sink positions / the rest with every position calibrated, then with
    /// the first `skip` left out.
    pub full: (f64, f64),
    pub skipped: (f64, f64),
    /// See [`BREAK_NATS`].
    pub verdict: SkipVerdict,
}

/// `sinkscope quant`'s result (quant.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuantReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub text_source: String,
    pub sequences: usize,
    pub tokens_per_sequence: usize,
    /// Rows predicted from positions below this are the sink side of [`NllSplit`].
    pub sink_positions: usize,
    pub calibration: CalibrationInfo,
    pub baseline: NllSplit,
    pub baseline_by_position: Vec<f64>,
    pub cases: Vec<QuantCase>,
    pub skip_comparisons: Vec<SkipComparison>,
}

impl QuantReport {
    /// Pairs each static case calibrated without its first positions with the same setting
    /// calibrated on all of them.
    pub fn compare_skips(cases: &[QuantCase]) -> Vec<SkipComparison> {
        cases
            .iter()
            .filter(|c| c.setting.scheme.is_static() && c.setting.calib_skip > 0)
            .filter_map(|skipped| {
                let full = cases.iter().find(|c| c.setting == QuantSetting { calib_skip: 0, ..skipped.setting })?;
                let gain_sink = skipped.delta_sink - full.delta_sink;
                let gain_rest = skipped.delta_rest - full.delta_rest;
                Some(SkipComparison {
                    scheme: skipped.setting.scheme,
                    bits: skipped.setting.bits,
                    kv: skipped.setting.kv,
                    skip: skipped.setting.calib_skip,
                    full: (full.delta_sink, full.delta_rest),
                    skipped: (skipped.delta_sink, skipped.delta_rest),
                    verdict: match (gain_sink >= BREAK_NATS, gain_sink > BREAK_RATIO * gain_rest.max(0.0), gain_rest >= SPREAD_NATS) {
                        (true, true, _) => SkipVerdict::BreaksSinksOnly,
                        (true, false, true) => SkipVerdict::BreaksSinksAndBeyond,
                        _ => SkipVerdict::NotAtSinks,
                    },
                })
            })
            .collect()
    }

    /// One-line findings: the best and worst setting per bit width, and each skip comparison.
    pub fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut bits: Vec<u32> = self.cases.iter().map(|c| c.setting.bits).collect();
        bits.sort_unstable_by(|a, b| b.cmp(a));
        bits.dedup();
        for b in bits {
            let mut of: Vec<&QuantCase> = self.cases.iter().filter(|c| c.setting.bits == b).collect();
            of.sort_by(|x, y| x.nll.ppl.total_cmp(&y.nll.ppl));
            if let (Some(best), Some(worst)) = (of.first(), of.last()) {
                out.push(format!(
                    "int{b}: best {} (perplexity {:.3} vs {:.3} unquantized), worst {} ({:.3}; sink positions {:+.3} nats, the rest {:+.3})",
                    best.label, best.nll.ppl, self.baseline.ppl, worst.label, worst.nll.ppl, worst.delta_sink, worst.delta_rest
                ));
            }
        }
        for c in &self.skip_comparisons {
            out.push(format!(
                "{} int{}{}: calibrated without the first {} positions, NLL at the sink positions {:+.3} nats and elsewhere {:+.3} (all positions calibrated: {:+.3} / {:+.3}) — {}",
                c.scheme.name(),
                c.bits,
                if c.kv { " +kv" } else { "" },
                c.skip,
                c.skipped.0,
                c.skipped.1,
                c.full.0,
                c.full.1,
                match c.verdict {
                    SkipVerdict::BreaksSinksOnly => "breaks the model at exactly those tokens",
                    SkipVerdict::BreaksSinksAndBeyond => "breaks the model at those tokens, and at the others too",
                    SkipVerdict::NotAtSinks => "does not single out the sink positions",
                }
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn splits_and_skip_comparisons() {
        let nll = vec![vec![4.0, 2.0, 1.0, 1.0], vec![6.0, 2.0, 3.0, 1.0]];
        let s = NllSplit::of(&nll, 1);
        assert!((s.sink_nll - 5.0).abs() < 1e-12 && (s.rest_nll - 10.0 / 6.0).abs() < 1e-12);
        assert!((s.nll_mean - 20.0 / 8.0).abs() < 1e-12 && (s.ppl - 2.5f64.exp()).abs() < 1e-9);
        assert_eq!(nll_by_position(&[vec![1.0, 2.0], vec![3.0]]), vec![2.0, 2.0]);
        let base = NllSplit { ppl: 1.0, nll_mean: 0.0, sink_nll: 1.0, rest_nll: 1.0 };
        let case = |skip: usize, sink: f64, rest: f64| {
            let setting = QuantSetting { scheme: QuantScheme::TensorStatic, bits: 8, kv: false, calib_skip: skip };
            QuantCase::new(setting, &QuantScore { nll: vec![vec![sink, rest, rest]], noise: BTreeMap::new() }, &base, 1)
        };
        let broken = QuantReport::compare_skips(&[case(0, 1.1, 1.0), case(4, 3.0, 1.1)]);
        assert_eq!(broken.len(), 1);
        assert_eq!(broken[0].verdict, SkipVerdict::BreaksSinksOnly);
        assert!((broken[0].skipped.0 - 2.0).abs() < 1e-12);
        // The sinks broke and the rest followed.
        assert_eq!(QuantReport::compare_skips(&[case(0, 1.1, 1.0), case(4, 3.0, 2.0)])[0].verdict, SkipVerdict::BreaksSinksAndBeyond);
        // Nothing sink-specific.
        assert_eq!(QuantReport::compare_skips(&[case(0, 1.1, 1.0), case(4, 1.2, 1.0)])[0].verdict, SkipVerdict::NotAtSinks);
    }
}
