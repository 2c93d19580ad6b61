//! The dashboard's state and its only way to change: [`update`] applies one [`Action`] to an
//! [`App`]. No terminal and no file I/O here (export is returned as an [`Effect`] for the event
//! loop to carry out), so every behaviour is unit-testable.

use std::path::PathBuf;

use super::data::Data;
use super::layout;
use crate::report::figures;
use crate::report::run::Run;

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Grid,
    Heatmap,
    Tokens,
    Activations,
    Streaming,
}

impl Tab {
    pub const ALL: [Tab; 6] = [Tab::Overview, Tab::Grid, Tab::Heatmap, Tab::Tokens, Tab::Activations, Tab::Streaming];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Grid => "Grid",
            Tab::Heatmap => "Heatmap",
            Tab::Tokens => "Tokens",
            Tab::Activations => "Activations",
            Tab::Streaming => "Streaming",
        }
    }

    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|&t| t == self).unwrap_or(0)
    }

    fn step(self, by: isize) -> Tab {
        let n = Tab::ALL.len() as isize;
        Tab::ALL[((self.index() as isize + by).rem_euclid(n)) as usize]
    }
}

/// What the layer × head grid is coloured by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridColour {
    Alpha,
    Class,
}

/// Whose attention the Tokens view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenScope {
    Head,
    Layer,
    All,
}

/// How attention received by a position is measured in the Tokens view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMeasure {
    /// α_k: mean attention from the queries at or after k (Gu et al.).
    Alpha,
    /// Column mass / T: k's share of all attention paid in the text.
    Mass,
}

/// Heatmap view state. The cursor is in source cells: (query bin, key column), where a key column
/// is a key bin of the full map or, in focus mode, one of the first K key positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatmapView {
    /// Magnification 2^zoom; 0 shows the whole map.
    pub zoom: u8,
    pub row: usize,
    pub col: usize,
    pub log: bool,
    pub focus: bool,
}

pub const MAX_ZOOM: u8 = 6;
/// Cells a Shift+arrow / PageUp / PageDown move the heatmap cursor (panning when zoomed).
pub const PAN_STEP: isize = 8;
/// Rolling windows (tokens) the Streaming view cycles through.
pub const WINDOWS: [usize; 3] = [32, 8, 128];
/// Most points a curve keeps (beyond a few per braille dot nothing more is visible).
const MAX_CURVE_POINTS: usize = 1000;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Quit,
    /// Esc: closes the help overlay, else quits.
    Back,
    ToggleHelp,
    NextTab,
    PrevTab,
    GoTab(Tab),
    /// Arrow keys (±1) and Shift+arrows / PageUp / PageDown (±[`PAN_STEP`]).
    Move { dx: isize, dy: isize },
    Enter,
    ZoomIn,
    ZoomOut,
    ZoomReset,
    ToggleLog,
    ToggleFocus,
    NextK,
    PrevK,
    ToggleGridColour,
    NextHead,
    PrevHead,
    NextLayer,
    PrevLayer,
    CycleScope,
    ToggleMeasure,
    CycleWindow,
    Export,
    /// Left click at a terminal cell.
    Click { x: u16, y: u16 },
    /// Mouse wheel: −1 up, +1 down.
    Scroll(isize),
    Resize { width: u16, height: u16 },
    /// A message for the status line (e.g. where an export went).
    Status(String),
}

/// Work `update` asks the event loop to do outside the pure state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    None,
    Export,
}

/// One rolling-perplexity curve of the Streaming view.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub label: String,
    /// (step, exp(mean NLL over the window ending at step)).
    pub points: Vec<(f64, f64)>,
    /// (step, ln of that perplexity): what the chart draws, so a few spikes do not flatten the
    /// rest of the curves.
    pub log_points: Vec<(f64, f64)>,
    pub first_eviction: Option<usize>,
    pub cliff: Option<usize>,
}

pub struct App {
    pub run: Run,
    pub data: Data,
    pub tab: Tab,
    pub layer: usize,
    pub head: usize,
    /// k of the grid's α_k colouring.
    pub k: usize,
    pub grid_colour: GridColour,
    pub heat: HeatmapView,
    pub scope: TokenScope,
    pub measure: TokenMeasure,
    pub token: usize,
    pub act_layer: usize,
    pub policy: usize,
    pub window: usize,
    pub overview_scroll: usize,
    pub help: bool,
    pub status: Option<String>,
    pub quit: bool,
    /// Terminal size, for mouse hit-testing and line-wise movement.
    pub width: u16,
    pub height: u16,
    /// Attention received per position for the current layer/head/scope/measure (recomputed when
    /// one of those changes, never per frame).
    pub token_weights: Option<Vec<f32>>,
    /// Rolling-perplexity curves for the current window.
    pub curves: Vec<Curve>,
}

impl App {
    pub fn new(run: Run) -> App {
        let data = Data::new(&run);
        let mut app = App {
            run,
            data,
            tab: Tab::Overview,
            layer: 0,
            head: 0,
            k: 0,
            grid_colour: GridColour::Alpha,
            heat: HeatmapView { zoom: 0, row: 0, col: 0, log: false, focus: false },
            scope: TokenScope::Head,
            measure: TokenMeasure::Alpha,
            token: 0,
            act_layer: 0,
            policy: 0,
            window: WINDOWS[0],
            overview_scroll: 0,
            help: false,
            status: None,
            quit: false,
            width: 120,
            height: 40,
            token_weights: None,
            curves: Vec::new(),
        };
        // Open on the strongest sink head so Grid, Heatmap and Tokens start somewhere telling.
        if let Some((l, h)) = app.strongest_head() {
            app.layer = l;
            app.head = h;
        }
        if let Some((rows, _)) = app.heat_dims() {
            app.heat.row = rows - 1;
        }
        app.refresh_tokens();
        app.refresh_curves();
        app
    }

    pub fn run_dir(&self) -> PathBuf {
        self.run.dir.clone()
    }

    /// The head with the largest α_0.
    fn strongest_head(&self) -> Option<(usize, usize)> {
        let mut best: Option<(f64, usize, usize)> = None;
        for l in 0..self.data.n_layers {
            for h in 0..self.data.n_heads {
                if let Some(a) = self.data.alpha(l, h, 0) {
                    if best.is_none_or(|(b, _, _)| a > b) {
                        best = Some((a, l, h));
                    }
                }
            }
        }
        best.map(|(_, l, h)| (l, h))
    }

    /// The heatmap's source size (rows, columns) for the selected head and mode.
    pub fn heat_dims(&self) -> Option<(usize, usize)> {
        let maps = self.run.heatmaps.as_ref()?;
        let cols = if self.heat.focus { maps.first_keys } else { maps.bins() };
        (maps.bins() > 0 && cols > 0 && self.layer < maps.n_layers && self.head < maps.n_heads).then_some((maps.bins(), cols))
    }

    /// The first key position of a heatmap column.
    pub fn col_key(&self, col: usize) -> usize {
        match &self.run.heatmaps {
            Some(m) if !self.heat.focus => m.edges.get(col).copied().unwrap_or(col),
            _ => col,
        }
    }

    /// Recomputes the Tokens view's weights (attention received per position).
    pub fn refresh_tokens(&mut self) {
        let Some(cm) = &self.data.col_mass else {
            self.token_weights = None;
            return;
        };
        let t = cm.n_tokens;
        let heads: Vec<(usize, usize)> = match self.scope {
            TokenScope::Head => vec![(self.layer, self.head)],
            TokenScope::Layer => (0..cm.n_heads).map(|h| (self.layer, h)).collect(),
            TokenScope::All => (0..cm.n_layers).flat_map(|l| (0..cm.n_heads).map(move |h| (l, h))).collect(),
        };
        let heads: Vec<(usize, usize)> = heads.into_iter().filter(|&(l, h)| l < cm.n_layers && h < cm.n_heads).collect();
        let mut sum = vec![0f64; t];
        for &(l, h) in &heads {
            for (s, &v) in sum.iter_mut().zip(cm.head(l, h)) {
                *s += v as f64;
            }
        }
        let n = heads.len().max(1) as f64;
        let weights = sum
            .iter()
            .enumerate()
            .map(|(k, &m)| {
                let per = match self.measure {
                    TokenMeasure::Alpha => m / (t - k) as f64,
                    TokenMeasure::Mass => m / t as f64,
                };
                (per / n) as f32
            })
            .collect();
        self.token_weights = Some(weights);
    }

    /// Recomputes the rolling-perplexity curves for the current window.
    pub fn refresh_curves(&mut self) {
        let Some(stream) = &self.run.stream else {
            self.curves.clear();
            return;
        };
        self.curves = stream
            .outcomes
            .iter()
            .map(|o| {
                let points = rolling_ppl(&o.nll, self.window);
                let log_points = points.iter().map(|&(x, p)| (x, p.ln())).collect();
                Curve { label: o.label.clone(), points, log_points, first_eviction: o.first_eviction_step, cliff: o.cliff_step }
            })
            .collect();
    }

    fn n_tokens(&self) -> usize {
        self.data.display.len()
    }

    fn select_head(&mut self, layer: usize, head: usize) {
        let layer = layer.min(self.data.n_layers.saturating_sub(1));
        let head = head.min(self.data.n_heads.saturating_sub(1));
        if (layer, head) != (self.layer, self.head) {
            self.layer = layer;
            self.head = head;
            self.clamp_heat();
            if self.scope != TokenScope::All {
                self.refresh_tokens();
            }
        }
    }

    fn clamp_heat(&mut self) {
        if let Some((rows, cols)) = self.heat_dims() {
            self.heat.row = self.heat.row.min(rows - 1);
            self.heat.col = self.heat.col.min(cols - 1);
        }
    }
}

/// The rolling perplexity of `nll` over `window` steps (unscored steps skipped, see
/// [`figures::rolling_ppl`]), thinned to at most [`MAX_CURVE_POINTS`] points (the last one kept).
pub fn rolling_ppl(nll: &[f64], window: usize) -> Vec<(f64, f64)> {
    let stride = nll.len().div_ceil(MAX_CURVE_POINTS).max(1);
    let last = nll.len().saturating_sub(1);
    figures::rolling_ppl(nll, window, 1).into_iter().enumerate().filter(|&(i, _)| i % stride == 0 || i == last).filter_map(|(i, p)| Some((i as f64, p?))).collect()
}

fn step(value: usize, by: isize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (value as isize + by).clamp(0, len as isize - 1) as usize
}

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
        }
        Action::ZoomIn => zoom(app, 1),
        Action::ZoomOut => zoom(app, -1),
        Action::ZoomReset => app.heat.zoom = 0,
        Action::ToggleLog => app.heat.log = !app.heat.log,
        Action::ToggleFocus => toggle_focus(app),
        Action::NextK => app.k = step(app.k, 1, app.data.alpha_k),
        Action::PrevK => app.k = step(app.k, -1, app.data.alpha_k),
        Action::ToggleGridColour => {
            app.grid_colour = match app.grid_colour {
                GridColour::Alpha => GridColour::Class,
                GridColour::Class => GridColour::Alpha,
            }
        }
        Action::NextHead => app.select_head(app.layer, app.head + 1),
        Action::PrevHead => app.select_head(app.layer, app.head.saturating_sub(1)),
        Action::NextLayer => app.select_head(app.layer + 1, app.head),
        Action::PrevLayer => app.select_head(app.layer.saturating_sub(1), app.head),
        Action::CycleScope => {
            app.scope = match app.scope {
                TokenScope::Head => TokenScope::Layer,
                TokenScope::Layer => TokenScope::All,
                TokenScope::All => TokenScope::Head,
            };
            app.refresh_tokens();
        }
        Action::ToggleMeasure => {
            app.measure = match app.measure {
                TokenMeasure::Alpha => TokenMeasure::Mass,
                TokenMeasure::Mass => TokenMeasure::Alpha,
            };
            app.refresh_tokens();
        }
        Action::CycleWindow => {
            let i = WINDOWS.iter().position(|&w| w == app.window).unwrap_or(0);
            app.window = WINDOWS[(i + 1) % WINDOWS.len()];
            app.refresh_curves();
        }
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
        Tab::Overview => app.overview_scroll = (app.overview_scroll as isize + dy).max(0) as usize,
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
            let n = app.n_tokens();
            if dy != 0 {
                let width = layout::token_text_width(layout::areas(app.width, app.height).body);
                app.token = layout::token_line_move(&app.data.flow, width, app.token, dy);
            }
            app.token = step(app.token, dx, n);
        }
        Tab::Activations => app.act_layer = step(app.act_layer, dy, app.data.layers.len()),
        Tab::Streaming => app.policy = step(app.policy, dy, app.curves.len()),
    }
}

fn zoom(app: &mut App, by: i8) {
    if app.tab != Tab::Heatmap {
        return;
    }
    app.heat.zoom = (app.heat.zoom as i8 + by).clamp(0, MAX_ZOOM as i8) as u8;
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
            let first = layout::first_token_line(&places, app.token, inner.height);
            if let Some(pos) = layout::token_at(&places, inner, first, x, y) {
                app.token = pos;
            }
        }
        Tab::Streaming => {
            if let Some(row) = layout::streaming(areas.body).row_at(y).filter(|&r| r < app.curves.len()) {
                app.policy = row;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(a.tab, Tab::Streaming, "Shift-Tab wraps around");
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
        assert_eq!(a.k, 0);
        update(&mut a, Action::PrevK);
        assert_eq!(a.k, 0);
        apply(&mut a, &[Action::NextK, Action::NextK]);
        assert_eq!(a.k, 2);
        for _ in 0..40 {
            update(&mut a, Action::NextK);
        }
        assert_eq!(a.k, 15, "α_k is reported for k < 16");
        update(&mut a, Action::ToggleGridColour);
        assert_eq!(a.grid_colour, GridColour::Class);
        update(&mut a, Action::ToggleGridColour);
        assert_eq!(a.grid_colour, GridColour::Alpha);
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
        assert_eq!(a.act_layer, 2);
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
        let head = a.token_weights.clone().unwrap();
        let cm = a.data.col_mass.as_ref().unwrap();
        let t = cm.n_tokens;
        let expect0 = cm.head(a.layer, a.head)[0] as f64 / t as f64;
        assert!((head[0] as f64 - expect0).abs() < 1e-6, "α_0 = column mass / T");
        update(&mut a, Action::CycleScope);
        assert_eq!(a.scope, TokenScope::Layer);
        assert_ne!(a.token_weights.as_ref().unwrap(), &head);
        update(&mut a, Action::CycleScope);
        assert_eq!(a.scope, TokenScope::All);
        let all = a.token_weights.clone().unwrap();
        update(&mut a, Action::NextHead);
        assert_eq!(a.token_weights.as_ref().unwrap(), &all, "the all-heads mean does not follow the head");
        update(&mut a, Action::ToggleMeasure);
        let mass = a.token_weights.clone().unwrap();
        assert!((mass[t - 1] as f64 - all[t - 1] as f64 / t as f64).abs() < 1e-6, "the last key: mass/T = α/T");
    }

    #[test]
    fn token_cursor_moves_by_token_and_by_line() {
        let mut a = app();
        apply(&mut a, &[Action::GoTab(Tab::Tokens), Action::Move { dx: 3, dy: 0 }]);
        assert_eq!(a.token, 3);
        update(&mut a, Action::Move { dx: -10, dy: 0 });
        assert_eq!(a.token, 0);
        update(&mut a, Action::Move { dx: 0, dy: 1 });
        assert!(a.token > 3, "down moves to the next line of the text");
        update(&mut a, Action::Move { dx: 0, dy: -1 });
        assert_eq!(a.token, 0);
        update(&mut a, Action::Move { dx: 1000, dy: 0 });
        assert_eq!(a.token, 63);
    }

    #[test]
    fn streaming_selection_and_window() {
        let mut a = app();
        assert_eq!(a.curves.len(), 5);
        apply(&mut a, &[Action::GoTab(Tab::Streaming), Action::Move { dx: 0, dy: 2 }]);
        assert_eq!(a.policy, 2);
        update(&mut a, Action::Move { dx: 0, dy: 10 });
        assert_eq!(a.policy, 4);
        let before = a.curves[0].points.clone();
        update(&mut a, Action::CycleWindow);
        assert_eq!(a.window, WINDOWS[1]);
        assert_ne!(a.curves[0].points, before);
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
        assert_eq!(a.token, 1, "'<s>' takes 3 cells, ' Once' the next 5");
        update(&mut a, Action::GoTab(Tab::Streaming));
        let table = layout::streaming(body).table;
        update(&mut a, Action::Click { x: table.x + 4, y: table.y + 2 + 3 });
        assert_eq!(a.policy, 3);
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
