//! KIVI's cache in the block replay (`model::policy_forward`): a layer holds every key and value
//! twice, side by side along the head dimension — as computed and as KIVI stores it — and each
//! query reads, per key and per value, the copy KIVI's token-by-token schedule gives it at its
//! distance ([`KiviWindow`]). Scores are taken against both copies in one product and the chosen
//! one kept; weights go to the chosen value copy in one product.
//!
//! A key group is rounded once all its 32 tokens have run (its earlier rows held from the block
//! before); a query only reads it rounded after its chunk of R closed, by which time it is whole.

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::numerics::kivi::{round_key_group, round_value_row, KiviWindow, GROUP};

/// KIVI's setting for one replay: its schedule and code widths.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kivi {
    pub window: KiviWindow,
    pub key_bits: u32,
    pub value_bits: u32,
}

/// Rows of keys a block rounded (their groups completed), heads first, for the error tally.
pub(super) struct RoundedRows {
    pub exact: Vec<f32>,
    pub rounded: Vec<f32>,
    pub positions: Vec<usize>,
}

/// The refusal when a policy drops keys KIVI has yet to quantize with their chunk.
fn chunk_not_held(window: &KiviWindow, t: usize) -> Error {
    Error::input(format!(
        "a KIVI cache quantizes its recent window's R = {} keys together once it fills, and this policy no longer holds all of them at step {t}: keep at least R recent keys (W − S ≥ R) or give a smaller --kivi-residual",
        window.residual
    ))
}

/// Refuses views under which a chunk closes (at the query that fills it) without every one of its
/// keys still held: KIVI's per-channel groups would be taken over keys the policy has dropped.
/// `views` gives each query's stream position, its first recent key and its pinned count.
pub(super) fn check_chunks_held(views: impl IntoIterator<Item = (usize, usize, usize)>, window: &KiviWindow) -> Result<()> {
    for (t, from, pinned) in views {
        if window.chunk_closes(t) && from > (t + 1 - window.residual).max(pinned) {
            return Err(chunk_not_held(window, t));
        }
    }
    Ok(())
}

/// Appends a block's keys (`new`: kv heads × b × dh, rotated, at stream positions `start`..) to
/// the held ones (`held`: kv heads × n × 2·dh at positions `base`..): each row as computed beside
/// its rounded copy, written for every group the block completes (its earlier rows included).
pub(super) fn append_keys(held: Option<&Tensor>, base: usize, new: &Tensor, start: usize, kivi: &Kivi) -> Result<(Tensor, RoundedRows)> {
    let (heads, b, dh) = new.dims3()?;
    let w = &kivi.window;
    let from = if start > w.exact_first { w.group_start(start) } else { start };
    let exact = match (start - from, held) {
        (0, _) => new.clone(),
        (_, None) => return Err(Error::Internal("a KIVI group began before anything was held".into())),
        (_, Some(_)) if from < base => return Err(chunk_not_held(w, start)),
        (tail, Some(h)) => Tensor::cat(&[&h.narrow(1, from - base, tail)?.narrow(2, 0, dh)?.contiguous()?, new], 1)?,
    };
    let n = start - from + b;
    let exact_rows = exact.flatten_all()?.to_vec1::<f32>()?;
    let mut rounded = exact_rows.clone();
    let mut group = from.max(w.exact_first);
    let mut complete = Vec::new();
    while group + GROUP <= start + b {
        complete.push(group);
        group += GROUP;
    }
    for h in 0..heads {
        for &g in &complete {
            let rows = (h * n + g - from) * dh..(h * n + g - from + GROUP) * dh;
            round_key_group(&mut rounded[rows], dh, kivi.key_bits);
        }
    }
    // Tallied: the block's exact first tokens (no error) and every row of the completed groups.
    let positions: Vec<usize> = (start..(start + b).min(w.exact_first)).chain(complete.iter().flat_map(|&g| g..g + GROUP)).collect();
    let mut done = RoundedRows { exact: Vec::new(), rounded: Vec::new(), positions };
    for h in 0..heads {
        for &p in &done.positions {
            let row = (h * n + p - from) * dh..(h * n + p - from + 1) * dh;
            done.exact.extend_from_slice(&exact_rows[row.clone()]);
            done.rounded.extend_from_slice(&rounded[row]);
        }
    }
    let both = Tensor::cat(&[&exact, &Tensor::from_vec(rounded, (heads, n, dh), &Device::Cpu)?], 2)?;
    let keys = match held {
        Some(h) if from > base => Tensor::cat(&[&h.narrow(1, 0, from - base)?, &both], 1)?,
        _ => both,
    };
    Ok((keys, done))
}

/// A block's values (kv heads × b × dh at `positions`) beside their rounded copies (kv heads × b
/// × 2·dh; the first `exact_first` positions' copies exact), and the rounded rows flat.
pub(super) fn paired_values(v: &Tensor, positions: &[usize], kivi: &Kivi) -> Result<(Tensor, Vec<f32>)> {
    let (heads, b, dh) = v.dims3()?;
    let mut rounded = v.flatten_all()?.to_vec1::<f32>()?;
    for (i, row) in rounded.chunks_exact_mut(dh).enumerate() {
        if positions[i % b] >= kivi.window.exact_first {
            round_value_row(row, kivi.value_bits);
        }
    }
    let copies = Tensor::from_vec(rounded.clone(), (heads, b, dh), &Device::Cpu)?;
    Ok((Tensor::cat(&[v, &copies], 2)?, rounded))
}

/// Scores of `q` (kv heads × rows × dh) against keys held both ways (kv heads × n × 2·dh): kv
/// heads × rows × 2n, each key's exact product then its rounded copy's.
pub(super) fn paired_scores(q: &Tensor, keys: &Tensor) -> Result<Tensor> {
    let (heads, n, twice) = keys.dims3()?;
    let k = keys.contiguous()?.reshape((heads, 2 * n, twice / 2))?;
    Ok(q.matmul(&k.t()?)?)
}

/// Where the replay's rows and columns sit in the stream: row i (kv head, member, query r) holds
/// the query at `start + i % queries`; column c < `pinned` is stream position c, the others
/// `base + c − pinned`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub start: usize,
    pub queries: usize,
    pub pinned: usize,
    pub base: usize,
    pub cols: usize,
}

impl Layout {
    fn query(&self, row: usize) -> usize {
        self.start + row % self.queries
    }

    fn key(&self, col: usize) -> usize {
        if col < self.pinned {
            col
        } else {
            self.base + col - self.pinned
        }
    }
}

/// Per row, the score the cache gives each column: `pairs` rows of 2·cols (exact, rounded) → rows
/// of cols, the rounded product where the query reads the key rounded. A column no query may see
/// yet (a key after it) keeps its exact product, which the softmax masks anyway.
pub(super) fn chosen_scores(pairs: &[f32], layout: Layout, window: &KiviWindow) -> Vec<f32> {
    let cols = layout.cols;
    let mut out = vec![0.0f32; pairs.len() / 2];
    out.par_chunks_mut(cols).zip(pairs.par_chunks(2 * cols)).enumerate().for_each(|(row, (s, p))| {
        let t = layout.query(row);
        for (c, x) in s.iter_mut().enumerate() {
            let j = layout.key(c);
            *x = p[2 * c + usize::from(j <= t && window.key_rounded(j, t))];
        }
    });
    out
}

/// The attention output (kv heads × rows × dh) of `weights` (rows of cols) over values held both
/// ways (kv heads × cols × 2·dh): each weight goes to the copy the query reads.
pub(super) fn chosen_values(weights: &[f32], values: &Tensor, layout: Layout, window: &KiviWindow) -> Result<Tensor> {
    let (heads, cols, twice) = values.dims3()?;
    let mut split = vec![0.0f32; weights.len() * 2];
    split.par_chunks_mut(2 * cols).zip(weights.par_chunks(cols)).enumerate().for_each(|(row, (s, w))| {
        let t = layout.query(row);
        for (c, &x) in w.iter().enumerate() {
            let j = layout.key(c);
            s[2 * c + usize::from(j <= t && window.value_rounded(j, t))] = x;
        }
    });
    let rows = weights.len() / (heads * cols).max(1);
    let pattern = Tensor::from_vec(split, (heads, rows, 2 * cols), &Device::Cpu)?;
    Ok(pattern.matmul(&values.contiguous()?.reshape((heads, 2 * cols, twice / 2))?)?)
}
