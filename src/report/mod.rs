//! Results as files: the run directory's records, the `Run` loader that reads any combination of
//! them back, and what `export` makes of a run — long-format tables (Parquet), figures (PNG/SVG)
//! and the Markdown findings.

pub mod bundle;
pub mod cache_error;
pub mod census;
#[cfg(feature = "plots")]
pub mod charts;
pub mod export;
pub mod figures;
pub mod markdown;
pub mod needle;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "plots")]
pub mod plot;
pub mod press;
pub mod records;
pub mod run;
pub mod survey;
pub mod tables;
pub mod tasks;
pub mod tokens;
#[cfg(feature = "plots")]
pub mod verify_figure;
