//! The Grid view's state: which α_k colours the layer × head grid, or the head classes.

/// What the layer × head grid is coloured by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridColour {
    Alpha,
    Class,
}

impl GridColour {
    pub(crate) fn toggled(self) -> GridColour {
        match self {
            GridColour::Alpha => GridColour::Class,
            GridColour::Class => GridColour::Alpha,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridState {
    /// k of the grid's α_k colouring.
    pub k: usize,
    pub colour: GridColour,
}

impl Default for GridState {
    fn default() -> Self {
        GridState { k: 0, colour: GridColour::Alpha }
    }
}
