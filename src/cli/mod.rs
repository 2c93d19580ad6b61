//! Command-line surface: clap definitions and one function per subcommand. Thin: every command
//! is model → capture → report calls into the library.

mod analyze;
mod capture;
#[cfg(feature = "tui")]
mod dash;
mod demo;
mod export;
mod generate;
mod info;
mod stream;
mod text;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use generate::{generate, generate_text};

use crate::error::Result;
use crate::model::{LoadOptions, LoadedModel};

#[derive(Parser, Debug)]
#[command(name = "sinkscope", version, about = "Where a transformer parks its attention, and what breaks when a KV cache throws those positions away")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Capture the default model on a default text and print a per-layer table.
    Demo(demo::DemoArgs),
    /// Show a model's architecture, sizes, tokenizer and storage.
    Info(info::InfoArgs),
    /// Continue a prompt (greedy unless --temperature is given).
    Generate(generate::GenerateArgs),
    /// Run a text through the model with streaming reducers; write a JSON summary (and, with
    /// --save-tensors, full tensors of the selected hooks).
    Capture(capture::CaptureArgs),
    /// Diagnose sinks: sink positions, Sink_k^ε, F-Attn, massive activations, head classes,
    /// causal head dependency and quantization risk over a probe set (or one text).
    Analyze(analyze::AnalyzeArgs),
    /// Stream a text token by token under one KV-cache policy: per-token NLL, perplexity before
    /// and after the first eviction, the cliff, cache length, tokens/s.
    Stream(stream::StreamArgs),
    /// Sweep the number of sink tokens at a fixed cache budget (plus the recompute reference) and
    /// recommend how many this model needs.
    Recommend(stream::RecommendArgs),
    /// Browse a run in the terminal: heads, heatmaps, sinks, activations and streaming curves
    /// (or compute one first with -m MODEL -f TEXT).
    #[cfg(feature = "tui")]
    Dash(dash::DashArgs),
    /// Write a run's Parquet tables, PNG/SVG figures and Markdown report (all four by default).
    Export(export::ExportArgs),
}

/// Model selection shared by every command that loads one.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf file, a llama2.c .bin (tokenizer beside it), an HF directory, a hub id
    /// (owner/name, via the HF cache), or an alias: smollm2-135m, stories260k.
    #[arg(short = 'm', long = "model", default_value = crate::model::source::DEFAULT_MODEL)]
    pub model: String,
    /// Keep GGUF weights quantized for matmuls (faster, less memory, not exact). Default:
    /// dequantize everything to f32 so analysis is exact.
    #[arg(long)]
    pub quantized: bool,
    /// Use this tokenizer.json (or llama2.c tok*.bin) instead of the model's own.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
}

impl ModelArgs {
    pub fn load(&self) -> Result<LoadedModel> {
        crate::model::load(&self.model, &LoadOptions { quantized: self.quantized, tokenizer: self.tokenizer.clone() })
    }
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Info(a) => info::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::Stream(a) => stream::run_stream(a),
        Command::Recommend(a) => stream::run_recommend(a),
        #[cfg(feature = "tui")]
        Command::Dash(a) => dash::run(a),
        Command::Export(a) => export::run(a),
    }
}
