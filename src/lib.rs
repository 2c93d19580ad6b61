//! sinkscope: where a transformer language model parks its attention (attention sinks), which
//! hidden dimensions carry massive activations, and what a KV cache loses by evicting them.
//!
//! Layers, bottom to top. A module imports only modules of lower layers (never its own layer's
//! siblings, never a higher one), and no two files import each other through any chain;
//! `tests/layers.rs` reads this list and checks every `use crate::…` and inline path against it.
//!
//! - L0 `error`: one error type, one line per user-facing failure
//! - L1 `io` (atomic files, JSON, safetensors arrays, text input, serving traces) · `numerics` (SIMD dispatch, e^x, softmax, SwiGLU, token sampling, KV-cache number formats, Hadamard rotation)
//! - L2 `metrics`: the papers' definitions on plain numbers (α_k, massive activation, quantization risk and fake quantization, ΔNLL/KL, step detection, binomial intervals, rank correlation)
//! - L3 `model`: sources, model families (`family`), loaders, tokenizers, the hook vocabulary (`HookPoint`, `HookReceiver`), the decoder, NLL scoring
//! - L4 `capture` (reducers, heatmaps, memory estimate, capture, ablation and fake-quantization runs) · `kv` (cache policies, simulator, recommendation, canary, pass-key retrieval) · `probe` (probe sets)
//! - L5 `analysis`: pure functions from captured reductions to findings
//! - L6 `report`: run-directory records, the `Run` loader, tables, Parquet, figures, Markdown
//! - L7 `pipeline` (capture/analyze/stream/watch/canary/quant/survey/needle/demo jobs with plain options) · `tui` (the dashboard over a `Run`)
//! - L8 `cli`: clap parsing and printing over `pipeline` and `tui`
//!
//! References: Xiao et al. 2023 (StreamingLLM, attention sinks); Gu et al. 2024 ("When Attention
//! Sink Emerges", α_k and Sink_k^ε); Sun et al. 2024 (massive activations).

pub mod analysis;
pub mod capture;
pub mod cli;
pub mod error;
pub mod io;
pub mod kv;
pub mod metrics;
pub mod model;
pub mod numerics;
pub mod pipeline;
pub mod probe;
pub mod report;
#[cfg(feature = "tui")]
pub mod tui;

pub use error::{Error, Result};

/// This build's version (the one every run file records).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
