//! Long fuzz runs of the parsers (the harness is `tests/fuzzing`):
//!
//!     cargo run --release --example fuzz -- [TARGET|all] [--execs N] [--seed S]
//!
//! Prints, per target, executions, inputs a parser accepted, failures (saved under
//! target/fuzz-crashes/) and the slowest input; exits 1 on any failure.

#[path = "../tests/fuzzing/mod.rs"]
mod fuzzing;

#[global_allocator]
static ALLOC: fuzzing::Capped = fuzzing::Capped;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<u64>().ok());
    let execs = value("--execs").unwrap_or(1_000_000);
    let seed = value("--seed").unwrap_or(1);
    let which = args.iter().find(|a| !a.starts_with("--") && a.parse::<u64>().is_err()).cloned().unwrap_or_else(|| "all".into());
    let Some(targets) = fuzzing::targets() else {
        eprintln!("error: the seeds come from ../shared/models (or SINKSCOPE_SHARED); not found");
        std::process::exit(2);
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let mut failed = false;
    for t in targets.iter().filter(|t| which == "all" || t.name == which) {
        let start = std::time::Instant::now();
        let r = fuzzing::fuzz(t, execs, seed, &root.join("fuzz-work").join(t.name), &root.join("fuzz-crashes"));
        println!(
            "{:<15} {:>9} executions  {:>8} accepted  {:>2} failures  slowest {:>7.2} ms  {:>6.1} s",
            t.name,
            r.executions,
            r.accepted,
            r.failures.len(),
            r.slowest.as_secs_f64() * 1e3,
            start.elapsed().as_secs_f64()
        );
        for f in &r.failures {
            println!("    {f}");
        }
        failed |= !r.failures.is_empty();
    }
    std::process::exit(i32::from(failed));
}
