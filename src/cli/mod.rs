//! Command-line surface: clap definitions and one function per subcommand. Thin: each command
//! parses its flags into a plain options struct, calls one `pipeline` job, and prints the result.

mod analyze;
mod canary;
mod capture;
#[cfg(feature = "tui")]
mod dash;
mod demo;
mod export;
mod fetch;
mod format;
mod generate;
mod heads;
mod info;
mod interrupt;
mod model_args;
mod needle;
mod policy_values;
mod progress;
mod quant;
mod stream;
mod survey;
mod verify;
mod watch;

use clap::{Parser, Subcommand};

use crate::error::Result;

#[derive(Parser, Debug)]
#[command(
    name = "sinkscope",
    version,
    about = "Where a transformer parks its attention, and what breaks when a KV cache throws those positions away"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The whole bundle for the default model (fetched on first use): capture, sink diagnosis with a
    /// causal sweep, sink-count sweep, then tables, figures and reports/demo/index.md.
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
    /// Classify KV heads as retrieval (whole cache) or streaming (sinks + recent window) from the
    /// attention each pays outside those keys; write DuoAttention-format gates.
    Heads(heads::HeadsArgs),
    /// Read a serving trace's per-token logprobs (JSONL, OpenAI/vLLM/llama.cpp responses,
    /// stream.json, CSV) and find sink loss: steps down in the rolling logprob just after an
    /// eviction. Exit status 3 when one is found (2 stays bad input).
    Watch(watch::WatchArgs),
    /// Hold a serving engine's trace (token ids and logprobs) against the exact simulator under
    /// the cache policy it declares: its noise floor before the first eviction, the differences
    /// after it, and the near misses (positions, pinned ± 1, W ± 1, discard amount, no eviction)
    /// ranked by fit. Exit status 3 when it diverges (2 stays bad input).
    Verify(verify::VerifyArgs),
    /// Pass-key retrieval under every cache policy: a random key hidden at each depth of prompts
    /// of each length, streamed through the policy's cache, scored by its rank among distractor
    /// keys, greedy exact match and answer NLL (resumable).
    Needle(needle::NeedleArgs),
    /// Fake-quantize activations at every linear projection's input (int8/int4; per-tensor,
    /// per-token, per-channel; dynamic or calibrated, with or without the first positions) and
    /// measure perplexity, NLL at the sink positions vs the rest, and SQNR per layer and site.
    Quant(quant::QuantArgs),
    /// Generate (or score a text) under a cache policy, logging per step the attention on the
    /// first four cache slots of every layer and the token log-probability; flag where the
    /// watched layer's mass collapses; write a trace `watch` reads.
    Canary(canary::CanaryArgs),
    /// Several models side by side: the probe-set diagnosis and sink-count sweeps per model
    /// (resumable), then one comparison table, page and figures.
    Survey(survey::SurveyArgs),
    /// Browse a run in the terminal: heads, heatmaps, sinks, activations and streaming curves
    /// (or compute one first with -m MODEL -f TEXT).
    #[cfg(feature = "tui")]
    Dash(dash::DashArgs),
    /// Write a run's Parquet tables, PNG/SVG figures and Markdown report (all four by default).
    Export(export::ExportArgs),
    /// Download catalog models by alias into the model cache, verified against their SHA-256.
    Fetch(fetch::FetchArgs),
    /// List the model aliases: size, architecture, where each is found or how it is fetched.
    Models(fetch::ModelsArgs),
}

/// Runs the command; the exit status it asks for (0 unless `watch` raises an alert).
pub fn run(cli: Cli) -> Result<u8> {
    // The dashboard owns the terminal (Ctrl-C is a key there); every other command cleans up.
    #[cfg(feature = "tui")]
    let interactive = matches!(cli.command, Command::Dash(_));
    #[cfg(not(feature = "tui"))]
    let interactive = false;
    if !interactive {
        interrupt::install();
    }
    let cli = match cli.command {
        Command::Watch(a) => return watch::run(a),
        Command::Verify(a) => return verify::run(a),
        _ => cli,
    };
    match cli.command {
        Command::Watch(_) | Command::Verify(_) => Ok(()),
        Command::Demo(a) => demo::run(a),
        Command::Info(a) => info::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::Stream(a) => stream::run_stream(a),
        Command::Recommend(a) => stream::run_recommend(a),
        Command::Heads(a) => heads::run(a),
        Command::Quant(a) => quant::run(a),
        Command::Canary(a) => canary::run(a),
        Command::Survey(a) => survey::run(a),
        Command::Needle(a) => needle::run(a),
        #[cfg(feature = "tui")]
        Command::Dash(a) => dash::run(a),
        Command::Export(a) => export::run(a),
        Command::Fetch(a) => fetch::run_fetch(a),
        Command::Models(a) => fetch::run_models(a),
    }
    .map(|()| 0)
}
