//! Orchestration: the library-level jobs the commands run — capture into a run directory, analyze
//! into a run, stream or sweep cache policies into a run, the demo bundle, generation — each taking
//! a plain options struct (never a clap struct) and reporting through [`progress::Progress`].

pub mod analyze;
pub mod canary;
pub mod capture;
pub mod demo;
pub mod generate;
pub mod heads;
pub mod needle;
pub mod needle_heads;
pub mod progress;
pub mod quant;
pub mod stream;
pub mod survey;
pub mod survey_parts;
pub mod verify;
pub mod watch;
