//! `sinkscope quant`: what fake activation quantization (int8/int4; per-tensor, per-token,
//! per-channel; dynamic or calibrated) does to a model's perplexity, at the sink positions and
//! elsewhere, and where in the network it adds the most noise.

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::session::Session;
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::metrics::quant::{QuantScheme, BIT_WIDTHS};
use crate::pipeline::quant::{quant_into, QuantOptions};

#[derive(Args, Debug)]
pub struct QuantArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The evaluated text (UTF-8), cut into --sequences sequences of --max-tokens tokens.
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Tokens per sequence; each runs from position 0 with nothing cached.
    #[arg(long, default_value_t = 512, value_parser = super::counts::at_least_one)]
    pub max_tokens: usize,
    /// Consecutive sequences cut from the text (each adds its first positions to the sink side).
    #[arg(long, default_value_t = 4, value_parser = super::counts::at_least_one)]
    pub sequences: usize,
    /// Integer widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,4", value_parser = parse_bits)]
    pub bits: Vec<u32>,
    /// Schemes, comma-separated: tensor_dynamic, token_dynamic, channel_static, tensor_static.
    #[arg(long, value_delimiter = ',', default_value = "tensor_dynamic,token_dynamic,channel_static,tensor_static", value_parser = parse_scheme)]
    pub schemes: Vec<QuantScheme>,
    /// Quantize the keys and values (the KV cache) too.
    #[arg(long)]
    pub kv: bool,
    /// Calibration text for the static schemes [default: the evaluated file's tokens after the
    /// evaluated sequences].
    #[arg(long)]
    pub calibrate: Option<PathBuf>,
    /// Also calibrate the static schemes without each calibration sequence's first k positions
    /// (the calibration set that under-samples attention sinks); 0 turns that off.
    #[arg(long, default_value_t = 4)]
    pub calib_skip_first: usize,
    /// Rows predicted from positions below this are the sink side of the NLL split.
    #[arg(long, default_value_t = 4)]
    pub sink_positions: usize,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write quant.json into this run directory (for `export` and `dash`).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

/// `--bits`' values: integer widths the fake quantization takes.
fn parse_bits(s: &str) -> std::result::Result<u32, String> {
    let bits = s.trim().parse::<u32>().map_err(|e| e.to_string())?;
    match BIT_WIDTHS.contains(&bits) {
        true => Ok(bits),
        false => Err(format!("{bits} is not a width between {} and {}", BIT_WIDTHS.start(), BIT_WIDTHS.end())),
    }
}

/// `--schemes`' values, by name.
fn parse_scheme(s: &str) -> std::result::Result<QuantScheme, String> {
    QuantScheme::parse(s).ok_or_else(|| format!("unknown scheme '{s}' (expected tensor_dynamic, token_dynamic, channel_static or tensor_static)"))
}

pub fn run(args: QuantArgs, s: &mut Session) -> Result<()> {
    let opts = QuantOptions {
        file: args.file,
        tokens: args.max_tokens,
        sequences: args.sequences,
        bits: args.bits,
        schemes: args.schemes,
        kv: args.kv,
        calibrate: args.calibrate,
        calib_skip_first: args.calib_skip_first,
        sink_positions: args.sink_positions,
    };
    opts.validate()?;
    let (lm, progress) = s.model(&args.model)?;
    let report = quant_into(lm, &opts, args.out.as_deref(), progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report, "the JSON printed")?);
        return Ok(());
    }
    println!(
        "{} × {} tokens of {}; sink side = predictions from positions < {}; static scales from {}",
        report.sequences, report.tokens_per_sequence, report.text_source, report.sink_positions, report.calibration.source
    );
    println!("{:<34} {:>12} {:>10} {:>10}  worst site (SQNR)   zeroed", "setting", "perplexity", "Δ sink", "Δ rest");
    println!("{:<34} {:>12.3} {:>10} {:>10}", "unquantized", report.baseline.ppl, "", "");
    for c in &report.cases {
        let worst =
            c.worst_site().map_or("-".to_string(), |w| format!("L{} {} {:.1} dB", w.layer, w.site.name(), w.sqnr_db.unwrap_or(f64::INFINITY)));
        let zeroed = c.mean_zero_share();
        println!("{:<34} {:>12.3} {:>+10.3} {:>+10.3}  {worst:<19} {:>5.1}%", c.label, c.nll.ppl, c.delta_sink, c.delta_rest, 100.0 * zeroed);
    }
    for f in report.findings() {
        println!("- {f}");
    }
    if let Some(dir) = &args.out {
        println!("quant.json in {}; `sinkscope export {}` writes the table, figure and report", dir.display(), dir.display());
    }
    Ok(())
}
