//! Dashboard speed: time to open a run (`Run::open` + building the `App`) and the time to draw
//! each view at 200×60 into ratatui's TestBackend (median and max over 50 frames), plus the
//! selection changes that recompute cached data. Targets (issue 6): open < 1 s, frame < 16 ms.
//!
//!   cargo bench --bench dash -- RUN_DIR      (default: tests/fixtures/run-stories260k)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use sinkscope::report::run::Run;
use sinkscope::tui::action::Action;
use sinkscope::tui::state::{App, Tab};
use sinkscope::tui::ui;
use sinkscope::tui::update::update;

const FRAMES: usize = 50;
const OPENS: usize = 5;
const OPEN_TARGET: Duration = Duration::from_secs(1);
const FRAME_TARGET: Duration = Duration::from_millis(16);

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; the first other argument is the run.
    let dir = std::env::args().skip(1).find(|a| !a.starts_with("--")).map_or_else(|| PathBuf::from("tests/fixtures/run-stories260k"), PathBuf::from);
    let mut opens = Vec::new();
    let mut app = None;
    for _ in 0..OPENS {
        let t = Instant::now();
        let run = match Run::open(&dir) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        };
        let a = App::new(run);
        opens.push(t.elapsed());
        app = Some(a);
    }
    let Some(mut app) = app else { return };
    let open = median(opens.clone());
    let tokens = app.run.tokens().map_or(0, <[_]>::len);
    println!("run {} — {}, {} tokens, {} layers × {} heads", dir.display(), app.run.model_name(), tokens, app.data.n_layers, app.data.n_heads);
    println!(
        "open (Run::open + App::new), median of {OPENS}: {} (max {}) {}",
        ms(open),
        ms(opens.iter().copied().max().unwrap_or_default()),
        verdict(open, OPEN_TARGET)
    );

    let (w, h) = (200, 60);
    update(&mut app, Action::Resize { width: w, height: h });
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    let views: Vec<(&str, Vec<Action>)> = vec![
        ("overview", vec![Action::GoTab(Tab::Overview)]),
        ("grid", vec![Action::GoTab(Tab::Grid)]),
        ("heatmap", vec![Action::GoTab(Tab::Heatmap)]),
        ("heatmap focus+log+zoom", vec![Action::ToggleFocus, Action::ToggleLog, Action::ZoomIn]),
        ("tokens", vec![Action::GoTab(Tab::Tokens), Action::Move { dx: 0, dy: 1000 }]),
        ("activations", vec![Action::GoTab(Tab::Activations)]),
        ("streaming", vec![Action::GoTab(Tab::Streaming)]),
        ("help overlay", vec![Action::GoTab(Tab::Overview), Action::ToggleHelp]),
    ];
    println!("frames at {w}×{h} (TestBackend), {FRAMES} each:");
    let mut worst = Duration::ZERO;
    for (name, actions) in views {
        for a in actions {
            update(&mut app, a);
        }
        let mut times = Vec::with_capacity(FRAMES);
        for _ in 0..FRAMES {
            let t = Instant::now();
            term.draw(|f| ui::render(f, &app)).expect("draw");
            times.push(t.elapsed());
        }
        let max = times.iter().copied().max().unwrap_or_default();
        let med = median(times);
        worst = worst.max(med);
        println!("  {name:<24} median {:>9}  max {:>9} {}", ms(med), ms(max), verdict(med, FRAME_TARGET));
    }
    update(&mut app, Action::ToggleHelp);

    // Selection changes that recompute cached data (once per change, not per frame).
    println!("selection changes (update only):");
    let changes: Vec<(&str, Action)> = vec![
        ("tokens scope → layer", Action::CycleScope),
        ("tokens scope → all heads", Action::CycleScope),
        ("tokens measure", Action::ToggleMeasure),
        ("tokens scope → head", Action::CycleScope),
        ("next head", Action::NextHead),
        ("streaming window", Action::CycleWindow),
    ];
    for (name, a) in changes {
        let t = Instant::now();
        update(&mut app, a);
        println!("  {name:<24} {:>9}", ms(t.elapsed()));
    }
    println!("slowest view median: {} {}", ms(worst), verdict(worst, FRAME_TARGET));
}

fn verdict(d: Duration, target: Duration) -> String {
    if d <= target {
        format!("✓ (< {})", ms(target))
    } else {
        format!("✗ over the {} target", ms(target))
    }
}
