//! Showing text from a file on a terminal.
//!
//! Names, keys and strings come from files that anyone can write: printed raw, a tensor
//! named `"\x1b]0;pwned\x07"` retitles the terminal, and a newline in a name forges a line of
//! the report. [`escape_for_terminal`] makes any such text inert before a table shows it
//! (JSON output needs nothing more: serde escapes control characters).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with every character that a terminal would act on written as a visible escape:
///
/// - `\n`, `\r`, `\t` as those two-character escapes, and `\` as `\\` (so that an escape
///   in the output always means an escaped character, never a literal backslash);
/// - other C0 controls and DEL as `\x1b`-style escapes;
/// - C1 controls (U+0080–U+009F) and the Unicode bidirectional controls (U+061C, U+200E,
///   U+200F, U+202A–U+202E, U+2066–U+2069), which reorder how a line reads, as `\u{202e}`.
///
/// Everything else, non-ASCII letters included, is kept. Text with nothing to escape is
/// returned borrowed.
///
/// ```
/// use weight_inspect::format::display::escape_for_terminal;
/// assert_eq!(escape_for_terminal("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
/// assert_eq!(escape_for_terminal("a\nb\x1b[31m"), "a\\nb\\x1b[31m");
/// assert_eq!(escape_for_terminal("é\u{202e}"), "é\\u{202e}");
/// ```
pub fn escape_for_terminal(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(
            escape_for_terminal("token_embd.weight ключ 😀"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn every_control_character_is_escaped() {
        for b in (0u8..0x20).chain([0x7f]) {
            let s = format!("a{}b", b as char);
            let e = escape_for_terminal(&s);
            assert!(!e.chars().any(|c| c.is_control()), "{b:#x}: {e:?}");
            assert!(e.starts_with("a\\") && e.ends_with('b'), "{e}");
        }
        assert_eq!(
            escape_for_terminal("\x1b]0;title\x07"),
            "\\x1b]0;title\\x07"
        );
        assert_eq!(escape_for_terminal("\r\t\0"), "\\r\\t\\x00");
        assert_eq!(escape_for_terminal("\u{85}\u{9b}"), "\\u{85}\\u{9b}");
    }

    #[test]
    fn bidi_controls_and_backslashes_are_escaped() {
        assert_eq!(
            escape_for_terminal("a\u{202e}b\u{2066}"),
            "a\\u{202e}b\\u{2066}"
        );
        assert_eq!(escape_for_terminal("a\\nb"), "a\\\\nb");
    }
}
