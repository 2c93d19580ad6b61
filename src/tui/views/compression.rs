//! Compression: `sinkscope press` — per press the keys and attention it kept and the answer's NLL
//! change, the selected press's layer × head grid of the attention each head kept (red: starved),
//! with the heads `needle --retrieval-heads` found retrieving marked when the run has them, and
//! the most starved heads; or `sinkscope tasks` — per arm each task's ranked-first / exact shares.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, fit, kv, missing, DIM};
use crate::analysis::needle::NeedleHeads;
use crate::analysis::press::{PressReport, PressRun};
use crate::analysis::tasks::TasksReport;
use crate::report::needle::accuracy_rgb;
use crate::tui::layout;
use crate::tui::state::App;
use crate::tui::widgets::put;

/// Rows the view selects among: the press runs, or the task arms.
pub fn rows(app: &App) -> usize {
    match (&app.run.press, &app.run.tasks) {
        (Some(p), _) => p.runs.len(),
        (None, Some(t)) => t.arms.len(),
        (None, None) => 0,
    }
}

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let selected = app.compression.row.min(rows(app).saturating_sub(1));
    match (&app.run.press, &app.run.tasks) {
        (Some(p), _) => press(f, area, p, app.run.needle.as_ref().and_then(|n| n.heads.as_ref()), selected),
        (None, Some(t)) => tasks(f, area, t, selected),
        (None, None) => missing(
            f,
            area,
            "Compression",
            "No press.json or tasks.json in this run: no compression results to show.",
            "sinkscope press -m MODEL -f TEXT --question Q --answer A --press snapkv,knorm --ratio 0.5 -o RUN_DIR",
        ),
    }
}

fn colour(share: f64) -> Color {
    let (r, g, b) = accuracy_rgb(share);
    Color::Rgb(r, g, b)
}

/// Whether query head `h` of layer `l` shares a KV head the needle's evidence keeps whole.
fn retrieves(heads: Option<&NeedleHeads>, l: usize, h: usize, group: usize) -> bool {
    heads.and_then(|x| x.full_by_needle.get(l)).and_then(|r| r.get(h / group.max(1))).copied().unwrap_or(false)
}

fn press(f: &mut Frame, area: Rect, r: &PressReport, heads: Option<&NeedleHeads>, selected: usize) {
    let n_rows = (r.runs.len() as u16 + 4).min(area.height / 2).max(5);
    let [top, bottom] = Layout::vertical([Constraint::Length(n_rows), Constraint::Min(0)]).areas(area);
    let [grid_area, list_area] = Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(bottom);
    press_table(f, top, r, selected);
    let Some(run) = r.runs.get(selected) else { return };
    grid(f, grid_area, r, run, heads);
    starved(f, list_area, r, run, heads);
}

fn press_table(f: &mut Frame, area: Rect, r: &PressReport, selected: usize) {
    let n = r.compressed();
    let base = r.uncompressed_mean_nll();
    f.render_widget(
        block(format!(
            "Presses · {n} positions compressed{} · answer NLL uncompressed {base:.3} · ↑/↓ select",
            if r.query_aware { " (query-aware)" } else { "" }
        )),
        area,
    );
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let w = inner.width as usize;
    let label_w = w.saturating_sub(2 + 6 + 8 + 10 + 9 + 16).clamp(8, 40);
    let header = format!("  {:<label_w$} {:>5} {:>7} {:>9} {:>8} {:>15}", "press", "ratio", "keys", "attention", "Δ NLL", "most starved");
    put(buf, inner.x, inner.y, header, w, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let visible = inner.height.saturating_sub(1) as usize;
    let first = layout::scroll(selected, r.runs.len(), visible);
    for (i, p) in r.runs.iter().enumerate().skip(first).take(visible) {
        let starved = p.most_starved().map_or("-".to_string(), |(l, h, s)| format!("L{l} H{h} {:.0}%", 100.0 * s));
        let line = format!(
            "{} {:<label_w$} {:>5} {:>6.1}% {:>8.1}% {:>+8.3} {:>15}",
            if i == selected { "▶" } else { " " },
            fit(&p.label, label_w),
            p.press.ratio,
            100.0 * p.kept_share(n),
            100.0 * p.mean_attention_kept(),
            p.mean_nll() - base,
            starved
        );
        let style = if i == selected { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
        put(buf, inner.x, inner.y + 1 + (i - first) as u16, line, w, style);
    }
}

/// Layer × query head: the share of its attention the head kept, "●" where it retrieves.
fn grid(f: &mut Frame, area: Rect, r: &PressReport, run: &PressRun, heads: Option<&NeedleHeads>) {
    let mark = if heads.is_some() { " · ● retrieves (needle)" } else { "" };
    f.render_widget(block(format!("{} · attention kept per head, layer × head{mark}", fit(&run.label, 40))), area);
    let inner = layout::inner(area);
    if inner.height < 2 || inner.width < 8 {
        return;
    }
    let group = r.model.config.n_heads / r.model.config.n_kv_heads.max(1);
    let buf = f.buffer_mut();
    let cell = 5usize;
    let n_heads = run.attention_kept.first().map_or(0, Vec::len);
    let header: String = std::iter::once(format!("{:>4}", "")).chain((0..n_heads).map(|h| format!("{:>cell$}", format!("H{h}")))).collect();
    put(buf, inner.x, inner.y, header, inner.width as usize, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    for (l, layer) in run.attention_kept.iter().enumerate().take(inner.height.saturating_sub(1) as usize) {
        let y = inner.y + 1 + l as u16;
        put(buf, inner.x, y, format!("{:>4}", format!("L{l}")), 4, Style::new().fg(DIM));
        for (h, &share) in layer.iter().enumerate() {
            let x = inner.x + 4 + (h * cell) as u16;
            if x + cell as u16 > inner.right() {
                break;
            }
            let dot = if retrieves(heads, l, h, group) { "●" } else { " " };
            let text = format!("{:>3.0}{dot}", 100.0 * share);
            put(buf, x + 1, y, text, cell - 1, Style::new().fg(Color::Black).bg(colour(share)));
        }
    }
}

/// The heads left the least of what they read, and how many of them retrieve.
fn starved(f: &mut Frame, area: Rect, r: &PressReport, run: &PressRun, heads: Option<&NeedleHeads>) {
    let group = r.model.config.n_heads / r.model.config.n_kv_heads.max(1);
    let mut all: Vec<(usize, usize, f64)> =
        run.attention_kept.iter().enumerate().flat_map(|(l, hs)| hs.iter().enumerate().map(move |(h, &s)| (l, h, s))).collect();
    all.sort_by(|a, b| a.2.total_cmp(&b.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    let take = area.height.saturating_sub(5).max(1) as usize;
    let mut v = vec![Line::from(Span::styled(format!("{:<8} {:>8}  {}", "head", "kept", "retrieves"), Style::new().fg(DIM)))];
    for &(l, h, s) in all.iter().take(take) {
        let effect = heads.and_then(|x| x.effects.query.get(l)).and_then(|r| r.get(h)).map_or(String::new(), |d| format!("ΔNLL {d:+.2}"));
        let mark = if retrieves(heads, l, h, group) { "● " } else { "" };
        v.push(Line::from(format!("{:<8} {:>7.1}%  {mark}{effect}", format!("L{l} H{h}"), 100.0 * s)));
    }
    if let Some(x) = heads {
        let worst: Vec<_> = all.iter().take(x.kept() * group).collect();
        let both = worst.iter().filter(|&&&(l, h, _)| retrieves(heads, l, h, group)).count();
        v.push(Line::from(""));
        v.push(kv("starved ∩ retrieving", format!("{both} of the {} most starved query heads share a retrieving KV head", worst.len())));
    } else {
        v.push(Line::from(""));
        v.push(Line::from(Span::styled("run needle --retrieval-heads into this directory to mark the heads that retrieve", Style::new().fg(DIM))));
    }
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Most starved heads")), area);
}

fn tasks(f: &mut Frame, area: Rect, r: &TasksReport, selected: usize) {
    let names = r.tasks();
    f.render_widget(
        block(format!(
            "Tasks · {} prompts of {} tokens per task · truth among {} · ranked first / exact · ↑/↓ select",
            r.spec.trials,
            r.spec.length,
            r.spec.distractors + 1
        )),
        area,
    );
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let w = inner.width as usize;
    let label_w = r.arms.iter().map(|a| a.label.chars().count()).max().unwrap_or(4).clamp(4, 36);
    let mut header = format!("  {:<label_w$} {:>5}", "arm", "ratio");
    for t in &names {
        header += &format!(" {:>11}", t.name());
    }
    put(buf, inner.x, inner.y, header, w, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let visible = inner.height.saturating_sub(1) as usize;
    let first = layout::scroll(selected, r.arms.len(), visible);
    for (i, arm) in r.arms.iter().enumerate().skip(first).take(visible) {
        let y = inner.y + 1 + (i - first) as u16;
        let style = if i == selected { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
        let ratio = arm.press.map_or("-".to_string(), |p| p.ratio.to_string());
        put(buf, inner.x, y, format!("{} {:<label_w$} {ratio:>5}", if i == selected { "▶" } else { " " }, fit(&arm.label, label_w)), w, style);
        for (c, &t) in names.iter().enumerate() {
            let x = inner.x + (2 + label_w + 6 + c * 12) as u16;
            if x + 12 > inner.right() {
                break;
            }
            if let Some(cell) = r.cell(i, t) {
                let text = format!("{:>4.0}%/{:>3.0}% ", 100.0 * cell.first, 100.0 * cell.exact);
                put(buf, x + 1, y, text, 11, Style::new().fg(Color::Black).bg(colour(cell.first)));
            }
        }
    }
}
