//! The dashboard's views, in tab order: what a tab is called and how Tab / Shift-Tab move.

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Grid,
    Heatmap,
    Tokens,
    Activations,
    Streaming,
    Retrieval,
    Compression,
    Survey,
}

impl Tab {
    pub const ALL: [Tab; 9] =
        [Tab::Overview, Tab::Grid, Tab::Heatmap, Tab::Tokens, Tab::Activations, Tab::Streaming, Tab::Retrieval, Tab::Compression, Tab::Survey];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Grid => "Grid",
            Tab::Heatmap => "Heatmap",
            Tab::Tokens => "Tokens",
            Tab::Activations => "Activations",
            Tab::Streaming => "Streaming",
            Tab::Retrieval => "Retrieval",
            Tab::Compression => "Presses",
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
