//! A budgeted collector of [`Diagnostic`]s.
//!
//! A hostile file can break one rule millions of times (a header of three million invalid
//! entries). [`Diagnostics`] counts every diagnostic but stores only the first
//! [`MAX_PER_CODE`] of each code and [`MAX_TOTAL`] in all, each message cut to
//! [`MAX_MESSAGE_LEN`] bytes; [`Diagnostics::finish`] then adds one line per code that had
//! more, e.g. "… and 2,999,984 more `safetensors.invalid-entry` diagnostics". The memory and
//! the output a file's diagnostics take are so bounded whatever the file.

use super::{Diagnostic, Severity};

/// Diagnostics stored per code; later ones of that code are only counted.
pub const MAX_PER_CODE: usize = 16;
/// Diagnostics stored in all (summary lines aside); later ones are only counted.
pub const MAX_TOTAL: usize = 256;
/// Longest message stored, in bytes: longer ones are cut at a character boundary and end
/// with `…` (a name from a file can be megabytes long).
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Collects diagnostics within the budget described in the module docs.
#[derive(Debug, Default, Clone)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
    /// Per code: severity, how many were pushed, how many were stored.
    counts: Vec<(&'static str, Severity, u64, u64)>,
}

impl Diagnostics {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count `d`, and store it if the budget allows. A summary line of another collector
    /// (`d.more > 0`) is not stored: its count joins this one's, so that collecting the
    /// finished diagnostics of several files again gives one summary per code.
    pub fn push(&mut self, mut d: Diagnostic) {
        let stored_total = self.list.len();
        let slot = match self.counts.iter_mut().find(|c| c.0 == d.code) {
            Some(s) => s,
            None => {
                self.counts.push((d.code, d.severity, 0, 0));
                self.counts.last_mut().expect("just pushed")
            }
        };
        if d.more > 0 {
            slot.2 += d.more;
            slot.1 = slot.1.max(d.severity);
            return;
        }
        slot.2 += 1;
        // An error of a code first seen as a warning (or the reverse) keeps the worse one.
        slot.1 = slot.1.max(d.severity);
        if slot.3 < MAX_PER_CODE as u64 && stored_total < MAX_TOTAL {
            slot.3 += 1;
            truncate_message(&mut d.message);
            self.list.push(d);
        }
    }

    /// Count and maybe store an error.
    pub fn error(&mut self, code: &'static str, message: impl Into<String>) {
        self.push(Diagnostic::error(code, message));
    }

    /// Count and maybe store a warning.
    pub fn warning(&mut self, code: &'static str, message: impl Into<String>) {
        self.push(Diagnostic::warning(code, message));
    }

    /// Count and maybe store every diagnostic of `ds`.
    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        for d in ds {
            self.push(d);
        }
    }

    /// Whether any error was pushed (stored or only counted).
    pub fn has_errors(&self) -> bool {
        self.counts.iter().any(|c| c.1 == Severity::Error)
    }

    /// How many diagnostics were pushed in all, stored or not.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.2).sum()
    }

    /// How many diagnostics of `code` were pushed, stored or not.
    pub fn count_of(&self, code: &str) -> u64 {
        self.counts.iter().find(|c| c.0 == code).map_or(0, |c| c.2)
    }

    /// The stored diagnostics so far (without the summary lines).
    pub fn stored(&self) -> &[Diagnostic] {
        &self.list
    }

    /// The stored diagnostics, then one summary line for each code that had more than were
    /// stored: "… and N more `code` diagnostics", with that code and its severity.
    pub fn finish(mut self) -> Vec<Diagnostic> {
        for &(code, severity, n, stored) in &self.counts {
            if n > stored {
                self.list.push(Diagnostic {
                    severity,
                    code,
                    message: format!("… and {} more `{code}` diagnostics", grouped(n - stored)),
                    more: n - stored,
                });
            }
        }
        self.list
    }
}

/// Cut `s` to at most [`MAX_MESSAGE_LEN`] bytes at a character boundary, ending it with `…`.
fn truncate_message(s: &mut String) {
    if s.len() <= MAX_MESSAGE_LEN {
        return;
    }
    let mut end = MAX_MESSAGE_LEN - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
    s.shrink_to_fit();
}

/// `2999984` → `2,999,984`.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_per_code_and_in_total_with_one_summary_per_code() {
        let mut d = Diagnostics::new();
        for i in 0..3_000_000u32 {
            d.error("a", format!("{i}"));
        }
        d.warning("b", "w");
        assert!(d.has_errors());
        assert_eq!((d.count(), d.count_of("a")), (3_000_001, 3_000_000));
        let list = d.finish();
        assert_eq!(list.len(), MAX_PER_CODE + 1 + 1);
        let last = list.last().unwrap();
        assert_eq!((last.code, last.severity), ("a", Severity::Error));
        assert_eq!(last.message, "… and 2,999,984 more `a` diagnostics");
    }

    #[test]
    fn total_cap_holds_across_codes() {
        const CODES: [&str; 40] = [
            "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11", "c12", "c13",
            "c14", "c15", "c16", "c17", "c18", "c19", "c20", "c21", "c22", "c23", "c24", "c25",
            "c26", "c27", "c28", "c29", "c30", "c31", "c32", "c33", "c34", "c35", "c36", "c37",
            "c38", "c39",
        ];
        let mut d = Diagnostics::new();
        for code in CODES {
            for _ in 0..20 {
                d.warning(code, "x");
            }
        }
        assert!(!d.has_errors());
        let list = d.finish();
        let stored = list.iter().filter(|x| !x.message.starts_with('…')).count();
        assert_eq!(stored, MAX_TOTAL);
        // Every code has its summary line, and the counts add up.
        let summaries = list.len() - stored;
        assert_eq!(summaries, CODES.len());
    }

    #[test]
    fn summaries_merge_when_collected_again() {
        let mut a = Diagnostics::new();
        for _ in 0..100 {
            a.error("x", "a");
        }
        let mut b = Diagnostics::new();
        for _ in 0..50 {
            b.error("x", "b");
        }
        let mut all = Diagnostics::new();
        all.extend(a.finish());
        all.extend(b.finish());
        assert_eq!(all.count_of("x"), 150);
        let list = all.finish();
        assert_eq!(list.len(), MAX_PER_CODE + 1);
        assert_eq!(list[MAX_PER_CODE].more, 150 - MAX_PER_CODE as u64);
    }

    #[test]
    fn long_messages_are_cut_at_a_char_boundary() {
        let mut d = Diagnostics::new();
        d.error("a", "é".repeat(4000));
        let list = d.finish();
        assert!(list[0].message.len() <= MAX_MESSAGE_LEN);
        assert!(list[0].message.ends_with('…'));
    }

    #[test]
    fn grouping() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(2_999_984), "2,999,984");
    }
}
