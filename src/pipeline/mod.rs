//! Orchestration: the library-level jobs the commands run — capture into a run directory, analyze
//! into a run, stream or sweep cache policies into a run, the demo bundle, generation — each taking
//! a plain options struct (never a clap struct) and reporting through [`progress::Progress`].

pub mod analyze;
pub mod cache_frontier;
pub mod canary;
pub mod capture;
pub mod demo;
pub mod generate;
pub mod heads;
pub mod needle;
pub mod needle_heads;
pub mod press;
pub mod progress;
pub mod quant;
pub mod stream;
pub mod survey;
pub mod survey_parts;
pub mod tasks;
pub mod verify;
pub mod watch;

/// Fingerprints the model and claims the run directory `out` for it, before the work starts: a
/// second command writing there, or a directory holding another model's results (without
/// `--replace`), is refused now rather than after minutes of computing (`io::run_dir`).
pub fn claim_out(lm: &mut crate::model::LoadedModel, out: Option<&std::path::Path>) -> crate::error::Result<()> {
    lm.fingerprint()?;
    let Some(out) = out else { return Ok(()) };
    let sha256 = lm.info.sha256.clone().unwrap_or_default();
    crate::io::staging::claim(out, Some(crate::io::run_dir::Owner { sha256: &sha256, source: &lm.info.source }))
}

/// Stages `tables` as `tables/<name>.parquet` in a run being written (a command that writes its
/// own tables beside its record: `needle`, `press`).
#[cfg(feature = "parquet")]
pub(crate) fn stage_tables(stage: &crate::io::staging::Staging, tables: Vec<crate::report::tables::Table>) -> crate::error::Result<()> {
    for table in tables {
        crate::report::parquet::write_table(&table, &stage.path(format!("tables/{}.parquet", table.name))?)?;
    }
    Ok(())
}
