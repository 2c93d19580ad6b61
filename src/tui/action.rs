//! What the user can ask of the dashboard ([`Action`], from keys and the mouse) and the work
//! `update` hands back to the event loop ([`Effect`]).

use super::state::Tab;

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
    Move {
        dx: isize,
        dy: isize,
    },
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
    Click {
        x: u16,
        y: u16,
    },
    /// Mouse wheel: −1 up, +1 down.
    Scroll(isize),
    Resize {
        width: u16,
        height: u16,
    },
    /// A message for the status line (e.g. where an export went).
    Status(String),
}

/// Work `update` asks the event loop to do outside the pure state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    None,
    Export,
    /// Open this run directory of the survey (Enter on the Survey view's selected model).
    OpenSurveyRun(std::path::PathBuf),
}
