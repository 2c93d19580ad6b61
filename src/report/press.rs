//! A press run as files: the tables `press` (one row per press and ratio), `press_kept` (one row
//! per kept position of each (layer, KV head)), `press_answer` (one row per answer token, the
//! uncompressed answer under press "none") and `press_heads` (per query head, the share of its
//! attention a press kept), and the Markdown summary.

use super::tables::{Builder, Meta, Table};
use crate::analysis::press::{PressReport, PressRun};

fn meta(r: &PressReport) -> Meta {
    Meta { model: r.model.display_name(), sha256: r.model.sha256.clone().unwrap_or_default(), version: r.sinkscope_version.clone() }
}

struct KeptRow<'a> {
    run: &'a PressRun,
    layer: usize,
    kv_head: usize,
    position: usize,
}

struct HeadRow<'a> {
    run: &'a PressRun,
    layer: usize,
    head: usize,
    kv_head: usize,
    share: f64,
}

struct AnswerRow<'a> {
    run: Option<&'a PressRun>,
    index: usize,
    token: u32,
    nll: f64,
    uncompressed: f64,
}

/// `press`, `press_kept` and `press_answer`.
pub fn tables(r: &PressReport) -> Vec<Table> {
    let m = meta(r);
    let n = r.compressed();
    let base = r.uncompressed_mean_nll();
    let summary = Builder::new(&r.runs, &m)
        .str("press", |p: &PressRun| p.label.clone())
        .str("scorer", |p| p.press.kind.name().to_string())
        .f64("ratio", |p| p.press.ratio)
        .u32("sinks", |p| p.press.sinks)
        .str("budget", |p| p.press.budget.name().to_string())
        .opt_u32("block", |p| p.press.block)
        .bool("rerotate", |p| p.press.rerotate)
        .bool("query_aware", |_| r.query_aware)
        .u32("compressed", |_| n)
        .f64("kept_share", |p| p.kept_share(n))
        .f64("attention_kept", PressRun::mean_attention_kept)
        .f64("answer_nll", PressRun::mean_nll)
        .f64("delta_nll", |p| p.mean_nll() - base)
        .f64("max_token_increase", |p| p.max_increase(&r.uncompressed_nll))
        .f64("seconds", |p| p.seconds)
        .build("press");
    let kept: Vec<KeptRow> = r
        .runs
        .iter()
        .flat_map(|run| {
            run.kept.iter().enumerate().flat_map(move |(layer, heads)| {
                heads.iter().enumerate().flat_map(move |(kv_head, ps)| ps.iter().map(move |&position| KeptRow { run, layer, kv_head, position }))
            })
        })
        .collect();
    let kept = Builder::new(&kept, &m)
        .str("press", |k: &KeptRow| k.run.label.clone())
        .f64("ratio", |k| k.run.press.ratio)
        .u32("layer", |k| k.layer)
        .u32("kv_head", |k| k.kv_head)
        .u32("position", |k| k.position)
        .build("press_kept");
    let mut answers: Vec<AnswerRow> = Vec::new();
    for run in std::iter::once(None).chain(r.runs.iter().map(Some)) {
        let nll = run.map_or(&r.uncompressed_nll, |p| &p.answer_nll);
        answers.extend(r.answer.ids.iter().enumerate().map(|(i, &token)| AnswerRow {
            run,
            index: i,
            token,
            nll: nll[i],
            uncompressed: r.uncompressed_nll[i],
        }));
    }
    let answers = Builder::new(&answers, &m)
        .str("press", |a: &AnswerRow| a.run.map_or("none".to_string(), |p| p.label.clone()))
        .f64("ratio", |a| a.run.map_or(0.0, |p| p.press.ratio))
        .u32("token_index", |a| a.index)
        .u32("token_id", |a| a.token as usize)
        .f64("nll", |a| a.nll)
        .f64("delta_nll", |a| a.nll - a.uncompressed)
        .build("press_answer");
    let heads: Vec<HeadRow> = r
        .runs
        .iter()
        .flat_map(|run| {
            run.attention_kept.iter().enumerate().flat_map(move |(layer, hs)| {
                let group = hs.len() / run.kept[layer].len().max(1);
                hs.iter().enumerate().map(move |(head, &share)| HeadRow { run, layer, head, kv_head: head / group.max(1), share })
            })
        })
        .collect();
    let heads = Builder::new(&heads, &m)
        .str("press", |h: &HeadRow| h.run.label.clone())
        .f64("ratio", |h| h.run.press.ratio)
        .u32("layer", |h| h.layer)
        .u32("head", |h| h.head)
        .u32("kv_head", |h| h.kv_head)
        .u32("keys_kept", |h| h.run.kept[h.layer][h.kv_head].len())
        .f64("attention_kept", |h| h.share)
        .build("press_heads");
    vec![summary, kept, answers, heads]
}

/// press.md: the prompt, then one line per press and ratio.
pub fn markdown(r: &PressReport) -> String {
    let n = r.compressed();
    let mut s = format!("# Compression of one prompt: {}\n\n", r.model.display_name());
    s += &format!(
        "Context {} tokens ({}), question {} ({}), answer {} ({}); {} compressed{}.\n\n",
        r.context.ids.len(),
        r.context.source,
        r.question.ids.len(),
        r.question.source,
        r.answer.ids.len(),
        r.answer.source,
        n,
        if r.query_aware { " — the question with the context (query-aware)" } else { ", the question and answer appended uncompressed" }
    );
    s += &format!("Answer NLL with nothing compressed: {:.4} nats per token.\n\n", r.uncompressed_mean_nll());
    s += "| press | ratio | keys kept | attention kept | answer NLL | Δ NLL | worst token Δ | most starved head (its attention kept) |\n|---|---|---|---|---|---|---|---|\n";
    for p in &r.runs {
        let starved = p.most_starved().map_or("-".to_string(), |(l, h, share)| format!("L{l} H{h} ({:.0}%)", 100.0 * share));
        s += &format!(
            "| {} | {} | {:.1}% | {:.1}% | {:.4} | {:+.4} | {:+.3} | {starved} |\n",
            p.label,
            p.press.ratio,
            100.0 * p.kept_share(n),
            100.0 * p.mean_attention_kept(),
            p.mean_nll(),
            p.mean_nll() - r.uncompressed_mean_nll(),
            p.max_increase(&r.uncompressed_nll)
        );
    }
    s
}
