//! The dashboard's state: which view and head are selected, each view's own state (its cursor,
//! settings and the data shaped for drawing, recomputed when a selection changes, never per
//! frame), and the terminal's size. Changed only by [`super::update::update`].

pub mod grid;
pub mod heatmap;
pub mod lists;
mod step;
pub mod streaming;
pub mod tokens;

use std::path::PathBuf;

use super::data::Data;
pub use super::tab::Tab;
use crate::analysis::findings::heads_by_alpha0;
use crate::report::run::Run;
pub use grid::{GridColour, GridState};
pub use heatmap::{HeatmapView, MAX_ZOOM, PAN_STEP};
pub use lists::{ActivationsState, CompressionState, OverviewState, RetrievalState, SurveyState};
pub(crate) use step::step;
pub use streaming::{rolling_ppl, Curve, StreamingState, WINDOWS};
pub use tokens::{TokenMeasure, TokenScope, TokensState};

pub struct App {
    pub run: Run,
    pub data: Data,
    pub tab: Tab,
    /// The selected head, shared by Grid, Heatmap and Tokens.
    pub layer: usize,
    pub head: usize,
    pub overview: OverviewState,
    pub grid: GridState,
    pub heat: HeatmapView,
    pub tokens: TokensState,
    pub activations: ActivationsState,
    pub streaming: StreamingState,
    pub retrieval: RetrievalState,
    pub compression: CompressionState,
    pub survey: SurveyState,
    pub help: bool,
    pub status: Option<String>,
    pub quit: bool,
    /// Terminal size, for mouse hit-testing and line-wise movement.
    pub width: u16,
    pub height: u16,
}

impl App {
    pub fn new(run: Run) -> App {
        let data = Data::new(&run);
        let tokens = TokensState::new(&data, (0, 0));
        let streaming = StreamingState::new(run.stream.as_ref());
        let mut app = App {
            run,
            data,
            tab: Tab::Overview,
            layer: 0,
            head: 0,
            overview: OverviewState::default(),
            grid: GridState::default(),
            heat: HeatmapView::default(),
            tokens,
            activations: ActivationsState::default(),
            streaming,
            retrieval: RetrievalState::default(),
            compression: CompressionState::default(),
            survey: SurveyState::default(),
            help: false,
            status: None,
            quit: false,
            width: 120,
            height: 40,
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
            app.survey.row = s.rows.iter().position(|r| app.run.dir.ends_with(&r.run_dir)).unwrap_or(0);
        }
        app.tokens.refresh(&app.data, (app.layer, app.head));
        app
    }

    pub fn run_dir(&self) -> PathBuf {
        self.run.dir.clone()
    }

    /// The head with the largest α_0.
    fn strongest_head(&self) -> Option<(usize, usize)> {
        heads_by_alpha0(&self.data.alpha).first().map(|&(l, h, _)| (l, h))
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

    pub(crate) fn select_head(&mut self, layer: usize, head: usize) {
        let layer = layer.min(self.data.n_layers.saturating_sub(1));
        let head = head.min(self.data.n_heads.saturating_sub(1));
        if (layer, head) != (self.layer, self.head) {
            self.layer = layer;
            self.head = head;
            self.clamp_heat();
            self.tokens.head_changed(&self.data, (layer, head));
        }
    }

    pub(crate) fn clamp_heat(&mut self) {
        let dims = self.heat_dims();
        self.heat.clamp(dims);
    }
}
