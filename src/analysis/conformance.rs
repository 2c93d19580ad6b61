//! Does an engine's cache do what it says? Holds an engine's per-token log-probabilities against
//! the exact simulator's under the declared policy and its near misses (`kv::alternatives`): the
//! engine's own noise floor from the steps before the first eviction, the differences after it,
//! a verdict, and the candidates ranked by how well each explains the trace.

use serde::{Deserialize, Serialize};

/// Mean |Δ| after the first eviction may exceed the floor's by this factor (plus
/// [`FLOOR_SLACK`]) and still conform: re-rotated keys add a little rounding of their own.
pub const FLOOR_FACTOR: f64 = 2.0;
/// Nats added to the allowed mean |Δ| (a floor of exactly 0 — the same arithmetic — still
/// leaves room for the last bit).
pub const FLOOR_SLACK: f64 = 2e-3;
/// An alternative explains the trace better when its per-step |Δ| is smaller by a mean this many
/// standard errors above zero (paired over the steps after the first eviction)…
pub const Z_BETTER: f64 = 3.0;
/// …and by at least this share of the floor's mean |Δ| (a candidate whose replay differs from
/// the declared one by rounding alone never "explains better").
pub const MIN_GAIN: f64 = 0.02;
/// Steps where two replays disagree needed before one can be preferred.
pub const MIN_INFORMATIVE: usize = 3;
/// Steps before the first eviction needed to measure the floor.
pub const MIN_FLOOR_STEPS: usize = 8;

/// One policy's replay of the trace's tokens.
#[derive(Debug, Clone)]
pub struct Replay {
    pub label: String,
    pub cause: String,
    /// The simulator's log-probability of each token of the sequence (index 0 unscored: NaN).
    pub logprob: Vec<f64>,
    /// The first sequence index scored on an evicted cache (`None`: never evicted).
    pub first_eviction: Option<usize>,
}

/// |Δ| statistics over a set of steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DeltaStats {
    pub steps: usize,
    /// null (NaN) over no steps.
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub mean_abs: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub max_abs: f64,
    /// Index of the largest |Δ|.
    pub worst_index: Option<usize>,
    /// Perplexity of the engine and of the simulator over these steps.
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub engine_ppl: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub sim_ppl: f64,
}

/// How well one candidate explains the trace after the first eviction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub label: String,
    pub cause: String,
    pub after: DeltaStats,
    /// Steps after the first eviction where this replay and the declared one differ by more than
    /// the floor's mean |Δ|: the only steps that can tell them apart.
    pub informative_steps: usize,
    /// Mean over those steps of |Δ declared| − |Δ this| (positive: this explains the trace better).
    pub gain_vs_declared: f64,
    /// That mean in standard errors (null: infinite, every difference the same).
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub z_vs_declared: f64,
    pub explains_better: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Conforms,
    /// The engine departs from the declared policy from this sequence index on.
    Diverges {
        from: usize,
    },
    /// Nothing was evicted under the declared policy: there is no cache behaviour to check.
    NotEvicted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conformance {
    /// The declared policy's first evicted sequence index.
    pub first_eviction: Option<usize>,
    /// The engine against the declared policy before any eviction: the engine's own noise.
    pub floor: DeltaStats,
    /// The engine against the declared policy from the first eviction on.
    pub after: DeltaStats,
    /// The largest mean |Δ| after the first eviction that conforms (null: nothing was evicted).
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub allowed_mean_abs: f64,
    pub verdict: Verdict,
    /// Every candidate (the declared one included), best explanation first.
    pub ranking: Vec<Fit>,
    /// Engine − simulator log-probability per sequence index under the declared policy (`None`
    /// where the trace does not score the token).
    pub delta: Vec<Option<f64>>,
}

/// Holds `engine` (the trace's log-probability per sequence index, `None` where unscored)
/// against `replays` (the declared policy first). `Err` says why no verdict can be given.
pub fn conformance(engine: &[Option<f64>], replays: &[Replay]) -> Result<Conformance, String> {
    let declared = replays.first().ok_or("no policy to hold the trace against")?;
    if let Some(r) = replays.iter().find(|r| r.logprob.len() != engine.len()) {
        return Err(format!("{} replayed {} tokens for a trace of {}", r.label, r.logprob.len(), engine.len()));
    }
    let delta_of = |r: &Replay| -> Vec<Option<f64>> { engine.iter().zip(&r.logprob).map(|(e, s)| e.map(|e| e - s)).collect() };
    let delta = delta_of(declared);
    if let Some(i) = delta.iter().position(|d| d.is_some_and(|d| !d.is_finite())) {
        return Err(format!("token {i}: the simulator's log-probability is not finite; the model or the replay is broken"));
    }
    let scored = |from: usize, to: usize| (from..to).filter(|&i| delta[i].is_some()).collect::<Vec<usize>>();
    let n = engine.len();
    // Candidates that evict earlier than the declared policy start the comparison there.
    let split = replays.iter().filter_map(|r| r.first_eviction).min().unwrap_or(n);
    let before = scored(0, split.min(declared.first_eviction.unwrap_or(n)));
    let floor = stats(&before, &delta, engine, &declared.logprob);
    let Some(first) = declared.first_eviction else {
        return Ok(Conformance {
            first_eviction: None,
            floor,
            after: DeltaStats::default(),
            allowed_mean_abs: f64::NAN,
            verdict: Verdict::NotEvicted,
            ranking: Vec::new(),
            delta,
        });
    };
    if before.len() < MIN_FLOOR_STEPS {
        return Err(format!(
            "only {} scored tokens come before the first eviction (token {split}); the engine's noise floor needs {MIN_FLOOR_STEPS}: give a trace with more tokens before its cache fills",
            before.len()
        ));
    }
    let after_steps = scored(split, n);
    if after_steps.is_empty() {
        return Err("the trace scores no token after the first eviction".into());
    }
    let after = stats(&scored(first, n), &delta, engine, &declared.logprob);
    let allowed = FLOOR_FACTOR * floor.mean_abs + FLOOR_SLACK;
    let mut ranking: Vec<Fit> = replays
        .iter()
        .map(|r| {
            let d = delta_of(r);
            // Only the steps where the two replays disagree by more than the engine's typical
            // noise can tell them apart (a budget one off changes a few steps per eviction a lot
            // and the rest not at all): the engine's side is measured there.
            let informative: Vec<usize> =
                after_steps.iter().copied().filter(|&i| (r.logprob[i] - declared.logprob[i]).abs() > floor.mean_abs).collect();
            let gains: Vec<f64> = informative.iter().map(|&i| abs(delta[i]) - abs(d[i])).collect();
            let (gain, z) = if gains.len() >= MIN_INFORMATIVE { mean_and_z(&gains) } else { (0.0, 0.0) };
            Fit {
                label: r.label.clone(),
                cause: r.cause.clone(),
                after: stats(&after_steps, &d, engine, &r.logprob),
                informative_steps: gains.len(),
                gain_vs_declared: gain,
                z_vs_declared: z,
                explains_better: gain > MIN_GAIN * floor.mean_abs && z > Z_BETTER,
            }
        })
        .collect();
    // Those that explain the trace better first, then by mean |Δ|; ties keep the candidates'
    // order (the declared one first).
    ranking.sort_by(|a, b| b.explains_better.cmp(&a.explains_better).then(a.after.mean_abs.total_cmp(&b.after.mean_abs)));
    let better = ranking.iter().find(|f| f.explains_better).and_then(|f| replays.iter().find(|r| r.label == f.label));
    let verdict = match better {
        None if after.mean_abs <= allowed => Verdict::Conforms,
        // The first step at which the engine sides with the better explanation by more than its
        // typical noise.
        Some(b) => {
            let db = delta_of(b);
            let from = scored(split, n).into_iter().find(|&i| abs(delta[i]) > abs(db[i]) + floor.mean_abs).unwrap_or(first);
            Verdict::Diverges { from }
        }
        // No candidate explains it: the first step past everything the engine's noise produced
        // before the eviction.
        None => Verdict::Diverges { from: scored(first, n).into_iter().find(|&i| abs(delta[i]) > floor.max_abs).unwrap_or(first) },
    };
    Ok(Conformance { first_eviction: Some(first), floor, after, allowed_mean_abs: allowed, verdict, ranking, delta })
}

/// The plain mean (NaN in, NaN out: nothing is dropped).
fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn abs(d: Option<f64>) -> f64 {
    d.map_or(f64::NAN, f64::abs)
}

fn stats(steps: &[usize], delta: &[Option<f64>], engine: &[Option<f64>], sim: &[f64]) -> DeltaStats {
    let mut s = DeltaStats { steps: steps.len(), ..DeltaStats::default() };
    if steps.is_empty() {
        return s;
    }
    let abs_d: Vec<f64> = steps.iter().map(|&i| abs(delta[i])).collect();
    s.mean_abs = mean(&abs_d);
    // A NaN is the largest difference: it never hides behind a fold.
    let worst = steps.iter().copied().max_by(|&a, &b| abs(delta[a]).total_cmp(&abs(delta[b])));
    s.worst_index = worst;
    s.max_abs = worst.map_or(f64::NAN, |i| abs(delta[i]));
    let nll = |v: &mut dyn Iterator<Item = f64>| -> f64 {
        let xs: Vec<f64> = v.collect();
        (-mean(&xs)).exp()
    };
    s.engine_ppl = nll(&mut steps.iter().map(|&i| engine[i].unwrap_or(f64::NAN)));
    s.sim_ppl = nll(&mut steps.iter().map(|&i| sim[i]));
    s
}

/// Mean of `xs` and the mean in standard errors (0 when there is no spread).
fn mean_and_z(xs: &[f64]) -> (f64, f64) {
    if xs.len() < 2 {
        return (xs.first().copied().unwrap_or(0.0), 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let se = (var / n).sqrt();
    let z = if se > 0.0 {
        mean / se
    } else if mean > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    (mean, z)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(label: &str, lp: Vec<f64>, first: Option<usize>) -> Replay {
        Replay { label: label.into(), cause: String::new(), logprob: lp, first_eviction: first }
    }

    /// An engine that is the "truth" policy plus small deterministic noise.
    fn engine_of(truth: &[f64]) -> Vec<Option<f64>> {
        truth.iter().enumerate().map(|(i, &x)| (i > 0).then(|| x + 0.01 * ((i * 7919 % 13) as f64 / 13.0 - 0.5))).collect()
    }

    fn policies() -> (Vec<f64>, Vec<f64>) {
        let n = 200;
        let declared: Vec<f64> = (0..n).map(|i| if i == 0 { f64::NAN } else { -2.0 - (i % 5) as f64 * 0.1 }).collect();
        // The alternative departs after the eviction at 100 by 0.3 nats on every third token.
        let alt: Vec<f64> = declared.iter().enumerate().map(|(i, &x)| if i >= 100 && i % 3 == 0 { x - 0.3 } else { x }).collect();
        (declared, alt)
    }

    #[test]
    fn an_engine_running_the_declared_policy_conforms() {
        let (declared, alt) = policies();
        let c = conformance(&engine_of(&declared), &[replay("declared", declared, Some(100)), replay("alt", alt, Some(100))]).unwrap();
        assert_eq!(c.verdict, Verdict::Conforms);
        assert_eq!(c.ranking[0].label, "declared");
        assert!(c.floor.steps == 99 && c.floor.max_abs <= 0.005 + 1e-12);
    }

    #[test]
    fn an_engine_running_an_alternative_diverges_and_names_it() {
        let (declared, alt) = policies();
        let c = conformance(&engine_of(&alt), &[replay("declared", declared, Some(100)), replay("alt", alt, Some(100))]).unwrap();
        assert_eq!(c.verdict, Verdict::Diverges { from: 102 });
        assert_eq!(c.ranking[0].label, "alt");
        assert!(c.ranking[0].explains_better);
    }

    #[test]
    fn a_nan_replay_or_too_short_a_prefix_gives_no_verdict() {
        let (mut declared, _) = policies();
        let engine = engine_of(&declared);
        assert!(conformance(&engine, &[replay("d", declared.clone(), Some(5))]).unwrap_err().contains("noise floor"));
        declared[150] = f64::NAN;
        assert!(conformance(&engine, &[replay("d", declared, Some(100))]).unwrap_err().contains("not finite"));
    }
}
