//! `watch` evaluated, not asserted (a plain harness, not a timed test): traces that the exact
//! cache simulator produces on several texts and models — `window` (the sink is evicted at the
//! first eviction: a positive when the model really collapses there, i.e. its mean NLL over the
//! 200 tokens after the eviction exceeds `sink S = 4`'s by ≥ 0.3 nats), `sink S = 4` and `dense`
//! (negatives, through whatever hard passages the texts hold) — run through the sink-loss
//! detector. Prints one line per trace and the summary: detection rate, detection delay (alarm −
//! eviction) and dating error (step start − eviction) on positives; sink-loss alarms and all steps
//! per 10,000 tokens on negatives. The simulated traces are kept in target/watch_eval/ and reused
//! (`--fresh` recomputes them), so detector settings can be compared quickly.
//!
//!     cargo bench --bench watch_eval -- [--tokens N] [--min-step NATS] [--false-alarms RATE] [--quick] [--fresh]

use sinkscope::analysis::sink_loss::{watch, WatchOptions};
use sinkscope::io::trace::{evictions_from_lengths, Trace, TraceFormat, TraceRequest};
use sinkscope::kv::{simulate, Eviction, Policy, PolicyKind, PositionMode};
use sinkscope::metrics::changepoint::StepOptions;
use sinkscope::model::{load, LoadOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn policy(kind: PolicyKind, sinks: usize, cache: usize) -> Policy {
    Policy::new(Eviction::of_kind(kind, sinks, None), cache, PositionMode::Slot)
}

struct Row {
    model: &'static str,
    text: String,
    label: String,
    /// Some(true): the cache collapsed at the eviction; Some(false): a negative; None: a window
    /// run that did not collapse (not scored).
    truth: Option<bool>,
    tokens: usize,
    eviction: Option<usize>,
    /// (start, alarm, size, sink_loss) per step.
    steps: Vec<(usize, usize, f64, bool)>,
    /// The first eviction's direct test: (drop, z, sink_loss).
    tested: Option<(f64, f64, bool)>,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let tokens: usize = arg("--tokens").and_then(|v| v.parse().ok()).unwrap_or(if quick { 600 } else { 1500 });
    let defaults = StepOptions::default();
    let steps = StepOptions {
        min_step: arg("--min-step").and_then(|v| v.parse().ok()).unwrap_or(defaults.min_step),
        false_alarms_per_10k: arg("--false-alarms").and_then(|v| v.parse().ok()).unwrap_or(defaults.false_alarms_per_10k),
        ..defaults
    };
    let opts = WatchOptions { steps, ..WatchOptions::default() };
    println!("window runs: + collapses at the eviction (a positive), · does not (not scored); - negatives");
    let corpora = std::path::Path::new("../shared/corpora");
    let books = [
        "pg1342_pride_and_prejudice.txt",
        "pg2641_a_room_with_a_view.txt",
        "pg2701_moby_dick.txt",
        "pg37106_little_women.txt",
        "pg64317_the_great_gatsby.txt",
        "pg84_frankenstein.txt",
    ];
    // (model alias, texts as (file, start char), whether a dense run is a negative)
    let books: Vec<(&str, usize)> = books.iter().take(if quick { 2 } else { 6 }).map(|b| (*b, 60_000)).collect();
    let stories: Vec<(&str, usize)> =
        [0, 20_000, 40_000, 60_000].iter().take(if quick { 1 } else { 4 }).map(|&s| ("tinystories_val_subset.txt", s)).collect();
    let plan = [("smollm2-135m", books, true), ("stories260k", stories, false)];
    let cache_dir = std::path::Path::new("target/watch_eval");
    std::fs::create_dir_all(cache_dir).unwrap();
    let fresh = std::env::args().any(|a| a == "--fresh");
    let mut rows = Vec::new();
    // Requests grouped by (model, policy kind, W) for the pooled test.
    let mut groups: std::collections::BTreeMap<(String, String), Vec<TraceRequest>> = Default::default();
    for (model, texts, dense) in plan {
        let mut loaded = None;
        for (file, start) in texts {
            let key = cache_dir.join(format!("{model}-{file}-{start}-{tokens}.json"));
            // Each trace: (label, positive, NLL per step, cache length per step).
            let traces: Vec<(String, bool, Vec<f64>, Vec<usize>)> =
                match std::fs::read(&key).ok().filter(|_| !fresh).and_then(|b| serde_json::from_slice(&b).ok()) {
                    Some(t) => t,
                    None => {
                        let lm = loaded.get_or_insert_with(|| load(model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}")));
                        let text = std::fs::read_to_string(corpora.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
                        let from = text.char_indices().nth(start).map_or(0, |(i, _)| i);
                        let ids: Vec<u32> = lm.tokenizer.encode(&text[from..]).unwrap().into_iter().take(tokens).collect();
                        let mut ps = Vec::new();
                        for w in [128, 256] {
                            ps.push(policy(PolicyKind::Window, 0, w));
                            ps.push(policy(PolicyKind::Sink, 4, w));
                        }
                        if dense && ids.len() <= lm.model.cfg.context_len {
                            ps.push(policy(PolicyKind::Dense, 0, 0));
                        }
                        let outcomes = simulate(&lm.model, &ids, &ps, &mut |_, _| {}).unwrap();
                        // A window run is a positive when it collapses against the sink run of its W.
                        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
                        let traces: Vec<_> = outcomes
                            .iter()
                            .map(|o| {
                                let positive = o.policy.kind() == PolicyKind::Window && {
                                    let w = o.policy.cache;
                                    let sink = outcomes.iter().find(|s| s.policy.kind() == PolicyKind::Sink && s.policy.cache == w).unwrap();
                                    let end = (w + 200).min(o.nll.len());
                                    mean(&o.nll[w..end]) - mean(&sink.nll[w..end]) >= 0.3
                                };
                                (o.label.clone(), positive, o.nll.clone(), o.cache_len.clone())
                            })
                            .collect();
                        std::fs::write(&key, serde_json::to_vec(&traces).unwrap()).unwrap();
                        traces
                    }
                };
            for (label, positive, nll, lens) in traces {
                let cache_len: Vec<Option<usize>> = lens.iter().map(|&l| Some(l)).collect();
                let request = TraceRequest {
                    id: label.clone(),
                    logprobs: nll.iter().map(|x| -x).collect(),
                    tokens: vec![None; nll.len()],
                    evictions: evictions_from_lengths(&cache_len),
                    cache_len,
                    ..TraceRequest::default()
                };
                if !label.starts_with("dense") {
                    // "window W=128 (slot)" / "sink S=4 + 124 recent, W=128 (slot)" → kind and W.
                    let kind = label.split_whitespace().next().unwrap_or_default().to_string();
                    let w = label.split("W=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default();
                    groups.entry((model.to_string(), format!("{kind} W={w}"))).or_default().push(request.clone());
                }
                let report = watch(&Trace { format: TraceFormat::SinkscopeStream, requests: vec![request] }, &opts);
                let r = &report.requests[0];
                // A window run that does not collapse is neither a positive nor a negative.
                let truth = if positive {
                    Some(true)
                } else if label.starts_with("window") {
                    None
                } else {
                    Some(false)
                };
                let row = Row {
                    model,
                    text: format!("{file}@{start}"),
                    label,
                    truth,
                    tokens: r.tokens,
                    eviction: r.evictions.first().copied(),
                    steps: r.steps.iter().map(|s| (s.step.start, s.step.alarm, s.step.size, s.sink_loss)).collect(),
                    tested: r.eviction_tests.first().map(|t| (t.drop, t.z, t.sink_loss)),
                };
                println!(
                    "{:<13} {:<36} {:<34} {} eviction {:>5} {}  steps {:?}",
                    row.model,
                    row.text,
                    row.label,
                    match row.truth {
                        Some(true) => "+",
                        Some(false) => "-",
                        None => "·",
                    },
                    row.eviction.map_or("-".into(), |e| e.to_string()),
                    row.tested.map_or(String::new(), |t| format!("test {}drop {:.2} z {:.1}", if t.2 { "LOSS " } else { "" }, t.0, t.1)),
                    row.steps.iter().map(|s| format!("{}@{}→{} {:.2}", if s.3 { "LOSS" } else { "step" }, s.0, s.1, s.2)).collect::<Vec<_>>()
                );
                rows.push(row);
            }
        }
    }
    println!("\npooled test (each group's first evictions together, z ≥ 2.33):");
    for ((model, group), requests) in &groups {
        let report = watch(&Trace { format: TraceFormat::SinkscopeStream, requests: requests.clone() }, &opts);
        match report.pooled {
            Some(p) => println!(
                "  {model:<13} {group:<12} {} requests: mean drop {:+.2} ± {:.2} nats, z {:+.1} → {}",
                p.requests,
                p.mean_drop,
                p.standard_error,
                p.z,
                if p.sink_loss { "SINK LOSS" } else { "none" }
            ),
            None => println!("  {model:<13} {group:<12} too few requests"),
        }
    }
    println!(
        "\nsettings: min step {} nats, target {} false alarms / 10k tokens, baseline {} tokens, max lag {}",
        opts.steps.min_step, opts.steps.false_alarms_per_10k, opts.steps.baseline, opts.max_lag
    );
    println!("blind steps: a CUSUM step dated within the lag window of the eviction; eviction test: the mean before vs after the known eviction (drop ≥ min step, z ≥ 2.33)");
    println!("model          positives | blind: detected  delay median/max  dating error median/max | test: detected  drop median | either | negatives: tokens  evictions  blind sink-loss alarms/10k  all steps/10k  test alarms");
    for model in ["smollm2-135m", "stories260k", "all"] {
        let mine: Vec<&Row> = rows.iter().filter(|r| model == "all" || r.model == model).collect();
        let pos: Vec<&&Row> = mine.iter().filter(|r| r.truth == Some(true)).collect();
        let neg: Vec<&&Row> = mine.iter().filter(|r| r.truth == Some(false)).collect();
        let blind = |r: &Row| r.eviction.and_then(|e| r.steps.iter().find(|s| s.3).map(|s| (s.1 as i64 - e as i64, s.0 as i64 - e as i64)));
        let hits: Vec<(i64, i64)> = pos.iter().filter_map(|r| blind(r)).collect();
        let tested: Vec<f64> = pos.iter().filter_map(|r| r.tested.filter(|t| t.2).map(|t| t.0)).collect();
        let either = pos.iter().filter(|r| blind(r).is_some() || r.tested.is_some_and(|t| t.2)).count();
        let med = |mut v: Vec<f64>| -> f64 {
            if v.is_empty() {
                return f64::NAN;
            }
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let neg_tokens: usize = neg.iter().map(|r| r.tokens).sum();
        let neg_evictions = neg.iter().filter(|r| r.tested.is_some()).count();
        let loss_alarms = neg.iter().map(|r| r.steps.iter().filter(|s| s.3).count()).sum::<usize>();
        let all_steps = neg.iter().map(|r| r.steps.len()).sum::<usize>();
        let test_alarms = neg.iter().filter(|r| r.tested.is_some_and(|t| t.2)).count();
        let per10k = |n: usize| 1e4 * n as f64 / neg_tokens.max(1) as f64;
        println!(
            "{model:<14} {:>9} | {:>6} ({:>3.0}%)  {:>6.0} / {:<6.0}  {:>10.0} / {:<10.0} | {:>6} ({:>3.0}%)  {:>11.2} | {:>3.0}% | {:>16}  {:>9}  {:>26.2}  {:>13.2}  {:>11}",
            pos.len(),
            hits.len(),
            100.0 * hits.len() as f64 / pos.len().max(1) as f64,
            med(hits.iter().map(|h| h.0 as f64).collect()),
            hits.iter().map(|h| h.0).max().unwrap_or(0),
            med(hits.iter().map(|h| h.1 as f64).collect()),
            hits.iter().map(|h| h.1).max().unwrap_or(0),
            tested.len(),
            100.0 * tested.len() as f64 / pos.len().max(1) as f64,
            med(tested.clone()),
            100.0 * either as f64 / pos.len().max(1) as f64,
            neg_tokens,
            neg_evictions,
            per10k(loss_alarms),
            per10k(all_steps),
            test_alarms
        );
    }
}
