//! Model loading and the instrumented forward pass, with the hook vocabulary the pass pushes into
//! (`HookPoint`, `HookReceiver`). `load` turns a `-m MODEL` argument into a [`LoadedModel`]: the
//! decoder (any supported family), its tokenizer, and the facts `sinkscope info` shows. This module knows
//! nothing of analysis.

pub mod cache_rounding;
pub mod catalog;
pub mod decoder;
pub mod family;
pub mod fetch;
pub mod fit;
pub mod gguf;
pub mod gguf_config;
pub mod head_tally;
pub mod hf;
pub mod hf_fields;
mod hf_layers;
pub mod hook;
pub mod info;
mod kivi_stream;
pub mod llama2c;
pub mod load;
pub mod matmul;
pub mod policy_forward;
pub mod quant_blocks;
pub mod quant_matmul;
pub mod receiver;
pub mod rope;
pub mod scoring;
pub mod setting_rules;
pub mod source;
pub mod tokenizer;
pub mod unread;
pub mod verified;

pub use decoder::{Decoder, DecoderConfig, KeyMask, KvCache, Param};
pub use info::{ModelInfo, NllSummary, TokenInfo};
pub use load::{load, load_source, LoadOptions, LoadedModel};
pub use rope::RopeLayout;
pub use source::{resolve, ModelSource};
pub use tokenizer::Tokenizer;
pub use verified::weights_sha256;
