//! Sink loss in a serving trace: the downward steps of each request's logprob series, each dated
//! against the cache's evictions (from the trace, or from a known budget) and judged — a step that
//! starts within a few tokens after an eviction is the signature of an evicted sink; a step with no
//! eviction before it is a hard passage or something else.

use serde::{Deserialize, Serialize};

use crate::io::trace::{Trace, TraceRequest};
use crate::metrics::changepoint::{downward_steps, mean_var, rolling_mean, Step, StepOptions, CONTEXT_FREE};

/// How steps are attributed to evictions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WatchOptions {
    pub steps: StepOptions,
    /// When the trace has no cache events: the cache budget W (an eviction when the context
    /// first exceeds W tokens).
    pub budget: Option<usize>,
    /// Context tokens before the trace's first token (a prompt the trace does not list).
    pub prompt_tokens: usize,
    /// A step is sink loss when its start lies this many tokens after an eviction, or fewer
    /// (the articles: 5–20 tokens), or up to [`EARLY_DATING`] tokens before it.
    pub max_lag: usize,
    /// Tokens in the rolling mean drawn and reported.
    pub rolling: usize,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions { steps: StepOptions::default(), budget: None, prompt_tokens: 0, max_lag: 20, rolling: 32 }
    }
}

/// How many tokens before the eviction that caused it a step's estimated start may lie: the
/// CUSUM dates a step at the start of the run that raised the alarm, and noise before the true
/// change can start that run a few tokens early.
pub const EARLY_DATING: usize = 10;

/// One step, with its attribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DatedStep {
    #[serde(flatten)]
    pub step: Step,
    /// The latest eviction before the step's start (or up to [`EARLY_DATING`] tokens after
    /// it), and the step's start minus it (negative: dated before the eviction).
    pub eviction: Option<usize>,
    pub lag: Option<i64>,
    /// The step starts within `max_lag` tokens after an eviction.
    pub sink_loss: bool,
}

/// One eviction tested directly: the mean logprob over the tokens before it against the tokens
/// after it (the eviction's time is known, so this needs no search and has far more power than
/// the blind detector: the articles' "correlate the cliff with the moment the cache crossed its
/// budget").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvictionTest {
    pub eviction: usize,
    pub mean_before: f64,
    pub mean_after: f64,
    /// mean_before − mean_after (nats; positive = logprob fell).
    pub drop: f64,
    /// drop / its standard error (pooled standard deviation of the two segments).
    pub z: f64,
    /// drop ≥ min_step and z ≥ [`EVICTION_Z`].
    pub sink_loss: bool,
}

/// One-sided z for a false alarm on 1% of evictions that change nothing.
pub const EVICTION_Z: f64 = 2.326;
/// Tokens after an eviction compared with the baseline before it.
pub const EVICTION_AFTER: usize = 64;

/// Tests each eviction with at least 32 tokens before it (after the context-free first ones) and
/// 16 after it.
fn test_evictions(x: &[f64], evictions: &[usize], opts: &WatchOptions) -> Vec<EvictionTest> {
    evictions
        .iter()
        .filter_map(|&e| {
            let from = e.saturating_sub(opts.steps.baseline).max(CONTEXT_FREE);
            let to = (e + EVICTION_AFTER).min(x.len());
            if e < from + 32 || to < e + 16 {
                return None;
            }
            let ((mb, vb), (ma, va)) = (mean_var(&x[from..e]), mean_var(&x[e..to]));
            let (n1, n2) = ((e - from) as f64, (to - e) as f64);
            // Pooled over both segments (sums of squares from the population variances).
            let sd = ((vb * n1 + va * n2) / (n1 + n2 - 2.0)).sqrt().max(1e-9);
            let drop = mb - ma;
            let z = drop / (sd * (1.0 / n1 + 1.0 / n2).sqrt());
            Some(EvictionTest { eviction: e, mean_before: mb, mean_after: ma, drop, z, sink_loss: drop >= opts.steps.min_step && z >= EVICTION_Z })
        })
        .collect()
}

/// The first eviction of every request tested together: a single request's text can rise or
/// fall by a nat around any given token, but across requests that variation averages out while
/// the loss of a sink does not.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PooledTest {
    pub requests: usize,
    /// Mean and standard error of the per-request drops (nats).
    pub mean_drop: f64,
    pub standard_error: f64,
    pub z: f64,
    /// z ≥ [`EVICTION_Z`].
    pub sink_loss: bool,
}

/// Fewest requests the pooled test needs.
pub const POOLED_MIN: usize = 3;

fn pooled(requests: &[RequestReport]) -> Option<PooledTest> {
    let drops: Vec<f64> = requests.iter().filter_map(|r| r.eviction_tests.first().map(|t| t.drop)).collect();
    if drops.len() < POOLED_MIN {
        return None;
    }
    let n = drops.len() as f64;
    let (mean_drop, var) = mean_var(&drops);
    // The sample standard deviation of the drops.
    let sd = (var * n / (n - 1.0)).sqrt();
    let standard_error = (sd / n.sqrt()).max(1e-9);
    let z = mean_drop / standard_error;
    Some(PooledTest { requests: drops.len(), mean_drop, standard_error, z, sink_loss: z >= EVICTION_Z })
}

/// One request's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestReport {
    pub id: String,
    pub tokens: usize,
    pub mean_logprob: f64,
    pub evictions: Vec<usize>,
    /// Where the evictions came from: "trace", "budget" or "none".
    pub eviction_source: String,
    pub steps: Vec<DatedStep>,
    /// Each eviction tested at its known time.
    pub eviction_tests: Vec<EvictionTest>,
    /// Rolling mean logprob at each token (for the figure).
    #[serde(skip)]
    pub rolling: Vec<f64>,
    #[serde(skip)]
    pub logprobs: Vec<f64>,
}

/// The whole trace's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchReport {
    pub format: String,
    pub options: WatchOptions,
    pub requests: Vec<RequestReport>,
    /// The requests' first evictions tested together (`None`: fewer than [`POOLED_MIN`]).
    pub pooled: Option<PooledTest>,
    /// Some step is attributed to an eviction, or some eviction's test shows the drop — or, with
    /// no cache information at all, some step was found (it cannot be cleared).
    pub sink_loss: bool,
    pub verdict: String,
}

/// Finds and dates the steps of every request.
pub fn watch(trace: &Trace, opts: &WatchOptions) -> WatchReport {
    let requests: Vec<RequestReport> = trace.requests.iter().map(|r| watch_request(r, opts)).collect();
    let attributed = requests.iter().flat_map(|r| &r.steps).filter(|s| s.sink_loss).count();
    let tested: Vec<(&RequestReport, &EvictionTest)> =
        requests.iter().flat_map(|r| r.eviction_tests.iter().filter(|t| t.sink_loss).map(move |t| (r, t))).collect();
    let unknown_cause = requests.iter().filter(|r| r.eviction_source == "none").flat_map(|r| &r.steps).count();
    let all_steps = requests.iter().map(|r| r.steps.len()).sum::<usize>();
    let pooled = pooled(&requests);
    let sink_loss = attributed > 0 || unknown_cause > 0 || !tested.is_empty() || pooled.is_some_and(|p| p.sink_loss);
    let verdict = if let Some(p) = pooled.filter(|p| p.sink_loss && attributed == 0 && tested.is_empty()) {
        format!(
            "SINK LOSS across requests: aligned at each request's first eviction, the mean logprob falls by {:.2} ± {:.2} nats over {} requests (z = {:.1}), though no single request shows it clearly. Pin the first tokens of the cache (StreamingLLM sinks, llama.cpp --keep).",
            p.mean_drop, p.standard_error, p.requests, p.z
        )
    } else if let Some((r, t)) = tested.first().filter(|_| attributed == 0) {
        format!(
            "SINK LOSS: the mean logprob falls at {} of {} evictions tested — first in request {:?}: {:.2} → {:.2} nats across the eviction at token {} (z = {:.1}); the blind step detector dated no step there. Pin the first tokens of the cache (StreamingLLM sinks, llama.cpp --keep).",
            tested.len(),
            requests.iter().map(|r| r.eviction_tests.len()).sum::<usize>(),
            r.id,
            t.mean_before,
            t.mean_after,
            t.eviction,
            t.z
        )
    } else if attributed > 0 {
        let first = requests.iter().find_map(|r| r.steps.iter().find(|s| s.sink_loss).map(|s| (r, *s)));
        let (r, s) = first.map_or((String::new(), None), |(r, s)| (r.id.clone(), Some(s)));
        let s = s.map_or(String::new(), |s| {
            format!(
                " — first in request {r:?}: mean logprob fell by {:.2} nats at token {}, {} tokens after the eviction at token {}",
                s.step.size,
                s.step.start,
                s.lag.unwrap_or(0),
                s.eviction.unwrap_or(0)
            )
        });
        format!("SINK LOSS: {attributed} step{} in the logprob trace start{} within {} tokens after an eviction{s}. Pin the first tokens of the cache (StreamingLLM sinks, llama.cpp --keep).", plural(attributed), if attributed == 1 { "s" } else { "" }, opts.max_lag)
    } else if unknown_cause > 0 {
        format!("{unknown_cause} step{} down in the logprob trace, but the trace has no cache events: pass --budget W (and --prompt-tokens) to tell whether they follow an eviction.", plural(unknown_cause))
    } else if all_steps > 0 {
        format!(
            "No sink loss: {all_steps} step{} down in the logprob trace, none within {} tokens after an eviction.",
            plural(all_steps),
            opts.max_lag
        )
    } else {
        "No sink loss: no step down in the rolling logprob.".to_string()
    };
    WatchReport { format: format!("{:?}", trace.format), options: *opts, requests, pooled, sink_loss, verdict }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn watch_request(r: &TraceRequest, opts: &WatchOptions) -> RequestReport {
    let (evictions, source) = if !r.evictions.is_empty() {
        (r.evictions.clone(), "trace")
    } else if let Some(w) = opts.budget {
        // The token that takes the context past W is the first that evicts.
        let at = w.saturating_sub(opts.prompt_tokens);
        (if at < r.logprobs.len() { vec![at] } else { Vec::new() }, "budget")
    } else if r.cache_len.iter().any(Option::is_some) {
        (Vec::new(), "trace")
    } else {
        (Vec::new(), "none")
    };
    let steps = downward_steps(&r.logprobs, &opts.steps)
        .into_iter()
        .map(|step| {
            let eviction = evictions.iter().copied().filter(|&e| e <= step.start + EARLY_DATING).max();
            let lag = eviction.map(|e| step.start as i64 - e as i64);
            DatedStep { step, eviction, lag, sink_loss: lag.is_some_and(|l| l <= opts.max_lag as i64) }
        })
        .collect();
    let n = r.logprobs.len();
    let eviction_tests = test_evictions(&r.logprobs, &evictions, opts);
    RequestReport {
        id: r.id.clone(),
        tokens: n,
        mean_logprob: r.logprobs.iter().sum::<f64>() / n.max(1) as f64,
        evictions,
        eviction_source: source.into(),
        steps,
        eviction_tests,
        rolling: rolling_mean(&r.logprobs, opts.rolling),
        logprobs: r.logprobs.clone(),
    }
}
