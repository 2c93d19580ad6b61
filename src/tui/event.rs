//! Terminal input → [`Action`]: the one keymap (mirrored by the help overlay) and the mouse.
//! Events that change nothing (mouse moves, key releases) map to `None`, so they cause no redraw.

use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEventKind};

use super::action::Action;
use super::state::{Tab, PAN_STEP};

pub fn to_action(event: &Event) -> Option<Action> {
    match event {
        Event::Key(k) => key(k),
        Event::Mouse(m) => match m.kind {
            MouseEventKind::Down(MouseButton::Left) => Some(Action::Click { x: m.column, y: m.row }),
            MouseEventKind::ScrollUp => Some(Action::Scroll(-1)),
            MouseEventKind::ScrollDown => Some(Action::Scroll(1)),
            _ => None,
        },
        Event::Resize(width, height) => Some(Action::Resize { width: *width, height: *height }),
        _ => None,
    }
}

pub fn key(k: &KeyEvent) -> Option<Action> {
    if k.kind == KeyEventKind::Release {
        return None;
    }
    let step = if k.modifiers.contains(KeyModifiers::SHIFT) { PAN_STEP } else { 1 };
    let mv = |dx: isize, dy: isize| Some(Action::Move { dx: dx * step, dy: dy * step });
    match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Some(Action::Quit),
        KeyCode::Char('q') => Some(Action::Quit),
        KeyCode::Esc => Some(Action::Back),
        KeyCode::Char('?') => Some(Action::ToggleHelp),
        KeyCode::Tab => Some(Action::NextTab),
        KeyCode::BackTab => Some(Action::PrevTab),
        KeyCode::Char(c @ '1'..='9') => Some(Action::GoTab(Tab::ALL[(c as u8 - b'1') as usize])),
        KeyCode::Left => mv(-1, 0),
        KeyCode::Right => mv(1, 0),
        KeyCode::Up => mv(0, -1),
        KeyCode::Down => mv(0, 1),
        KeyCode::PageUp => Some(Action::Move { dx: 0, dy: -PAN_STEP }),
        KeyCode::PageDown => Some(Action::Move { dx: 0, dy: PAN_STEP }),
        KeyCode::Enter => Some(Action::Enter),
        KeyCode::Char('+' | '=') => Some(Action::ZoomIn),
        KeyCode::Char('-' | '_') => Some(Action::ZoomOut),
        KeyCode::Char('0') => Some(Action::ZoomReset),
        KeyCode::Char('l') => Some(Action::ToggleLog),
        KeyCode::Char('f') => Some(Action::ToggleFocus),
        KeyCode::Char(',' | '<') => Some(Action::PrevK),
        KeyCode::Char('.' | '>') => Some(Action::NextK),
        KeyCode::Char('c') => Some(Action::ToggleGridColour),
        KeyCode::Char('[') => Some(Action::PrevHead),
        KeyCode::Char(']') => Some(Action::NextHead),
        KeyCode::Char('{') => Some(Action::PrevLayer),
        KeyCode::Char('}') => Some(Action::NextLayer),
        KeyCode::Char('a') => Some(Action::CycleScope),
        KeyCode::Char('m') => Some(Action::ToggleMeasure),
        KeyCode::Char('w') => Some(Action::CycleWindow),
        KeyCode::Char('e') => Some(Action::Export),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::{KeyEventState, MouseEvent};

    fn press(code: KeyCode, modifiers: KeyModifiers) -> Event {
        Event::Key(KeyEvent { code, modifiers, kind: KeyEventKind::Press, state: KeyEventState::NONE })
    }

    #[test]
    fn keys_map_to_actions() {
        let none = KeyModifiers::NONE;
        assert_eq!(to_action(&press(KeyCode::Char('q'), none)), Some(Action::Quit));
        assert_eq!(to_action(&press(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(to_action(&press(KeyCode::Char('c'), none)), Some(Action::ToggleGridColour));
        assert_eq!(to_action(&press(KeyCode::Char('3'), none)), Some(Action::GoTab(Tab::Heatmap)));
        assert_eq!(to_action(&press(KeyCode::Right, KeyModifiers::SHIFT)), Some(Action::Move { dx: PAN_STEP, dy: 0 }));
        assert_eq!(to_action(&press(KeyCode::Up, none)), Some(Action::Move { dx: 0, dy: -1 }));
        assert_eq!(to_action(&press(KeyCode::Char('?'), KeyModifiers::SHIFT)), Some(Action::ToggleHelp));
        assert_eq!(to_action(&press(KeyCode::Char('z'), none)), None);
        let release = Event::Key(KeyEvent { code: KeyCode::Char('q'), modifiers: none, kind: KeyEventKind::Release, state: KeyEventState::NONE });
        assert_eq!(to_action(&release), None);
    }

    #[test]
    fn mouse_and_resize() {
        let m = |kind| Event::Mouse(MouseEvent { kind, column: 7, row: 3, modifiers: KeyModifiers::NONE });
        assert_eq!(to_action(&m(MouseEventKind::Down(MouseButton::Left))), Some(Action::Click { x: 7, y: 3 }));
        assert_eq!(to_action(&m(MouseEventKind::ScrollDown)), Some(Action::Scroll(1)));
        assert_eq!(to_action(&m(MouseEventKind::Moved)), None, "moves cause no redraw");
        assert_eq!(to_action(&Event::Resize(80, 24)), Some(Action::Resize { width: 80, height: 24 }));
    }
}
