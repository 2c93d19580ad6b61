//! `sinkscope info MODEL [--json]`.

use clap::Args;

use crate::error::Result;
use crate::model::{LoadOptions, ModelInfo};

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Model path, hub id or alias (see `capture --help`).
    #[arg(default_value = crate::model::source::DEFAULT_MODEL)]
    pub model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InfoArgs) -> Result<()> {
    let lm = crate::model::load(&args.model, &LoadOptions::default())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&lm.info)?);
    } else {
        print!("{}", format_info(&lm.info));
    }
    Ok(())
}

pub fn format_info(i: &ModelInfo) -> String {
    let rows: Vec<(&str, String)> = vec![
        ("source", format!("{} ({})", i.source, i.format)),
        ("name", i.name.clone().unwrap_or_else(|| "-".into())),
        ("architecture", i.architecture.clone()),
        ("layers", i.n_layers.to_string()),
        ("heads", format!("{} (kv heads {}, head size {})", i.n_heads, i.n_kv_heads, i.d_head)),
        ("d_model", i.d_model.to_string()),
        ("d_ff", i.d_ff.to_string()),
        ("context", i.context_len.to_string()),
        ("vocab", i.vocab_size.to_string()),
        ("tokenizer", format!("{}{}", i.tokenizer, if i.adds_bos { ", adds BOS" } else { ", no BOS" })),
        ("quantization", i.quantization.clone()),
        ("compute", i.compute.to_string()),
        ("rope", format!("{}, theta {}", i.rope_layout, i.rope_theta)),
        ("rms eps", format!("{:e}", i.rms_eps)),
        ("embeddings", if i.tied_embeddings { "tied".into() } else { "untied".into() }),
        ("parameters", format!("{:.1}M", i.n_params as f64 / 1e6)),
    ];
    rows.iter().map(|(k, v)| format!("{k:<13} {v}\n")).collect()
}
