//! A pass-key sweep as files: the tables `needle` (one row per policy × length × depth) and
//! `needle_trials` (one per prompt), the depth × length heatmap of each policy, accuracy against
//! the needle's distance from the answer, and the Markdown summary.

use super::tables::{Builder, Meta, Table};
use crate::analysis::needle::{budget_split, NeedleCell, NeedleHeads, NeedleReport, NeedleTrial};

fn meta(r: &NeedleReport) -> Meta {
    Meta { model: r.model.display_name(), sha256: r.model.sha256.clone().unwrap_or_default(), version: r.sinkscope_version.clone() }
}

/// A policy label as a file name: lower-case letters and digits, runs of the rest as one '-'.
pub fn slug(label: &str) -> String {
    let s: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

/// An accuracy's colour, red (0) through yellow to green (1): the heatmaps' and the dashboard's.
pub fn accuracy_rgb(v: f64) -> (u8, u8, u8) {
    let v = v.clamp(0.0, 1.0);
    let (r, g) = if v < 0.5 { (220.0, 60.0 + 360.0 * v) } else { (220.0 - 340.0 * (v - 0.5), 240.0 - 60.0 * (v - 0.5)) };
    (r as u8, g as u8, 80)
}

/// `needle` and `needle_trials`.
pub fn tables(r: &NeedleReport) -> Vec<Table> {
    let m = meta(r);
    let s = &r.settings;
    let cells = Builder::new(&r.cells, &m)
        .str("policy", |c: &NeedleCell| c.policy.clone())
        .opt_u32("cache", |c| c.budget)
        .str("mode", |c| r.mode(&c.policy).to_string())
        .str("filler", |_| s.filler.clone())
        .u32("length", |c| c.length)
        .f64("depth", |c| c.depth)
        .f64("depth_actual", |c| c.depth_actual)
        .u32("trials", |c| c.trials)
        .u32("candidates", |_| s.distractors + 1)
        .f64("rank_accuracy", |c| c.rank_accuracy)
        .f64("rank_ci_low", |c| c.rank_ci[0])
        .f64("rank_ci_high", |c| c.rank_ci[1])
        .f64("exact_accuracy", |c| c.exact_accuracy)
        .f64("exact_ci_low", |c| c.exact_ci[0])
        .f64("exact_ci_high", |c| c.exact_ci[1])
        .f64("mean_rank", |c| c.mean_rank)
        .f64("answer_nll", |c| c.answer_nll)
        .f64("distance", |c| c.distance)
        .f64("needle_kept", |c| c.needle_kept)
        .bool("within_budget", |c| c.within_budget)
        .opt_f64("kl_from_exact", |c| c.kl_from_exact)
        .build("needle");
    let trials = Builder::new(&r.trials, &m)
        .str("policy", |t: &NeedleTrial| t.policy.clone())
        .str("mode", |t| r.mode(&t.policy).to_string())
        .u32("length", |t| t.length)
        .f64("depth", |t| t.depth)
        .f64("depth_actual", |t| t.depth_actual)
        .u32("trial", |t| t.trial)
        .u32("key", |t| t.key as usize)
        .f64("answer_nll", |t| t.answer_nll)
        .u32("rank", |t| t.rank)
        .u32("candidates", |t| t.candidates)
        .bool("exact", |t| t.exact)
        .opt_u32("first_wrong", |t| t.first_wrong)
        .str("predicted", |t| t.predicted.clone().unwrap_or_default())
        .u32("distance", |t| t.distance)
        .f64("needle_kept", |t| t.needle_kept)
        .opt_u32("cache", |t| t.budget)
        .opt_f64("kl_from_exact", |t| t.kl_from_exact)
        .build("needle_trials");
    let mut out = vec![cells, trials];
    out.extend(r.heads.as_ref().map(|h| heads_table(h, &m)));
    out
}

/// One row per KV head (`head` null) and, with grouped queries, per query head: the answer's
/// ΔNLL when it loses the needle, and for KV heads the attention outside S + R and which heads
/// each evidence keeps whole.
struct HeadRow {
    layer: usize,
    kv_head: usize,
    head: Option<usize>,
    delta_nll: f64,
    outside: Option<f64>,
    whole_by_needle: Option<bool>,
    whole_by_outside: Option<bool>,
}

fn heads_table(h: &NeedleHeads, m: &Meta) -> Table {
    let mut rows = Vec::new();
    for (l, kvs) in h.effects.kv.iter().enumerate() {
        for (kv, &d) in kvs.iter().enumerate() {
            rows.push(HeadRow {
                layer: l,
                kv_head: kv,
                head: None,
                delta_nll: d,
                outside: h.outside.get(l).and_then(|o| o.get(kv)).copied(),
                whole_by_needle: h.full_by_needle.get(l).and_then(|f| f.get(kv)).copied(),
                whole_by_outside: h.full_by_outside.get(l).and_then(|f| f.get(kv)).copied(),
            });
        }
        let queries = h.effects.query.get(l).map_or(0, Vec::len);
        if queries > kvs.len() {
            let group = queries / kvs.len().max(1);
            for (q, &d) in h.effects.query[l].iter().enumerate() {
                rows.push(HeadRow {
                    layer: l,
                    kv_head: q / group,
                    head: Some(q),
                    delta_nll: d,
                    outside: None,
                    whole_by_needle: None,
                    whole_by_outside: None,
                });
            }
        }
    }
    let flag = |b: Option<bool>| b.map_or(String::new(), |b| if b { "yes".into() } else { "no".into() });
    Builder::new(&rows, m)
        .u32("layer", |r: &HeadRow| r.layer)
        .u32("kv_head", |r| r.kv_head)
        .opt_u32("head", |r| r.head)
        .f64("delta_nll", |r| r.delta_nll)
        .opt_f64("outside_mass", |r| r.outside)
        .str("whole_by_needle", |r| flag(r.whole_by_needle))
        .str("whole_by_outside", |r| flag(r.whole_by_outside))
        .u32("prompts", |_| h.effects.prompts)
        .u32("prompt_length", |_| h.length)
        .build("needle_heads")
}

/// The heads section of the Markdown summary.
fn heads_markdown(h: &NeedleHeads) -> String {
    let mut md = format!(
        "\n### Which heads retrieve\n\nEach KV head (all its query heads together) loses the needle's keys at the answer's queries only, the rest of the model unchanged; the answer's ΔNLL (nats, summed over its tokens) averaged over {} calibration prompts of {} tokens (keys drawn apart from the sweep's; dense answer NLL {:.2}). Beside it, the rank of the same KV head by the attention it pays outside S={} + {} recent keys over {} tokens — what `heads` ranks by.\n\n| KV head | ΔNLL | rank by attention outside |\n|---|---|---|\n",
        h.effects.prompts, h.length, h.effects.answer_nll, h.sinks, h.recent, h.outside_tokens
    );
    for (l, kv, d, rank) in h.leaders(10) {
        md += &format!("| L{l}.kv{kv} | {d:+.3} | {rank} |\n");
    }
    md += &format!(
        "\nOf the {} KV heads ({:.0}%) each evidence keeps whole, {} are the same; Spearman's ρ between the two over every KV head: {}.\n",
        h.kept(),
        h.share * 100.0,
        h.overlap,
        h.rank_correlation.map_or("— (one evidence is constant)".into(), |r| format!("{r:.2}"))
    );
    md
}

/// The Markdown summary: per policy, accuracy with the needle within and beyond the budget, and
/// its depth × length grid of rank-1 accuracy.
pub fn markdown(r: &NeedleReport) -> String {
    let s = &r.settings;
    let mut md = format!(
        "## Pass-key retrieval — {}\n\n{} trials per cell, the key ranked among {} candidates (chance {:.0}%); filler: {}. Streamed: the prompt, question last, streams through the bounded cache, so what a policy evicted before the question arrived is gone; question known (score-based rules, labels ending \"question known\"): the prompt is prefilled whole and compressed once by its own queries' attention, the question's included (SnapKV's setting).\n\n",
        r.model.display_name(),
        s.trials,
        s.distractors + 1,
        100.0 / (s.distractors + 1) as f64,
        s.filler
    );
    md += "| policy | within budget: trials, ranked first, greedy exact | beyond budget: trials, ranked first, greedy exact |\n|---|---|---|\n";
    let side =
        |v: Option<(usize, f64, f64)>| v.map_or("—".to_string(), |(n, rank, exact)| format!("{n}, {:.0}%, {:.0}%", rank * 100.0, exact * 100.0));
    for p in &r.policies {
        let split = budget_split(&r.cells, &p.label);
        md += &format!("| {} | {} | {} |\n", p.label, side(split.within), side(split.beyond));
    }
    for p in &r.policies {
        md += &format!("\n### {}\n\nRank-1 accuracy (%) by depth (rows) and length (columns):\n\n| depth |", p.label);
        for l in &s.lengths {
            md += &format!(" {l} |");
        }
        md += "\n|---|";
        md += &"---|".repeat(s.lengths.len());
        md += "\n";
        for &d in &s.depths {
            md += &format!("| {d:.2} |");
            for &l in &s.lengths {
                let cell = r.cells.iter().find(|c| c.policy == p.label && c.length == l && c.depth == d);
                md += &cell.map_or(" — |".to_string(), |c| format!(" {:.0} |", c.rank_accuracy * 100.0));
            }
            md += "\n";
        }
    }
    if let Some(h) = &r.heads {
        md += &heads_markdown(h);
    }
    md
}

#[cfg(feature = "plots")]
pub use figures::{accuracy_by_distance, heads_grid, heatmaps};

#[cfg(feature = "plots")]
mod figures {
    use plotters::coord::Shift;
    use plotters::prelude::*;

    use super::slug;
    use crate::analysis::needle::NeedleReport;
    use crate::kv::retrieval::Compression;
    use crate::report::charts::LineChart;
    use crate::report::plot::{header, Figure, HeadGrid, FONT};

    /// One policy's depth × length grid of rank-1 accuracy, the classic needle-in-a-haystack plot.
    pub struct NeedleHeatmap {
        pub title: String,
        pub subtitle: String,
        pub lengths: Vec<usize>,
        pub depths: Vec<f64>,
        /// [depth][length]; NaN where no cell was run.
        pub values: Vec<Vec<f64>>,
    }

    fn red_to_green(v: f64) -> RGBColor {
        let (r, g, b) = super::accuracy_rgb(v);
        RGBColor(r, g, b)
    }

    impl Figure for NeedleHeatmap {
        fn size(&self) -> (u32, u32) {
            ((320 + self.lengths.len() as u32 * 110).clamp(760, 1400), (200 + self.depths.len() as u32 * 40).clamp(420, 1000))
        }

        fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
            root.fill(&WHITE)?;
            let body = header(root, &self.title, &self.subtitle)?;
            let (cols, rows) = (self.lengths.len(), self.depths.len());
            let mut chart = ChartBuilder::on(&body)
                .margin(14)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..cols as f64, rows as f64..0f64)?;
            let lengths = self.lengths.clone();
            let depths = self.depths.clone();
            chart
                .configure_mesh()
                .disable_mesh()
                .x_labels(cols + 1)
                .y_labels(rows + 1)
                .x_label_formatter(&|v| lengths.get(*v as usize).filter(|_| v.fract() == 0.0).map_or(String::new(), |l| format!("{l}")))
                .y_label_formatter(&|v| depths.get(*v as usize).filter(|_| v.fract() == 0.0).map_or(String::new(), |d| format!("{d:.2}")))
                .x_label_offset(if cols > 0 { (body.dim_in_pixel().0 as i32 - 100) / cols as i32 / 2 } else { 0 })
                .y_label_offset(if rows > 0 { (body.dim_in_pixel().1 as i32 - 80) / rows as i32 / 2 } else { 0 })
                .x_desc("prompt length (tokens)")
                .y_desc("needle depth")
                .label_style((FONT, 14))
                .axis_desc_style((FONT, 16))
                .draw()?;
            chart.draw_series(self.values.iter().enumerate().flat_map(|(r, row)| {
                row.iter().enumerate().map(move |(c, &v)| {
                    let color = if v.is_finite() { red_to_green(v) } else { RGBColor(235, 235, 235) };
                    Rectangle::new([(c as f64, r as f64), (c as f64 + 1.0, r as f64 + 1.0)], color.filled())
                })
            }))?;
            chart.draw_series(self.values.iter().enumerate().flat_map(|(r, row)| {
                row.iter().enumerate().filter(|(_, v)| v.is_finite()).map(move |(c, &v)| {
                    Text::new(format!("{:.0}%", v * 100.0), (c as f64 + 0.4, r as f64 + 0.35), (FONT, 14).into_font().color(&BLACK))
                })
            }))?;
            Ok(())
        }
    }

    /// (file stem, heatmap) per policy.
    pub fn heatmaps(r: &NeedleReport) -> Vec<(String, NeedleHeatmap)> {
        let s = &r.settings;
        r.policies
            .iter()
            .map(|p| {
                let values = s
                    .depths
                    .iter()
                    .map(|&d| {
                        s.lengths
                            .iter()
                            .map(|&l| {
                                r.cells.iter().find(|c| c.policy == p.label && c.length == l && c.depth == d).map_or(f64::NAN, |c| c.rank_accuracy)
                            })
                            .collect()
                    })
                    .collect();
                let fig = NeedleHeatmap {
                    title: format!("pass-key retrieval — {}: {}", r.model.display_name(), p.label),
                    subtitle: format!(
                        "share of {} trials whose key ranks first among {} candidates (chance {:.0}%); {}",
                        s.trials,
                        s.distractors + 1,
                        100.0 / (s.distractors + 1) as f64,
                        match p.compression {
                            Compression::Streamed => "the prompt streams through the cache, question last",
                            Compression::QuestionKnown => "the prompt prefilled whole, then compressed with the question known",
                        }
                    ),
                    lengths: s.lengths.clone(),
                    depths: s.depths.clone(),
                    values,
                };
                (format!("needle-{}", slug(&p.label)), fig)
            })
            .collect()
    }

    /// Each query head's ΔNLL when it alone loses the needle at the answer, layers × heads.
    pub fn heads_grid(r: &NeedleReport) -> Option<HeadGrid> {
        let h = r.heads.as_ref()?;
        Some(HeadGrid {
            title: format!("which heads retrieve — {}: answer ΔNLL when one head loses the needle", r.model.display_name()),
            subtitle: format!(
                "nats, the answer's tokens summed; the needle's keys hidden from that head at the answer's queries only; mean of {} prompts of {} tokens",
                h.effects.prompts, h.length
            ),
            values: h.effects.query.clone(),
            value_label: "ΔNLL (nats)".into(),
        })
    }

    /// Rank-1 accuracy against the needle's distance from the answer, one line per policy, the
    /// budgets marked.
    pub fn accuracy_by_distance(r: &NeedleReport) -> LineChart {
        let series = r
            .policies
            .iter()
            .map(|p| {
                let mut pts: Vec<(f64, f64)> = r.cells.iter().filter(|c| c.policy == p.label).map(|c| (c.distance, c.rank_accuracy)).collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (p.label.clone(), pts)
            })
            .collect();
        let mut budgets: Vec<usize> = r.policies.iter().filter_map(|p| p.budget).collect();
        budgets.sort_unstable();
        budgets.dedup();
        LineChart {
            title: format!("pass-key retrieval — {}: accuracy by the needle's distance", r.model.display_name()),
            subtitle: format!("share of trials whose key ranks first among {} candidates, per length × depth cell", r.settings.distractors + 1),
            x_desc: "tokens from the needle to the answer".into(),
            y_desc: "ranked first".into(),
            series,
            log_y: false,
            markers: budgets.into_iter().map(|w| (w as f64, format!("W = {w}"))).collect(),
            points: true,
            legend_bottom: false,
        }
    }
}
