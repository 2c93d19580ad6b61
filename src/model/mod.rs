//! Model loading and the instrumented forward pass, with the hook vocabulary the pass pushes into
//! (`HookPoint`, `CaptureSink`). `load` turns a `-m MODEL` argument into a [`LoadedModel`]: the
//! Llama-family network, its tokenizer, and the facts `sinkscope info` shows. This module knows
//! nothing of analysis.

pub mod catalog;
pub mod fetch;
pub mod gguf;
pub mod hf;
pub mod hook;
pub mod info;
pub mod llama;
pub mod llama2c;
pub mod load;
pub mod matmul;
pub mod rope;
pub mod scoring;
pub mod sink;
pub mod source;
pub mod tokenizer;
pub mod windowed;

pub use info::{ModelInfo, NllSummary, TokenInfo};
pub use llama::{KeyMask, KvCache, Llama, LlamaConfig, Param};
pub use load::{load, load_source, weights_sha256, LoadOptions, LoadedModel};
pub use rope::RopeLayout;
pub use source::{resolve, ModelSource};
pub use tokenizer::Tokenizer;
