//! Draws one frame from `&App`: the tab bar, the current view, the status line, and the help
//! overlay on top. Nothing here changes state.

use ratatui::style::{Color, Modifier, Style};
use ratatui::Frame;

use super::layout::{self, TAB_PREFIX};
use super::state::{App, Tab};
use super::views;
use super::widgets::put;

pub fn render(f: &mut Frame, app: &App) {
    let size = f.area();
    let a = layout::areas(size.width, size.height);
    tabs(f, a.tabs, app);
    match app.tab {
        Tab::Overview => views::overview::render(f, a.body, app),
        Tab::Grid => views::grid::render(f, a.body, app),
        Tab::Heatmap => views::heatmap::render(f, a.body, app),
        Tab::Tokens => views::tokens::render(f, a.body, app),
        Tab::Activations => views::activations::render(f, a.body, app),
        Tab::Streaming => views::streaming::render(f, a.body, app),
        Tab::Retrieval => views::retrieval::render(f, a.body, app),
        Tab::Compression => views::compression::render(f, a.body, app),
        Tab::Survey => views::survey::render(f, a.body, app),
    }
    status(f, a.status, app);
    if app.help {
        views::help::render(f, a.body);
    }
}

fn tabs(f: &mut Frame, area: ratatui::layout::Rect, app: &App) {
    let buf = f.buffer_mut();
    if area.height == 0 {
        return;
    }
    put(buf, area.x, area.y, TAB_PREFIX, area.width as usize, Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD));
    let mut end = area.x;
    for (t, (x0, x1)) in layout::tab_ranges(area) {
        let style =
            if t == app.tab { Style::new().fg(Color::Black).bg(Color::White).add_modifier(Modifier::BOLD) } else { Style::new().fg(Color::Gray) };
        put(buf, x0, area.y, layout::tab_label(t), (x1 - x0) as usize, style);
        end = x1 + 1;
    }
    // The model and run on the right, when there is room.
    let who = format!(" {} · {} ", app.run.model_name(), app.run.id());
    let w = who.chars().count() as u16;
    if end + w <= area.right() {
        put(buf, area.right() - w, area.y, who, w as usize, Style::new().fg(views::DIM));
    }
}

/// Hints for the current view (the full list is behind `?`).
fn hints(tab: Tab) -> &'static str {
    match tab {
        Tab::Overview => "↑↓ scroll",
        Tab::Grid => "arrows select · Enter open · , . k · c colour",
        Tab::Heatmap => "arrows cursor · +/- zoom · l log · f focus · [ ] head · { } layer",
        Tab::Tokens => "←→↑↓ token · a scope · m measure · [ ] head · { } layer",
        Tab::Activations => "↑↓ layer",
        Tab::Streaming => "↑↓ policy · w window",
        Tab::Retrieval => "↑↓ policy",
        Tab::Compression => "↑↓ press or arm",
        Tab::Survey => "↑↓ model · Enter open its run",
    }
}

fn status(f: &mut Frame, area: ratatui::layout::Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let (text, style) = match &app.status {
        Some(s) => (format!(" {s}"), Style::new().fg(Color::Black).bg(Color::LightGreen)),
        None => (format!(" {} · e export · ? help · q quit", hints(app.tab)), Style::new().fg(views::DIM)),
    };
    put(f.buffer_mut(), area.x, area.y, text, area.width as usize, style);
}
