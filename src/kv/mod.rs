//! KV-cache eviction: policies and position modes (and a declared policy's near misses), the
//! policy-managed cache, its memory, the streaming simulator, the sink-count recommendation built
//! on it and the live canary; `press/` compresses a prefilled context as kvpress does; `retrieval/` holds pass-key retrieval under a policy (prompts,
//! compression, which heads retrieve).

pub mod alternatives;
pub mod cache;
mod cache_decode;
pub mod cache_frontier;
pub mod canary;
pub mod divergence;
mod head_set;
pub mod memory;
pub mod per_head;
pub mod policy;
pub mod prefill;
pub mod press;
pub mod recommend;
pub mod retrieval;
pub mod scored;
mod scored_replay;
pub mod simulate;
pub mod trace;

pub use policy::{Eviction, Policy, PolicyKind, PositionMode, Scorer};
pub use simulate::{recompute_stride, simulate, simulate_with, SimOptions, StreamOutcome};
