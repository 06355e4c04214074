//! The table of a model's tensors, under its summary: each tensor's name, dtype, shape and
//! size, the file holding it (multi-file models), its SHA-256 cut short (`--verify`), and
//! whether a diagnostic of the report names it.
//!
//! ```text
//!   tensor                  dtype  shape               size  sha256
//!   token_embd.weight       Q4_K   [2048, 32000]   35.2 MiB  55d18e2f72e78280
//! ```
//!
//! Names come from the file: each is escaped ([`esc`]), and cut when absurdly long (the JSON
//! has it whole). Rows are written as they are formatted: a file of a million tensors does not
//! hold its table in memory.

use super::{esc, human};
use crate::format::Severity;
use crate::verify::{Report, TensorEntry};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

/// Names longer than this (in characters, escaped) are cut, ending with `…`.
const MAX_NAME: usize = 200;
/// The name column is as wide as the longest name, up to this; longer names push their row's
/// other columns right.
const NAME_COLUMN: usize = 60;
/// Dimensions shown of a shape; more are counted (`[1, 2, …, 8 more]`).
const MAX_DIMS: usize = 8;
/// Digits of a SHA-256 shown.
const SHA_DIGITS: usize = 16;

/// Writes the table of `r`'s tensors: a blank line, a header, a row per tensor in the file's
/// order.
pub(super) fn write_table(out: &mut impl Write, r: &Report) -> io::Result<()> {
    let named = named_tensors(r);
    let multi = r.tensors.iter().any(|t| t.file.is_some());
    let hashed = r.tensors.iter().any(|t| t.sha256.is_some());
    let mut w = Widths {
        name: "tensor".len(),
        dtype: "dtype".len(),
        shape: "shape".len(),
        size: "size".len(),
        file: "file".len(),
    };
    for t in &r.tensors {
        w.name = w.name.max(chars(&name(&t.name)).min(NAME_COLUMN));
        w.dtype = w.dtype.max(chars(&cut(&t.dtype, 24)));
        w.shape = w.shape.max(chars(&shape(&t.shape)));
        w.size = w.size.max(chars(&human(t.n_bytes)));
        if let Some(f) = &t.file {
            w.file = w.file.max(chars(&cut(f, NAME_COLUMN)));
        }
    }
    writeln!(out)?;
    let mut line = String::new();
    w.line(
        &mut line,
        ["tensor", "dtype", "shape", "size"],
        multi.then_some("file"),
        hashed.then_some("sha256"),
        (!named.is_empty()).then_some("check"),
    );
    out.write_all(line.as_bytes())?;
    for t in &r.tensors {
        line.clear();
        let check = named.get(t.name.as_str()).map(|s| match s {
            Severity::Error => "error",
            Severity::Warning => "warning",
        });
        w.line(
            &mut line,
            [
                &name(&t.name),
                &cut(&t.dtype, 24),
                &shape(&t.shape),
                &human(t.n_bytes),
            ],
            multi.then(|| t.file.as_deref().map_or(Cow::Borrowed("-"), |f| cut(f, 60))),
            hashed.then(|| sha(t)),
            (!named.is_empty()).then_some(check.unwrap_or("")),
        );
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// The widths of the table's columns.
struct Widths {
    name: usize,
    dtype: usize,
    shape: usize,
    size: usize,
    file: usize,
}

impl Widths {
    /// One line of the table into `line`: the four columns every table has, then those only
    /// some have; no space at its end.
    fn line(
        &self,
        line: &mut String,
        [name, dtype, shape, size]: [&str; 4],
        file: Option<impl AsRef<str>>,
        sha: Option<impl AsRef<str>>,
        check: Option<&str>,
    ) {
        use std::fmt::Write as _;
        let _ = write!(
            line,
            "  {name:<nw$}  {dtype:<dw$}  {shape:<sw$}  {size:>zw$}",
            nw = self.name,
            dw = self.dtype,
            sw = self.shape,
            zw = self.size
        );
        if let Some(f) = file {
            let _ = write!(line, "  {:<fw$}", f.as_ref(), fw = self.file);
        }
        if let Some(h) = sha {
            let _ = write!(line, "  {:<SHA_DIGITS$}", h.as_ref());
        }
        if let Some(c) = check {
            let _ = write!(line, "  {c}");
        }
        line.truncate(line.trim_end().len());
        line.push('\n');
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A tensor's name as shown: escaped, and cut past [`MAX_NAME`] characters.
fn name(n: &str) -> Cow<'_, str> {
    cut(n, MAX_NAME)
}

/// `s` escaped, cut to `max` characters (ending with `…`) when longer: only its first ones are
/// escaped, whatever its length.
fn cut(s: &str, max: usize) -> Cow<'_, str> {
    let head = match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => return esc(s),
    };
    let mut shown: String = esc(head).chars().take(max - 1).collect();
    shown.push('…');
    Cow::Owned(shown)
}

/// `[2048, 32000]`, in the file's own order (GGUF: ne\[0\] first, as gguf-dump shows it).
fn shape(dims: &[u64]) -> String {
    let mut s = String::from("[");
    for (i, d) in dims.iter().take(MAX_DIMS).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&d.to_string());
    }
    if dims.len() > MAX_DIMS {
        s.push_str(&format!(", …, {} more", dims.len() - MAX_DIMS));
    }
    s.push(']');
    s
}

/// The first digits of a tensor's SHA-256, `-` when it has none.
fn sha(t: &TensorEntry) -> &str {
    match &t.sha256 {
        Some(h) => &h[..SHA_DIGITS.min(h.len())],
        None => "-",
    }
}

/// The tensors the report's diagnostics name, each with the worst severity naming it.
///
/// A diagnostic names a tensor in quotes after `tensor `, `tensors `, `tensor name `,
/// `tensor N ` or (its second of a pair) ` and `: `tensor 'blk.0.attn_q.weight' (info at byte
/// …)`. A name can hold quotes: each of the next few quotes may end it, and only the names of
/// tensors of the report are looked up.
fn named_tensors(r: &Report) -> HashMap<&str, Severity> {
    let mut named: HashMap<&str, Severity> = HashMap::new();
    for d in &r.diagnostics {
        let m = d.message.as_str();
        for (open, _) in m.match_indices('\'') {
            if !names_a_tensor(&m[..open]) {
                continue;
            }
            let rest = &m[open + 1..];
            for (end, _) in rest.match_indices('\'').take(8) {
                let worst = named.entry(&rest[..end]).or_insert(d.severity);
                *worst = (*worst).max(d.severity);
            }
        }
    }
    named
}

/// Whether a quote after `before` opens a tensor's name.
fn names_a_tensor(before: &str) -> bool {
    let before = before.trim_end_matches(|c: char| c.is_ascii_digit() || c == ' ');
    let words = ["tensor", "tensors", "tensor name"];
    if words.iter().any(|w| before.ends_with(w)) {
        return true;
    }
    // `tensors 'a' (bytes …) and 'b'`.
    before.ends_with(" and") && before.contains("tensors '")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Diagnostic;

    fn tensor(name: &str, dtype: &str, shape: &[u64], n_bytes: u64) -> TensorEntry {
        TensorEntry {
            name: name.into(),
            dtype: dtype.into(),
            shape: shape.to_vec(),
            offset: 0,
            n_bytes,
            file: None,
            sha256: None,
        }
    }

    fn table(r: &Report) -> String {
        let mut out = Vec::new();
        write_table(&mut out, r).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn report(tensors: Vec<TensorEntry>, diagnostics: Vec<Diagnostic>) -> Report {
        Report {
            path: "m.gguf".into(),
            format: None,
            version: None,
            endianness: None,
            alignment: None,
            file_size: 0,
            data_offset: None,
            tensor_count: Some(tensors.len() as u64),
            metadata_count: None,
            total_params: None,
            data_size: None,
            dtypes: Default::default(),
            dtype_bytes: Default::default(),
            architecture: None,
            file_type: None,
            files: Vec::new(),
            tensors,
            metadata: Vec::new(),
            valid: true,
            errors: Vec::new(),
            warnings: Vec::new(),
            diagnostics,
            llama_cpp_loadable: None,
            hashed: false,
            remote: false,
            header_only: None,
        }
    }

    #[test]
    fn a_row_per_tensor_with_its_dtype_shape_and_size() {
        let r = report(
            vec![
                tensor("token_embd.weight", "Q8_0", &[64, 4], 272),
                tensor("output_norm.weight", "F32", &[64], 256),
            ],
            vec![],
        );
        assert_eq!(
            table(&r),
            "\n  tensor              dtype  shape     size\n  \
             token_embd.weight   Q8_0   [64, 4]  272 B\n  \
             output_norm.weight  F32    [64]     256 B\n"
        );
    }

    #[test]
    fn the_tensors_a_diagnostic_names_are_marked() {
        let r = report(
            vec![
                tensor("a", "F32", &[1], 4),
                tensor("it's", "F32", &[1], 4),
                tensor("c", "F32", &[1], 4),
                tensor("d", "F32", &[1], 4),
            ],
            vec![
                Diagnostic::warning("x", "tensor 3 'it's' (at byte 9) uses something"),
                Diagnostic::error(
                    "y",
                    "tensors 'it's' (bytes 0..4) and 'a' (bytes 2..6) overlap",
                ),
                Diagnostic::warning("z", "quantized tensors (e.g. 'c' of type Q4_0) but no …"),
                Diagnostic::warning("k", "key 'd' is odd"),
            ],
        );
        let t = table(&r);
        let row = |n: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(&format!("{n} ")))
                .unwrap_or_else(|| panic!("{n}: {t}"))
                .to_owned()
        };
        assert!(t.lines().nth(1).unwrap().ends_with("  check"), "{t}");
        assert!(row("a").ends_with("  error"), "{t}");
        assert!(row("it's").ends_with("  error"), "{t}");
        assert!(row("c").ends_with("4 B"), "{t}");
        assert!(row("d").ends_with("4 B"), "{t}");
    }

    #[test]
    fn names_are_escaped_and_huge_ones_cut() {
        let huge = "n".repeat(1 << 20);
        let r = report(
            vec![
                tensor(
                    "evil\x1b[2J\nforged",
                    "F32",
                    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                    4,
                ),
                tensor(&huge, "F32", &[], 4),
            ],
            vec![],
        );
        let t = table(&r);
        assert!(t.contains("evil\\x1b[2J\\nforged"), "{t}");
        assert!(t.contains("[1, 2, 3, 4, 5, 6, 7, 8, …, 2 more]"), "{t}");
        assert!(
            t.contains(&format!("{}…  F32", "n".repeat(MAX_NAME - 1))),
            "{t}"
        );
        assert!(t.len() < 1000, "{}", t.len());
        assert_eq!(t.lines().count(), 4);
    }
}
