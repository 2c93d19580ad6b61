//! `sinkscope fetch ALIAS…` (download and verify catalog models) and `sinkscope models` (what
//! each alias is, where it was found or how it would be fetched).

use clap::Args;

use super::progress::TerminalProgress;
use crate::error::{Error, Result};
use crate::io::finite_json::to_pretty;
use crate::model::catalog::{human_bytes, lookup, CatalogEntry, CATALOG};
use crate::model::fetch::{download_dir, fetch, offline_from_env};
use crate::model::source::find_alias;

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Aliases to download (see `sinkscope models`).
    #[arg(required = true)]
    pub aliases: Vec<String>,
    /// Never download: only check that each file is already in the model cache, verified.
    #[arg(long)]
    pub offline: bool,
}

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run_fetch(args: FetchArgs) -> Result<()> {
    let entries: Vec<&CatalogEntry> = args
        .aliases
        .iter()
        .map(|a| {
            lookup(a).ok_or_else(|| {
                Error::input(format!("unknown alias '{a}'; known: {}", CATALOG.iter().map(|e| e.alias).collect::<Vec<_>>().join(", ")))
            })
        })
        .collect::<Result<_>>()?;
    for entry in entries {
        let path = fetch(entry, args.offline || offline_from_env(), &mut TerminalProgress::new())?;
        println!("{}  {}  ({}, SHA-256 verified)", entry.alias, path.display(), human_bytes(entry.bytes));
    }
    Ok(())
}

/// Where each source of `entry` is, in the order they are tried.
fn sources(entry: &CatalogEntry) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(h) = entry.hub {
        out.push(format!("hub {}@{} {}", h.repo, &h.revision[..12], h.file));
    }
    if !entry.registry.is_empty() {
        out.push(format!("registry {}", entry.registry.iter().map(|p| format!("{}=={}", p.package, p.version)).collect::<Vec<_>>().join(" + ")));
    }
    out
}

pub fn run_models(args: ModelsArgs) -> Result<()> {
    let cache = download_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "-".into());
    if args.json {
        let rows: Vec<serde_json::Value> = CATALOG
            .iter()
            .map(|e| {
                serde_json::json!({
                    "alias": e.alias, "file": e.file, "bytes": e.bytes, "sha256": e.sha256,
                    "architecture": e.architecture, "about": e.about,
                    "found": find_alias(e).found.map(|p| p.display().to_string()),
                    "sources": sources(e), "note": e.note,
                })
            })
            .collect();
        println!("{}", to_pretty(&serde_json::json!({ "download_dir": cache, "models": rows }), "the JSON printed")?);
        return Ok(());
    }
    println!("{:<14} {:>9}  {:<10} where", "alias", "size", "arch");
    for e in &CATALOG {
        let lookup = find_alias(e);
        let place = match (lookup.found, sources(e)) {
            (Some(p), _) => format!("found: {}", p.display()),
            (None, _) if !lookup.rejected.is_empty() => {
                format!("{} has its size but not its SHA-256 (damaged or another model)", lookup.rejected[0].0.display())
            }
            (None, s) if s.is_empty() => format!("not found; no pinned download: {}", e.note),
            (None, s) => format!("not found; `sinkscope fetch {}` downloads it from {}", e.alias, s.join(", else ")),
        };
        println!("{:<14} {:>9}  {:<10} {place}", e.alias, human_bytes(e.bytes), e.architecture);
        println!("{:<14} {:>9}  {:<10} {}", "", "", "", e.about);
    }
    println!("\ndownloads go to {cache} (SINKSCOPE_MODELS overrides); HF_HUB_OFFLINE=1 or --offline never downloads");
    Ok(())
}
