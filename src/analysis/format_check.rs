//! Does an engine store its KV cache in the format it declares? Holds a trace's per-token
//! log-probabilities against the simulator's under the declared format and its near misses
//! (`kv::alternatives::format_near_misses`), over every scored token.
//!
//! Per token a rounded cache is chaotic (any difference of arithmetic moves some values across a
//! rounding boundary), so a right and a wrong format can be equally far from a trace token by
//! token; what a wrong format adds is a bias. Each candidate's fit is the mean of engine −
//! simulator log-probability over the scored tokens in standard errors (z): the declared format
//! conforms while |z| < [`Z_FORMAT`]. Catastrophic tokens make the spread heavier-tailed than the
//! standard error assumes, so a verdict near the threshold deserves a longer trace.

use serde::{Deserialize, Serialize};

/// |z| below which a format explains the trace.
pub const Z_FORMAT: f64 = 3.0;
/// Scored tokens needed for a verdict.
pub const MIN_FORMAT_TOKENS: usize = 64;

/// One format's replay of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatFit {
    pub label: String,
    /// What an engine storing this format instead of the declared one does, in words.
    pub cause: String,
    /// Mean engine − simulator log-probability over the scored tokens (nats).
    pub bias: f64,
    /// That mean in standard errors (null: infinite, every difference the same).
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub z: f64,
    pub mean_abs: f64,
    pub engine_ppl: f64,
    pub sim_ppl: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatVerdict {
    Conforms,
    Diverges,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatCheck {
    pub verdict: FormatVerdict,
    pub tokens: usize,
    /// The declared format first, then the candidates by |z|.
    pub fits: Vec<FormatFit>,
    /// Candidates other than the declared one that explain the trace as well (|z| < threshold):
    /// what this trace cannot tell apart from the declared format.
    pub indistinguishable: Vec<String>,
    /// When the declared format diverges: the candidate that explains the trace, if one does.
    pub best: Option<String>,
}

/// One replay: (label, cause, log-probability per sequence index, NaN where unscored).
pub type FormatReplay = (String, String, Vec<f64>);

/// Holds `engine` (per sequence index, `None` where unscored) against `replays` (the declared
/// format first). `Err` says why no verdict can be given.
pub fn format_check(engine: &[Option<f64>], replays: &[FormatReplay]) -> Result<FormatCheck, String> {
    if replays.is_empty() {
        return Err("no format to hold the trace against".into());
    }
    let mut fits = Vec::with_capacity(replays.len());
    let mut tokens = 0;
    for (label, cause, lp) in replays {
        if lp.len() != engine.len() {
            return Err(format!("{label} replayed {} tokens for a trace of {}", lp.len(), engine.len()));
        }
        let pairs: Vec<(f64, f64)> =
            engine.iter().zip(lp).filter_map(|(e, s)| Some((e.as_ref().copied()?, *s))).filter(|(_, s)| !s.is_nan()).collect();
        if pairs.iter().any(|(e, s)| !e.is_finite() || !s.is_finite()) {
            return Err(format!("{label}: a log-probability is not finite"));
        }
        if pairs.len() < MIN_FORMAT_TOKENS {
            return Err(format!("only {} tokens are scored; telling cache formats apart needs at least {MIN_FORMAT_TOKENS}", pairs.len()));
        }
        tokens = pairs.len();
        fits.push(fit(label, cause, &pairs));
    }
    let declared = fits[0].clone();
    let mut others: Vec<FormatFit> = fits.split_off(1);
    others.sort_by(|a, b| a.z.abs().total_cmp(&b.z.abs()));
    let indistinguishable = others.iter().filter(|f| f.z.abs() < Z_FORMAT).map(|f| f.label.clone()).collect();
    let conforms = declared.z.abs() < Z_FORMAT;
    let best = (!conforms).then(|| others.first().filter(|f| f.z.abs() < Z_FORMAT).map(|f| f.label.clone())).flatten();
    let verdict = if conforms { FormatVerdict::Conforms } else { FormatVerdict::Diverges };
    Ok(FormatCheck { verdict, tokens, fits: std::iter::once(declared).chain(others).collect(), indistinguishable, best })
}

fn fit(label: &str, cause: &str, pairs: &[(f64, f64)]) -> FormatFit {
    let n = pairs.len() as f64;
    let d: Vec<f64> = pairs.iter().map(|(e, s)| e - s).collect();
    let bias = d.iter().sum::<f64>() / n;
    let sd = (d.iter().map(|x| (x - bias).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let z = if sd > 0.0 {
        bias / (sd / n.sqrt())
    } else if bias == 0.0 {
        0.0
    } else {
        f64::INFINITY.copysign(bias)
    };
    let ppl = |f: &dyn Fn(&(f64, f64)) -> f64| (-pairs.iter().map(f).sum::<f64>() / n).exp();
    FormatFit {
        label: label.to_string(),
        cause: cause.to_string(),
        bias,
        z,
        mean_abs: d.iter().map(|x| x.abs()).sum::<f64>() / n,
        engine_ppl: ppl(&|p| p.0),
        sim_ppl: ppl(&|p| p.1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(label: &str, lp: Vec<f64>) -> FormatReplay {
        (label.into(), String::new(), lp)
    }

    #[test]
    fn a_biased_format_diverges_and_the_unbiased_candidate_is_named() {
        // The engine loses 0.2 nats per token against "f16" and matches "q4_0" up to ±0.3 noise.
        let n = 200;
        let noise: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { 0.3 } else { -0.3 }).collect();
        let engine: Vec<Option<f64>> = std::iter::once(None).chain((1..n).map(|i| Some(-2.2 + noise[i]))).collect();
        let q4: Vec<f64> = std::iter::once(f64::NAN).chain((1..n).map(|_| -2.2)).collect();
        let f16: Vec<f64> = std::iter::once(f64::NAN).chain((1..n).map(|_| -2.0)).collect();
        let c = format_check(&engine, &[replay("f16", f16.clone()), replay("q4_0", q4.clone())]).unwrap();
        assert_eq!((c.verdict, c.best.as_deref()), (FormatVerdict::Diverges, Some("q4_0")));
        assert!(c.fits[0].z < -3.0 && (c.fits[0].bias + 0.2).abs() < 0.01);
        let c = format_check(&engine, &[replay("q4_0", q4), replay("f16", f16)]).unwrap();
        assert_eq!((c.verdict, c.indistinguishable.len()), (FormatVerdict::Conforms, 0));
        assert!(format_check(&engine[..10], &[replay("x", vec![0.0; 10])]).is_err(), "too few tokens");
    }
}
