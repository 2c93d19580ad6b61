//! The vocabulary between model and analysis: hook names, the sink trait the forward pass pushes
//! into, streaming reducers, the bundle `capture` runs, and the memory estimate checked first.

pub mod ablation;
pub mod heatmap;
pub mod hook;
pub mod memory;
pub mod run;
pub mod reducers;
pub mod sink;
pub mod summary;

pub use hook::{HookFilter, HookPoint};
pub use sink::{CaptureSink, FanOut, NoCapture, TensorCollector};
pub use summary::{CaptureSummary, StandardReducers};
