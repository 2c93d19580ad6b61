//! The capture interface the forward pass pushes into: `HookReceiver` (ask first with `wants`, so
//! unwanted hooks cost nothing), `NoCapture` for plain inference, and a fan-out over several receivers.
//! The forward pass owns this vocabulary; `capture` implements it.

use std::ops::Range;

use candle_core::Tensor;

use super::hook::HookPoint;
use crate::error::Result;

/// Receives tensors from the forward pass.
pub trait HookReceiver {
    /// Whether `record` should be called for this hook; the forward pass skips work otherwise.
    fn wants(&self, hook: &HookPoint) -> bool;

    /// One tensor of `hook` (shapes in [`HookPoint`]'s docs). `rows` are the absolute positions
    /// covered along the position axis — the query axis for attention maps, which arrive in
    /// query blocks whose key axis spans every visible key (0..rows.end).
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()>;

    /// A replacement for the tensor at `hook`, which the forward pass then uses in its place (an
    /// intervention, e.g. fake quantization). Called before `record`, when `wants` says so, at the
    /// hooks whose value the forward pass goes on to use as it is: the inputs of the projections
    /// (`ln1.hook_normalized`, `attn.hook_z`, `ln2.hook_normalized`, `mlp.hook_post`) and the keys and
    /// values (`attn.hook_k`, `attn.hook_v`). Default: none.
    fn rewrite(&mut self, _hook: &HookPoint, _rows: Range<usize>, _value: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }
}

/// Captures nothing (plain inference).
pub struct NoCapture;

impl HookReceiver for NoCapture {
    fn wants(&self, _: &HookPoint) -> bool {
        false
    }
    fn record(&mut self, _: &HookPoint, _: Range<usize>, _: &Tensor) -> Result<()> {
        Ok(())
    }
}

/// Forwards each hook to every sink that wants it.
pub struct FanOut<'a>(pub Vec<&'a mut dyn HookReceiver>);

impl HookReceiver for FanOut<'_> {
    fn wants(&self, hook: &HookPoint) -> bool {
        self.0.iter().any(|s| s.wants(hook))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        for receiver in self.0.iter_mut() {
            if receiver.wants(hook) {
                receiver.record(hook, rows.clone(), value)?;
            }
        }
        Ok(())
    }
    /// Each sink's rewrite applies to what the sinks before it left.
    fn rewrite(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<Option<Tensor>> {
        let mut current: Option<Tensor> = None;
        for receiver in self.0.iter_mut() {
            if receiver.wants(hook) {
                if let Some(new) = receiver.rewrite(hook, rows.clone(), current.as_ref().unwrap_or(value))? {
                    current = Some(new);
                }
            }
        }
        Ok(current)
    }
}
