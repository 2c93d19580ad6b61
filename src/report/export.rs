//! `export`: a run directory → `tables/*.parquet`, `figures/*.{png,svg}` and `index.md`, beside
//! the run's own files, as [`super::bundle`] names them; the table, figure and Markdown modules do
//! the rest.

use std::path::{Path, PathBuf};

use super::bundle::{figure_specs, ExportOptions, FigureSpec, FIGURES_DIR, INDEX_FILE, TABLES_DIR};
use super::markdown;
use super::run::Run;
use super::tables::{tables, Table};
use crate::error::Result;
use crate::io::staging::Staging;
use crate::io::write_atomic;

/// What `export` wrote.
#[derive(Debug, Clone, Default)]
pub struct Exported {
    /// (table name, file, rows)
    pub tables: Vec<(String, PathBuf, usize)>,
    pub figures: Vec<PathBuf>,
    pub index: Option<PathBuf>,
}

impl Exported {
    pub fn files(&self) -> Vec<PathBuf> {
        self.tables.iter().map(|t| t.1.clone()).chain(self.figures.iter().cloned()).chain(self.index.clone()).collect()
    }
}

/// Builds the figure of `spec` once and saves it to every path; false when the run lacks its data.
#[cfg(feature = "plots")]
fn draw(run: &Run, spec: &FigureSpec, paths: &[PathBuf]) -> Result<bool> {
    use super::bundle::FigureKind;
    use super::figures;
    use super::plot::{save, Figure, Scale};
    fn save_all<F: Figure>(fig: Option<F>, paths: &[PathBuf]) -> Result<bool> {
        let Some(fig) = fig else { return Ok(false) };
        paths.iter().try_for_each(|p| save(&fig, p))?;
        Ok(true)
    }
    match spec.kind {
        FigureKind::Grid(k) => save_all(figures::alpha_grid(run, k), paths),
        FigureKind::Heatmap(l, h, log) => save_all(figures::head_heatmap(run, l, h, if log { Scale::Log } else { Scale::Linear }), paths),
        FigureKind::Early(l, h) => save_all(figures::head_early(run, l, h), paths),
        FigureKind::Layers => save_all(figures::layer_magnitudes(run), paths),
        FigureKind::Massive => save_all(figures::massive_dims(run, 24), paths),
        FigureKind::Ppl => save_all(figures::ppl_curves(run), paths),
        FigureKind::PplAfterEviction => save_all(figures::ppl_after_eviction(run), paths),
        FigureKind::PerHeadFrontier => save_all(figures::per_head_frontier(run), paths),
        FigureKind::KeptFirst => save_all(figures::kept_first(run), paths),
        FigureKind::QuantNll(bits) => save_all(figures::quant_nll(run, bits), paths),
        FigureKind::QuantSqnr(bits) => save_all(figures::quant_sqnr(run, bits), paths),
        FigureKind::NeedlePolicy(i) => save_all(run.needle.as_ref().and_then(|n| super::needle::heatmaps(n).into_iter().nth(i).map(|h| h.1)), paths),
        FigureKind::NeedleDistance => save_all(run.needle.as_ref().map(super::needle::accuracy_by_distance), paths),
        FigureKind::NeedleHeads => save_all(run.needle.as_ref().and_then(super::needle::heads_grid), paths),
    }
}

#[cfg(not(feature = "plots"))]
fn draw(_: &Run, _: &FigureSpec, _: &[PathBuf]) -> Result<bool> {
    Err(crate::error::Error::input("this sinkscope was built without the `plots` feature; rebuild with default features for --png/--svg"))
}

#[cfg(feature = "parquet")]
fn write_table(table: &Table, path: &Path) -> Result<()> {
    super::parquet::write_table(table, path)
}

#[cfg(not(feature = "parquet"))]
fn write_table(_: &Table, _: &Path) -> Result<()> {
    Err(crate::error::Error::input("this sinkscope was built without the `parquet` feature; rebuild with default features for --parquet"))
}

/// Writes the run's tables, figures and index.md; they land in the run directory together, when
/// everything is written (an interrupted export leaves it as it was).
pub fn export(run: &Run, opts: &ExportOptions) -> Result<Exported> {
    let mut out = Exported::default();
    // The run's tables, then its needle sweep's (report::needle builds on report::tables).
    let all_tables = match opts.parquet || opts.md {
        true => tables(run).into_iter().chain(run.needle.iter().flat_map(super::needle::tables)).collect(),
        false => Vec::new(),
    };
    let specs = figure_specs(run, opts);
    let stage = Staging::begin(&run.dir)?;
    if opts.parquet {
        for t in &all_tables {
            let rel = Path::new(TABLES_DIR).join(format!("{}.parquet", t.name));
            write_table(t, &stage.path(&rel)?)?;
            out.tables.push((t.name.to_string(), run.dir.join(rel), t.n_rows()));
        }
    }
    if opts.png || opts.svg {
        let exts: Vec<&str> = [(opts.png, "png"), (opts.svg, "svg")].into_iter().filter(|x| x.0).map(|x| x.1).collect();
        for spec in &specs {
            let rels: Vec<PathBuf> = exts.iter().map(|ext| Path::new(FIGURES_DIR).join(format!("{}.{ext}", spec.stem))).collect();
            let staged = rels.iter().map(|r| stage.path(r)).collect::<Result<Vec<_>>>()?;
            if draw(run, spec, &staged)? {
                out.figures.extend(rels.iter().map(|r| run.dir.join(r)));
            }
        }
    }
    if opts.md {
        let text = markdown::index(run, &specs, &all_tables, &|rel: &Path| stage.has(rel));
        write_atomic(&stage.path(INDEX_FILE)?, text.as_bytes())?;
        out.index = Some(run.dir.join(INDEX_FILE));
    }
    stage.commit()?;
    Ok(out)
}
