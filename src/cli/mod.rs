//! Command-line surface: clap definitions and one function per subcommand. Thin: each command
//! parses its flags into a plain options struct, calls one `pipeline` job in its [`Session`] (the
//! terminal, or a caller such as the Python package holding a loaded model), and prints the result
//! when the session prints.

mod analyze;
mod cache_format_args;
mod canary;
mod capture;
mod counts;
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
mod policy_args;
mod policy_values;
mod press;
mod progress;
mod quant;
pub mod session;
mod stream;
mod survey;
mod tasks;
pub mod usage;
mod verify;
mod watch;

use clap::{Parser, Subcommand};

use crate::error::Result;
use session::Session;

#[derive(Parser, Debug)]
#[command(
    name = "sinkscope",
    version,
    about = "Where a transformer parks its attention, and what breaks when a KV cache throws those positions away"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Start the -o directory afresh when it holds another model's results (their records and
    /// arrays are replaced at the end); without it such a directory is refused.
    #[arg(long, global = true)]
    pub replace: bool,
    /// The command line as given (without the program name), logged in the run directories the
    /// command writes (`io::run_log`).
    #[arg(skip)]
    pub argv: Vec<String>,
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
    /// Compress one prompt's context once as kvpress does (its presses by name; PyramidKV,
    /// AdaKV, ChunkKV blocks and key re-rotation as flags), append the question and answer, and
    /// score the answer against the uncompressed one; what each (layer, KV head) kept.
    Press(press::PressArgs),
    /// RULER-style tasks generated from a text (pass key, several keys, several values, variable
    /// tracking, common words), every prompt uncompressed and under each press (± pinned sinks,
    /// blocks, AdaKV, query-aware), scored by the truth's rank, greedy exact match and NLL.
    Tasks(tasks::TasksArgs),
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

/// Parses a command line (`argv` without the program name) as the binary does; a usage error,
/// `--help` included, is one line.
pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> Result<Cli> {
    let argv: Vec<String> = argv.into_iter().collect();
    let mut cli: Cli = usage::parse_from(argv.clone())?;
    cli.argv = argv;
    Ok(cli)
}

/// Runs the command in the terminal; the exit status it asks for (0 unless `watch` or `verify`
/// raises an alert).
pub fn run(cli: Cli) -> Result<u8> {
    // The dashboard owns the terminal (Ctrl-C is a key there); every other command cleans up.
    #[cfg(feature = "tui")]
    let interactive = matches!(cli.command, Command::Dash(_));
    #[cfg(not(feature = "tui"))]
    let interactive = false;
    if !interactive {
        interrupt::install();
    }
    // What the command kept stays recorded until the process exits: a Ctrl-C after the commit,
    // before the exit, must say the results were written (they are), not that nothing was kept.
    run_command(cli, &mut Session::terminal())
}

/// Runs one command for a caller that runs many in one process (the Python package): afterwards
/// it holds no directory and remembers nothing the command kept.
pub fn run_in(cli: Cli, s: &mut Session) -> Result<u8> {
    let result = run_command(cli, s);
    if result.is_err() {
        // As the binary's main does: a failed command leaves no new, empty -o directory.
        crate::io::staging::discard_created_dirs();
    }
    crate::io::run_dir::release_all();
    crate::io::run_log::set_command_line(Vec::new());
    crate::io::staging::end_command();
    result
}

/// Runs the command in `session` (the terminal, or a caller holding a loaded model).
fn run_command(cli: Cli, s: &mut Session) -> Result<u8> {
    let writes_a_run = matches!(
        cli.command,
        Command::Demo(_)
            | Command::Capture(_)
            | Command::Analyze(_)
            | Command::Stream(_)
            | Command::Recommend(_)
            | Command::Needle(_)
            | Command::Press(_)
            | Command::Tasks(_)
            | Command::Heads(_)
            | Command::Canary(_)
            | Command::Quant(_)
            | Command::Verify(_)
    );
    if cli.replace && !writes_a_run {
        return Err(crate::error::Error::input(
            "--replace applies to the commands that write a model's run (-o): demo, capture, analyze, stream, recommend, needle, press, tasks, heads, canary, quant and verify",
        ));
    }
    crate::io::run_dir::set_replace(cli.replace);
    crate::io::run_log::set_command_line(std::iter::once("sinkscope".to_string()).chain(cli.argv.iter().cloned()).collect());
    dispatch(cli, s)
}

fn dispatch(cli: Cli, s: &mut Session) -> Result<u8> {
    let cli = match cli.command {
        Command::Watch(a) => return watch::run(a, s),
        Command::Verify(a) => return verify::run(a, s),
        _ => cli,
    };
    // The rest need the terminal, or load or fetch models of their own.
    match cli.command {
        Command::Watch(_) | Command::Verify(_) => Ok(()),
        Command::Demo(a) => s.needs_terminal("demo").and_then(|()| demo::run(a)),
        Command::Info(a) => s.needs_terminal("info").and_then(|()| info::run(a)),
        Command::Generate(a) => s.needs_terminal("generate").and_then(|()| generate::run(a)),
        #[cfg(feature = "tui")]
        Command::Dash(a) => s.needs_terminal("dash").and_then(|()| dash::run(a)),
        Command::Fetch(a) => s.needs_terminal("fetch").and_then(|()| fetch::run_fetch(a)),
        Command::Models(a) => s.needs_terminal("models").and_then(|()| fetch::run_models(a)),
        Command::Capture(a) => capture::run(a, s),
        Command::Analyze(a) => analyze::run(a, s),
        Command::Stream(a) => stream::run_stream(a, s),
        Command::Recommend(a) => stream::run_recommend(a, s),
        Command::Heads(a) => heads::run(a, s),
        Command::Quant(a) => quant::run(a, s),
        Command::Canary(a) => canary::run(a, s),
        Command::Survey(a) => survey::run(a, s),
        Command::Needle(a) => needle::run(a, s),
        Command::Press(a) => press::run(a, s),
        Command::Tasks(a) => tasks::run(a, s),
        Command::Export(a) => export::run(a, s),
    }
    .map(|()| 0)
}
