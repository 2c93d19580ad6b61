//! `e`: the current view's numbers as a file in RUN_DIR/exports/ — CSV for tables (one row per
//! fact), JSON for the overview — plus, where the view is a figure, the same figure as `export`
//! draws it (PNG, via `report::figures`), written atomically. Building the bytes is pure; only
//! [`write`] touches the disk.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::state::{App, Tab};
use super::views::heatmap::source;
use crate::error::{Error, Result};
use crate::io::write_atomic;

/// A file to write: its name in exports/ and contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub name: String,
    pub bytes: Vec<u8>,
    /// What it holds, for the status line.
    pub what: String,
}

/// A CSV field, quoted when it must be (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// The current view's export, or why there is none.
pub fn build(app: &App) -> std::result::Result<Export, String> {
    match app.tab {
        Tab::Overview => overview(app),
        Tab::Grid => grid(app),
        Tab::Heatmap => heatmap(app),
        Tab::Tokens => tokens(app),
        Tab::Activations => activations(app),
        Tab::Streaming => streaming(app),
        Tab::Retrieval => retrieval(app),
        Tab::Compression => compression(app),
        Tab::Survey => survey(app),
    }
}

/// The Overview's facts as JSON.
fn overview(app: &App) -> std::result::Result<Export, String> {
    let d = &app.data;
    let run = &app.run;
    let a = run.analysis.as_ref();
    let rec = run.stream.as_ref().and_then(|s| s.recommendation.as_ref());
    let value = serde_json::json!({
        "run": run.dir.display().to_string(),
        "model": run.model(),
        "text": run.text_name(),
        "n_tokens": run.tokens().map_or(0, <[_]>::len),
        "sink_positions": a.map(|a| &a.sink_positions),
        "text_sink_positions": d.text_sinks.iter().map(|s| serde_json::json!({"pos": s.pos, "token": s.token, "heads": s.heads.len(), "mean_alpha": s.mean_alpha})).collect::<Vec<_>>(),
        "sink_score_percent": a.map(|a| &a.sink_score),
        "epsilon": d.epsilon,
        "f_attn": a.map(|a| a.f_attn),
        "top_ablation_heads": a.and_then(|a| a.ablation.as_ref()).map(|ab| &ab.top_heads),
        "massive": a.map(|a| &a.massive),
        "recommended_sinks": rec.and_then(|r| r.recommended_sinks),
        "cache": rec.map(|r| r.cache),
        "verdict": rec.map(|r| &r.verdict),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    Ok(Export { name: "overview.json".into(), bytes, what: "overview".into() })
}

/// α_k per head as CSV.
fn grid(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let d = &app.data;
    s.push_str("layer,head,class");
    for k in 0..d.alpha_k {
        let _ = write!(s, ",alpha_{k}");
    }
    s.push('\n');
    for l in 0..d.n_layers {
        for h in 0..d.n_heads {
            let _ = write!(s, "{l},{h},{}", opt(d.class(l, h)));
            for k in 0..d.alpha_k {
                let _ = write!(s, ",{}", opt(d.alpha(l, h, k)));
            }
            s.push('\n');
        }
    }
    Ok(Export { name: "grid-alpha.csv".into(), bytes: s.into_bytes(), what: format!("α_k per head ({})", d.alpha_source) })
}

/// The selected head's heatmap cells as CSV.
fn heatmap(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let run = &app.run;
    let maps = run.heatmaps.as_ref().ok_or("no heatmaps in this run")?;
    app.heat_dims().ok_or("the heatmaps do not cover the selected head")?;
    let src = source(app, maps);
    s.push_str("layer,head,query_from,query_to,key_from,key_to,attention\n");
    for r in 0..src.rows {
        for c in 0..src.cols {
            if src.masked(r, c) {
                continue;
            }
            let (k0, k1) = if app.heat.focus { (c, c + 1) } else { (maps.edges[c], maps.edges[c + 1]) };
            let _ = writeln!(s, "{},{},{},{},{k0},{k1},{}", app.layer, app.head, maps.edges[r], maps.edges[r + 1], src.get(r, c));
        }
    }
    let kind = if app.heat.focus { "early" } else { "map" };
    Ok(Export {
        name: format!("heatmap-L{}H{}-{kind}.csv", app.layer, app.head),
        bytes: s.into_bytes(),
        what: format!("attention of L{}H{} ([from, to) ranges)", app.layer, app.head),
    })
}

/// Attention received per token as CSV.
fn tokens(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let d = &app.data;
    let run = &app.run;
    let weights = app.tokens.weights.as_ref().ok_or("no per-position attention in this run")?;
    let tokens = run.tokens().unwrap_or(&[]);
    let (scope, measure) = (format!("{:?}", app.tokens.scope).to_lowercase(), format!("{:?}", app.tokens.measure).to_lowercase());
    s.push_str("pos,id,token,scope,layer,head,measure,value,sink\n");
    for (i, t) in tokens.iter().enumerate() {
        let _ = writeln!(
            s,
            "{i},{},{},{scope},{},{},{measure},{},{}",
            t.id,
            field(&t.piece),
            app.layer,
            app.head,
            opt(weights.get(i)),
            d.is_sink.get(i).copied().unwrap_or(false)
        );
    }
    Ok(Export { name: format!("tokens-{scope}-{measure}.csv"), bytes: s.into_bytes(), what: "attention received per token".into() })
}

/// Per-layer magnitudes as CSV.
fn activations(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let d = &app.data;
    if d.layers.is_empty() {
        return Err("no per-layer magnitudes in this run".into());
    }
    s.push_str("layer,max_abs,max_pos,max_dim,median_abs,ratio_to_median,massive_dims\n");
    for l in &d.layers {
        let dims: Vec<String> = l.massive_dims.iter().map(|d| d.to_string()).collect();
        let ratio = if l.median_abs > 0.0 { (l.max_abs / l.median_abs).to_string() } else { String::new() };
        let _ = writeln!(s, "{},{},{},{},{},{ratio},{}", l.layer, l.max_abs, opt(l.max_pos), opt(l.max_dim), l.median_abs, field(&dims.join(" ")));
    }
    Ok(Export { name: "activations.csv".into(), bytes: s.into_bytes(), what: "per-layer max and median |h|".into() })
}

/// The sweep table as CSV.
fn streaming(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let run = &app.run;
    let stream = run.stream.as_ref().ok_or("no stream.json in this run")?;
    let rec = stream.recommendation.as_ref();
    s.push_str("policy,sinks,cache,ppl,ppl_after_eviction,ratio_to_best,first_eviction_step,cliff_step,tokens_per_s,recommended\n");
    for o in &stream.outcomes {
        let row = rec.and_then(|r| r.table.iter().find(|t| t.label == o.label));
        let recommended = rec.is_some_and(|r| r.recommended_sinks.is_some() && row.is_some_and(|t| t.sinks == r.recommended_sinks));
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{recommended}",
            field(&o.label),
            o.policy.pinned(),
            o.policy.cache,
            o.ppl,
            opt(o.ppl_after_eviction),
            opt(row.and_then(|t| t.ratio_to_best)),
            opt(o.first_eviction_step),
            opt(o.cliff_step),
            o.tokens_per_s
        );
    }
    Ok(Export { name: "streaming-sweep.csv".into(), bytes: s.into_bytes(), what: "the sweep table".into() })
}

/// The needle sweep's cells (every policy × length × depth) as CSV.
fn retrieval(app: &App) -> std::result::Result<Export, String> {
    let r = app.run.needle.as_ref().ok_or("no needle.json in this run")?;
    let mut s = String::from(
        "policy,mode,cache,length,depth,trials,rank_accuracy,rank_ci_low,rank_ci_high,exact_accuracy,answer_nll,distance,needle_kept,within_budget\n",
    );
    for c in &r.cells {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            field(&c.policy),
            r.mode(&c.policy),
            opt(c.budget),
            c.length,
            c.depth,
            c.trials,
            c.rank_accuracy,
            c.rank_ci[0],
            c.rank_ci[1],
            c.exact_accuracy,
            c.answer_nll,
            c.distance,
            c.needle_kept,
            c.within_budget
        );
    }
    Ok(Export { name: "retrieval-cells.csv".into(), bytes: s.into_bytes(), what: "the pass-key cells".into() })
}

/// The selected press's attention kept per head, or the task sweep's outcomes, as CSV.
fn compression(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    if let Some(r) = &app.run.press {
        let run = r.runs.get(app.compression.row).ok_or("this press run holds no presses")?;
        s += "press,ratio,layer,head,attention_kept\n";
        for (l, heads) in run.attention_kept.iter().enumerate() {
            for (h, share) in heads.iter().enumerate() {
                let _ = writeln!(s, "{},{},{l},{h},{share}", field(&run.label), run.press.ratio);
            }
        }
        let stem: String = run.label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        return Ok(Export {
            name: format!("press-heads-{stem}-{}.csv", run.press.ratio),
            bytes: s.into_bytes(),
            what: "the attention each head kept".into(),
        });
    }
    let r = app.run.tasks.as_ref().ok_or("no press.json or tasks.json in this run")?;
    s += "arm,task,trial,rank,exact,answer_nll,evidence_kept\n";
    for o in &r.outcomes {
        let p = &r.prompts[o.prompt];
        let _ =
            writeln!(s, "{},{},{},{},{},{},{}", field(&r.arms[o.arm].label), p.task.name(), p.trial, o.rank, o.exact, o.answer_nll, o.evidence_kept);
    }
    Ok(Export { name: "task-trials.csv".into(), bytes: s.into_bytes(), what: "the task outcomes".into() })
}

/// The survey table as CSV.
fn survey(app: &App) -> std::result::Result<Export, String> {
    let mut s = String::new();
    let run = &app.run;
    let survey = run.survey.as_ref().ok_or("this run was not opened through a survey")?;
    s.push_str("model,family,n_params,sink_0,f_attn,max_activation,max_to_median,first_massive_layer,text,cache,tokens,window_ppl,best_ppl,window_ratio,recommended_sinks,streaming_heads\n");
    for r in &survey.rows {
        for w in &r.sweeps {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                field(&r.model),
                field(&r.family),
                r.n_params,
                r.sink_0,
                r.f_attn,
                r.max_activation,
                r.max_to_median,
                opt(r.first_massive_layer),
                field(&w.text),
                w.cache,
                w.tokens,
                opt(w.window_ppl),
                opt(w.best_ppl),
                opt(w.window_ratio),
                opt(w.recommended_sinks),
                opt(w.streaming_heads)
            );
        }
    }
    Ok(Export { name: "survey.csv".into(), bytes: s.into_bytes(), what: "the survey table".into() })
}
/// Writes the current view's export (and its figure, when it has one) into RUN_DIR/exports/;
/// returns the paths written.
pub fn write(app: &App) -> Result<Vec<PathBuf>> {
    let e = build(app).map_err(|why| Error::input(format!("nothing to export here: {why}")))?;
    let dir = app.run.dir.join("exports");
    std::fs::create_dir_all(&dir).map_err(|err| Error::file(&dir, format!("cannot create ({err})")))?;
    let path = dir.join(&e.name);
    write_atomic(&path, &e.bytes)?;
    let mut written = vec![path];
    written.extend(figure(app, &dir)?);
    Ok(written)
}

/// The view as a publication figure, drawn by the same code as `sinkscope export`.
#[cfg(feature = "plots")]
fn figure(app: &App, dir: &std::path::Path) -> Result<Option<PathBuf>> {
    use crate::report::figures;
    use crate::report::plot::{save, Figure, Scale};
    fn drawn<F: Figure>(fig: Option<F>, path: PathBuf) -> Result<Option<PathBuf>> {
        match fig {
            Some(f) => save(&f, &path).map(|_| Some(path)),
            None => Ok(None),
        }
    }
    let (run, l, h) = (&app.run, app.layer, app.head);
    match app.tab {
        Tab::Grid => drawn(figures::alpha_grid(run, app.grid.k), dir.join(format!("alpha-grid-k{}.png", app.grid.k))),
        Tab::Heatmap if app.heat.focus => drawn(figures::head_early(run, l, h), dir.join(format!("heatmap-L{l}-H{h}-first.png"))),
        Tab::Heatmap if app.heat.log => drawn(figures::head_heatmap(run, l, h, Scale::Log), dir.join(format!("heatmap-L{l}-H{h}-log.png"))),
        Tab::Heatmap => drawn(figures::head_heatmap(run, l, h, Scale::Linear), dir.join(format!("heatmap-L{l}-H{h}-linear.png"))),
        Tab::Activations => drawn(figures::layer_magnitudes(run), dir.join("layer-magnitudes.png")),
        Tab::Streaming => drawn(figures::ppl_curves(run), dir.join("ppl-curves.png")),
        Tab::Retrieval => {
            let Some(r) = &run.needle else { return Ok(None) };
            match crate::report::needle::heatmaps(r).into_iter().nth(app.retrieval.policy) {
                Some((stem, fig)) => save(&fig, &dir.join(format!("{stem}.png"))).map(|_| Some(dir.join(format!("{stem}.png")))),
                None => Ok(None),
            }
        }
        Tab::Overview | Tab::Tokens | Tab::Compression | Tab::Survey => Ok(None),
    }
}

#[cfg(not(feature = "plots"))]
fn figure(_: &App, _: &std::path::Path) -> Result<Option<PathBuf>> {
    Ok(None)
}

/// The status-line message for an export attempt.
pub fn status_message(app: &App) -> String {
    let what = build(app).map(|e| e.what).unwrap_or_default();
    match write(app) {
        Ok(paths) => format!("exported {what} → {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")),
        Err(e) => format!("export failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field(" lead"), "\" lead\"");
    }
}
