//! `sinkscope quant` as a job: cut a text into sequences, calibrate static scales (on another text,
//! or on the tokens after the evaluated ones), score every scheme × bit width with fake-quantized
//! activations, and write quant.json into a run directory.

use std::path::{Path, PathBuf};

use super::progress::Progress;
use crate::analysis::quant::{nll_by_position, CalibrationInfo, NllSplit, QuantCase, QuantReport};
use crate::capture::quant::{score, Calibration, QuantSetting};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::metrics::quant::{QuantScheme, BIT_WIDTHS};
use crate::model::load::LoadedModel;
use crate::report::run::QUANT_FILE;

/// What to quantize and score.
#[derive(Debug, Clone)]
pub struct QuantOptions {
    pub file: PathBuf,
    /// Tokens per sequence (each runs from position 0 with nothing cached).
    pub tokens: usize,
    /// Consecutive sequences cut from the text (more sink positions to average over).
    pub sequences: usize,
    pub bits: Vec<u32>,
    pub schemes: Vec<QuantScheme>,
    /// Quantize the keys and values too.
    pub kv: bool,
    /// The static schemes' calibration text; `None`: the evaluated file's tokens after the
    /// evaluated sequences (the evaluated text itself when it has none left).
    pub calibrate: Option<PathBuf>,
    /// Also calibrate without each calibration sequence's first k positions (0: only with them).
    pub calib_skip_first: usize,
    /// Rows predicted from positions below this are the sink side of the NLL split.
    pub sink_positions: usize,
}

impl QuantOptions {
    pub fn validate(&self) -> Result<()> {
        if self.tokens < 2 || self.sequences == 0 {
            return Err(Error::input("--max-tokens must be at least 2 and --sequences at least 1"));
        }
        if self.bits.is_empty() || self.bits.iter().any(|b| !BIT_WIDTHS.contains(b)) {
            return Err(Error::input(format!("--bits takes widths between {} and {}, e.g. 8,4", BIT_WIDTHS.start(), BIT_WIDTHS.end())));
        }
        if self.schemes.is_empty() {
            return Err(Error::input("--schemes needs at least one of tensor_dynamic, token_dynamic, channel_static, tensor_static"));
        }
        if self.sink_positions == 0 || self.sink_positions >= self.tokens - 1 {
            return Err(Error::input(format!(
                "--sink-positions must be between 1 and {} (fewer than the scored positions)",
                self.tokens.saturating_sub(2)
            )));
        }
        Ok(())
    }

    /// Every setting to score, in report order: by bit width, scheme, then calibration skip.
    pub fn settings(&self) -> Vec<QuantSetting> {
        let mut out = Vec::new();
        for &bits in &self.bits {
            for &scheme in &self.schemes {
                out.push(QuantSetting { scheme, bits, kv: self.kv, calib_skip: 0 });
                if scheme.is_static() && self.calib_skip_first > 0 {
                    out.push(QuantSetting { scheme, bits, kv: self.kv, calib_skip: self.calib_skip_first });
                }
            }
        }
        out
    }
}

/// Cuts `ids` into up to `n` consecutive sequences of `len` tokens (a shorter tail is dropped).
fn sequences(ids: &[u32], len: usize, n: usize) -> Vec<Vec<u32>> {
    ids.chunks_exact(len).take(n).map(<[u32]>::to_vec).collect()
}

fn tokenize(lm: &LoadedModel, file: &Path) -> Result<Vec<u32>> {
    let text = crate::io::text::read_text_file(file)?;
    lm.tokenizer.encode(&text)
}

/// Runs the quantization sweep and writes quant.json into `out` when given.
pub fn quant_into(lm: &mut LoadedModel, opts: &QuantOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<QuantReport> {
    opts.validate()?;
    let context = lm.model.cfg.context_len;
    if opts.tokens > context {
        return Err(Error::input(format!("--max-tokens {} exceeds the model's context of {context}", opts.tokens)));
    }
    super::claim_out(lm, out)?;
    let ids = tokenize(lm, &opts.file)?;
    let mut eval = sequences(&ids, opts.tokens, opts.sequences);
    if eval.is_empty() {
        if ids.len() <= opts.sink_positions + 1 {
            return Err(Error::file(&opts.file, format!("gives only {} tokens; quant needs more than {}", ids.len(), opts.sink_positions + 1)));
        }
        progress.warning(&format!("{} gives only {} tokens; scoring one sequence of that length", opts.file.display(), ids.len()));
        eval = vec![ids.clone()];
    } else if eval.len() < opts.sequences {
        progress.warning(&format!("{} gives {} sequences of {} tokens, not {}", opts.file.display(), eval.len(), opts.tokens, opts.sequences));
    }
    let len = eval[0].len();
    let used: usize = eval.iter().map(Vec::len).sum();
    let needs_calibration = opts.schemes.iter().any(QuantScheme::is_static);
    let (calib, calibration_info) = calibration_sequences(lm, opts, &ids, used, len, &eval)?;
    if needs_calibration && calibration_info.in_sample {
        progress.warning("the text has no tokens beyond the evaluated ones: static scales are calibrated on the evaluated text itself (in-sample); give --calibrate FILE for a fair test");
    }
    let calibrations = if needs_calibration {
        let skips: Vec<String> = calibration_info.skips.iter().map(|k| k.to_string()).collect();
        progress.status(&format!("calibrating static scales (skipping the first {} positions)", skips.join(" / ")));
        Calibration::measure_skips(&lm.model, &calib, &calibration_info.skips, opts.kv, &mut crate::model::receiver::NoCapture)?
    } else {
        Vec::new()
    };
    progress.status("scoring the unquantized model");
    let base = score(&lm.model, &eval, None, None)?;
    let baseline = NllSplit::of(&base.nll, opts.sink_positions);
    let settings = opts.settings();
    let mut cases = Vec::with_capacity(settings.len());
    for (i, setting) in settings.iter().enumerate() {
        progress.status(&format!("[{}/{}] {}", i + 1, settings.len(), setting.label()));
        let cal = calibrations.iter().find(|c| c.skip == setting.calib_skip);
        let scored = score(&lm.model, &eval, Some(*setting), cal)?;
        cases.push(QuantCase::new(*setting, &scored, &baseline, opts.sink_positions));
    }
    progress.status("");
    lm.fingerprint()?;
    let skip_comparisons = QuantReport::compare_skips(&cases);
    let report = QuantReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text_source: opts.file.display().to_string(),
        sequences: eval.len(),
        tokens_per_sequence: len,
        sink_positions: opts.sink_positions,
        calibration: calibration_info,
        baseline,
        baseline_by_position: nll_by_position(&base.nll),
        cases,
        skip_comparisons,
    };
    if let Some(dir) = out {
        let stage = Staging::begin(dir)?;
        write_json_atomic(&stage.path(QUANT_FILE)?, &report)?;
        stage.commit()?;
    }
    Ok(report)
}

/// The calibration sequences (same length as the evaluated ones) and where they came from.
fn calibration_sequences(
    lm: &LoadedModel,
    opts: &QuantOptions,
    ids: &[u32],
    used: usize,
    len: usize,
    eval: &[Vec<u32>],
) -> Result<(Vec<Vec<u32>>, CalibrationInfo)> {
    let mut skips = vec![0];
    if opts.calib_skip_first > 0 {
        skips.push(opts.calib_skip_first);
    }
    let info = |source: String, seqs: &[Vec<u32>], in_sample: bool| CalibrationInfo {
        source,
        sequences: seqs.len(),
        tokens_per_sequence: seqs.first().map_or(0, Vec::len),
        skips: skips.clone(),
        in_sample,
    };
    if let Some(file) = &opts.calibrate {
        let cal_ids = tokenize(lm, file)?;
        let mut seqs = sequences(&cal_ids, len, opts.sequences);
        if seqs.is_empty() {
            if cal_ids.len() <= opts.calib_skip_first {
                return Err(Error::file(
                    file,
                    format!("gives only {} tokens, none left after --calib-skip-first {}", cal_ids.len(), opts.calib_skip_first),
                ));
            }
            seqs = vec![cal_ids];
        }
        let i = info(file.display().to_string(), &seqs, false);
        return Ok((seqs, i));
    }
    let rest = sequences(ids.get(used..).unwrap_or_default(), len, opts.sequences);
    if rest.is_empty() {
        return Ok((eval.to_vec(), info(format!("{} (the evaluated tokens)", opts.file.display()), eval, true)));
    }
    let i = info(format!("{} (tokens {}..{} after the evaluated ones)", opts.file.display(), used, used + rest.len() * len), &rest, false);
    Ok((rest, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_pair_each_static_scheme_with_its_skip() {
        let opts = QuantOptions {
            file: PathBuf::new(),
            tokens: 64,
            sequences: 2,
            bits: vec![8, 4],
            schemes: QuantScheme::ALL.to_vec(),
            kv: false,
            calibrate: None,
            calib_skip_first: 4,
            sink_positions: 4,
        };
        opts.validate().unwrap();
        let s = opts.settings();
        assert_eq!(s.len(), 12);
        assert_eq!(s.iter().filter(|s| s.calib_skip == 4).count(), 4);
        assert_eq!(sequences(&[1, 2, 3, 4, 5], 2, 5), vec![vec![1, 2], vec![3, 4]]);
        assert!(QuantOptions { sink_positions: 63, ..opts.clone() }.validate().is_err());
        assert!(QuantOptions { bits: vec![1], ..opts }.validate().is_err());
    }
}
