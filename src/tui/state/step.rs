//! Cursor movement within a list: the one rule every view's selection follows.

/// `value` moved by `by`, kept within 0..len (0 when empty).
pub(crate) fn step(value: usize, by: isize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (value as isize + by).clamp(0, len as isize - 1) as usize
}
