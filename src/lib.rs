//! sinkscope: where a transformer language model parks its attention (attention sinks), which
//! hidden dimensions carry massive activations, and what a KV cache loses by evicting them.
//!
//! Modules in data-flow order: [`model`] (loading + instrumented forward) and [`probe`] (what to
//! run) → [`capture`] (hook names, sinks, streaming reducers, the capture and ablation runs) →
//! [`analysis`] (sink metrics, massive activations, head classes, dependency) → [`report`] (serde
//! records, atomic files) → [`cli`].
//!
//! References: Xiao et al. 2023 (StreamingLLM, attention sinks); Gu et al. 2024 ("When Attention
//! Sink Emerges", α_k and Sink_k^ε); Sun et al. 2024 (massive activations).

pub mod error;
pub mod serde_nan;
pub mod simd;
pub mod textfile;
pub mod model;
pub mod probe;
pub mod capture;
pub mod analysis;
pub mod kv;
pub mod report;
#[cfg(feature = "tui")]
pub mod tui;
pub mod cli;

pub use error::{Error, Result};
