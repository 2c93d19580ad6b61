//! The Streaming view's state: the selected policy, the rolling window and the curves drawn for
//! it (recomputed when the window changes, never per frame).

use crate::report::figures;
use crate::report::records::StreamReport;

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

/// The Streaming view's state.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamingState {
    /// The selected policy (its row in the run's outcomes).
    pub policy: usize,
    /// The rolling window, one of [`WINDOWS`].
    pub window: usize,
    /// Rolling-perplexity curves for the current window.
    pub curves: Vec<Curve>,
}

impl StreamingState {
    pub fn new(stream: Option<&StreamReport>) -> Self {
        let mut state = StreamingState { policy: 0, window: WINDOWS[0], curves: Vec::new() };
        state.refresh(stream);
        state
    }

    pub(crate) fn move_by(&mut self, dy: isize) {
        self.policy = super::step::step(self.policy, dy, self.curves.len());
    }

    pub(crate) fn next_window(&mut self, stream: Option<&StreamReport>) {
        let i = WINDOWS.iter().position(|&w| w == self.window).unwrap_or(0);
        self.window = WINDOWS[(i + 1) % WINDOWS.len()];
        self.refresh(stream);
    }

    /// Recomputes the rolling-perplexity curves for the current window.
    pub fn refresh(&mut self, stream: Option<&StreamReport>) {
        let Some(stream) = stream else {
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
