//! The Tokens view's state: whose attention (a head, a layer, every head), measured how, the
//! cursor in the text, and the weight per position drawn for that choice (recomputed when one of
//! them changes, never per frame).

use crate::tui::data::{ColMass, Data};
use crate::tui::layout;

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

impl TokenScope {
    fn next(self) -> TokenScope {
        match self {
            TokenScope::Head => TokenScope::Layer,
            TokenScope::Layer => TokenScope::All,
            TokenScope::All => TokenScope::Head,
        }
    }
}

impl TokenMeasure {
    fn toggled(self) -> TokenMeasure {
        match self {
            TokenMeasure::Alpha => TokenMeasure::Mass,
            TokenMeasure::Mass => TokenMeasure::Alpha,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokensState {
    pub scope: TokenScope,
    pub measure: TokenMeasure,
    /// The selected position.
    pub cursor: usize,
    /// Attention received per position for the selected head and this scope and measure.
    pub weights: Option<Vec<f32>>,
}

impl TokensState {
    pub fn new(data: &Data, head: (usize, usize)) -> Self {
        let mut state = TokensState { scope: TokenScope::Head, measure: TokenMeasure::Alpha, cursor: 0, weights: None };
        state.refresh(data, head);
        state
    }

    /// Moves the cursor `dx` positions and `dy` lines of the text as wrapped at `width`.
    pub(crate) fn move_by(&mut self, data: &Data, width: u16, dx: isize, dy: isize) {
        if dy != 0 {
            self.cursor = layout::token_line_move(&data.flow, width, self.cursor, dy);
        }
        self.cursor = super::step::step(self.cursor, dx, data.display.len());
    }

    pub(crate) fn next_scope(&mut self, data: &Data, head: (usize, usize)) {
        self.scope = self.scope.next();
        self.refresh(data, head);
    }

    pub(crate) fn toggle_measure(&mut self, data: &Data, head: (usize, usize)) {
        self.measure = self.measure.toggled();
        self.refresh(data, head);
    }

    /// After another head is selected: the weights follow unless they are every head's.
    pub(crate) fn head_changed(&mut self, data: &Data, head: (usize, usize)) {
        if self.scope != TokenScope::All {
            self.refresh(data, head);
        }
    }

    /// Recomputes the weights (attention received per position) for `head` = (layer, head).
    pub fn refresh(&mut self, data: &Data, head: (usize, usize)) {
        self.weights = data.col_mass.as_ref().map(|cm| weights(cm, self.scope, self.measure, head));
    }
}

fn weights(cm: &ColMass, scope: TokenScope, measure: TokenMeasure, (layer, head): (usize, usize)) -> Vec<f32> {
    let t = cm.n_tokens;
    let heads: Vec<(usize, usize)> = match scope {
        TokenScope::Head => vec![(layer, head)],
        TokenScope::Layer => (0..cm.n_heads).map(|h| (layer, h)).collect(),
        TokenScope::All => (0..cm.n_layers).flat_map(|l| (0..cm.n_heads).map(move |h| (l, h))).collect(),
    };
    let heads: Vec<(usize, usize)> = heads.into_iter().filter(|&(l, h)| l < cm.n_layers && h < cm.n_heads && cm.attends(l)).collect();
    let mut sum = vec![0f64; t];
    for &(l, h) in &heads {
        for (s, &v) in sum.iter_mut().zip(cm.head(l, h)) {
            *s += v as f64;
        }
    }
    let n = heads.len().max(1) as f64;
    sum.iter()
        .enumerate()
        .map(|(k, &m)| {
            let per = match measure {
                TokenMeasure::Alpha => m / (t - k) as f64,
                TokenMeasure::Mass => m / t as f64,
            };
            (per / n) as f32
        })
        .collect()
}
