//! `llama-gguf-hash` lines (llama.cpp's `examples/gguf-hash`, and gguf-py's `gguf_hash.py`),
//! read and written.
//!
//! The tool prints one line per digest: `KIND  DIGEST  NAME`, the kind left-aligned in 8
//! columns, two spaces between fields:
//!
//! ```text
//! xxh64     f66e9cd66a4396a0  model.gguf:token_embd.weight
//! sha256    7a3c…(64 hex)     model.gguf:token_embd.weight
//! sha256    91be…(64 hex)     model.gguf
//! uuid      ef001206-…        model.gguf
//! ```
//!
//! `NAME` is `FILE:TENSOR` for a tensor's bytes (exactly `ggml_nbytes`, no padding), and `FILE`
//! alone for the whole model, whose digest is over every tensor's bytes one after the other in
//! the header's order — not the file's own digest (the header is not in it). `FILE` is the path
//! the tool was given; here it must be a safe path relative to the model's folder (a leading
//! `./` is dropped).
//!
//! Only `sha256` lines are checked by this program. Lines of the other kinds (`xxh64`, `xxh3`,
//! `sha1`, `uuid`) are read, counted and reported as not checked
//! ([`Document::notes`](crate::manifest::Document::notes)); a file named only by such lines is
//! refused, since nothing of it could be checked. A tensor line carries no offset: the checker
//! places the tensor by reading the file's own GGUF header.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest as _, Sha256};

use super::shown;
use crate::format::{self, Header};
use crate::manifest::read::FileReader;
use crate::manifest::{
    FileExpectation, ManifestError, Sha256Hex, TensorExpectation, MAX_FILES, MAX_TENSORS,
};
use crate::names::{case_fold, check_repo_path, escape};

/// Longest tensor name read (GGUF's own limit is 64 bytes in llama.cpp; others write longer).
const MAX_TENSOR_NAME: usize = 4096;

/// The hash kinds `llama-gguf-hash` prints, and the length of their digest in characters.
const KINDS: [(&str, usize); 5] = [
    ("sha256", 64),
    ("sha1", 40),
    ("xxh64", 16),
    ("xxh3", 16),
    ("uuid", 36),
];

/// `llama-gguf-hash` lines (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufHashDocument {
    files: Vec<FileExpectation>,
    unchecked: Vec<(&'static str, usize)>,
}

#[derive(Default)]
struct Entry {
    tensors: Vec<TensorExpectation>,
    names: HashSet<String>,
    model: Option<Sha256Hex>,
}

/// One line of `llama-gguf-hash` output, its fields checked.
struct HashLine<'a> {
    /// One of [`KINDS`].
    kind: &'static str,
    /// Its digest, of the kind's length and characters.
    digest: &'a str,
    /// The file, a safe relative path (a leading `./` dropped).
    file: &'a str,
    /// The tensor, when the line is for one.
    tensor: Option<&'a str>,
}

impl<'a> HashLine<'a> {
    /// Reads `line`, the `nth` line that is not blank; the error says why it is not a
    /// `llama-gguf-hash` line (and, for the first, that the document is no other manifest).
    fn parse(line: &'a str, nth: usize) -> Result<HashLine<'a>, String> {
        let mut tokens = line.split_ascii_whitespace();
        let (Some(kind), Some(digest), Some(name), None) =
            (tokens.next(), tokens.next(), tokens.next(), tokens.next())
        else {
            return Err(format!(
                "'{}' is not a llama-gguf-hash line (KIND  DIGEST  FILE[:TENSOR]){}",
                shown(line, 80),
                if nth == 1 {
                    " — and the document is no other manifest this program reads"
                } else {
                    ""
                }
            ));
        };
        let Some(&(kind, len)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            return Err(format!(
                "unknown hash kind '{}' (llama-gguf-hash writes sha256, sha1, xxh64, xxh3 \
                 and uuid)",
                shown(kind, 20)
            ));
        };
        let digest_ok = digest.len() == len
            && digest.bytes().enumerate().all(|(j, b)| {
                if kind == "uuid" && matches!(j, 8 | 13 | 18 | 23) {
                    b == b'-'
                } else {
                    b.is_ascii_hexdigit()
                }
            });
        if !digest_ok {
            return Err(format!(
                "'{}' is not a {kind} digest ({len} characters)",
                shown(digest, 80)
            ));
        }
        let mut name = name;
        while let Some(rest) = name.strip_prefix("./") {
            name = rest;
        }
        let (file, tensor) = match name.split_once(':') {
            Some((f, t)) => (f, Some(t)),
            None => (name, None),
        };
        check_repo_path(file).map_err(|why| format!("file name '{}': {why}", shown(file, 200)))?;
        if let Some(t) = tensor {
            if t.is_empty() || t.len() > MAX_TENSOR_NAME || t.chars().any(char::is_control) {
                return Err(format!(
                    "tensor name '{}' is empty, longer than {MAX_TENSOR_NAME} bytes or holds \
                     a control character",
                    shown(t, 80)
                ));
            }
        }
        Ok(HashLine {
            kind,
            digest,
            file,
            tensor,
        })
    }
}

/// The document as text: bytes that are not UTF-8 are no manifest this program reads, and the
/// error names the line they are on.
fn utf8_text(bytes: &[u8]) -> Result<&str, ManifestError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        ManifestError::invalid(format!(
            "not a manifest this program reads: line {line} is not UTF-8 text (a \
             weight-inspect manifest, an OpenSSF model-signing bundle or statement, or \
             llama-gguf-hash lines)"
        ))
    })
}

impl GgufHashDocument {
    /// Parses `llama-gguf-hash` output (see the module docs). Blank lines are skipped; any other
    /// line that is not `KIND  DIGEST  FILE[:TENSOR]` is an error naming its line number.
    pub fn parse(bytes: &[u8]) -> Result<GgufHashDocument, ManifestError> {
        let text = utf8_text(bytes)?;
        let mut files: BTreeMap<String, Entry> = BTreeMap::new();
        let mut folded: HashMap<String, String> = HashMap::new();
        let mut other_only: BTreeMap<String, &'static str> = BTreeMap::new();
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut tensors = 0usize;
        let mut lines = 0usize;
        for (i, raw) in text.split('\n').enumerate() {
            let n = i + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.trim().is_empty() {
                continue;
            }
            lines += 1;
            let bad = |why: String| ManifestError::invalid(format!("line {n}: {why}"));
            let HashLine {
                kind,
                digest,
                file,
                tensor,
            } = HashLine::parse(line, lines).map_err(bad)?;
            let key = case_fold(file);
            match folded.get(&key) {
                Some(seen) if seen != file => {
                    return Err(bad(format!(
                        "file '{}' differs from '{}' only by case",
                        escape(file),
                        escape(seen)
                    )))
                }
                Some(_) => {}
                None => {
                    if folded.len() == MAX_FILES {
                        return Err(bad(format!("more than {MAX_FILES} files")));
                    }
                    folded.insert(key, file.to_string());
                }
            }
            if kind != "sha256" {
                *counts.entry(kind).or_default() += 1;
                if !files.contains_key(file) {
                    other_only.entry(file.to_string()).or_insert(kind);
                }
                continue;
            }
            other_only.remove(file);
            let sha: Sha256Hex = digest
                .parse()
                .map_err(|e: crate::names::ParseError| bad(e.to_string()))?;
            let entry = files.entry(file.to_string()).or_default();
            match tensor {
                None => {
                    if entry.model.replace(sha).is_some() {
                        return Err(bad(format!(
                            "a second sha256 line for the whole of '{}'",
                            escape(file)
                        )));
                    }
                }
                Some(t) => {
                    if !entry.names.insert(t.to_string()) {
                        return Err(bad(format!(
                            "a second sha256 line for tensor '{}' of '{}'",
                            escape(t),
                            escape(file)
                        )));
                    }
                    tensors += 1;
                    if tensors > MAX_TENSORS {
                        return Err(bad(format!("more than {MAX_TENSORS} tensors")));
                    }
                    entry.tensors.push(TensorExpectation {
                        name: t.to_string(),
                        range: None,
                        sha256: sha,
                    });
                }
            }
        }
        if lines == 0 {
            return Err(ManifestError::invalid(
                "empty: no llama-gguf-hash line (nor any other manifest this program reads)".into(),
            ));
        }
        if let Some((file, kind)) = other_only.into_iter().next() {
            return Err(ManifestError::invalid(format!(
                "file '{}' has only {kind} lines (and other kinds than sha256), which this \
                 program cannot check: run llama-gguf-hash with --sha256 (or --all)",
                escape(&file)
            )));
        }
        let files = files
            .into_iter()
            .map(|(path, e)| FileExpectation {
                path,
                tensors: e.tensors,
                tensor_data_sha256: e.model,
                ..FileExpectation::default()
            })
            .collect();
        Ok(GgufHashDocument {
            files,
            unchecked: counts.into_iter().collect(),
        })
    }

    /// What each file must be: its tensors (placed by the file's header) and the digest of its
    /// tensor data, from the `sha256` lines; by path.
    pub fn files(&self) -> &[FileExpectation] {
        &self.files
    }

    /// How many lines of each other kind (`sha1`, `uuid`, `xxh3`, `xxh64`) were read and are not
    /// checked, by kind.
    pub fn unchecked_lines(&self) -> &[(&'static str, usize)] {
        &self.unchecked
    }

    /// The report's notes: which lines were not checked.
    pub(crate) fn notes(&self) -> Vec<String> {
        if self.unchecked.is_empty() {
            return Vec::new();
        }
        let kinds: Vec<String> = self
            .unchecked
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        vec![format!(
            "{} line(s) were not checked: only the sha256 lines of llama-gguf-hash are",
            kinds.join(", ")
        )]
    }
}

/// Writes `llama-gguf-hash --sha256` lines for the GGUF files among `paths` (chosen and named as
/// [`crate::manifest::create`] does): for each file, one line per tensor in the header's order,
/// then the line of the whole model (the SHA-256 of every tensor's bytes in that order). Files
/// that are not GGUF are left out; none at all is an error.
pub fn create_gguf_hash(paths: &[PathBuf]) -> Result<String, ManifestError> {
    let named = crate::manifest::create::select(paths)?.named;
    let mut out = String::new();
    let mut any = false;
    for (rel, path) in &named {
        let Some(lines) = file_lines(rel, path)? else {
            continue;
        };
        any = true;
        out.push_str(&lines);
    }
    if !any {
        return Err(ManifestError::Input(
            "no GGUF file to describe (llama-gguf-hash lines describe GGUF files only)".into(),
        ));
    }
    Ok(out)
}

/// One file's lines, or `None` when it is not a GGUF file.
fn file_lines(rel: &str, path: &Path) -> Result<Option<String>, ManifestError> {
    if rel.contains(':') || rel.chars().any(|c| c.is_whitespace()) {
        return Err(ManifestError::Input(format!(
            "'{}' cannot be named in llama-gguf-hash lines (a ':' or a space in its path)",
            escape(rel)
        )));
    }
    // Read by position, never mapped: a file truncated while it is hashed is an error naming
    // it, not a SIGBUS (see `manifest::read`).
    let io = |e| ManifestError::io(path, e);
    let file = FileReader::open(path).map_err(io)?;
    let magic = file.read(0..file.len().min(8)).map_err(io)?;
    if format::detect(&magic) != Some(format::Format::Gguf) {
        return Ok(None);
    }
    let header = match file.parse_header().map_err(io)? {
        Ok(Header::Gguf(h)) => h,
        Ok(_) => return Ok(None),
        Err(e) => {
            return Err(ManifestError::Input(format!(
                "{}: not a readable GGUF file: {}",
                escape(rel),
                escape(&e.to_string())
            )))
        }
    };
    let mut ranges = Vec::with_capacity(header.tensors.len());
    for t in &header.tensors {
        if t.name.is_empty() || t.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ManifestError::Input(format!(
                "{}: tensor '{}' cannot be named in llama-gguf-hash lines (a space or control \
                 character in its name)",
                escape(rel),
                escape(&t.name)
            )));
        }
        let r = t.byte_range();
        if r.start > r.end || r.end > file.len() {
            return Err(ManifestError::Input(format!(
                "{}: tensor '{}' lies outside the file",
                escape(rel),
                escape(&t.name)
            )));
        }
        ranges.push(r);
    }
    let (tensor_digests, model) = rayon::join(
        || {
            ranges
                .par_iter()
                .map(|r| file.sha256(r.clone()).map(Sha256Hex))
                .collect::<std::io::Result<Vec<_>>>()
        },
        || {
            let mut h = Sha256::new();
            for r in &ranges {
                file.blocks(r.clone(), |b| h.update(b))?;
            }
            Ok::<_, std::io::Error>(Sha256Hex(h.finalize().into()))
        },
    );
    let (tensor_digests, model) = (tensor_digests.map_err(io)?, model.map_err(io)?);
    file.unchanged().map_err(io)?;
    let mut out = String::new();
    for (t, d) in header.tensors.iter().zip(&tensor_digests) {
        out.push_str(&format!("{:<8}  {d}  {rel}:{}\n", "sha256", t.name));
    }
    out.push_str(&format!("{:<8}  {model}  {rel}\n", "sha256"));
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "ab00000000000000000000000000000000000000000000000000000000000001";

    fn err(text: &str) -> String {
        GgufHashDocument::parse(text.as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_every_kind_and_keeps_the_sha256_lines() {
        let text = format!(
            "xxh64     f66e9cd66a4396a0  m.gguf:t0\n\
             sha1      {}  m.gguf:t0\n\
             sha256    {D}  ./m.gguf:t0\n\
             sha256    {D}  m.gguf:blk.0:odd\r\n\
             \n\
             xxh3      f66e9cd66a4396a0  m.gguf\n\
             sha256    {D}  m.gguf\n\
             uuid      ef001206-dadc-5f6d-a15f-3359e577d4e5  m.gguf\n",
            "a".repeat(40)
        );
        let d = GgufHashDocument::parse(text.as_bytes()).unwrap();
        let f = &d.files()[0];
        assert_eq!(f.path, "m.gguf");
        let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["t0", "blk.0:odd"]);
        assert!(f.tensors.iter().all(|t| t.range.is_none()));
        assert_eq!(f.tensor_data_sha256.unwrap().to_string(), D);
        assert!(f.sha256.is_none() && f.chunks.is_none());
        assert_eq!(
            d.unchecked_lines(),
            [("sha1", 1), ("uuid", 1), ("xxh3", 1), ("xxh64", 1)]
        );
        let notes = d.notes();
        assert!(notes[0].contains("1 xxh64") && notes[0].contains("not checked"));
    }

    #[test]
    fn refuses_what_it_cannot_check_or_trust() {
        assert!(err("").contains("empty"));
        assert!(err("\n  \n").contains("empty"));
        assert!(err("xxh64 f66e9cd66a4396a0 m.gguf:t\n").contains("only xxh64 lines"));
        assert!(err(&format!("sha256 {D} ../m.gguf:t\n")).contains("'..'"));
        assert!(err(&format!("sha256 {D} /etc/m.gguf:t\n")).contains("absolute"));
        assert!(err(&format!("sha256 {D} m.gguf:\n")).contains("tensor name"));
        assert!(err(&format!("sha256 {D} m.gguf:t\x1b[2J\n")).contains("control"));
        assert!(err("sha256 abc m.gguf:t\n").contains("not a sha256 digest"));
        assert!(err(&format!("md5 {D} m.gguf:t\n")).contains("unknown hash kind"));
        assert!(err(&format!("sha256 {D} m.gguf:t extra\n")).contains("line 1"));
        assert!(err(&format!("sha256 {D} m.gguf:t\nsha256 {D} m.gguf:t\n"))
            .contains("line 2: a second sha256 line"));
        assert!(err(&format!("sha256 {D} m.gguf:t\nsha256 {D} M.gguf:t\n")).contains("by case"));
        assert!(err("\u{0}\u{ff}").contains("line 1"));
        assert!(GgufHashDocument::parse(b"\xff\xfe").is_err());
        let e = err("hello world\n");
        assert!(
            e.contains("line 1") && e.contains("no other manifest"),
            "{e}"
        );
    }

    #[test]
    fn a_file_truncated_while_it_is_hashed_is_an_error_naming_it() {
        use testkit::gguf::{Fill, GgufWriter};
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.gguf");
        let bytes = GgufWriter::new()
            .arch("llama")
            .tensor("token_embd.weight", 0, &[1024, 1024])
            .tensor("output.weight", 0, &[256, 256])
            .fill(Fill::Pattern)
            .build();
        std::fs::write(&path, &bytes).unwrap();
        // Whole, every tensor and the model are described.
        let lines = create_gguf_hash(std::slice::from_ref(&path)).unwrap();
        assert_eq!(lines.lines().count(), 3, "{lines}");
        let p = path.clone();
        crate::manifest::read_hook::before_first_read(&path, move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(4096)
                .unwrap();
        });
        let e = create_gguf_hash(std::slice::from_ref(&path))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.gguf: it changed while it was read"), "{e}");
    }
}
