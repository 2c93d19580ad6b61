//! The dashboard's test harness, shared by the view tests: the committed stories260K run (or a
//! copy without some files), drawing into ratatui's TestBackend, and the frame as plain text.
#![allow(dead_code)]

use std::path::Path;

use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::text::Span;
use ratatui::Terminal;
use sinkscope::report::run::Run;
use sinkscope::tui::action::Action;
use sinkscope::tui::state::App;
use sinkscope::tui::ui;
use sinkscope::tui::update::update;

use crate::common;

/// The committed run, by a relative path so the snapshots do not depend on the checkout's place.
pub const FIXTURE: &str = "tests/fixtures/run-stories260k";

pub fn fixture_app() -> App {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let mut app = App::new(Run::open(Path::new(FIXTURE)).or_else(|_| Run::open(&dir)).unwrap());
    update(&mut app, Action::Resize { width: 120, height: 40 });
    app
}

/// A copy of the fixture run without `drop` files, in a directory named `name`.
pub fn copy_without(name: &str, drop: &[&str]) -> common::TempDir {
    let dir = common::temp_child(name, name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(common::fixture("run-stories260k")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_file() && !drop.contains(&file.as_str()) {
            std::fs::copy(&path, dir.join(&file)).unwrap();
        }
    }
    dir
}

pub fn draw(app: &mut App, width: u16, height: u16) -> Buffer {
    update(app, Action::Resize { width, height });
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| ui::render(f, app)).unwrap();
    term.backend().buffer().clone()
}

/// The buffer as plain text, one line per row, trailing spaces trimmed (wide characters occupy
/// one string position but two cells).
pub fn text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        let mut skip = 0;
        for x in 0..buf.area.width {
            let s = buf[(x, y)].symbol();
            if skip > 0 {
                skip -= 1;
                continue;
            }
            skip = Span::raw(s).width().saturating_sub(1);
            line.push_str(s);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn screen(app: &mut App, actions: &[Action]) -> String {
    for a in actions {
        update(app, a.clone());
    }
    text(&draw(app, 120, 40))
}
