//! The dashboard's state: which view, head, cursor and settings are selected, and the data shaped
//! for drawing (recomputed when a selection changes, never per frame). Changed only by
//! [`super::update::update`].

use std::path::PathBuf;

use super::data::Data;
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
    Survey,
}

impl Tab {
    pub const ALL: [Tab; 7] = [Tab::Overview, Tab::Grid, Tab::Heatmap, Tab::Tokens, Tab::Activations, Tab::Streaming, Tab::Survey];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Grid => "Grid",
            Tab::Heatmap => "Heatmap",
            Tab::Tokens => "Tokens",
            Tab::Activations => "Activations",
            Tab::Streaming => "Streaming",
            Tab::Survey => "Survey",
        }
    }

    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|&t| t == self).unwrap_or(0)
    }

    pub(crate) fn step(self, by: isize) -> Tab {
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
    /// The selected model of the survey (its row in `run.survey`).
    pub survey_row: usize,
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
            survey_row: 0,
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
        // The survey opens on the model whose run this is.
        if let Some(s) = &app.run.survey {
            app.survey_row = s.rows.iter().position(|r| app.run.dir.ends_with(&r.run_dir)).unwrap_or(0);
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

    pub(crate) fn n_tokens(&self) -> usize {
        self.data.display.len()
    }

    pub(crate) fn select_head(&mut self, layer: usize, head: usize) {
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

    pub(crate) fn clamp_heat(&mut self) {
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
    figures::rolling_ppl(nll, window, 1)
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i % stride == 0 || i == last)
        .filter_map(|(i, p)| Some((i as f64, p?)))
        .collect()
}
