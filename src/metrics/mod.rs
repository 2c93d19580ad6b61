//! The papers' definitions as pure functions on plain numbers, shared by the reducers that compute
//! them while a pass streams by and by the analyses, figures and dashboard that read them back:
//! α_k, the massive-activation criterion, int8 quantization risk, ΔNLL / KL between predictions,
//! downward steps in a token-logprob series, a proportion's binomial interval, and rank correlation.

pub mod changepoint;
pub mod divergence;
pub mod massive;
pub mod proportion;
pub mod quant;
pub mod rank;
pub mod sinks;
