//! The terminal dashboard without a terminal: every view rendered into ratatui's TestBackend on
//! the committed stories260K run and compared with insta snapshots (tests/snapshots/), runs with
//! parts missing, tiny and large sizes, exports, and the real-terminal tmux smoke script.
#![cfg(feature = "tui")]

#[macro_use]
mod common;
mod dashboard;

use std::path::Path;

use dashboard::{copy_without, draw, fixture_app, screen, text, FIXTURE};
use sinkscope::report::run::Run;
use sinkscope::tui::action::{Action, Effect};
use sinkscope::tui::export;
use sinkscope::tui::state::{App, GridColour, Tab};
use sinkscope::tui::update::update;

#[test]
fn snapshot_overview() {
    insta::assert_snapshot!("overview", screen(&mut fixture_app(), &[]));
}

#[test]
fn snapshot_grid_alpha() {
    insta::assert_snapshot!("grid_alpha", screen(&mut fixture_app(), &[Action::GoTab(Tab::Grid)]));
}

#[test]
fn snapshot_grid_class_and_k() {
    let s = screen(&mut fixture_app(), &[Action::GoTab(Tab::Grid), Action::ToggleGridColour, Action::NextK, Action::Move { dx: 1, dy: 1 }]);
    insta::assert_snapshot!("grid_class", s);
}

#[test]
fn snapshot_heatmap() {
    insta::assert_snapshot!("heatmap", screen(&mut fixture_app(), &[Action::GoTab(Tab::Grid), Action::Enter]));
}

#[test]
fn snapshot_heatmap_focus_log_zoom() {
    let s = screen(
        &mut fixture_app(),
        &[Action::GoTab(Tab::Heatmap), Action::ToggleFocus, Action::ToggleLog, Action::ZoomIn, Action::Move { dx: 2, dy: -5 }],
    );
    insta::assert_snapshot!("heatmap_focus_log_zoom", s);
}

#[test]
fn snapshot_tokens() {
    insta::assert_snapshot!("tokens", screen(&mut fixture_app(), &[Action::GoTab(Tab::Tokens), Action::Move { dx: 4, dy: 0 }]));
}

#[test]
fn snapshot_activations() {
    insta::assert_snapshot!("activations", screen(&mut fixture_app(), &[Action::GoTab(Tab::Activations), Action::Move { dx: 0, dy: 2 }]));
}

#[test]
fn snapshot_streaming() {
    insta::assert_snapshot!("streaming", screen(&mut fixture_app(), &[Action::GoTab(Tab::Streaming), Action::Move { dx: 0, dy: 1 }]));
}

/// A sampled perplexity (recompute scored on some steps) is marked ≈ with its interval below.
#[test]
fn streaming_shows_a_sampled_value_with_its_interval() {
    let dir = copy_without("run-sampled", &[]);
    let path = dir.join("stream.json");
    let mut stream: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let row = stream["recommendation"]["table"].as_array_mut().unwrap().last_mut().unwrap();
    assert!(row["label"].as_str().unwrap().starts_with("recompute"));
    row["ppl_after_eviction_ci"] = serde_json::json!([1.5, 9.25]);
    row["scored_steps"] = 40.into();
    std::fs::write(&path, stream.to_string()).unwrap();
    let mut app = App::new(Run::open(&dir).unwrap());
    let s = screen(&mut app, &[Action::GoTab(Tab::Streaming)]);
    assert!(s.contains("40 post-eviction steps scored, 95% interval 1.50–9.25"), "{s}");
    assert_eq!(s.matches('≈').count(), 2, "the value and its note: {s}");
}

/// A run not opened through a survey says how to make one.
#[test]
fn snapshot_survey_without_a_survey() {
    insta::assert_snapshot!("survey_missing", screen(&mut fixture_app(), &[Action::GoTab(Tab::Survey)]));
}

#[test]
fn snapshot_help() {
    insta::assert_snapshot!("help", screen(&mut fixture_app(), &[Action::ToggleHelp]));
}

#[test]
fn snapshot_run_without_stream() {
    let dir = copy_without("run-no-stream", &["stream.json"]);
    let mut app = App::new(Run::open(&dir).unwrap());
    let s = screen(&mut app, &[Action::GoTab(Tab::Streaming)]);
    insta::assert_snapshot!("no_stream_streaming", s);
    let overview = screen(&mut app, &[Action::GoTab(Tab::Overview)]);
    assert!(overview.contains("✗ stream.json"), "{overview}");
    assert!(overview.contains("no recommendation in this run"), "{overview}");
    // Export says why there is nothing to export instead of failing.
    update(&mut app, Action::GoTab(Tab::Streaming));
    assert!(export::status_message(&app).contains("no stream.json"));
}

#[test]
fn capture_only_run_says_what_is_missing() {
    let dir = copy_without("run-capture-only", &["stream.json", "report.json"]);
    let mut app = App::new(Run::open(&dir).unwrap());
    let grid = screen(&mut app, &[Action::GoTab(Tab::Grid), Action::ToggleGridColour]);
    assert!(grid.contains("no head classes"), "{grid}");
    let overview = screen(&mut app, &[Action::GoTab(Tab::Overview)]);
    assert!(overview.contains("no analysis (report.json)"), "{overview}");
    // The grid falls back to the capture's own α.
    update(&mut app, Action::ToggleGridColour);
    let grid = screen(&mut app, &[Action::GoTab(Tab::Grid)]);
    assert!(grid.contains("(capture.json)"), "{grid}");
}

#[test]
fn analysis_only_run_renders_every_view_with_content() {
    let dir = copy_without("run-analysis-only", &["stream.json", "capture.json", "reductions.safetensors"]);
    let mut app = App::new(Run::open(&dir).unwrap());
    for tab in Tab::ALL {
        let s = screen(&mut app, &[Action::GoTab(tab)]);
        // Below the tab bar and above the status line, the view draws something.
        let body: Vec<&str> = s.lines().skip(1).take(38).collect();
        assert!(body.iter().filter(|l| !l.trim().is_empty()).count() >= 3, "{} draws an empty body:\n{s}", tab.title());
    }
    // Exact heatmaps still give per-token attention without reductions.safetensors.
    assert!(app.tokens.weights.is_some());
    let heat = screen(&mut app, &[Action::GoTab(Tab::Heatmap)]);
    assert!(heat.contains("64 tokens, exact"), "{heat}");
}

#[test]
fn no_panic_at_any_size_in_any_state() {
    let mut app = fixture_app();
    let states: Vec<Vec<Action>> = vec![
        vec![],
        vec![Action::ToggleHelp],
        vec![Action::ToggleHelp, Action::ToggleFocus, Action::ZoomIn, Action::ZoomIn, Action::ZoomIn],
        vec![Action::ToggleHelp, Action::ToggleLog, Action::ToggleGridColour, Action::CycleScope, Action::ToggleMeasure, Action::CycleWindow],
    ];
    for state in states {
        for a in state {
            update(&mut app, a);
        }
        for tab in Tab::ALL {
            update(&mut app, Action::GoTab(tab));
            for (w, h) in [(20, 5), (1, 1), (0, 0), (2, 40), (200, 2), (45, 14), (200, 60), (300, 100)] {
                let buf = draw(&mut app, w, h);
                assert_eq!(buf.area.width, w);
            }
            // Clicks anywhere at a tiny size must not panic either.
            update(&mut app, Action::Resize { width: 20, height: 5 });
            for (x, y) in [(0, 0), (19, 4), (10, 2), (500, 500)] {
                update(&mut app, Action::Click { x, y });
            }
            update(&mut app, Action::Resize { width: 120, height: 40 });
        }
    }
}

#[test]
fn large_frames_show_every_view() {
    let mut app = fixture_app();
    let expect = [
        (Tab::Overview, "Sink-count recommendation"),
        (Tab::Grid, "Selected head"),
        (Tab::Heatmap, "Legend · cursor"),
        (Tab::Tokens, "Receives most"),
        (Tab::Activations, "Per layer (resid_post)"),
        (Tab::Streaming, "Policies"),
    ];
    for (tab, needle) in expect {
        update(&mut app, Action::GoTab(tab));
        let s = text(&draw(&mut app, 200, 60));
        assert!(s.contains(needle), "{tab:?} at 200×60 lacks {needle:?}:\n{s}");
    }
}

#[test]
fn colours_follow_the_data() {
    let mut app = fixture_app();
    update(&mut app, Action::GoTab(Tab::Grid));
    update(&mut app, Action::Resize { width: 120, height: 40 });
    let buf = draw(&mut app, 120, 40);
    let g = sinkscope::tui::layout::grid(sinkscope::tui::layout::areas(120, 40).body, app.data.n_layers, app.data.n_heads, app.layer);
    let (x, y) = g.cell_origin(app.layer, app.head).unwrap();
    let alpha = app.data.alpha(app.layer, app.head, 0).unwrap() as f32;
    assert_eq!(buf[(x + 1, y)].bg, sinkscope::tui::widgets::colour::sequential(alpha), "the selected cell is coloured by its α_0");
    assert_eq!(app.grid.colour, GridColour::Alpha);
    // The heatmap: on the strongest sink head, the last query's pixel on key 0 is the brightest of its row.
    update(&mut app, Action::Enter);
    let buf = draw(&mut app, 120, 40);
    let (rows, cols) = app.heat_dims().unwrap();
    let geom = sinkscope::tui::layout::heatmap(sinkscope::tui::layout::areas(120, 40).body, rows, cols, &app.heat);
    let y = geom.raster.y + (geom.rows.used() as u16 - 1) / 2;
    let lum = |c: ratatui::style::Color| match c {
        ratatui::style::Color::Rgb(r, g, b) => r as u32 + g as u32 + b as u32,
        _ => 0,
    };
    let key0 = lum(buf[(geom.raster.x, y)].bg);
    let rest = (2..geom.cols.used() as u16).map(|x| lum(buf[(geom.raster.x + x, y)].bg)).max().unwrap();
    assert!(key0 > rest, "key 0 ({key0}) is brighter than every later key ({rest})");
}

#[test]
fn export_writes_each_views_table_into_exports() {
    let dir = copy_without("run-export", &[]);
    let mut app = App::new(Run::open(&dir).unwrap());
    let expect = [
        (Tab::Overview, "overview.json", "\"recommended_sinks\""),
        (Tab::Grid, "grid-alpha.csv", "layer,head,class,alpha_0"),
        (Tab::Heatmap, "heatmap-L", "layer,head,query_from,query_to,key_from,key_to,attention"),
        (Tab::Tokens, "tokens-head-alpha.csv", "pos,id,token,scope,layer,head,measure,value,sink"),
        (Tab::Activations, "activations.csv", "layer,max_abs,max_pos"),
        (Tab::Streaming, "streaming-sweep.csv", "policy,sinks,cache,ppl"),
    ];
    for (tab, name, header) in expect {
        update(&mut app, Action::GoTab(tab));
        let msg = export::status_message(&app);
        assert!(msg.starts_with("exported"), "{msg}");
        let path = std::fs::read_dir(dir.join("exports"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(name) && p.extension().is_some_and(|e| e == "csv" || e == "json"))
            .unwrap();
        let body = std::fs::read_to_string(&path).unwrap();
        assert!(body.contains(header), "{name}: {body:.200}");
        assert!(msg.contains(&path.display().to_string()));
    }
    // Views that are figures also get the figure `sinkscope export` draws.
    let head = format!("heatmap-L{}-H{}-linear.png", app.layer, app.head);
    for png in ["alpha-grid-k0.png", head.as_str(), "layer-magnitudes.png", "ppl-curves.png"] {
        let bytes = std::fs::read(dir.join("exports").join(png)).unwrap_or_else(|_| panic!("{png} not exported"));
        assert_eq!(&bytes[..4], b"\x89PNG", "{png}");
    }
    let grid = std::fs::read_to_string(dir.join("exports/grid-alpha.csv")).unwrap();
    assert_eq!(grid.lines().count(), 1 + 5 * 8, "one row per head");
    let sweep = std::fs::read_to_string(dir.join("exports/streaming-sweep.csv")).unwrap();
    assert!(sweep.lines().any(|l| l.starts_with("window W=48 (slot),0,48,") && l.ends_with(",true")), "S=0 is recommended:\n{sweep}");
    // Nothing but the exports is left behind (atomic writes clean their temp files).
    let names: Vec<String> = std::fs::read_dir(dir.join("exports")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[test]
fn dash_refuses_a_non_terminal_and_bad_arguments() {
    let out = common::sinkscope(&["dash", FIXTURE]);
    assert_eq!(out.status.code(), Some(2), "stdout is a pipe here");
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an interactive terminal"));
    // Checked before computing anything: no run directory appears.
    let dir = common::temp_child("dash-no-tty", "run");
    let out = common::sinkscope(&["dash", "-m", "stories260k", "-f", "tests/fixtures/texts/tinystories.txt", "-o", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.exists());
    let out = common::sinkscope(&["dash", FIXTURE, "-f", "tests/fixtures/texts/tinystories.txt"]);
    assert_eq!(out.status.code(), Some(2), "a run and -f conflict");
}

/// A private tmux server running one command in a detached session (killed on drop).
struct Tmux {
    sock: String,
}

impl Tmux {
    /// Starts `cmd` at width × height, or `None` (after saying so) when tmux is absent.
    fn start(tag: &str, cmd: &str, width: u16, height: u16) -> Option<Tmux> {
        if std::process::Command::new("tmux").arg("-V").output().is_err() {
            common::skip("tmux is not installed; the real-terminal test cannot run (apt-get install tmux)");
            return None;
        }
        let t = Tmux { sock: format!("sinkscope-test-{}-{tag}", std::process::id()) };
        let full = format!("{cmd}; echo DASH-EXITED $?; sleep 30");
        let ok = t.run(&["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", &width.to_string(), "-y", &height.to_string(), &full]);
        assert!(ok, "tmux new-session failed");
        Some(t)
    }

    fn run(&self, args: &[&str]) -> bool {
        std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.sock)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .is_ok_and(|s| s.success())
    }

    fn pane(&self) -> String {
        let out = std::process::Command::new("tmux").args(["-L", &self.sock, "capture-pane", "-p", "-t", "t"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits up to `secs` for `needle` on screen; panics with the pane otherwise.
    fn wait_for(&self, needle: &str, secs: u64) -> String {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let pane = self.pane();
            if pane.contains(needle) {
                return pane;
            }
            assert!(std::time::Instant::now() < end, "{needle:?} never appeared; the pane shows:\n{pane}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.run(&args));
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[test]
fn dash_computes_a_run_from_a_text_then_opens_it() {
    let Some(models) = common::models_dir() else { return };
    let dir = common::temp_child("dash-compute", "run");
    let cmd = format!(
        "SINKSCOPE_MODELS={} {} dash -m stories260k -f tests/fixtures/texts/tinystories.txt --max-tokens 48 --no-ablation -o {}",
        models.display(),
        env!("CARGO_BIN_EXE_sinkscope"),
        dir.display()
    );
    let Some(t) = Tmux::start("compute", &cmd, 120, 40) else { return };
    let pane = t.wait_for("Findings", 60);
    assert!(pane.contains("48 tokens"), "{pane}");
    t.keys(&["2"]);
    t.wait_for("α_0 per head", 10);
    t.keys(&["q"]);
    t.wait_for("DASH-EXITED 0", 10);
    let run = Run::open(&dir).unwrap();
    assert!(run.capture.is_some() && run.analysis.is_some() && run.heatmaps.is_some());
}

#[test]
fn dash_in_a_terminal_reports_a_missing_run_in_one_line() {
    let cmd = format!("{} dash tests/fixtures/no-such-run", env!("CARGO_BIN_EXE_sinkscope"));
    let Some(t) = Tmux::start("missing", &cmd, 120, 10) else { return };
    let pane = t.wait_for("DASH-EXITED 2", 10);
    assert!(pane.contains("error: tests/fixtures/no-such-run: is not a directory"), "{pane}");
}

/// The real-terminal check: scripts/tui_smoke.sh drives the binary in tmux through every view.
#[test]
fn tmux_smoke() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tui_smoke.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(common::fixture("run-stories260k"))
        .env("SINKSCOPE_BIN", env!("CARGO_BIN_EXE_sinkscope"))
        .output()
        .expect("run scripts/tui_smoke.sh");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if log.contains("SKIP") {
        common::skip(&format!("tmux smoke test: {}", log.trim()));
        return;
    }
    assert!(out.status.success(), "tmux smoke test failed:\n{log}");
    assert!(log.contains("PASS"), "{log}");
}

/// A `recommend --per-head` run: its streams in the policy table, the frontier in the side pane,
/// and for a selected per-head stream what its sets kept.
#[test]
fn streaming_shows_the_per_head_frontier() {
    let Some(_) = common::model("stories260K.gguf") else { return };
    let dir = common::temp_child("tui-per-head", "run");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "recommend",
        "--per-head",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "200",
        "--cache",
        "48",
        "--head-sinks",
        "2",
        "--shares",
        "0,0.5",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut app = App::new(Run::open(&dir).unwrap());
    let s = screen(&mut app, &[Action::GoTab(Tab::Streaming)]);
    assert!(s.contains("Per-head policies, W = 48") && s.contains(" 50% "), "{s}");
    // With no retrieval heads the per-head policy is the uniform cache: the same perplexity twice.
    let zero = s.lines().find(|l| l.contains("  0% ")).expect("the 0% row");
    let pane = zero.rsplit('│').nth(1).unwrap_or(zero);
    let nums: Vec<&str> = pane.split_whitespace().filter(|w| w.contains('.') && !w.contains("MiB")).collect();
    assert!(nums.len() >= 2 && nums[0] == nums[1], "{zero}");
    assert!(s.contains("kept 0–3 100% / 100%"), "{s}");
}

/// `quant`'s results show under the Activations tab: below the magnitudes in a full run, as the
/// whole view in a quant-only run (every other tab says what it lacks, nothing panics).
#[test]
fn quant_results_show_in_the_activations_view() {
    let model = model_or_skip!("stories260K.gguf");
    let story = common::fixture("texts/tinystories.txt");
    let full = copy_without("with-quant", &[]);
    let only = common::temp_child("quant-only", "run");
    for dir in [&full, &only] {
        let out = common::sinkscope(&[
            "quant",
            "-m",
            model.to_str().unwrap(),
            "-f",
            story.to_str().unwrap(),
            "--max-tokens",
            "64",
            "--sequences",
            "2",
            "-o",
            dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for (dir, also) in [(&full, "Per layer (resid_post)"), (&only, "tensor_static int4 skip4")] {
        let mut app = App::new(Run::open(dir).unwrap());
        update(&mut app, Action::GoTab(Tab::Activations));
        let s = text(&draw(&mut app, 160, 60));
        assert!(s.contains("Activation quantization") && s.contains("token_dynamic int8") && s.contains(also), "{s}");
        for tab in Tab::ALL {
            update(&mut app, Action::GoTab(tab));
            for (w, h) in [(160, 60), (30, 8)] {
                draw(&mut app, w, h);
            }
        }
    }
}

/// A survey directory opens as its first model's run with the survey's table in the Overview and
/// its own Survey view (Enter opens another model's run); a survey.json whose run directories are
/// gone is one clear error.
#[test]
fn a_survey_directory_opens_with_its_table() {
    let model = model_or_skip!("stories260K.gguf");
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_child("survey-dash", "survey");
    let out = common::sinkscope(&[
        "survey",
        "-m",
        model.to_str().unwrap(),
        "-m",
        bin.to_str().unwrap(),
        "--cache",
        "32",
        "--tokens",
        "120",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut app = App::new(Run::open(&dir).unwrap());
    let s = text(&draw(&mut app, 200, 60));
    assert!(s.contains("Survey of 2 models") && s.contains("models/stories260K.bin") && s.contains("stories260k ·"), "{s}");
    for tab in Tab::ALL {
        update(&mut app, Action::GoTab(tab));
        draw(&mut app, 120, 40);
    }
    // The Survey view: both models side by side, the open one marked, its sweeps below.
    update(&mut app, Action::GoTab(Tab::Survey));
    let s = text(&draw(&mut app, 200, 60));
    assert!(s.contains("2 models (↑/↓ select") && s.contains("streaming heads") && s.contains("mean α_0") && s.contains("Sink_0^ε against"), "{s}");
    assert!(s.contains(" ● stories260k") && s.contains("W = 32 on 120 tokens of stream-text.txt:"), "{s}");
    // ↓ then Enter opens the second model's run; the survey stays, now marking that run.
    update(&mut app, Action::Move { dx: 0, dy: 1 });
    let open = match update(&mut app, Action::Enter) {
        Effect::OpenSurveyRun(path) => path,
        other => panic!("Enter on the survey gave {other:?}"),
    };
    assert_eq!(open, dir.join("models/stories260K.bin"));
    sinkscope::tui::open_survey_run(&mut app, &open);
    assert!(app.run.dir.ends_with("models/stories260K.bin") && app.run.survey.is_some() && app.tab == Tab::Survey && app.survey.row == 1);
    let s = text(&draw(&mut app, 200, 60));
    assert!(s.contains(" ● stories260K.bin") && s.contains("opened stories260K.bin"), "{s}");
    // The survey's table exports as CSV, one row per model × sweep.
    let csv = String::from_utf8(export::build(&app).unwrap().bytes).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("model,family,n_params,sink_0") && csv.contains("stories260K.bin,llama"), "{csv}");
    // A run directory that has gone away: the dashboard stays where it was and says why.
    sinkscope::tui::open_survey_run(&mut app, &dir.join("models/nonexistent"));
    assert!(
        app.run.dir.ends_with("models/stories260K.bin") && app.status.as_deref().is_some_and(|m| m.starts_with("cannot open")),
        "{:?}",
        app.status
    );
    std::fs::remove_dir_all(dir.join("models")).unwrap();
    let err = Run::open(&dir).unwrap_err().to_string();
    assert!(err.contains("survey.json") && err.contains("re-run `sinkscope survey`"), "{err}");
}

/// The committed examples in notebooks-data/ are runs the dashboard opens without a model: every
/// view draws, and the survey's table lists its three models.
#[test]
fn the_committed_examples_open_in_the_dashboard() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks-data");
    for (dir, expect) in
        [("smollm2-135m", "smollm2-135m (llama, gguf)"), ("stories260k", "stories260k (llama, gguf)"), ("survey", "Survey of 3 models")]
    {
        let run = Run::open(&root.join(dir)).unwrap_or_else(|e| panic!("notebooks-data/{dir}: {e}"));
        let mut app = App::new(run);
        let s = text(&draw(&mut app, 200, 60));
        assert!(s.contains(expect), "notebooks-data/{dir}: {s}");
        for tab in Tab::ALL {
            update(&mut app, Action::GoTab(tab));
            draw(&mut app, 160, 48);
        }
    }
}

/// A hybrid's capture (Qwen3-Next's tiny fixture: linear-attention layers 0 and 2) in every view
/// and token scope: nothing panics and no NaN reaches the screen (a linear layer's column mass is
/// left out, not averaged in).
#[test]
fn a_hybrids_run_renders_in_every_view_without_nan() {
    let dir = common::temp_dir("tui-hybrid");
    let model = common::fixture("arch/qwen3_next");
    let run_dir = dir.join("run");
    let out = common::sinkscope(&[
        "capture",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "Once upon a time there was a little dog who liked the sun",
        "-o",
        run_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut app = App::new(Run::open(&run_dir).unwrap());
    for tab in Tab::ALL {
        let s = screen(&mut app, &[Action::GoTab(tab)]);
        assert!(!s.contains("NaN"), "{tab:?} shows NaN:\n{s}");
    }
    for _ in 0..3 {
        let s = screen(&mut app, &[Action::GoTab(Tab::Tokens), Action::CycleScope]);
        assert!(!s.contains("NaN"), "tokens shows NaN:\n{s}");
    }
}
