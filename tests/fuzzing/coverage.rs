//! Code coverage for the fuzzer, on stable Rust. Built with LLVM's SanitizerCoverage
//! (`-Cpasses=sancov-module` with inline 8-bit counters: `scripts/fuzz.sh`), every instrumented
//! edge of sinkscope and its dependencies counts its hits in a byte, and LLVM registers each
//! module's counters through `__sanitizer_cov_8bit_counters_init` before `main`. Built without
//! those flags (the test command), nothing registers and the fuzzer runs unguided.

use std::sync::Mutex;

/// The counter regions LLVM registered: (start, end) addresses.
static REGIONS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Called by each instrumented module's constructor with its counters.
#[no_mangle]
pub extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8) {
    if let Ok(mut regions) = REGIONS.lock() {
        if start < stop {
            regions.push((start as usize, stop as usize));
        }
    }
}

/// Called with each module's table of edge addresses (`-sanitizer-coverage-pc-table`); the
/// counters are all the fuzzer reads.
#[no_mangle]
pub extern "C" fn __sanitizer_cov_pcs_init(_start: *const usize, _stop: *const usize) {}

fn regions() -> Vec<(usize, usize)> {
    REGIONS.lock().map(|r| r.clone()).unwrap_or_default()
}

/// Instrumented edges (0 when built without coverage).
pub fn edges() -> usize {
    regions().iter().map(|(a, b)| b - a).sum()
}

/// Sets every counter to zero before an execution.
pub fn reset() {
    for (start, stop) in regions() {
        // SAFETY: LLVM registered [start, stop) as this module's counters, alive for the whole
        // process; only this thread writes them between executions (the parsers run here too).
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, stop - start) };
    }
}

/// The (edge, hit-count bucket) pairs seen so far: AFL's buckets 1, 2, 3, 4–7, 8–15, 16–31,
/// 32–127, 128+, one bit each per edge.
#[derive(Default)]
pub struct Features {
    seen: Vec<u8>,
    count: usize,
    /// Count an edge once, whatever its hits (corpus minimisation: keep what reaches new code).
    edges_only: bool,
}

fn bucket(hits: u8) -> u8 {
    match hits {
        0 => 0,
        1 => 1,
        2 => 1 << 1,
        3 => 1 << 2,
        4..=7 => 1 << 3,
        8..=15 => 1 << 4,
        16..=31 => 1 << 5,
        32..=127 => 1 << 6,
        _ => 1 << 7,
    }
}

impl Features {
    /// Features that count an edge once, whatever its hits.
    pub fn edges_only() -> Features {
        Features { edges_only: true, ..Features::default() }
    }

    /// Adds the counters of the execution that just ran; returns how many features were new.
    pub fn absorb(&mut self) -> usize {
        let mut new = 0;
        let mut at = 0;
        for (start, stop) in regions() {
            // SAFETY: as in `reset`; read after the execution returned.
            let counters = unsafe { std::slice::from_raw_parts(start as *const u8, stop - start) };
            if self.seen.len() < at + counters.len() {
                self.seen.resize(at + counters.len(), 0);
            }
            for (i, &hits) in counters.iter().enumerate() {
                let b = if self.edges_only { u8::from(hits > 0) } else { bucket(hits) };
                if b & !self.seen[at + i] != 0 {
                    self.seen[at + i] |= b;
                    new += 1;
                }
            }
            at += counters.len();
        }
        self.count += new;
        new
    }

    /// Features seen so far.
    pub fn count(&self) -> usize {
        self.count
    }
}
