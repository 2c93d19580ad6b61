//! What each command prints: plain-text tables of a model, a capture, a diagnosis, a stream, a
//! sweep and an export.

use crate::analysis::findings::AnalysisFindings;
use crate::analysis::AnalysisReport;
use crate::kv::cache_frontier::CacheFrontier;
use crate::kv::divergence::CacheErrorByHead;
use crate::kv::per_head::Frontier;
use crate::kv::recommend::Recommendation;
use crate::kv::simulate::StreamOutcome;
use crate::metrics::massive;
use crate::model::decoder::config::{describe_windows, ExpertAct};
use crate::model::decoder::{DecoderConfig, MlpKind, NormKind, NormPlacement, QkNorm};
use crate::model::info::ModelInfo;
use crate::report::export::Exported;
use crate::report::markdown::equal_ppl_memory;
use crate::report::records::CaptureReport;

/// "2nd", "3rd", "6th", "11th", "22nd".
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What sets the model's family apart from Llama, in words ("as Llama" when nothing does).
fn describe_switches(cfg: &DecoderConfig) -> String {
    let (a, d_head) = (&cfg.arch, cfg.d_head);
    let mut parts = Vec::new();
    match a.norm {
        NormKind::Rms => {}
        NormKind::Layer => parts.push("LayerNorm".to_string()),
        NormKind::LayerNoBias => parts.push("LayerNorm without bias".to_string()),
    }
    match a.norm_placement {
        NormPlacement::Pre => {}
        NormPlacement::Post => parts.push("norms after attention and MLP".into()),
        NormPlacement::Sandwich => parts.push("norms before and after attention and MLP".into()),
        NormPlacement::Shared => parts.push("one norm shared by attention and MLP".into()),
    }
    match a.qk_norm {
        QkNorm::None => {}
        QkNorm::PerHead => parts.push("q/k RMSNorm per head".into()),
        QkNorm::AcrossHeads => parts.push("q/k RMSNorm across heads".into()),
    }
    if let Some(s) = a.delta_net {
        let linear = cfg.linear_layers();
        parts.push(format!(
            "Gated DeltaNet (linear attention, a recurrent state instead of a KV cache) in layers {linear:?}: {} key heads of {} shared by {} value heads of {}, a {}-tap convolution",
            s.k_heads, s.k_dim, s.v_heads, s.v_dim, s.conv_kernel
        ));
    }
    if a.gated_attention {
        parts.push("each head's output × σ(gate), the gate computed beside its query".into());
    }
    if let Some(m) = a.mla {
        let q = if m.q_lora_rank > 0 { format!(", queries through rank {}", m.q_lora_rank) } else { String::new() };
        parts.push(format!(
            "latent attention: one cached row per token of a RoPE key ({}) and a latent ({}), keys {} + {} and values {} wide per head{q}",
            m.qk_rope, m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head
        ));
    } else if a.learned_positions {
        parts.push("learned absolute positions (no RoPE)".into());
    } else if let Some(r) = a.rotary_dims {
        parts.push(format!("RoPE on {r} of {d_head} dims per head"));
    }
    if a.parallel_residual {
        parts.push("attention and MLP in parallel".into());
    }
    match a.mlp {
        MlpKind::SwiGlu => {}
        MlpKind::Gelu => parts.push("GELU MLP".into()),
        MlpKind::GeGluTanh => parts.push("GeGLU MLP".into()),
        MlpKind::GeluTanh => parts.push("GELU (tanh) MLP".into()),
        MlpKind::Moe(m) => {
            let expert = match m.expert {
                ExpertAct::SwiGlu => "SwiGLU",
                ExpertAct::ClampedSwiGlu { .. } => "clamped SwiGLU",
            };
            let weights = if m.norm_top_k { "weights renormalised over them" } else { "each weighted by its softmax over all" };
            parts.push(format!("mixture of {} {expert} experts, {} per token, {weights}", m.experts, m.top_k));
            if m.groups > 1 {
                let by = if m.groups_by_top_two { "their two best experts' sum, as llama.cpp" } else { "their best expert" };
                parts.push(format!("experts chosen within the best {} of {} groups (by {by})", m.top_groups, m.groups));
            }
            if let Some(s) = m.routed_scale {
                parts.push(format!("expert weights × {s}"));
            }
            match (m.shared_ff, m.ungated_shared) {
                (0, _) => {}
                (w, false) => parts.push(format!("a shared expert ({w} wide) gated by σ(x·g)")),
                (w, true) => parts.push(format!("shared experts ({w} wide) ungated")),
            }
            if m.dense_layers > 0 {
                parts.push(format!("the first {} layers dense ({} wide)", m.dense_layers, m.dense_ff));
            }
        }
    }
    if a.learned_sinks {
        parts.push("a learned sink logit per head".into());
    }
    if let Some(f) = &cfg.rope_freq_factors {
        parts.push(format!("RoPE frequencies scaled ({})", f.source));
    }
    if let Some(y) = a.rope_yarn {
        parts.push(format!("YaRN RoPE ×{} from {} positions", y.factor, y.original_context));
    }
    if let Some(c) = a.attn_logit_softcap {
        parts.push(format!("attention scores soft-capped at {c}"));
    }
    if let Some(c) = a.final_logit_softcap {
        parts.push(format!("logits soft-capped at {c}"));
    }
    if a.embed_scale {
        parts.push("embeddings × √d_model".into());
    }
    if let Some(s) = a.attn_scale {
        parts.push(format!("attention scale {s:.4}"));
    }
    // Shortest f32 form: a GGUF stores them as f32 (0.22, not 0.2199999988).
    if let Some(m) = a.embed_multiplier {
        parts.push(format!("embeddings × {}", m as f32));
    }
    if let Some(m) = a.residual_multiplier {
        parts.push(format!("attention and MLP outputs × {}", m as f32));
    }
    if let Some(d) = a.logit_divisor {
        parts.push(format!("logits ÷ {}", d as f32));
    }
    let nope = cfg.nope_layers();
    if !nope.is_empty() {
        parts.push(format!("no RoPE on {}", which_layers(&nope, cfg.n_layers)));
    }
    for w in cfg.windows() {
        let windowed: Vec<usize> = (0..cfg.n_layers).filter(|&l| cfg.layer_window(l) == Some(w)).collect();
        let local_theta = windowed.first().map(|&l| cfg.layers[l].rope_theta).filter(|&t| t != cfg.rope_theta);
        let mut base = local_theta.map_or(String::new(), |t| format!(", RoPE base {t} there"));
        let scaled = a.rope_yarn.is_some() || cfg.rope_freq_factors.is_some();
        if scaled && windowed.first().is_some_and(|&l| cfg.layers[l].unscaled) {
            base.push_str(", RoPE not scaled there");
        }
        parts.push(format!("sliding window of {w} keys on {}{base}", which_layers(&windowed, cfg.n_layers)));
    }
    if parts.is_empty() {
        "as Llama".into()
    } else {
        parts.join(", ")
    }
}

/// Names a set of layers among `n`: "every layer", "every 4th layer", "all but every 6th layer",
/// or the list.
fn which_layers(set: &[usize], n: usize) -> String {
    let every = |inside: bool| (2..=n).find(|k| (0..n).all(|l| set.contains(&l) == ((l + 1).is_multiple_of(*k) == inside)));
    if set.len() == n {
        "every layer".into()
    } else if let Some(k) = every(true) {
        format!("every {} layer", ordinal(k))
    } else if let Some(k) = every(false) {
        format!("all but every {} layer", ordinal(k))
    } else {
        format!("layers {}", set.iter().map(usize::to_string).collect::<Vec<_>>().join(", "))
    }
}

pub fn format_info(i: &ModelInfo) -> String {
    let cfg = &i.config;
    let rows: Vec<(&str, String)> = vec![
        ("source", format!("{} ({})", i.source, i.format)),
        ("name", i.name.clone().unwrap_or_else(|| "-".into())),
        ("architecture", i.architecture.clone()),
        ("layers", i.config.n_layers.to_string()),
        ("heads", format!("{} (kv heads {}, head size {})", i.config.n_heads, i.config.n_kv_heads, i.config.d_head)),
        ("d_model", i.config.d_model.to_string()),
        ("d_ff", i.config.d_ff.to_string()),
        ("context", i.config.context_len.to_string()),
        ("vocab", i.config.vocab_size.to_string()),
        ("tokenizer", format!("{}{}", i.tokenizer, if i.adds_bos { ", adds BOS" } else { ", no BOS" })),
        ("quantization", i.quantization.clone()),
        ("compute", i.compute.to_string()),
        ("in memory", format!("{:.1} MiB of weights", i.weight_bytes as f64 / (1u64 << 20) as f64)),
        ("block", describe_switches(cfg)),
        ("rope", format!("{}, theta {}", i.config.rope_layout, i.config.rope_theta)),
        (if cfg.arch.norm == NormKind::Rms { "rms eps" } else { "norm eps" }, format!("{:e}", i.config.rms_eps)),
        ("embeddings", if i.tied_embeddings { "tied".into() } else { "untied".into() }),
        ("parameters", format!("{:.1}M", i.n_params as f64 / 1e6)),
    ];
    let mut rows = rows;
    if let Some(bad) = &i.non_finite_weights {
        rows.push(("weights", if bad.is_empty() { "all finite".into() } else { format!("BROKEN: {} tensor{} NaN or ∞ — nothing this model computes can be trusted; replace the file (check it against its source's SHA-256)", bad.len(), if bad.len() == 1 { " holds" } else { "s hold" }) }));
        for w in bad.iter().take(8) {
            rows.push((
                "",
                format!(
                    "{}: {} of {} elements non-finite, the first ({}) at element {}",
                    w.tensor, w.count, w.elements, w.first_value, w.first_index
                ),
            ));
        }
        if bad.len() > 8 {
            rows.push(("", format!("… and {} more (`info --json` lists them all)", bad.len() - 8)));
        }
    }
    if let Some(note) = &i.memory_note {
        rows.push(("memory", note.clone()));
    }
    if !i.unread.is_empty() {
        rows.push((
            "not read",
            format!(
                "{} thing{} in the file no part of sinkscope's decoder reads — other commands refuse this file:",
                i.unread.len(),
                if i.unread.len() == 1 { "" } else { "s" }
            ),
        ));
        rows.extend(i.unread.iter().map(|u| ("", format!("{}: {}", u.name, u.suggests))));
    }
    rows.iter().map(|(k, v)| format!("{k:<13} {v}\n")).collect()
}

pub fn format_table(r: &CaptureReport) -> String {
    let name = r.model.display_name();
    let mut s = format!(
        "sinkscope demo — {name}: {} layers × {} heads, {} tokens of {}\nperplexity {} · capture {:.2}s\n\n",
        r.model.config.n_layers,
        r.model.config.n_heads,
        r.n_tokens,
        r.text_source,
        r.nll.as_ref().map_or("-".to_string(), |n| format!("{:.2}", n.perplexity)),
        r.wall_seconds
    );
    s.push_str("layer  attn→pos0   max|h|  at (pos, dim)    median|h|   max/median\n");
    for l in &r.summary.layers {
        let at = match (l.max_abs_pos, l.max_abs_dim) {
            (Some(p), Some(d)) => format!("({p}, {d})"),
            _ => "-".into(),
        };
        let ratio = if l.median_abs > 0.0 { l.max_abs / l.median_abs } else { f32::INFINITY };
        s.push_str(&format!(
            "{:>5}  {:>9}  {:>7.1}  {:<14}  {:>9.4}  {:>11.0}\n",
            l.layer,
            l.mean_attention_pos0.map_or("linear".into(), |a| format!("{a:.3}")),
            l.max_abs,
            at,
            l.median_abs,
            ratio
        ));
    }
    s.push_str("\nattn→pos0: mean over heads of α₀, the average attention queries pay to position 0.\n");
    s
}

pub fn format_summary(r: &AnalysisReport) -> String {
    let name = r.model.display_name();
    let mut s = format!("sinkscope analyze — {name}: {} probes, ε = {}\n\n", r.probes.len(), r.settings.epsilon);
    let d = AnalysisFindings::of(r);
    for skipped in &d.skipped_probes {
        s.push_str(&format!("probe left out: {skipped}\n"));
    }
    s.push_str(&format!("sink positions: {:?}\n", d.sink_positions));
    let ts: Vec<String> = d.probe_lengths.iter().map(|t| t.to_string()).collect();
    s.push_str(&format!("Sink_k^ε (% of probe·layer·head with α_k > ε; T = {}):", ts.join("/")));
    for (k, score) in d.sink_scores.iter().take(8) {
        s.push_str(&format!("  k={k}: {score:.1}"));
    }
    s.push_str(&format!("\nF-Attn (mean attention on position 0): {:.3}\n", d.f_attn));
    if let Some(k) = &d.alpha0_by_kind {
        let mean = |side: Option<(f64, usize)>| side.map_or("-".to_string(), |(m, _)| format!("{m:.3}"));
        s.push_str(&format!(
            "  by layer kind: global layers {}, windowed layers ({} of {}, {} keys; α counts the queries within the window) {}\n",
            mean(k.global),
            k.windowed_layers,
            k.n_layers,
            describe_windows(&k.windows),
            mean(k.windowed)
        ));
    }
    if let Some(ls) = &d.learned_sinks {
        s.push_str(&format!(
            "learned sinks: {:.3} of each softmax row on average (beside α_0); most in L{}H{}: {:.3}\n",
            ls.mean, ls.top.0, ls.top.1, ls.top.2
        ));
    }
    match d.massive.first_layer {
        Some(l) => s.push_str(&format!(
            "massive activations: from layer {l}, dims {:?}, positions {:?}\n",
            &d.massive.dims[..d.massive.dims.len().min(8)],
            &d.massive.positions[..d.massive.positions.len().min(8)]
        )),
        None => s.push_str(&format!("massive activations: none (no element with {})\n", massive::criterion())),
    }
    s.push_str(&format!("head classes: {}\n", d.classes.describe(", ")));
    s.push_str("\nper probe:  name                    T   F-Attn  sinks        perplexity\n");
    for p in &r.probes {
        let sinks: Vec<usize> = p.sink_positions.iter().map(|s| s.pos).take(4).collect();
        let ppl = p.nll.as_ref().map_or("-".into(), |n| format!("{:.2}", n.perplexity));
        s.push_str(&format!("            {:<22} {:>4}  {:>6.3}  {:<12} {ppl}\n", p.name, p.n_tokens, p.f_attn, format!("{sinks:?}")));
    }
    if let Some(c) = &d.causal {
        s.push_str(&format!(
            "\ncausal dependency ({} tokens, keys {:?}, {:.0}s): heads whose masking hurts most\n",
            c.tokens, c.keys, c.wall_seconds
        ));
        for t in &c.top_heads {
            s.push_str(&format!("  L{}H{} without key {}: ΔNLL {:+.4} nats, KL {:.4}\n", t.layer, t.head.unwrap_or(0), t.key_pos, t.delta_nll, t.kl));
        }
    }
    s
}

pub fn format_outcome(o: &StreamOutcome) -> String {
    let opt = |v: Option<f64>| v.map_or("-".into(), |p| format!("{p:.3}"));
    let kept = o.kept.map_or(String::new(), |k| {
        let shares: Vec<String> = k.kept_first_share.iter().map(|s| format!("{:.0}%", 100.0 * s)).collect();
        format!(
            "kept positions 0–3 in {} of (layer, KV head, step) after the first eviction; mean key age {:.1} tokens\n",
            shares.join(" / "),
            k.mean_age
        )
    });
    format!(
        "{}: {} tokens, perplexity {:.3}, after first eviction {} (first eviction at step {}), cliff {}, max cache {} entries, KV memory {}, {:.1} tokens/s\n",
        o.label,
        o.tokens,
        o.ppl,
        opt(o.ppl_after_eviction),
        o.first_eviction_step.map_or("-".into(), |s| s.to_string()),
        o.cliff_step.map_or("none".into(), |s| format!("at step {s}")),
        o.cache_len.iter().max().copied().unwrap_or(0),
        o.kv_memory.describe(),
        o.tokens_per_s
    ) + &kept
}

pub fn format_recommendation(r: &Recommendation) -> String {
    let mut s = format!("sink-count sweep at a budget of W = {} entries (S sinks inside it), {} tokens\n\n", r.cache, r.tokens);
    s.push_str("policy                                        ppl      ppl after eviction   ×best   cliff\n");
    for row in &r.table {
        s.push_str(&format!(
            "{:<44} {:>8.3}  {:>18}  {:>6}  {}\n",
            row.label,
            row.ppl,
            row.ppl_after_eviction.map_or("-".into(), |p| format!("{p:.3}")),
            row.ratio_to_best.map_or("-".into(), |x| format!("{x:.3}")),
            row.cliff_step.map_or("none".into(), |c| format!("step {c}"))
        ));
        if let (Some([lo, hi]), Some(n)) = (row.ppl_after_eviction_ci, row.scored_steps) {
            s.push_str(&format!("{:<44} {:>8}  {:>18}  (a sample of {n} steps; 95% interval)\n", "", "", format!("{lo:.2}–{hi:.2}")));
        }
    }
    s.push_str(&format!("\nrecommended sinks: {}\n{}\n", r.recommended_sinks.map_or("-".into(), |v| v.to_string()), r.verdict));
    if let Some(m) = &r.kv_memory {
        s.push_str(&format!("KV memory at W = {}: {} per sequence\n", r.cache, m.describe()));
    }
    if let Some(note) = &r.model_windows {
        s.push_str(&format!("{note}\n"));
    }
    s
}

pub fn format_exported(e: &Exported) -> String {
    let mut s = String::new();
    for (name, path, rows) in &e.tables {
        s.push_str(&format!("table  {name:<12} {rows:>7} rows  {}\n", path.display()));
    }
    if !e.figures.is_empty() {
        s.push_str(&format!("figures {} files in {}\n", e.figures.len(), e.figures[0].parent().map_or(String::new(), |p| p.display().to_string())));
    }
    if let Some(i) = &e.index {
        s.push_str(&format!("report {}\n", i.display()));
    }
    s
}

pub fn format_frontier(f: &Frontier) -> String {
    let kv_heads = f.gates.full.iter().flatten().count();
    let mut s = format!(
        "per-head policies over {} tokens: retrieval KV heads keep every key, the others {} sinks + {} recent (W = {}); heads ranked by {}\n\n",
        f.tokens,
        f.sinks,
        f.cache - f.sinks,
        f.cache,
        f.gates.ranked_by_text()
    );
    let stored = match &f.cache_rounding {
        Some(r) => {
            s.push_str(&format!("cache: {} (every cache of the sweep; the heads are ranked on the exact model)\n\n", r.describe()));
            "stored"
        }
        None => "f16",
    };
    s.push_str(&format!("retrieval heads      KV entries   KV memory ({stored})   ppl from step {:<5}  | uniform sink, same memory: W   ppl from step {}  | uniform at equal ppl\n", f.cache, f.cache));
    for r in &f.rows {
        s.push_str(&format!(
            "{:>4} of {:<4} ({:>5.1}%) {:>10}   {:>12.2} MiB   {:>18}   | {:>28}   {:>18}  | {}\n",
            r.retrieval_heads,
            kv_heads,
            100.0 * r.share,
            r.entries,
            r.bytes as f64 / (1 << 20) as f64,
            format!("{:.3}", r.ppl_from_w),
            r.uniform_cache,
            format!("{:.3}", r.uniform_ppl_from_w),
            equal_ppl_memory(r)
        ));
    }
    s
}

/// One line on a rounding cache's KL divergence from the exact cache (`stream --kl`).
pub fn format_divergence(kl: &[f64], first_eviction: Option<usize>) -> String {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let after = first_eviction.filter(|&s| s < kl.len()).map_or(String::new(), |s| format!(" ({:.4} after the first eviction)", mean(&kl[s..])));
    let (worst, at) = kl.iter().enumerate().fold((0.0f64, 0), |(m, i), (j, &x)| if x > m { (x, j) } else { (m, i) });
    format!("KL from the exact cache's next-token distribution: mean {:.4} nats per token{after}; largest {worst:.3} at step {at}", mean(kl))
}

/// Where a rounding cache's error lands: the sinks' rounding error against the rest, and the
/// heads whose attention moved most off the sink positions.
pub fn format_cache_error(e: &CacheErrorByHead) -> String {
    let mut out =
        format!("Where the error lands (positions 0–{} as the sinks, {} queries per head):\n", e.sink_positions.saturating_sub(1), e.queries);
    let (keys, values, keys_abs) = e.sink_error_ratios();
    let times = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.2}×"));
    out.push_str(&format!(
        "  the sinks' rounding error over the other positions': keys {} relative, {} absolute; values {} relative (mean over heads)\n",
        times(keys),
        times(keys_abs),
        times(values)
    ));
    out.push_str("  heads whose attention moved most off the sinks (exact → rounded):\n");
    let err = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.3}"));
    for h in e.most_moved().into_iter().take(5) {
        out.push_str(&format!(
            "    L{:<3} H{:<3} {:.3} → {:.3} ({:+.3})  key error at the sinks {}, elsewhere {}\n",
            h.layer,
            h.head,
            h.sink_mass_exact,
            h.sink_mass_rounded,
            -h.sink_mass_moved(),
            err(h.key_error_sinks),
            err(h.key_error_rest)
        ));
    }
    out
}

/// `recommend --cache-types`: every configuration against the exact full cache (★ the choice,
/// ◆ on the frontier), then the verdict.
pub fn format_cache_frontier(f: &CacheFrontier) -> String {
    let mut out = format!(
        "cache types over {} tokens, scored from step {} ({} steps): the exact full cache's perplexity {:.3}, its memory as f16 {:.2} MiB\n\n",
        f.tokens,
        f.scored_from,
        f.scored_steps,
        f.reference_ppl,
        f.reference_bytes as f64 / (1 << 20) as f64
    );
    let width = f.rows.iter().map(|r| r.format.chars().count()).max().unwrap_or(6).max(6);
    let policy_width = f.rows.iter().map(|r| r.policy.chars().count()).max().unwrap_or(6).max(6);
    out.push_str(&format!(
        "    {:<width$}  {:<policy_width$} {:>9} {:>8}  {:>19} {:>11} {:>7}\n",
        "format", "policy", "ppl", "Δppl", "95% interval", "memory", "share"
    ));
    for (i, r) in f.rows.iter().enumerate() {
        let pct = |x: f64| format!("{:+.1}%", 100.0 * (x - 1.0));
        let mark = match (f.chosen == Some(i), r.on_frontier) {
            (true, _) => "★",
            (false, true) => "◆",
            _ => " ",
        };
        out.push_str(&format!(
            "  {mark} {:<width$}  {:<policy_width$} {:>9.3} {:>8}  {:>19} {:>7.2} MiB {:>6.1}%\n",
            r.format,
            r.policy,
            r.ppl,
            pct(r.ratio),
            r.ratio_ci.map_or("-".into(), |[lo, hi]| format!("{} to {}", pct(lo), pct(hi))),
            r.bytes as f64 / (1 << 20) as f64,
            100.0 * r.memory_share
        ));
    }
    out.push_str(&format!("\n★ chosen · ◆ on the frontier (no other row has less memory and a lower perplexity)\n{}\n", f.verdict));
    out
}
