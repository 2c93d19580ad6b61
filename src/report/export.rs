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

/// Where a drawn figure goes: files, or an SVG text.
#[cfg(feature = "plots")]
trait FigureSink {
    fn take<F: super::plot::Figure>(&mut self, fig: &F) -> Result<()>;
}

/// Saves the figure to every path (the extension picks the format).
#[cfg(feature = "plots")]
struct Files<'a>(&'a [PathBuf]);

#[cfg(feature = "plots")]
impl FigureSink for Files<'_> {
    fn take<F: super::plot::Figure>(&mut self, fig: &F) -> Result<()> {
        self.0.iter().try_for_each(|p| super::plot::save(fig, p))
    }
}

/// Keeps the figure as SVG text.
#[cfg(feature = "plots")]
struct SvgText(Option<String>);

#[cfg(feature = "plots")]
impl FigureSink for SvgText {
    fn take<F: super::plot::Figure>(&mut self, fig: &F) -> Result<()> {
        self.0 = Some(super::plot::svg_string(fig)?);
        Ok(())
    }
}

/// Builds the figure of `spec` once and hands it to `sink`; false when the run lacks its data.
#[cfg(feature = "plots")]
fn draw<S: FigureSink>(run: &Run, spec: &FigureSpec, sink: &mut S) -> Result<bool> {
    use super::bundle::FigureKind;
    use super::figures;
    use super::plot::{Figure, Scale};
    fn give<F: Figure, S: FigureSink>(fig: Option<F>, sink: &mut S) -> Result<bool> {
        let Some(fig) = fig else { return Ok(false) };
        sink.take(&fig)?;
        Ok(true)
    }
    match spec.kind {
        FigureKind::Grid(k) => give(figures::alpha_grid(run, k), sink),
        FigureKind::Heatmap(l, h, log) => give(figures::head_heatmap(run, l, h, if log { Scale::Log } else { Scale::Linear }), sink),
        FigureKind::Early(l, h) => give(figures::head_early(run, l, h), sink),
        FigureKind::Layers => give(figures::layer_magnitudes(run), sink),
        FigureKind::Massive => give(figures::massive_dims(run, 24), sink),
        FigureKind::Ppl => give(figures::ppl_curves(run), sink),
        FigureKind::PplAfterEviction => give(figures::ppl_after_eviction(run), sink),
        FigureKind::PerHeadFrontier => give(figures::per_head_frontier(run), sink),
        FigureKind::KeptFirst => give(figures::kept_first(run), sink),
        FigureKind::QuantNll(bits) => give(figures::quant_nll(run, bits), sink),
        FigureKind::QuantSqnr(bits) => give(figures::quant_sqnr(run, bits), sink),
        FigureKind::NeedlePolicy(i) => give(run.needle.as_ref().and_then(|n| super::needle::heatmaps(n).into_iter().nth(i).map(|h| h.1)), sink),
        FigureKind::NeedleDistance => give(run.needle.as_ref().map(super::needle::accuracy_by_distance), sink),
        FigureKind::NeedleHeads => give(run.needle.as_ref().and_then(super::needle::heads_grid), sink),
        FigureKind::CacheFrontier => give(run.stream.as_ref().and_then(|s| super::cache_error::frontier_chart(s, &run.model_name())), sink),
        FigureKind::CacheErrorHeads => give(run.stream.as_ref().and_then(|s| super::cache_error::moved_grid(s, &run.model_name())), sink),
    }
}

#[cfg(feature = "plots")]
fn draw_files(run: &Run, spec: &FigureSpec, paths: &[PathBuf]) -> Result<bool> {
    draw(run, spec, &mut Files(paths))
}

#[cfg(not(feature = "plots"))]
fn draw_files(_: &Run, _: &FigureSpec, _: &[PathBuf]) -> Result<bool> {
    Err(crate::error::Error::input("this sinkscope was built without the `plots` feature; rebuild with default features for --png/--svg"))
}

/// The run's figures (those `export` would draw with `opts`) as SVG text: (file stem, caption,
/// SVG), only the stems in `only` when given — for notebooks, which show them inline.
#[cfg(feature = "plots")]
pub fn figure_svgs(run: &Run, opts: &ExportOptions, only: Option<&[String]>) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for spec in figure_specs(run, opts).into_iter().filter(|s| only.is_none_or(|o| o.contains(&s.stem))) {
        let mut svg = SvgText(None);
        if draw(run, &spec, &mut svg)? {
            if let Some(text) = svg.0 {
                out.push((spec.stem, spec.caption, text));
            }
        }
    }
    Ok(out)
}

/// Every table of the run, in `export`'s order: the run's own, its quantized cache's, then its
/// needle sweep's, its presses' and its task sweep's (report::cache_error, report::needle,
/// report::press and report::tasks build on report::tables).
pub fn run_tables(run: &Run) -> Vec<Table> {
    let own = tables(run).into_iter().chain(super::cache_error::tables(run));
    own.chain(run.needle.iter().flat_map(super::needle::tables))
        .chain(run.press.iter().flat_map(super::press::tables))
        .chain(run.tasks.iter().flat_map(super::tasks::tables))
        .collect()
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
    let all_tables = match opts.parquet || opts.md {
        true => run_tables(run),
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
            if draw_files(run, spec, &staged)? {
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
