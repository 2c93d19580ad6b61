//! `sinkscope dash`: a terminal dashboard over a saved run. This module owns the terminal — raw
//! mode, alternate screen and mouse capture, restored on exit and on panic — and the event loop,
//! which redraws only after an event that maps to an action (no timer, so no flicker and no idle
//! CPU). Everything shown comes from a [`Run`]: no model code and no candle here.

pub mod action;
pub mod data;
pub mod event;
pub mod export;
pub mod layout;
pub mod state;
pub mod tab;
pub mod ui;
pub mod update;
pub mod views;
pub mod widgets;

use std::io::{stdout, IsTerminal};

use ratatui::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::execute;
use ratatui::DefaultTerminal;

use crate::error::{Error, Result};
use crate::report::run::Run;
use action::{Action, Effect};
use state::App;
use update::update;

/// Opens the dashboard on `run` and returns when the user quits.
pub fn run(run: Run) -> Result<()> {
    if !stdout().is_terminal() {
        return Err(Error::input("`sinkscope dash` needs an interactive terminal (stdout is not a TTY)"));
    }
    let mut app = App::new(run);
    // Mouse capture is ours to undo; ratatui's hook (installed by try_init, and run first)
    // restores raw mode and the main screen, then calls this one.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = execute!(stdout(), DisableMouseCapture);
        previous(info);
    }));
    let mut terminal = ratatui::try_init().map_err(|e| Error::input(format!("cannot set up the terminal ({e})")))?;
    let _ = execute!(stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, &mut app);
    let _ = execute!(stdout(), DisableMouseCapture);
    ratatui::restore();
    result
}

/// Replaces the dashboard's run with another model's run of the same survey, staying on the
/// Survey view; a run that cannot be opened leaves everything as it was and says why.
pub fn open_survey_run(app: &mut App, dir: &std::path::Path) {
    match Run::open(dir) {
        Ok(mut run) => {
            run.survey = app.run.survey.take();
            run.survey_dir = app.run.survey_dir.take();
            let (width, height) = (app.width, app.height);
            *app = App::new(run);
            app.tab = state::Tab::Survey;
            update(app, Action::Resize { width, height });
            let msg = format!("opened {}", app.run.model_name());
            update(app, Action::Status(msg));
        }
        Err(e) => {
            update(app, Action::Status(format!("cannot open {}: {e}", dir.display())));
        }
    }
}

fn event_loop(terminal: &mut DefaultTerminal, app: &mut App) -> Result<()> {
    let size = terminal.size()?;
    update(app, Action::Resize { width: size.width, height: size.height });
    terminal.draw(|f| ui::render(f, app))?;
    while !app.quit {
        let ev = ratatui::crossterm::event::read()?;
        let Some(action) = event::to_action(&ev) else { continue };
        match update(app, action) {
            Effect::Export => {
                let msg = export::status_message(app);
                update(app, Action::Status(msg));
            }
            Effect::OpenSurveyRun(dir) => open_survey_run(app, &dir),
            Effect::None => {}
        }
        if !app.quit {
            terminal.draw(|f| ui::render(f, app))?;
        }
    }
    Ok(())
}
