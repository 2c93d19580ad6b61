//! What an export bundle holds and where: the directory and file names under a run directory, the
//! export options, and the figures a run has data for, in reading order.

use super::figures;
use super::run::Run;

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
    pub(crate) kind: FigureKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FigureKind {
    Grid(usize),
    Heatmap(usize, usize, bool),
    Early(usize, usize),
    Layers,
    Massive,
    Ppl,
    PplAfterEviction,
    PerHeadFrontier,
    KeptFirst,
    /// `quant`'s NLL increase by position at one bit width.
    QuantNll(u32),
    /// `quant`'s lowest SQNR per layer at one bit width.
    QuantSqnr(u32),
    /// `needle`'s depth × length heatmap of one policy (its index), accuracy by distance, and
    /// which heads retrieve.
    NeedlePolicy(usize),
    NeedleDistance,
    NeedleHeads,
    /// `stream --kl`'s attention moved off the sinks per head.
    CacheErrorHeads,
    /// `recommend --cache-types`' perplexity against memory.
    CacheFrontier,
}

/// The figures this run has data for, in reading order.
pub fn figure_specs(run: &Run, opts: &ExportOptions) -> Vec<FigureSpec> {
    let mut specs = Vec::new();
    head_specs(run, opts, &mut specs);
    record_specs(run, &mut specs);
    quant_and_needle_specs(run, &mut specs);
    specs
}

fn spec(stem: impl Into<String>, caption: impl Into<String>, kind: FigureKind) -> FigureSpec {
    FigureSpec { stem: stem.into(), caption: caption.into(), kind }
}

/// α grids and the chosen heads' heatmaps.
fn head_specs(run: &Run, opts: &ExportOptions, specs: &mut Vec<FigureSpec>) {
    let heads = opts.heads.as_deref();
    if figures::head_alphas(run).is_some() {
        for k in opts.grid_keys.clone().unwrap_or_else(|| figures::grid_keys(run)) {
            specs.push(spec(
                format!("alpha-grid-k{k}"),
                format!("Attention every head pays to position {k} (α_{k}), layer × head"),
                FigureKind::Grid(k),
            ));
        }
    }
    if let Some(maps) = &run.heatmaps {
        let default = figures::default_heads(run);
        let chosen = heads.map_or(default, <[_]>::to_vec);
        for (l, h) in chosen.into_iter().filter(|&(l, h)| l < maps.n_layers && h < maps.n_heads) {
            specs.push(spec(
                format!("heatmap-L{l}-H{h}-log"),
                format!("Layer {l} head {h}: query × key attention, log colour scale"),
                FigureKind::Heatmap(l, h, true),
            ));
            specs.push(spec(
                format!("heatmap-L{l}-H{h}-linear"),
                format!("Layer {l} head {h}: query × key attention, linear colour scale"),
                FigureKind::Heatmap(l, h, false),
            ));
            specs.push(spec(
                format!("heatmap-L{l}-H{h}-first{}", maps.first_keys),
                format!("Layer {l} head {h}: attention on the first {} keys", maps.first_keys),
                FigureKind::Early(l, h),
            ));
        }
    }
}

/// Activation magnitudes and the streaming records' figures.
fn record_specs(run: &Run, specs: &mut Vec<FigureSpec>) {
    if run.capture.is_some() {
        specs.push(spec("layer-magnitudes", "Activation magnitudes per layer (max |h|, median |h|, residual norms; log scale)", FigureKind::Layers));
    }
    if run.reductions.as_ref().is_some_and(|r| r.get("max_abs_by_dim", 2).is_some()) {
        specs.push(spec("massive-dims", "Hidden dims with the largest |h| (massive activations above the dashed line)", FigureKind::Massive));
    }
    if run.stream.is_some() {
        specs.push(spec("ppl-curves", "Perplexity while streaming under each cache policy, first eviction marked", FigureKind::Ppl));
    }
    if run.stream.as_ref().is_some_and(|s| s.recommendation.is_some()) {
        specs.push(spec(
            "ppl-after-eviction",
            "Perplexity after the first eviction per policy, recommended S highlighted, sampled values with their 95% interval",
            FigureKind::PplAfterEviction,
        ));
    }
    if !super::figures::unpinned_kept(run).is_empty() {
        specs.push(spec("kept-first", "How often score-based policies with nothing pinned keep each of the first positions", FigureKind::KeptFirst));
    }
    if run.stream.as_ref().is_some_and(|s| s.cache_error_by_head.is_some()) {
        specs.push(spec(
            "cache-error-heads",
            "Attention the rounding cache moves off the sink positions, per head (layer × head)",
            FigureKind::CacheErrorHeads,
        ));
    }
    if run.stream.as_ref().is_some_and(|s| s.cache_frontier.is_some()) {
        specs.push(spec(
            "cache-frontier",
            "Cache types × exact first tokens × W: perplexity over the exact full cache's against memory, the frontier as its own line",
            FigureKind::CacheFrontier,
        ));
    }
    if run.per_head.is_some() {
        specs.push(spec(
            "per-head-frontier",
            "KV memory against perplexity: per-head policies (retrieval heads keep everything) beside a uniform sink cache of the same memory",
            FigureKind::PerHeadFrontier,
        ));
    }
}

/// `quant`'s and `needle`'s figures.
fn quant_and_needle_specs(run: &Run, specs: &mut Vec<FigureSpec>) {
    for bits in super::figures::quant_bits(run) {
        specs.push(spec(format!("quant-nll-int{bits}"), format!("int{bits} activation quantization: NLL increase over the unquantized model by position (the first positions are the sinks), per scheme"), FigureKind::QuantNll(bits)));
        specs.push(spec(
            format!("quant-sqnr-int{bits}"),
            format!("int{bits} activation quantization: the lowest SQNR of each layer's projection inputs, per scheme"),
            FigureKind::QuantSqnr(bits),
        ));
    }
    if let Some(n) = &run.needle {
        for (i, p) in n.policies.iter().enumerate() {
            specs.push(spec(
                format!("needle-{}", super::needle::slug(&p.label)),
                format!("Pass-key retrieval under {}: rank-1 accuracy by needle depth and prompt length", p.label),
                FigureKind::NeedlePolicy(i),
            ));
        }
        specs.push(spec(
            "needle-distance",
            "Pass-key rank-1 accuracy against the needle's distance from the answer, per policy, budgets marked",
            FigureKind::NeedleDistance,
        ));
        if n.heads.is_some() {
            specs.push(spec(
                "needle-heads",
                "Which heads retrieve: the answer's ΔNLL when one head loses the needle, layer × head",
                FigureKind::NeedleHeads,
            ));
        }
    }
}
