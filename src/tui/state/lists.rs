//! The state of the views that are one scrolled list: the Overview's scroll, the Activations
//! view's layer, the Retrieval view's policy, the Survey's model.

/// The Overview's first shown line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverviewState {
    pub scroll: usize,
}

impl OverviewState {
    pub(crate) fn move_by(&mut self, dy: isize) {
        self.scroll = (self.scroll as isize + dy).max(0) as usize;
    }
}

/// The Activations view's selected layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActivationsState {
    pub layer: usize,
}

impl ActivationsState {
    pub(crate) fn move_by(&mut self, dy: isize, n_layers: usize) {
        self.layer = super::step::step(self.layer, dy, n_layers);
    }
}

/// The Survey's selected model (its row in the survey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SurveyState {
    pub row: usize,
}

impl SurveyState {
    pub(crate) fn move_by(&mut self, dy: isize, n_rows: usize) {
        self.row = super::step::step(self.row, dy, n_rows);
    }
}

/// The Retrieval view's selected policy (its row in the needle sweep).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetrievalState {
    pub policy: usize,
}

/// The Compression view's selected press (or task arm).
#[derive(Debug, Clone, Copy, Default)]
pub struct CompressionState {
    pub row: usize,
}

impl CompressionState {
    pub(crate) fn move_by(&mut self, dy: isize, rows: usize) {
        self.row = super::step::step(self.row, dy, rows);
    }
}

impl RetrievalState {
    pub(crate) fn move_by(&mut self, dy: isize, n_policies: usize) {
        self.policy = super::step::step(self.policy, dy, n_policies);
    }
}
