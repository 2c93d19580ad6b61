//! The dashboard's only way to change: [`update`] applies one [`Action`] to an [`App`]. No
//! terminal and no file I/O here (export is returned as an [`Effect`] for the event loop to carry
//! out), so every behaviour is unit-testable.

use super::action::{Action, Effect};
use super::layout;
use super::state::{step, App, Tab};

/// Applies one action. The only place the state changes.
pub fn update(app: &mut App, action: Action) -> Effect {
    // Keep the status line until the next key, so an export's path stays readable.
    if !matches!(action, Action::Resize { .. } | Action::Status(_)) {
        app.status = None;
    }
    if app.help && !matches!(action, Action::ToggleHelp | Action::Back | Action::Quit | Action::Resize { .. } | Action::Status(_)) {
        return Effect::None;
    }
    match action {
        Action::Quit => app.quit = true,
        Action::Back => {
            if app.help {
                app.help = false;
            } else {
                app.quit = true;
            }
        }
        Action::ToggleHelp => app.help = !app.help,
        Action::NextTab => app.tab = app.tab.step(1),
        Action::PrevTab => app.tab = app.tab.step(-1),
        Action::GoTab(t) => app.tab = t,
        Action::Move { dx, dy } => move_in_view(app, dx, dy),
        Action::Enter => {
            if app.tab == Tab::Grid {
                app.tab = Tab::Heatmap;
            }
            if app.tab == Tab::Survey {
                if let (Some(s), Some(dir)) = (&app.run.survey, &app.run.survey_dir) {
                    if let Some(row) = s.rows.get(app.survey.row) {
                        return Effect::OpenSurveyRun(dir.join(&row.run_dir));
                    }
                }
            }
        }
        Action::ZoomIn => zoom(app, 1),
        Action::ZoomOut => zoom(app, -1),
        Action::ZoomReset => app.heat.zoom = 0,
        Action::ToggleLog => app.heat.log = !app.heat.log,
        Action::ToggleFocus => toggle_focus(app),
        Action::NextK => app.grid.k = step(app.grid.k, 1, app.data.alpha_k),
        Action::PrevK => app.grid.k = step(app.grid.k, -1, app.data.alpha_k),
        Action::ToggleGridColour => app.grid.colour = app.grid.colour.toggled(),
        Action::NextHead => app.select_head(app.layer, app.head + 1),
        Action::PrevHead => app.select_head(app.layer, app.head.saturating_sub(1)),
        Action::NextLayer => app.select_head(app.layer + 1, app.head),
        Action::PrevLayer => app.select_head(app.layer.saturating_sub(1), app.head),
        Action::CycleScope => app.tokens.next_scope(&app.data, (app.layer, app.head)),
        Action::ToggleMeasure => app.tokens.toggle_measure(&app.data, (app.layer, app.head)),
        Action::CycleWindow => app.streaming.next_window(app.run.stream.as_ref()),
        Action::Export => return Effect::Export,
        Action::Click { x, y } => click(app, x, y),
        Action::Scroll(by) => {
            if app.tab == Tab::Heatmap {
                zoom(app, -(by.signum() as i8));
            } else {
                move_in_view(app, 0, by);
            }
        }
        Action::Resize { width, height } => {
            app.width = width;
            app.height = height;
        }
        Action::Status(s) => app.status = Some(s),
    }
    Effect::None
}

fn move_in_view(app: &mut App, dx: isize, dy: isize) {
    match app.tab {
        Tab::Overview => app.overview.move_by(dy),
        Tab::Grid => {
            let (l, h) = (step(app.layer, dy, app.data.n_layers), step(app.head, dx, app.data.n_heads));
            app.select_head(l, h);
        }
        Tab::Heatmap => {
            if let Some((rows, cols)) = app.heat_dims() {
                app.heat.row = step(app.heat.row, dy, rows);
                app.heat.col = step(app.heat.col, dx, cols);
            }
        }
        Tab::Tokens => {
            let width = layout::token_text_width(layout::areas(app.width, app.height).body);
            app.tokens.move_by(&app.data, width, dx, dy);
        }
        Tab::Activations => app.activations.move_by(dy, app.data.layers.len()),
        Tab::Streaming => app.streaming.move_by(dy),
        Tab::Retrieval => app.retrieval.move_by(dy, app.run.needle.as_ref().map_or(0, |n| n.policies.len())),
        Tab::Compression => app.compression.move_by(dy, crate::tui::views::compression::rows(app)),
        Tab::Survey => app.survey.move_by(dy, app.run.survey.as_ref().map_or(0, |s| s.rows.len())),
    }
}

fn zoom(app: &mut App, by: i8) {
    if app.tab == Tab::Heatmap {
        app.heat.zoom_by(by);
    }
}

/// Switches between the full map and the first-K-keys map, keeping the cursor on the same keys.
fn toggle_focus(app: &mut App) {
    let Some(maps) = &app.run.heatmaps else { return };
    if app.heat.focus {
        let key = app.heat.col;
        app.heat.focus = false;
        app.heat.col = maps.bin_of(key);
    } else {
        let key = app.col_key(app.heat.col);
        app.heat.focus = true;
        app.heat.col = key.min(maps.first_keys.saturating_sub(1));
    }
    app.clamp_heat();
}

fn click(app: &mut App, x: u16, y: u16) {
    let areas = layout::areas(app.width, app.height);
    if let Some(tab) = layout::tab_at(areas.tabs, x, y) {
        app.tab = tab;
        return;
    }
    match app.tab {
        Tab::Grid => {
            let g = layout::grid(areas.body, app.data.n_layers, app.data.n_heads, app.layer);
            if let Some((l, h)) = g.cell_at(x, y) {
                // A click on the selected cell opens it, like Enter.
                if (l, h) == (app.layer, app.head) {
                    app.tab = Tab::Heatmap;
                } else {
                    app.select_head(l, h);
                }
            }
        }
        Tab::Heatmap => {
            if let Some((rows, cols)) = app.heat_dims() {
                let g = layout::heatmap(areas.body, rows, cols, &app.heat);
                if let Some((r, c)) = g.cell_at(x, y) {
                    app.heat.row = r;
                    app.heat.col = c;
                }
            }
        }
        Tab::Tokens => {
            let inner = layout::token_text_area(areas.body);
            let places = layout::token_layout(&app.data.flow, inner.width);
            let first = layout::first_token_line(&places, app.tokens.cursor, inner.height);
            if let Some(pos) = layout::token_at(&places, inner, first, x, y) {
                app.tokens.cursor = pos;
            }
        }
        Tab::Streaming => {
            if let Some(row) = layout::streaming(areas.body).row_at(y).filter(|&r| r < app.streaming.curves.len()) {
                app.streaming.policy = row;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::run::Run;
    use crate::tui::state::*;
    use std::path::Path;

    fn app() -> App {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run-stories260k");
        App::new(Run::open(&dir).expect("fixture run opens"))
    }

    fn apply(app: &mut App, actions: &[Action]) {
        for a in actions {
            update(app, a.clone());
        }
    }

    #[test]
    fn tabs_cycle_and_jump() {
        let mut a = app();
        assert_eq!(a.tab, Tab::Overview);
        update(&mut a, Action::NextTab);
        assert_eq!(a.tab, Tab::Grid);
        update(&mut a, Action::PrevTab);
        update(&mut a, Action::PrevTab);
        assert_eq!(a.tab, Tab::Survey, "Shift-Tab wraps around to the last view");
        update(&mut a, Action::GoTab(Tab::Tokens));
        assert_eq!(a.tab, Tab::Tokens);
    }

    #[test]
    fn opens_on_the_strongest_sink_head() {
        let a = app();
        let best = a.data.alpha(a.layer, a.head, 0).unwrap();
        for l in 0..a.data.n_layers {
            for h in 0..a.data.n_heads {
                assert!(a.data.alpha(l, h, 0).unwrap() <= best);
            }
        }
    }

    #[test]
    fn grid_navigation_clamps_and_enter_opens_the_heatmap() {
        let mut a = app();
        apply(&mut a, &[Action::GoTab(Tab::Grid), Action::Move { dx: -100, dy: -100 }]);
        assert_eq!((a.layer, a.head), (0, 0));
        apply(&mut a, &[Action::Move { dx: 1, dy: 0 }, Action::Move { dx: 0, dy: 1 }, Action::Move { dx: 0, dy: 1 }]);
        assert_eq!((a.layer, a.head), (2, 1));
        apply(&mut a, &[Action::Move { dx: 100, dy: 100 }]);
        assert_eq!((a.layer, a.head), (4, 7), "5 layers × 8 heads");
        update(&mut a, Action::Enter);
        assert_eq!(a.tab, Tab::Heatmap);
        assert_eq!((a.layer, a.head), (4, 7), "the heatmap shows the selected head");
    }

    #[test]
    fn head_and_layer_keys_work_in_every_view() {
        let mut a = app();
        apply(&mut a, &[Action::GoTab(Tab::Heatmap), Action::Move { dx: 0, dy: 0 }]);
        a.layer = 0;
        a.head = 0;
        apply(&mut a, &[Action::NextHead, Action::NextHead, Action::NextLayer]);
        assert_eq!((a.layer, a.head), (1, 2));
        apply(&mut a, &[Action::PrevHead, Action::PrevLayer, Action::PrevLayer]);
        assert_eq!((a.layer, a.head), (0, 1));
    }

    #[test]
    fn k_changes_within_the_alpha_table() {
        let mut a = app();
        assert_eq!(a.grid.k, 0);
        update(&mut a, Action::PrevK);
        assert_eq!(a.grid.k, 0);
        apply(&mut a, &[Action::NextK, Action::NextK]);
        assert_eq!(a.grid.k, 2);
        for _ in 0..40 {
            update(&mut a, Action::NextK);
        }
        assert_eq!(a.grid.k, 15, "α_k is reported for k < 16");
        update(&mut a, Action::ToggleGridColour);
        assert_eq!(a.grid.colour, GridColour::Class);
        update(&mut a, Action::ToggleGridColour);
        assert_eq!(a.grid.colour, GridColour::Alpha);
    }

    #[test]
    fn heatmap_cursor_zoom_log_and_focus() {
        let mut a = app();
        update(&mut a, Action::GoTab(Tab::Heatmap));
        assert_eq!(a.heat.row, 63, "starts on the last query, which sees every key");
        apply(&mut a, &[Action::Move { dx: 5, dy: -3 }, Action::Move { dx: PAN_STEP, dy: -PAN_STEP }]);
        assert_eq!((a.heat.row, a.heat.col), (52, 13));
        apply(&mut a, &[Action::ZoomIn, Action::ZoomIn]);
        assert_eq!(a.heat.zoom, 2);
        for _ in 0..20 {
            update(&mut a, Action::ZoomIn);
        }
        assert_eq!(a.heat.zoom, MAX_ZOOM);
        update(&mut a, Action::ZoomOut);
        assert_eq!(a.heat.zoom, MAX_ZOOM - 1);
        update(&mut a, Action::ZoomReset);
        assert_eq!(a.heat.zoom, 0);
        update(&mut a, Action::ToggleLog);
        assert!(a.heat.log);
        // Focus keeps the cursor on key 13 (< K = 16) and clamps moves to the first K keys.
        update(&mut a, Action::ToggleFocus);
        assert!(a.heat.focus);
        assert_eq!(a.heat.col, 13);
        update(&mut a, Action::Move { dx: 100, dy: 0 });
        assert_eq!(a.heat.col, 15);
        update(&mut a, Action::ToggleFocus);
        assert!(!a.heat.focus);
        assert_eq!(a.heat.col, 15);
        update(&mut a, Action::Move { dx: 100, dy: 100 });
        assert_eq!((a.heat.row, a.heat.col), (63, 63));
        // Zoom keys do nothing outside the heatmap.
        update(&mut a, Action::GoTab(Tab::Grid));
        update(&mut a, Action::ZoomIn);
        assert_eq!(a.heat.zoom, 0);
    }

    #[test]
    fn wheel_zooms_the_heatmap_and_scrolls_elsewhere() {
        let mut a = app();
        apply(&mut a, &[Action::GoTab(Tab::Heatmap), Action::Scroll(-1), Action::Scroll(-1)]);
        assert_eq!(a.heat.zoom, 2);
        update(&mut a, Action::Scroll(1));
        assert_eq!(a.heat.zoom, 1);
        apply(&mut a, &[Action::GoTab(Tab::Activations), Action::Scroll(1), Action::Scroll(1)]);
        assert_eq!(a.activations.layer, 2);
    }

    #[test]
    fn help_toggles_and_swallows_other_keys() {
        let mut a = app();
        update(&mut a, Action::ToggleHelp);
        assert!(a.help);
        update(&mut a, Action::NextTab);
        assert_eq!(a.tab, Tab::Overview, "keys behind the overlay are ignored");
        update(&mut a, Action::Back);
        assert!(!a.help && !a.quit, "Esc closes the overlay first");
        update(&mut a, Action::ToggleHelp);
        update(&mut a, Action::ToggleHelp);
        assert!(!a.help);
    }

    #[test]
    fn quitting() {
        let mut a = app();
        update(&mut a, Action::Quit);
        assert!(a.quit);
        let mut a = app();
        update(&mut a, Action::Back);
        assert!(a.quit, "Esc quits when no overlay is open");
        let mut a = app();
        apply(&mut a, &[Action::ToggleHelp, Action::Quit]);
        assert!(a.quit, "q quits even from the help overlay");
    }

    #[test]
    fn export_is_an_effect_and_status_clears_on_the_next_key() {
        let mut a = app();
        assert_eq!(update(&mut a, Action::Export), Effect::Export);
        update(&mut a, Action::Status("wrote x".into()));
        assert_eq!(a.status.as_deref(), Some("wrote x"));
        update(&mut a, Action::Resize { width: 80, height: 24 });
        assert_eq!(a.status.as_deref(), Some("wrote x"), "a resize keeps the message");
        assert_eq!((a.width, a.height), (80, 24));
        update(&mut a, Action::NextTab);
        assert_eq!(a.status, None);
    }

    #[test]
    fn token_scope_and_measure_recompute_the_weights() {
        let mut a = app();
        update(&mut a, Action::GoTab(Tab::Tokens));
        let head = a.tokens.weights.clone().unwrap();
        let cm = a.data.col_mass.as_ref().unwrap();
        let t = cm.n_tokens;
        let expect0 = cm.head(a.layer, a.head)[0] as f64 / t as f64;
        assert!((head[0] as f64 - expect0).abs() < 1e-6, "α_0 = column mass / T");
        update(&mut a, Action::CycleScope);
        assert_eq!(a.tokens.scope, TokenScope::Layer);
        assert_ne!(a.tokens.weights.as_ref().unwrap(), &head);
        update(&mut a, Action::CycleScope);
        assert_eq!(a.tokens.scope, TokenScope::All);
        let all = a.tokens.weights.clone().unwrap();
        update(&mut a, Action::NextHead);
        assert_eq!(a.tokens.weights.as_ref().unwrap(), &all, "the all-heads mean does not follow the head");
        update(&mut a, Action::ToggleMeasure);
        let mass = a.tokens.weights.clone().unwrap();
        assert!((mass[t - 1] as f64 - all[t - 1] as f64 / t as f64).abs() < 1e-6, "the last key: mass/T = α/T");
    }

    #[test]
    fn token_cursor_moves_by_token_and_by_line() {
        let mut a = app();
        apply(&mut a, &[Action::GoTab(Tab::Tokens), Action::Move { dx: 3, dy: 0 }]);
        assert_eq!(a.tokens.cursor, 3);
        update(&mut a, Action::Move { dx: -10, dy: 0 });
        assert_eq!(a.tokens.cursor, 0);
        update(&mut a, Action::Move { dx: 0, dy: 1 });
        assert!(a.tokens.cursor > 3, "down moves to the next line of the text");
        update(&mut a, Action::Move { dx: 0, dy: -1 });
        assert_eq!(a.tokens.cursor, 0);
        update(&mut a, Action::Move { dx: 1000, dy: 0 });
        assert_eq!(a.tokens.cursor, 63);
    }

    #[test]
    fn streaming_selection_and_window() {
        let mut a = app();
        assert_eq!(a.streaming.curves.len(), 5);
        apply(&mut a, &[Action::GoTab(Tab::Streaming), Action::Move { dx: 0, dy: 2 }]);
        assert_eq!(a.streaming.policy, 2);
        update(&mut a, Action::Move { dx: 0, dy: 10 });
        assert_eq!(a.streaming.policy, 4);
        let before = a.streaming.curves[0].points.clone();
        update(&mut a, Action::CycleWindow);
        assert_eq!(a.streaming.window, WINDOWS[1]);
        assert_ne!(a.streaming.curves[0].points, before);
    }

    #[test]
    fn clicks_select_tabs_and_grid_cells() {
        let mut a = app();
        update(&mut a, Action::Resize { width: 120, height: 40 });
        let areas = layout::areas(120, 40);
        let (x, _) = layout::tab_ranges(areas.tabs).into_iter().find(|(t, _)| *t == Tab::Grid).map(|(_, r)| (r.0, r.1)).unwrap();
        update(&mut a, Action::Click { x, y: areas.tabs.y });
        assert_eq!(a.tab, Tab::Grid);
        let g = layout::grid(areas.body, a.data.n_layers, a.data.n_heads, a.layer);
        let (cx, cy) = g.cell_origin(1, 3).unwrap();
        update(&mut a, Action::Click { x: cx, y: cy });
        assert_eq!((a.layer, a.head, a.tab), (1, 3, Tab::Grid));
        update(&mut a, Action::Click { x: cx, y: cy });
        assert_eq!(a.tab, Tab::Heatmap, "a second click opens the head");
    }

    #[test]
    fn clicks_move_the_heatmap_cursor_the_token_and_the_policy() {
        let mut a = app();
        apply(&mut a, &[Action::Resize { width: 120, height: 40 }, Action::GoTab(Tab::Heatmap)]);
        let body = layout::areas(120, 40).body;
        let (rows, cols) = a.heat_dims().unwrap();
        let g = layout::heatmap(body, rows, cols, &a.heat);
        // Exact 64×64 map at magnification 1: cell (x, y) of the raster shows (2y, x).
        update(&mut a, Action::Click { x: g.raster.x + 5, y: g.raster.y + 10 });
        assert_eq!((a.heat.row, a.heat.col), (20, 5));
        update(&mut a, Action::Click { x: g.raster.x + 100, y: g.raster.y });
        assert_eq!((a.heat.row, a.heat.col), (20, 5), "a click beside the map changes nothing");
        update(&mut a, Action::GoTab(Tab::Tokens));
        let inner = layout::token_text_area(body);
        update(&mut a, Action::Click { x: inner.x + 5, y: inner.y });
        assert_eq!(a.tokens.cursor, 1, "'<s>' takes 3 cells, ' Once' the next 5");
        update(&mut a, Action::GoTab(Tab::Streaming));
        let table = layout::streaming(body).table;
        update(&mut a, Action::Click { x: table.x + 4, y: table.y + 2 + 3 });
        assert_eq!(a.streaming.policy, 3);
    }

    #[test]
    fn rolling_perplexity_skips_unscored_steps() {
        let nll = [0.0, f64::NAN, 2.0f64.ln(), 2.0f64.ln()];
        let p = rolling_ppl(&nll, 2);
        assert_eq!(p.len(), 4);
        assert!((p[0].1 - 1.0).abs() < 1e-12);
        assert!((p[1].1 - 1.0).abs() < 1e-12, "the NaN step leaves the window's mean as it was");
        assert!((p[2].1 - 2.0).abs() < 1e-12, "window [NaN, ln 2]");
        assert!((p[3].1 - 2.0).abs() < 1e-12);
        assert!(rolling_ppl(&vec![1.0; 5000], 32).len() <= 1001);
    }
}
