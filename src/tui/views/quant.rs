//! The activation-quantization panel of the Activations tab (`sinkscope quant`'s quant.json):
//! each setting's perplexity, NLL change at the sink positions and elsewhere, its worst site, and
//! the verdict on calibrating without the first positions.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, kv, DIM, WARN};
use crate::analysis::quant::{QuantReport, SkipVerdict};
use crate::tui::widgets::colour::short;

pub fn render(f: &mut Frame, area: Rect, q: &QuantReport) {
    let mut v = vec![kv(
        "text",
        format!(
            "{} × {} tokens of {} · static scales from {} · sink side = first {} positions",
            q.sequences, q.tokens_per_sequence, q.text_source, q.calibration.source, q.sink_positions
        ),
    )];
    v.push(Line::from(Span::styled(
        format!("{:<30} {:>10} {:>8} {:>8}  {:<20} {:>6}", "setting", "perplexity", "Δ sink", "Δ rest", "worst site (SQNR)", "zeroed"),
        Style::new().fg(DIM).add_modifier(Modifier::BOLD),
    )));
    v.push(Line::from(format!("{:<30} {:>10}", "unquantized", short(q.baseline.ppl))));
    for c in &q.cases {
        let worst =
            c.worst_site().map_or("-".to_string(), |w| format!("L{} {} {:.1} dB", w.layer, w.site.name(), w.sqnr_db.unwrap_or(f64::INFINITY)));
        let zeroed = c.mean_zero_share();
        // Red where the sink positions lose more than half a nat.
        let style = if c.delta_sink > 0.5 { Style::new().fg(Color::LightRed) } else { Style::new() };
        v.push(Line::from(Span::styled(
            format!("{:<30} {:>10} {:>+8.3} {:>+8.3}  {:<20} {:>5.1}%", c.label, short(c.nll.ppl), c.delta_sink, c.delta_rest, worst, 100.0 * zeroed),
            style,
        )));
    }
    for s in &q.skip_comparisons {
        let (text, colour) = match s.verdict {
            SkipVerdict::BreaksSinksOnly => ("breaks exactly the sink positions", WARN),
            SkipVerdict::BreaksSinksAndBeyond => ("breaks the sink positions, and the rest too", WARN),
            SkipVerdict::NotAtSinks => ("no sink-specific damage", DIM),
        };
        v.push(Line::from(vec![
            Span::raw(format!("{} int{} without the first {}: sinks {:+.2} (vs {:+.2}) · ", s.scheme.name(), s.bits, s.skip, s.skipped.0, s.full.0)),
            Span::styled(text, Style::new().fg(colour)),
        ]));
    }
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Activation quantization (sinkscope quant)")), area);
}
