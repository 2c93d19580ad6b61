//! Fake activation quantization run through the forward pass: the calibration observer (per-channel
//! absmax of every projection input over a text, optionally without each sequence's first
//! positions), the sink that rewrites every projection input (and optionally K and V) on its
//! integer grid, and the run that scores token sequences under one scheme and bit width.

use std::collections::BTreeMap;
use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::metrics::quant::{absmax_columns_into, qmax, quantize_with_scheme, QuantNoise, QuantScheme};
use crate::model::decoder::{Decoder, MlpKind};
use crate::model::hook::HookPoint;
use crate::model::receiver::{FanOut, HookReceiver};

/// The input of one linear projection of a block (or, optionally, the keys and values the cache
/// holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantSite {
    /// q|k|v's input: the attention's normalised input.
    Qkv,
    /// o_proj's input: the heads' outputs.
    O,
    /// gate|up's input (up alone where the MLP has no gate): the MLP's normalised input.
    GateUp,
    /// The down projection's input: the MLP activation.
    Down,
    /// Keys as projected (after any q/k norm, before RoPE).
    K,
    V,
}

impl QuantSite {
    pub const ALL: [QuantSite; 6] = [QuantSite::Qkv, QuantSite::O, QuantSite::GateUp, QuantSite::Down, QuantSite::K, QuantSite::V];

    pub fn name(&self) -> &'static str {
        match self {
            QuantSite::Qkv => "qkv",
            QuantSite::O => "o",
            QuantSite::GateUp => "gate_up",
            QuantSite::Down => "down",
            QuantSite::K => "k",
            QuantSite::V => "v",
        }
    }

    /// The site a hook's tensor feeds, when it is one being quantized (`kv`: keys and values too).
    pub fn of(hook: &HookPoint, kv: bool) -> Option<(usize, QuantSite)> {
        match *hook {
            HookPoint::AttnIn(l) => Some((l, QuantSite::Qkv)),
            HookPoint::Z(l) => Some((l, QuantSite::O)),
            HookPoint::MlpIn(l) => Some((l, QuantSite::GateUp)),
            HookPoint::MlpPost(l) => Some((l, QuantSite::Down)),
            HookPoint::K(l) if kv => Some((l, QuantSite::K)),
            HookPoint::V(l) if kv => Some((l, QuantSite::V)),
            _ => None,
        }
    }
}

/// One quantization setting: scheme, bit width, whether K/V are quantized too, and (static
/// schemes) how many leading positions of each calibration sequence were left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantSetting {
    pub scheme: QuantScheme,
    pub bits: u32,
    pub kv: bool,
    pub calib_skip: usize,
}

impl QuantSetting {
    /// e.g. "tensor_static int8 (calibrated without the first 4 positions)".
    pub fn label(&self) -> String {
        let mut s = format!("{} int{}", self.scheme.name(), self.bits);
        if self.kv {
            s.push_str(" +kv");
        }
        if self.scheme.is_static() && self.calib_skip > 0 {
            s.push_str(&format!(" skip{}", self.calib_skip));
        }
        s
    }
}

/// Per-channel absmax of every site's input over a calibration text (rows at positions below
/// `skip` left out), from the unquantized model.
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    pub skip: usize,
    /// Calibration rows observed (over all sequences).
    pub rows: usize,
    columns: BTreeMap<HookPoint, Vec<f32>>,
}

impl Calibration {
    /// Runs the unquantized model over each sequence and records, per site, each channel's largest
    /// |value| at positions ≥ `skip`.
    pub fn measure(model: &Decoder, sequences: &[Vec<u32>], skip: usize, kv: bool) -> Result<Calibration> {
        Self::measure_after(model, sequences, skip, kv, &mut crate::model::receiver::NoCapture)
    }

    /// [`Calibration::measure`] with `before` rewriting each site's input first.
    pub fn measure_after(model: &Decoder, sequences: &[Vec<u32>], skip: usize, kv: bool, before: &mut dyn HookReceiver) -> Result<Calibration> {
        Ok(Self::measure_skips(model, sequences, &[skip], kv, before)?.remove(0))
    }

    /// One calibration per entry of `skips`, all from one pass over the sequences.
    pub fn measure_skips(
        model: &Decoder,
        sequences: &[Vec<u32>],
        skips: &[usize],
        kv: bool,
        before: &mut dyn HookReceiver,
    ) -> Result<Vec<Calibration>> {
        let mut observer = Observer { kv, cals: skips.iter().map(|&skip| Calibration { skip, ..Calibration::default() }).collect() };
        for ids in sequences {
            model.forward(ids, None, &mut FanOut(vec![&mut *before, &mut observer]))?;
            for cal in observer.cals.iter_mut() {
                cal.rows += ids.len().saturating_sub(cal.skip);
            }
        }
        if let Some(cal) = observer.cals.iter().find(|c| c.rows == 0) {
            return Err(Error::input(format!(
                "the calibration text leaves no positions after skipping the first {}; give a longer one or a smaller --calib-skip-first",
                cal.skip
            )));
        }
        Ok(observer.cals)
    }
}

/// Raises each calibration's per-channel absmax with the rows at or past its skip.
struct Observer {
    kv: bool,
    cals: Vec<Calibration>,
}

impl HookReceiver for Observer {
    fn wants(&self, hook: &HookPoint) -> bool {
        QuantSite::of(hook, self.kv).is_some()
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let n = value.dim(0)?;
        let width = value.elem_count() / n.max(1);
        let x = value.flatten_all()?.to_vec1::<f32>()?;
        for cal in self.cals.iter_mut() {
            let first = cal.skip.saturating_sub(rows.start).min(n);
            let acc = cal.columns.entry(*hook).or_insert_with(|| vec![0.0; width]);
            absmax_columns_into(acc, &x[first * width..]);
        }
        Ok(())
    }
}

/// Rewrites every site's input on the setting's grid and sums the noise per (layer, site).
struct FakeQuant<'a> {
    setting: QuantSetting,
    calibration: Option<&'a Calibration>,
    noise: BTreeMap<(usize, QuantSite), QuantNoise>,
}

impl HookReceiver for FakeQuant<'_> {
    fn wants(&self, hook: &HookPoint) -> bool {
        QuantSite::of(hook, self.setting.kv).is_some()
    }

    fn record(&mut self, _: &HookPoint, _: Range<usize>, _: &Tensor) -> Result<()> {
        Ok(())
    }

    fn rewrite(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<Option<Tensor>> {
        let Some(site) = QuantSite::of(hook, self.setting.kv) else { return Ok(None) };
        let n = value.dim(0)?;
        let width = value.elem_count() / n.max(1);
        let mut x = value.flatten_all()?.to_vec1::<f32>()?;
        let calibrated = match (self.setting.scheme.is_static(), self.calibration) {
            (true, Some(cal)) => cal.columns.get(hook).map(Vec::as_slice),
            (true, None) => return Err(Error::Internal("a static scheme without calibration".into())),
            (false, _) => None,
        };
        let noise = quantize_with_scheme(self.setting.scheme, &mut x, width, calibrated, qmax(self.setting.bits))
            .ok_or_else(|| Error::Internal(format!("{hook}: no calibration of width {width}")))?;
        self.noise.entry(site).or_default().add(&noise);
        Ok(Some(Tensor::from_vec(x, value.dims(), value.device())?))
    }
}

/// Per-target NLL of each sequence (row r predicts token r + 1) and, under a setting, the noise
/// each (layer, site) received over all sequences.
pub struct QuantScore {
    pub nll: Vec<Vec<f64>>,
    pub noise: BTreeMap<(usize, QuantSite), QuantNoise>,
}

/// Scores `sequences`, each from position 0 with nothing cached, under `setting` (None: the
/// unquantized model). Static settings need `calibration` measured with the setting's skip.
pub fn score(model: &Decoder, sequences: &[Vec<u32>], setting: Option<QuantSetting>, calibration: Option<&Calibration>) -> Result<QuantScore> {
    score_after(model, sequences, setting, calibration, &mut crate::model::receiver::NoCapture)
}

/// [`score`] with `before` rewriting each site's input first (e.g. a perturbation that measures
/// how sensitive the quantized model is to the last bit of its inputs).
pub fn score_after(
    model: &Decoder,
    sequences: &[Vec<u32>],
    setting: Option<QuantSetting>,
    calibration: Option<&Calibration>,
    before: &mut dyn HookReceiver,
) -> Result<QuantScore> {
    if matches!(model.cfg.arch.mlp, MlpKind::Moe(_)) {
        return Err(Error::input("quant does not support mixture-of-experts MLPs (each token has its own experts' inputs); use a dense model"));
    }
    let mut noise = BTreeMap::new();
    let mut nll = Vec::with_capacity(sequences.len());
    for ids in sequences {
        if ids.len() < 2 {
            return Err(Error::input("a sequence of fewer than 2 tokens has nothing to predict; give a longer text"));
        }
        let hidden = match setting {
            Some(setting) => {
                let mut sink = FakeQuant { setting, calibration, noise: BTreeMap::new() };
                let hidden = model.forward(ids, None, &mut FanOut(vec![before, &mut sink]))?;
                for (k, n) in sink.noise {
                    noise.entry(k).or_insert_with(QuantNoise::default).add(&n);
                }
                hidden
            }
            None => model.forward(ids, None, before)?,
        };
        let t = ids.len();
        nll.push(model.next_token_nll(&hidden.narrow(0, 0, t - 1)?, &ids[1..])?);
    }
    Ok(QuantScore { nll, noise })
}
