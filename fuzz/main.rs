//! Long fuzz runs of the parsers (the harness is `tests/fuzzing`); `scripts/fuzz.sh` builds this
//! with coverage instrumentation, so inputs that reach new code are kept (in `fuzz/corpus/<target>/`,
//! committed) and mutated further:
//!
//!     scripts/fuzz.sh [TARGET|all] [--execs N] [--seed S]
//!     scripts/fuzz.sh [TARGET|all] --minimize       (shrink the corpus to what adds coverage)
//!     cargo run --release --example fuzz -- [TARGET|all] [--execs N] [--seed S]   (unguided)
//!
//! Prints, per target, executions, inputs a parser accepted, coverage features reached and inputs
//! kept, failures (saved under target/fuzz-crashes/) and the slowest input; exits 1 on any failure.

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
        eprintln!("error: the seeds come from tests/data and tests/fixtures; not found");
        std::process::exit(2);
    };
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = repo.join("target");
    let edges = fuzzing::coverage::edges();
    println!(
        "{}",
        if edges > 0 {
            format!("coverage-guided: {edges} instrumented edges")
        } else {
            "unguided (built without coverage; see scripts/fuzz.sh)".into()
        }
    );
    if args.iter().any(|a| a == "--minimize") {
        for t in targets.iter().filter(|t| which == "all" || t.name == which) {
            let (before, after) = fuzzing::minimize(t, &root.join("fuzz-work").join(t.name), &repo.join("fuzz/corpus").join(t.name));
            println!("{:<15} corpus {before} → {after} inputs", t.name);
        }
        return;
    }
    let mut failed = false;
    for t in targets.iter().filter(|t| which == "all" || t.name == which) {
        let start = std::time::Instant::now();
        let corpus = repo.join("fuzz/corpus").join(t.name);
        let r = fuzzing::fuzz(t, execs, seed, &root.join("fuzz-work").join(t.name), &root.join("fuzz-crashes"), Some(&corpus));
        println!(
            "{:<15} {:>9} executions  {:>8} accepted  {:>7} features  {:>5} kept  {:>2} failures  slowest {:>7.2} ms  {:>6.1} s",
            t.name,
            r.executions,
            r.accepted,
            r.features,
            r.kept,
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
