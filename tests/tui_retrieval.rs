//! The dashboard's Retrieval view: a `sinkscope needle` sweep written into a copy of the
//! committed run (and into a directory of its own) drawn, navigated and exported.
#![cfg(feature = "tui")]

mod common;
mod dashboard;

use dashboard::{copy_without, draw, screen};
use sinkscope::report::run::Run;
use sinkscope::tui::action::Action;
use sinkscope::tui::export;
use sinkscope::tui::state::{App, Tab};
use sinkscope::tui::update::update;

/// A copy of the fixture run with a small `sinkscope needle` sweep (stories260K, heads measured)
/// written into it.
fn run_with_needle(name: &str) -> common::TempDir {
    let dir = copy_without(name, &[]);
    let model = common::model("stories260K.gguf").expect("stories260K ships with the project");
    let filler = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "needle",
        "-m",
        model.to_str().unwrap(),
        "-f",
        filler.to_str().unwrap(),
        "--lengths",
        "160,200",
        "--depths",
        "0,0.5,1",
        "--trials",
        "2",
        "--cache",
        "64",
        "--policy",
        "dense,window,sink",
        "--retrieval-heads",
        "--heads-trials",
        "1",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir
}

#[test]
fn retrieval_shows_the_needle_sweep_its_grid_and_heads_and_exports_them() {
    let dir = run_with_needle("run-needle");
    let mut app = App::new(Run::open(&dir).unwrap());
    let n = app.run.needle.as_ref().expect("needle.json is read with the run").policies.len();
    assert_eq!(n, 6, "dense, window, sink and the three per-head arms");
    let s = screen(&mut app, &[Action::GoTab(Tab::Retrieval)]);
    for want in ["Pass-key retrieval", "▶ dense", "window W=64", "rank-1 accuracy, depth × length", "Which heads retrieve", "L0.kv", "Spearman"] {
        assert!(s.contains(want), "Retrieval lacks {want:?}:\n{s}");
    }
    // The grid has a row per depth and a column per length.
    assert!(s.contains("depth    160    200"), "{s}");
    assert!(s.lines().any(|l| l.contains(" 0.50 ") && l.matches('%').count() >= 2), "{s}");
    let s = screen(&mut app, &[Action::Move { dx: 0, dy: 1 }]);
    assert!(s.contains("▶ window W=64"), "↓ selects the next policy:\n{s}");
    assert!(s.contains("window W=64 (slot) · rank-1 accuracy"), "the grid follows the selection:\n{s}");
    let msg = export::status_message(&app);
    assert!(msg.starts_with("exported"), "{msg}");
    let csv = std::fs::read_to_string(dir.join("exports/retrieval-cells.csv")).unwrap();
    assert!(csv.starts_with("policy,mode,cache,length,depth,trials,rank_accuracy"), "{csv:.200}");
    assert_eq!(csv.lines().count(), 1 + 6 * 2 * 3, "one row per policy × length × depth");
    #[cfg(feature = "plots")]
    assert!(std::fs::read_dir(dir.join("exports")).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("needle-window")));
}

#[test]
fn a_needle_only_run_opens_and_every_view_draws() {
    let dir = run_with_needle("run-needle-only");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let keep = path.file_name().is_some_and(|n| n == "needle.json");
        if path.is_file() && !keep {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let mut app = App::new(Run::open(&dir).unwrap());
    assert!(app.run.capture.is_none() && app.run.needle.is_some());
    for tab in Tab::ALL {
        update(&mut app, Action::GoTab(tab));
        for (w, h) in [(120, 40), (20, 5), (0, 0), (200, 60)] {
            draw(&mut app, w, h);
        }
    }
    let s = screen(&mut app, &[Action::GoTab(Tab::Retrieval)]);
    assert!(s.contains("Which heads retrieve"), "{s}");
}

/// The Compression view: presses run into the needle run's directory are drawn per press (keys and
/// attention kept, the NLL change), the selected press's layer × head grid marks the heads the
/// needle found retrieving, and the most starved heads are listed; a task sweep's arms in a run of
/// their own.
#[test]
fn compression_shows_presses_beside_the_heads_that_retrieve_and_task_arms() {
    let dir = run_with_needle("run-compression");
    let model = common::model("stories260K.gguf").expect("stories260K ships with the project");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let (model, text) = (model.to_str().unwrap(), text.to_str().unwrap());
    let press = common::sinkscope(&[
        "press",
        "-m",
        model,
        "-f",
        text,
        "--tokens",
        "120",
        "--question",
        " Who was there?",
        "--answer",
        " A little girl.",
        "--press",
        "snapkv,knorm",
        "--ratio",
        "0.5",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(press.status.success(), "{}", String::from_utf8_lossy(&press.stderr));
    let mut app = App::new(Run::open(&dir).unwrap());
    let s = screen(&mut app, &[Action::GoTab(Tab::Compression)]);
    for want in [
        "Presses · 120 positions compressed",
        "▶ snapkv",
        "attention kept per head",
        "● retrieves (needle)",
        "Most starved heads",
        "starved ∩ retrieving",
    ] {
        assert!(s.contains(want), "Compression lacks {want:?}:\n{s}");
    }
    assert!(s.contains('●'), "a retrieving head is marked in the grid:\n{s}");
    let s = screen(&mut app, &[Action::Move { dx: 0, dy: 1 }]);
    assert!(s.contains("▶ knorm") && s.contains("knorm · attention kept per head"), "↓ selects the next press:\n{s}");
    let msg = export::status_message(&app);
    assert!(msg.starts_with("exported"), "{msg}");
    let csv = std::fs::read_to_string(dir.join("exports/press-heads-knorm-0.5.csv")).unwrap();
    assert!(csv.starts_with("press,ratio,layer,head,attention_kept"), "{csv:.200}");
    assert_eq!(csv.lines().count(), 1 + 5 * 8, "one row per layer × head of stories260K");

    let tasks = common::temp_dir("run-tasks-view");
    let out = common::sinkscope(&[
        "tasks",
        "-m",
        model,
        "-f",
        text,
        "--task",
        "passkey",
        "--length",
        "300",
        "--trials",
        "2",
        "--press",
        "streaming_llm",
        "--ratio",
        "0.5",
        "--block",
        "16",
        "-o",
        tasks.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut app = App::new(Run::open(&tasks).unwrap());
    let s = screen(&mut app, &[Action::GoTab(Tab::Compression)]);
    for want in ["Tasks · 2 prompts of 300 tokens", "▶ none", "streaming_llm+block16", "passkey"] {
        assert!(s.contains(want), "the task view lacks {want:?}:\n{s}");
    }
    for tab in Tab::ALL {
        update(&mut app, Action::GoTab(tab));
        for (w, h) in [(120, 40), (20, 5), (0, 0)] {
            draw(&mut app, w, h);
        }
    }
}
