//! `export`: a run directory → `tables/*.parquet`, `figures/*.{png,svg}` and `index.md`, beside
//! the run's own files. Decides the file names; the table, figure and Markdown modules do the rest.

use std::path::{Path, PathBuf};

use super::figures;
use super::run::Run;
use super::tables::{tables, Table};
use crate::error::{Error, Result};

pub const TABLES_DIR: &str = "tables";
pub const FIGURES_DIR: &str = "figures";
pub const INDEX_FILE: &str = "index.md";

#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    pub parquet: bool,
    pub png: bool,
    pub svg: bool,
    pub md: bool,
    /// Heads that get heatmaps (default: [`figures::default_heads`]).
    pub heads: Option<Vec<(usize, usize)>>,
    /// Key positions that get an α grid (default: [`figures::grid_keys`]).
    pub grid_keys: Option<Vec<usize>>,
}

/// One figure of a run: its file stem under figures/ and what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureSpec {
    pub stem: String,
    pub caption: String,
    kind: FigureKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum FigureKind {
    Grid(usize),
    Heatmap(usize, usize, bool),
    Early(usize, usize),
    Layers,
    Massive,
    Ppl,
}

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

/// The figures this run has data for, in reading order.
pub fn figure_specs(run: &Run, opts: &ExportOptions) -> Vec<FigureSpec> {
    let mut specs = Vec::new();
    let heads = opts.heads.as_deref();
    if figures::head_alphas(run).is_some() {
        for k in opts.grid_keys.clone().unwrap_or_else(|| figures::grid_keys(run)) {
            specs.push(FigureSpec { stem: format!("alpha-grid-k{k}"), caption: format!("Attention every head pays to position {k} (α_{k}), layer × head"), kind: FigureKind::Grid(k) });
        }
    }
    if let Some(maps) = &run.heatmaps {
        let default = figures::default_heads(run);
        let chosen = heads.map_or(default, <[_]>::to_vec);
        for (l, h) in chosen.into_iter().filter(|&(l, h)| l < maps.n_layers && h < maps.n_heads) {
            specs.push(FigureSpec { stem: format!("heatmap-L{l}-H{h}-log"), caption: format!("Layer {l} head {h}: query × key attention, log colour scale"), kind: FigureKind::Heatmap(l, h, true) });
            specs.push(FigureSpec { stem: format!("heatmap-L{l}-H{h}-linear"), caption: format!("Layer {l} head {h}: query × key attention, linear colour scale"), kind: FigureKind::Heatmap(l, h, false) });
            specs.push(FigureSpec { stem: format!("heatmap-L{l}-H{h}-first{}", maps.first_keys), caption: format!("Layer {l} head {h}: attention on the first {} keys", maps.first_keys), kind: FigureKind::Early(l, h) });
        }
    }
    if run.capture.is_some() {
        specs.push(FigureSpec { stem: "layer-magnitudes".into(), caption: "Activation magnitudes per layer (max |h|, median |h|, residual norms; log scale)".into(), kind: FigureKind::Layers });
    }
    if run.reductions.as_ref().is_some_and(|r| r.get("max_abs_by_dim", 2).is_some()) {
        specs.push(FigureSpec { stem: "massive-dims".into(), caption: "Hidden dims with the largest |h| (massive activations above the dashed line)".into(), kind: FigureKind::Massive });
    }
    if run.stream.is_some() {
        specs.push(FigureSpec { stem: "ppl-curves".into(), caption: "Perplexity while streaming under each cache policy, first eviction marked".into(), kind: FigureKind::Ppl });
    }
    specs
}

/// Builds the figure of `spec` once and saves it to every path; false when the run lacks its data.
#[cfg(feature = "plots")]
fn draw(run: &Run, spec: &FigureSpec, paths: &[PathBuf]) -> Result<bool> {
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
    }
}

#[cfg(not(feature = "plots"))]
fn draw(_: &Run, _: &FigureSpec, _: &[PathBuf]) -> Result<bool> {
    Err(Error::input("this sinkscope was built without the `plots` feature; rebuild with default features for --png/--svg"))
}

#[cfg(feature = "parquet")]
fn write_table(table: &Table, path: &Path) -> Result<()> {
    super::parquet::write_table(table, path)
}

#[cfg(not(feature = "parquet"))]
fn write_table(_: &Table, _: &Path) -> Result<()> {
    Err(Error::input("this sinkscope was built without the `parquet` feature; rebuild with default features for --parquet"))
}

fn make_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot create ({e})")))
}

pub fn export(run: &Run, opts: &ExportOptions) -> Result<Exported> {
    let mut out = Exported::default();
    let all_tables = if opts.parquet || opts.md { tables(run) } else { Vec::new() };
    let specs = figure_specs(run, opts);
    if opts.parquet {
        let dir = run.dir.join(TABLES_DIR);
        make_dir(&dir)?;
        for t in &all_tables {
            let path = dir.join(format!("{}.parquet", t.name));
            write_table(t, &path)?;
            out.tables.push((t.name.to_string(), path, t.n_rows()));
        }
    }
    if opts.png || opts.svg {
        let dir = run.dir.join(FIGURES_DIR);
        make_dir(&dir)?;
        let exts: Vec<&str> = [(opts.png, "png"), (opts.svg, "svg")].into_iter().filter(|x| x.0).map(|x| x.1).collect();
        for spec in &specs {
            let paths: Vec<PathBuf> = exts.iter().map(|ext| dir.join(format!("{}.{ext}", spec.stem))).collect();
            if draw(run, spec, &paths)? {
                out.figures.extend(paths);
            }
        }
    }
    if opts.md {
        let path = run.dir.join(INDEX_FILE);
        let text = super::markdown::index(run, &specs, &all_tables);
        super::write_atomic(&path, text.as_bytes())?;
        out.index = Some(path);
    }
    Ok(out)
}
