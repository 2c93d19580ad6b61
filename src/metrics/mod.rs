//! The papers' definitions as pure functions on plain numbers, shared by the reducers that compute
//! them while a pass streams by and by the analyses, figures and dashboard that read them back:
//! α_k, the massive-activation criterion, int8 quantization risk, ΔNLL / KL between predictions,
//! and downward steps in a token-logprob series.

pub mod changepoint;
pub mod divergence;
pub mod massive;
pub mod quant;
pub mod sinks;
