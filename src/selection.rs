//! Which files of a repository to fetch.
//!
//! - Explicit files: exactly those paths; one ending in `/` is a folder: every file below it,
//!   as `hf download REPO folder/` fetches it.
//! - `--include` / `--exclude` globs (globset, `*` crosses `/` as in huggingface_hub's
//!   `fnmatch`; a pattern ending in `/` means everything below that folder).
//! - A quantization tag (`REPO:Q4_K_M`), as llama.cpp's `-hf` reads it: the first GGUF whose
//!   path contains the tag followed by `.` or `-` (any case), leaving out `mmproj` and
//!   `imatrix` files and split parts other than the first; every part of a split GGUF
//!   (`NAME-00001-of-0000N.gguf`) is then fetched.
//! - Nothing at all: a repository holding GGUF models gets one model — `Q4_K_M` first, then
//!   `Q8_0`, then the first GGUF — and a note says which and how to get the others; any other
//!   repository is fetched whole, as `hf download` does.
//!
//! - A multimodal GGUF repository (one with `mmproj*.gguf` projectors): with the model chosen
//!   by a tag or by default, the projector closest in precision to it comes too, as with
//!   llama.cpp's `-hf` (`matching_mmproj`); [`Selection::no_mmproj`] leaves it out.
//!
//! Explicit files, the quantization's files and the files matching `--include` add up;
//! `--exclude` removes files matched by the globs or the quantization (never explicit files).

// Some helpers serve only the network half of the crate (fetching).
#![cfg_attr(not(feature = "net"), allow(dead_code))]

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The default quantizations tried, in order, for a bare GGUF repository.
pub const DEFAULT_QUANTS: [&str; 2] = ["Q4_K_M", "Q8_0"];

/// What to fetch from a repository. The default (nothing set) is the bare selection described
/// in the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Explicit repository paths (one ending in `/` selects every file below that folder).
    pub files: Vec<String>,
    /// Glob patterns a file must match (any of them).
    pub include: Vec<String>,
    /// Glob patterns that remove files.
    pub exclude: Vec<String>,
    /// A quantization tag such as `Q4_K_M`.
    pub quant: Option<String>,
    /// Leave out the multimodal projector that comes with a model chosen by tag or by default
    /// (`--no-mmproj`).
    pub no_mmproj: bool,
}

impl Selection {
    /// Everything (or one model of a GGUF repository): the bare selection.
    pub fn all() -> Self {
        Selection::default()
    }

    /// Exactly these files.
    pub fn files<I, S>(files: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Selection {
            files: files.into_iter().map(Into::into).collect(),
            ..Selection::default()
        }
    }

    /// The GGUF file(s) carrying this quantization tag.
    pub fn quant(tag: impl Into<String>) -> Self {
        Selection {
            quant: Some(tag.into()),
            ..Selection::default()
        }
    }

    /// Adds an explicit file.
    #[must_use]
    pub fn with_file(mut self, path: impl Into<String>) -> Self {
        self.files.push(path.into());
        self
    }

    /// Adds an include pattern.
    #[must_use]
    pub fn with_include(mut self, glob: impl Into<String>) -> Self {
        self.include.push(glob.into());
        self
    }

    /// Adds an exclude pattern.
    #[must_use]
    pub fn with_exclude(mut self, glob: impl Into<String>) -> Self {
        self.exclude.push(glob.into());
        self
    }

    /// Sets the quantization tag.
    #[must_use]
    pub fn with_quant(mut self, tag: impl Into<String>) -> Self {
        self.quant = Some(tag.into());
        self
    }

    /// Leaves out the multimodal projector of a model chosen by tag or by default.
    #[must_use]
    pub fn without_mmproj(mut self) -> Self {
        self.no_mmproj = true;
        self
    }

    /// True when only explicit files are asked for (they can be resolved one by one, without
    /// listing the repository).
    pub fn is_explicit_only(&self) -> bool {
        !self.files.is_empty()
            && self.files.iter().all(|f| !f.ends_with('/'))
            && self.include.is_empty()
            && self.quant.is_none()
    }

    /// True when no file, tag or include pattern is given.
    pub fn is_bare(&self) -> bool {
        self.files.is_empty() && self.include.is_empty() && self.quant.is_none()
    }
}

/// Why a reference, a repository spec or a pattern could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectionError {
    /// A model reference in none of the forms [`parse_reference`] reads.
    #[error(
        "invalid '{}': expected org/name, org/name:QUANT, hf.co/org/name:QUANT or hf://org/name/path",
        crate::names::escape(spec)
    )]
    Reference {
        /// The reference as given.
        spec: String,
    },
    /// `REPO:QUANT` with an empty or malformed tag.
    #[error(
        "invalid '{}': expected REPO or REPO:QUANT (e.g. org/name:Q4_K_M)",
        crate::names::escape(spec)
    )]
    RepoSpec {
        /// The spec as given.
        spec: String,
    },
    /// A glob that does not parse.
    #[error("invalid pattern '{}': {reason}", crate::names::escape(pattern))]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// Why.
        reason: String,
    },
}

/// No GGUF file of a repository carries the quantization tag asked for: what
/// [`FetchError::NoSuchQuant`](crate::fetch::FetchError::NoSuchQuant) and
/// [`RemoteError::NoSuchQuant`](crate::remote::RemoteError::NoSuchQuant) hold, with the tags
/// there are. Names from the listing are escaped when shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no GGUF file in '{}' carries the quantization '{}'{}",
    crate::names::escape(repo),
    crate::names::escape(tag),
    fmt_available(available)
)]
pub struct NoSuchQuant {
    /// The repository.
    pub repo: String,
    /// The tag asked for.
    pub tag: String,
    /// The files of the listing that the tag was looked for among.
    pub available: Vec<String>,
}

/// A model reference as people write it (see [`parse_reference`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `org/name`.
    pub repo: String,
    /// A dataset when the reference says so (`hf://datasets/…`), else `None`.
    pub repo_type: Option<crate::names::RepoType>,
    /// The quantization tag after `:`, as written (tags match case-insensitively).
    pub quant: Option<String>,
    /// A file named in the reference (`hf://org/name/path/in/repo`).
    pub file: Option<String>,
}

/// Reads a model reference in the forms `hf`, llama.cpp and ollama users write: `org/name`,
/// `org/name:Q4_K_M` (any case), `hf.co/org/name:Q4_K_M` and `huggingface.co/org/name`
/// (with or without `https://`; `…/datasets/org/name` and `…/spaces/org/name` too), and
/// `hf://org/name/path/to/file` (`hf://datasets/org/name/…` for a dataset, `hf://spaces/…` for
/// a Space), as huggingface_hub's file system names files.
pub fn parse_reference(spec: &str) -> Result<Reference, SelectionError> {
    let bad = || SelectionError::Reference {
        spec: spec.to_string(),
    };
    if let Some(rest) = spec.strip_prefix("hf://") {
        let (repo_type, rest) = match rest.split_once('/') {
            Some(("datasets", r)) => (Some(crate::names::RepoType::Dataset), r),
            Some(("spaces", r)) => (Some(crate::names::RepoType::Space), r),
            Some(("models", r)) => (None, r),
            _ => (None, rest),
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(org), Some(name)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        if org.is_empty() || name.is_empty() || name.contains(':') {
            return Err(bad());
        }
        let file = parts.next().filter(|f| !f.is_empty()).map(str::to_string);
        return Ok(Reference {
            repo: format!("{org}/{name}"),
            repo_type,
            quant: None,
            file,
        });
    }
    let mut rest = spec;
    for scheme in ["https://", "http://"] {
        if let Some(r) = rest.strip_prefix(scheme) {
            rest = r;
        }
    }
    for host in ["hf.co/", "huggingface.co/", "www.huggingface.co/"] {
        if let Some(r) = rest.strip_prefix(host) {
            rest = r;
            break;
        }
    }
    let mut repo_type = None;
    if rest.len() != spec.len() {
        // A page address: `huggingface.co/datasets/org/name`, `…/spaces/org/name`.
        for (segment, t) in [
            ("datasets/", crate::names::RepoType::Dataset),
            ("spaces/", crate::names::RepoType::Space),
        ] {
            if let Some(r) = rest.strip_prefix(segment) {
                rest = r;
                repo_type = Some(t);
            }
        }
        if rest.split('/').count() != 2 {
            return Err(bad());
        }
    } else if rest.split('/').count() == 3 {
        // The type in front, as huggingface_hub's URIs and `hf cache` name repositories:
        // `datasets/org/name`, `spaces/org/name`, `models/org/name` (a repository id has two
        // parts, so a third can only be the type).
        for (segment, t) in [
            ("datasets/", Some(crate::names::RepoType::Dataset)),
            ("spaces/", Some(crate::names::RepoType::Space)),
            ("models/", Some(crate::names::RepoType::Model)),
        ] {
            if let Some(r) = rest.strip_prefix(segment) {
                rest = r;
                repo_type = t;
            }
        }
    }
    let (repo, quant) = parse_repo_spec(rest)?;
    Ok(Reference {
        repo,
        repo_type,
        quant,
        file: None,
    })
}

/// Splits `REPO[:QUANT]`. An empty tag is an error.
pub fn parse_repo_spec(spec: &str) -> Result<(String, Option<String>), SelectionError> {
    match spec.split_once(':') {
        None => Ok((spec.to_string(), None)),
        Some((repo, tag)) => {
            if tag.is_empty() || tag.contains(':') || tag.contains('/') {
                Err(SelectionError::RepoSpec {
                    spec: spec.to_string(),
                })
            } else {
                Ok((repo.to_string(), Some(tag.to_string())))
            }
        }
    }
}

/// A split GGUF file name: `{prefix}-{index:05}-of-{count:05}.gguf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitInfo {
    /// The path without the split suffix and `.gguf`.
    pub prefix: String,
    /// 1-based part number.
    pub index: u32,
    /// Number of parts.
    pub count: u32,
}

/// Reads the split suffix of a `.gguf` path, if any.
pub(crate) fn split_info(path: &str) -> Option<SplitInfo> {
    let stem = strip_suffix_ci(path, ".gguf")?;
    // "-00001-of-00003" is 15 bytes.
    if stem.len() < 16 || !stem.is_char_boundary(stem.len() - 15) {
        return None;
    }
    let (prefix, tail) = stem.split_at(stem.len() - 15);
    let b = tail.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    if b[0] != b'-'
        || !digits(&b[1..6])
        || !tail[6..10].eq_ignore_ascii_case("-of-")
        || !digits(&b[10..15])
    {
        return None;
    }
    let index = tail[1..6].parse().ok()?;
    let count = tail[10..15].parse().ok()?;
    if index == 0 || count == 0 || index > count {
        return None;
    }
    Some(SplitInfo {
        prefix: prefix.to_string(),
        index,
        count,
    })
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let n = s.len().checked_sub(suffix.len())?;
    if s.is_char_boundary(n) && s[n..].eq_ignore_ascii_case(suffix) {
        Some(&s[..n])
    } else {
        None
    }
}

/// True for a `.gguf` path.
pub(crate) fn is_gguf(path: &str) -> bool {
    strip_suffix_ci(path, ".gguf").is_some()
}

/// True for a GGUF that holds a model, not a projector or an importance matrix (its file name
/// contains neither `mmproj` nor `imatrix`).
pub(crate) fn is_gguf_model(path: &str) -> bool {
    if !is_gguf(path) {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    !name.contains("mmproj") && !name.contains("imatrix")
}

/// True for a multimodal projector: a `.gguf` whose file name contains `mmproj`.
pub(crate) fn is_mmproj(path: &str) -> bool {
    is_gguf(path)
        && path
            .rsplit('/')
            .next()
            .unwrap_or(path)
            .to_ascii_lowercase()
            .contains("mmproj")
}

/// The precision a file name announces, in bits per weight, with the type as written
/// (upper case): `F32`/`FP32` 32, `F16`/`FP16`/`BF16` 16, `Q8_0` 8, `Q4_K_M`/`IQ4_XS` 4,
/// `TQ1_0` 1… Looked for in the parts of the name between `-` and `.`, the last one first
/// (`model-Q4_K_M.gguf`, `mmproj-model-f16.gguf`).
pub fn precision(path: &str) -> Option<(u32, String)> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = strip_suffix_ci(name, ".gguf").unwrap_or(name);
    stem.rsplit(['-', '.']).find_map(|part| {
        let t = part.to_ascii_uppercase();
        let bits = match t.as_str() {
            "F32" | "FP32" => 32,
            "F16" | "FP16" | "BF16" => 16,
            _ => {
                let q = t
                    .strip_prefix("IQ")
                    .or_else(|| t.strip_prefix("TQ"))
                    .or_else(|| t.strip_prefix('Q'))?;
                let digits: String = q.chars().take_while(char::is_ascii_digit).collect();
                let rest = &q[digits.len()..];
                if !(rest.is_empty() || rest.starts_with('_')) {
                    return None;
                }
                digits.parse().ok().filter(|b| (1..=8).contains(b))?
            }
        };
        Some((bits, t))
    })
}

/// The multimodal projector to fetch with `model`: of the `mmproj*.gguf` files, the one
/// closest in precision to the model (a projector without a precision in its name counts as
/// 16-bit, as they usually are), then the one of exactly the same type (`BF16` for a `BF16`
/// model), then the more precise one, then one in the model's folder, then the first listed.
/// `None` when the repository has no projector.
pub(crate) fn matching_mmproj<'a>(paths: &[&'a str], model: &str) -> Option<&'a str> {
    let folder = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let (bits, kind) = precision(model).unwrap_or((16, String::new()));
    let here = folder(model);
    paths
        .iter()
        .copied()
        .filter(|p| is_mmproj(p) && split_info(p).is_none_or(|s| s.count <= 1))
        .enumerate()
        .min_by_key(|(i, p)| {
            let (b, k) = precision(p).unwrap_or((16, String::new()));
            (
                b.abs_diff(bits),
                k != kind,
                std::cmp::Reverse(b),
                folder(p) != here,
                *i,
            )
        })
        .map(|(_, p)| p)
}

/// True when `path` carries `tag` followed by `.` or `-`, ignoring case.
pub(crate) fn has_quant_tag(path: &str, tag: &str) -> bool {
    if tag.is_empty() {
        return false;
    }
    let p = path.to_ascii_lowercase();
    let t = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = p[from..].find(&t) {
        let end = from + i + t.len();
        if matches!(p.as_bytes().get(end), Some(b'.') | Some(b'-')) {
            return true;
        }
        from += i + 1;
        while !p.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

/// The first model GGUF (first part of a split) carrying `tag`, in `paths` order.
pub(crate) fn find_quant<'a>(paths: &[&'a str], tag: &str) -> Option<&'a str> {
    paths.iter().copied().find(|p| {
        is_gguf_model(p)
            && has_quant_tag(p, tag)
            && split_info(p).is_none_or(|s| s.count <= 1 || s.index == 1)
    })
}

/// Every part of the split GGUF `path` belongs to (just `path` when it is not split), in
/// `paths` order.
pub(crate) fn split_parts<'a>(paths: &[&'a str], path: &'a str) -> Vec<&'a str> {
    match split_info(path) {
        Some(s) if s.count > 1 => paths
            .iter()
            .copied()
            .filter(|p| split_info(p).is_some_and(|o| o.prefix == s.prefix && o.count == s.count))
            .collect(),
        _ => vec![path],
    }
}

/// The model a bare GGUF repository gets: Q4_K_M, else Q8_0, else the first model GGUF.
/// Returns the chosen first part and the tag that chose it (`None` for "the first").
pub(crate) fn default_gguf<'a>(paths: &[&'a str]) -> Option<(&'a str, Option<&'static str>)> {
    for tag in DEFAULT_QUANTS {
        if let Some(p) = find_quant(paths, tag) {
            return Some((p, Some(tag)));
        }
    }
    paths
        .iter()
        .copied()
        .find(|p| is_gguf_model(p) && split_info(p).is_none_or(|s| s.count <= 1 || s.index == 1))
        .map(|p| (p, None))
}

/// Builds a glob set; `*` crosses `/`, a trailing `/` means "everything below".
pub(crate) fn build_globs(patterns: &[String]) -> Result<GlobSet, SelectionError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let pat = if p.ends_with('/') {
            format!("{p}*")
        } else {
            p.clone()
        };
        let g = GlobBuilder::new(&pat)
            .literal_separator(false)
            .build()
            .map_err(|e| SelectionError::Pattern {
                pattern: p.clone(),
                reason: e.to_string(),
            })?;
        b.add(g);
    }
    b.build().map_err(|e| SelectionError::Pattern {
        pattern: patterns.join(" "),
        reason: e.to_string(),
    })
}

/// The outcome of applying a selection to a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    /// Chosen paths, in listing order.
    pub paths: Vec<String>,
    /// A note for the user (which model a bare GGUF repository got, and how to get others).
    pub notice: Option<String>,
}

/// Why a selection chose nothing (the callers add the repository and turn it into their own
/// error: [`FetchError`](crate::fetch::FetchError), [`RemoteError`](crate::remote::RemoteError)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectError {
    /// A pattern does not parse.
    #[error(transparent)]
    BadPattern(#[from] SelectionError),
    /// An explicit file is not in the listing.
    #[error("file '{}' is not in the repository", crate::names::escape(.0))]
    MissingFile(String),
    /// No GGUF carries the tag.
    #[error(
        "no GGUF file carries the quantization '{}'{}",
        crate::names::escape(tag),
        fmt_available(available)
    )]
    NoQuant {
        /// The tag.
        tag: String,
        /// The GGUF files there are.
        available: Vec<String>,
    },
    /// Nothing matched.
    #[error("no file matches the selection")]
    Empty,
}

/// Applies `sel` to the paths of a listing (in listing order).
pub(crate) fn choose(paths: &[&str], sel: &Selection, repo: &str) -> Result<Chosen, SelectError> {
    let include = build_globs(&sel.include)?;
    let exclude = build_globs(&sel.exclude)?;
    let mut picked = vec![false; paths.len()];
    let mut notice = None;
    let index_of = |p: &str| paths.iter().position(|q| *q == p);

    let mut globbed = vec![false; paths.len()];
    for f in &sel.files {
        if f.ends_with('/') {
            // A folder: every file below it (subject to --exclude, like a glob's).
            let mut any = false;
            for (i, p) in paths.iter().enumerate() {
                if p.starts_with(f.as_str()) {
                    globbed[i] = true;
                    any = true;
                }
            }
            if !any {
                return Err(SelectError::MissingFile(f.clone()));
            }
            continue;
        }
        match index_of(f) {
            Some(i) => picked[i] = true,
            None => return Err(SelectError::MissingFile(f.clone())),
        }
    }
    // The model chosen for the user (by tag or by default), whose projector comes with it.
    let mut model = None;
    if let Some(tag) = &sel.quant {
        let first = find_quant(paths, tag).ok_or_else(|| SelectError::NoQuant {
            tag: tag.clone(),
            available: paths
                .iter()
                .filter(|p| is_gguf(p))
                .map(|p| p.to_string())
                .collect(),
        })?;
        for part in split_parts(paths, first) {
            if let Some(i) = index_of(part) {
                globbed[i] = true;
            }
        }
        model = Some(first);
    }
    if !sel.include.is_empty() {
        for (i, p) in paths.iter().enumerate() {
            if include.is_match(p) {
                globbed[i] = true;
            }
        }
    }
    if sel.is_bare() {
        match default_gguf(paths) {
            Some((first, tag)) => {
                model = Some(first);
                let parts = split_parts(paths, first);
                for part in &parts {
                    if let Some(i) = index_of(part) {
                        globbed[i] = true;
                    }
                }
                let models: Vec<&str> = paths
                    .iter()
                    .copied()
                    .filter(|p| {
                        is_gguf_model(p)
                            && split_info(p).is_none_or(|s| s.count <= 1 || s.index == 1)
                    })
                    .collect();
                let why = match tag {
                    Some(t) => format!("the {t} quantization"),
                    None => "the first GGUF model".to_string(),
                };
                let what = if parts.len() > 1 {
                    format!("{first} ({} parts)", parts.len())
                } else {
                    first.to_string()
                };
                notice = Some(if models.len() > 1 {
                    format!(
                        "{repo} holds {} GGUF models; fetching {why}: {what}. \
                         Choose another with {repo}:QUANT, or fetch them all with --include '*.gguf'",
                        models.len()
                    )
                } else {
                    format!("{repo} is a GGUF repository; fetching {why}: {what}. Fetch everything with --include '*'")
                });
            }
            None => globbed.iter_mut().for_each(|g| *g = true),
        }
    }
    let mmproj = model
        .filter(|_| !sel.no_mmproj)
        .and_then(|m| matching_mmproj(paths, m));
    if let Some(i) = mmproj.and_then(index_of) {
        globbed[i] = true;
        if !exclude.is_match(paths[i]) {
            let with = format!(
                "with its multimodal projector {} (--no-mmproj leaves it out)",
                paths[i]
            );
            notice = Some(match notice {
                Some(n) => format!("{n}. Fetching it {with}"),
                None => format!("fetching {} {with}", model.unwrap_or_default()),
            });
        }
    }
    for (i, p) in paths.iter().enumerate() {
        if globbed[i] && !exclude.is_match(p) {
            picked[i] = true;
        }
    }
    let out: Vec<String> = paths
        .iter()
        .zip(&picked)
        .filter(|(_, k)| **k)
        .map(|(p, _)| p.to_string())
        .collect();
    if out.is_empty() {
        return Err(SelectError::Empty);
    }
    Ok(Chosen { paths: out, notice })
}

/// ` (available tags: Q4_K_M, Q8_0)`: what a tag that no file carries could have been, for
/// a message (the files themselves when none carries a tag).
pub(crate) fn fmt_available(a: &[String]) -> String {
    // The tags the model files carry (what the user can ask for), in listing order; the files
    // themselves only when none carries a tag.
    let mut tags: Vec<String> = Vec::new();
    for p in a.iter().filter(|p| is_gguf_model(p)) {
        if let Some((_, t)) = precision(p) {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
    }
    let (what, items) = if tags.is_empty() {
        ("files", a)
    } else {
        ("tags", &tags[..])
    };
    if items.is_empty() {
        return " (it has no GGUF files)".to_string();
    }
    let mut s = format!(
        " (available {what}: {}",
        items
            .iter()
            .take(12)
            .map(|i| crate::names::escape(i).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if items.len() > 12 {
        s.push_str(&format!(", … {} more", items.len() - 12));
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &[&str] = &[
        ".gitattributes",
        "README.md",
        "model-F16.gguf",
        "model-Q4_K_M.gguf",
        "model-Q8_0.gguf",
        "mmproj-model-Q8_0.gguf",
        "big/model-Q5_K_M-00001-of-00002.gguf",
        "big/model-Q5_K_M-00002-of-00002.gguf",
    ];

    fn pick(paths: &[&str], sel: &Selection) -> Vec<String> {
        choose(paths, sel, "org/name").unwrap().paths
    }

    #[test]
    fn repo_spec() {
        assert_eq!(parse_repo_spec("a/b").unwrap(), ("a/b".into(), None));
        assert_eq!(
            parse_repo_spec("a/b:Q4_K_M").unwrap(),
            ("a/b".into(), Some("Q4_K_M".into()))
        );
        assert!(parse_repo_spec("a/b:").is_err());
        assert!(parse_repo_spec("a/b:x:y").is_err());
        for (spec, repo, quant) in [
            ("a/b:q4_k_m", "a/b", Some("q4_k_m")),
            ("hf.co/a/b:Q4_K_M", "a/b", Some("Q4_K_M")),
            ("https://huggingface.co/a/b", "a/b", None),
            ("huggingface.co/a/b:Q8_0", "a/b", Some("Q8_0")),
        ] {
            let r = parse_reference(spec).unwrap();
            assert_eq!(
                (r.repo.as_str(), r.quant.as_deref()),
                (repo, quant),
                "{spec}"
            );
            assert_eq!(r.file, None);
        }
        let r = parse_reference("hf://a/b/sub/m.gguf").unwrap();
        assert_eq!(
            (r.repo.as_str(), r.file.as_deref(), r.repo_type),
            ("a/b", Some("sub/m.gguf"), None)
        );
        use crate::names::RepoType;
        for (spec, t, file) in [
            ("hf://datasets/a/b", RepoType::Dataset, None),
            ("hf://spaces/a/b/app.py", RepoType::Space, Some("app.py")),
            (
                "https://huggingface.co/datasets/a/b",
                RepoType::Dataset,
                None,
            ),
            ("huggingface.co/spaces/a/b", RepoType::Space, None),
            ("datasets/a/b", RepoType::Dataset, None),
            ("spaces/a/b", RepoType::Space, None),
            ("models/a/b", RepoType::Model, None),
        ] {
            let r = parse_reference(spec).unwrap();
            assert_eq!(
                (r.repo.as_str(), r.file.as_deref(), r.repo_type),
                ("a/b", file, Some(t)),
                "{spec}"
            );
        }
        for bad in [
            "hf://a",
            "hf.co/a/b/c:Q4",
            "https://hf.co/a",
            "hf://a/b:Q4/x",
        ] {
            assert!(parse_reference(bad).is_err(), "{bad}");
        }
        // A type in front keeps the quantization tag; any other third part is no type.
        let r = parse_reference("models/a/b:Q8_0").unwrap();
        assert_eq!((r.repo.as_str(), r.quant.as_deref()), ("a/b", Some("Q8_0")));
        assert_eq!(parse_reference("other/a/b").unwrap().repo_type, None);
    }

    #[test]
    fn quant_tags() {
        assert!(has_quant_tag("model-Q4_K_M.gguf", "q4_k_m"));
        assert!(has_quant_tag("model.Q8_0-00001-of-00002.gguf", "Q8_0"));
        assert!(!has_quant_tag("model-Q4_K_M.gguf", "Q4_K"));
        assert!(!has_quant_tag("model-Q4_K_Mx.gguf", "Q4_K_M"));
        assert_eq!(
            pick(REPO, &Selection::quant("Q8_0").without_mmproj()),
            vec!["model-Q8_0.gguf"]
        );
        assert_eq!(
            pick(REPO, &Selection::quant("q8_0").without_mmproj()),
            vec!["model-Q8_0.gguf"]
        );
        assert_eq!(
            pick(REPO, &Selection::quant("Q5_K_M").without_mmproj()),
            vec![
                "big/model-Q5_K_M-00001-of-00002.gguf",
                "big/model-Q5_K_M-00002-of-00002.gguf"
            ]
        );
        match choose(REPO, &Selection::quant("Q2_K"), "r") {
            Err(SelectError::NoQuant { tag, available }) => {
                assert_eq!(tag, "Q2_K");
                assert_eq!(available.len(), 6);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mmproj_is_never_the_model_but_comes_with_it() {
        let paths = ["mmproj-Q8_0.gguf", "llava-Q8_0.gguf"];
        assert_eq!(
            pick(&paths, &Selection::quant("Q8_0")),
            vec!["mmproj-Q8_0.gguf", "llava-Q8_0.gguf"]
        );
        assert_eq!(
            pick(&paths, &Selection::quant("q8_0").without_mmproj()),
            vec!["llava-Q8_0.gguf"]
        );
        let paths = ["mmproj-Q8_0.gguf"];
        assert!(choose(&paths, &Selection::quant("Q8_0"), "r").is_err());
        // Neither an importance matrix nor a later part of a split model is "the model".
        let paths = [
            "m.imatrix.gguf",
            "imatrix-Q4_K_M.gguf",
            "m-Q4_K_M-00002-of-00002.gguf",
            "m-Q4_K_M-00001-of-00002.gguf",
        ];
        assert_eq!(
            default_gguf(&paths),
            Some(("m-Q4_K_M-00001-of-00002.gguf", Some("Q4_K_M")))
        );
    }

    #[test]
    fn the_projector_closest_in_precision() {
        let paths = [
            "gemma-3-4b-it-Q4_K_M.gguf",
            "gemma-3-4b-it-Q8_0.gguf",
            "gemma-3-4b-it-BF16.gguf",
            "gemma-3-4b-it-F32.gguf",
            "mmproj-model-f16.gguf",
            "mmproj-BF16.gguf",
            "mmproj-F32.gguf",
            "mmproj-Q8_0.gguf",
        ];
        let proj = |m| matching_mmproj(&paths, m);
        assert_eq!(proj("gemma-3-4b-it-Q8_0.gguf"), Some("mmproj-Q8_0.gguf"));
        // 4 bits: the 8-bit one is closest.
        assert_eq!(proj("gemma-3-4b-it-Q4_K_M.gguf"), Some("mmproj-Q8_0.gguf"));
        // 16 bits: the same type first.
        assert_eq!(proj("gemma-3-4b-it-BF16.gguf"), Some("mmproj-BF16.gguf"));
        assert_eq!(proj("gemma-3-4b-it-F32.gguf"), Some("mmproj-F32.gguf"));
        // Only 16- and 32-bit projectors: a 4-bit model gets the 16-bit one.
        let few = ["m-Q4_K_M.gguf", "mmproj-F32.gguf", "mmproj-F16.gguf"];
        assert_eq!(
            matching_mmproj(&few, "m-Q4_K_M.gguf"),
            Some("mmproj-F16.gguf")
        );
        // In a folder per quantization, the one beside the model.
        let folders = [
            "Q4/m-Q4_K_M.gguf",
            "Q8/m-Q8_0.gguf",
            "Q8/mmproj-f16.gguf",
            "Q4/mmproj-f16.gguf",
        ];
        assert_eq!(
            matching_mmproj(&folders, "Q4/m-Q4_K_M.gguf"),
            Some("Q4/mmproj-f16.gguf")
        );
        assert_eq!(matching_mmproj(&["m-Q4_K_M.gguf"], "m-Q4_K_M.gguf"), None);
        // A bare repository gets Q4_K_M and its projector, and says so.
        let c = choose(&paths, &Selection::all(), "ggml-org/gemma").unwrap();
        assert_eq!(
            c.paths,
            vec!["gemma-3-4b-it-Q4_K_M.gguf", "mmproj-Q8_0.gguf"]
        );
        let n = c.notice.unwrap();
        assert!(
            n.contains("mmproj-Q8_0.gguf") && n.contains("--no-mmproj"),
            "{n}"
        );
        // --exclude still wins.
        let c = choose(
            &paths,
            &Selection::quant("Q8_0").with_exclude("mmproj*"),
            "r",
        )
        .unwrap();
        assert_eq!(c.paths, vec!["gemma-3-4b-it-Q8_0.gguf"]);
    }

    #[test]
    fn precisions_from_names() {
        for (name, bits) in [
            ("a/Model-Q4_K_M.gguf", Some(4)),
            ("model-UD-Q4_K_XL.gguf", Some(4)),
            ("m-IQ2_XXS.gguf", Some(2)),
            ("m.Q5_K_S.gguf", Some(5)),
            ("mmproj-model-f16.gguf", Some(16)),
            ("m-bf16.gguf", Some(16)),
            ("m-TQ1_0.gguf", Some(1)),
            ("mmproj.gguf", None),
            ("Qwen2-VL-7B.gguf", None),
            ("m-Q99.gguf", None),
        ] {
            assert_eq!(precision(name).map(|p| p.0), bits, "{name}");
        }
    }

    #[test]
    fn splits() {
        let s = split_info("a/x-Q4-00002-of-00003.gguf").unwrap();
        assert_eq!((s.prefix.as_str(), s.index, s.count), ("a/x-Q4", 2, 3));
        assert!(split_info("x-Q4.gguf").is_none());
        assert!(split_info("x-00004-of-00003.gguf").is_none());
        // A second part alone never starts a selection.
        let paths = ["m-Q8_0-00002-of-00002.gguf", "m-Q8_0-00001-of-00002.gguf"];
        assert_eq!(
            pick(&paths, &Selection::quant("Q8_0")),
            vec!["m-Q8_0-00002-of-00002.gguf", "m-Q8_0-00001-of-00002.gguf"]
        );
    }

    #[test]
    fn bare_gguf_repo_prefers_q4_k_m_then_q8_0_then_first() {
        let c = choose(REPO, &Selection::all().without_mmproj(), "org/name").unwrap();
        assert_eq!(c.paths, vec!["model-Q4_K_M.gguf"]);
        let n = c.notice.unwrap();
        assert!(n.contains("Q4_K_M") && n.contains("org/name:QUANT"), "{n}");
        let no_q4: Vec<&str> = REPO.iter().copied().filter(|p| !p.contains("Q4")).collect();
        assert_eq!(
            pick(&no_q4, &Selection::all()),
            vec!["model-Q8_0.gguf", "mmproj-model-Q8_0.gguf"]
        );
        let only = ["README.md", "mmproj-f16.gguf", "m-f16.gguf", "m-bf16.gguf"];
        let c = choose(&only, &Selection::all(), "r").unwrap();
        assert_eq!(c.paths, vec!["mmproj-f16.gguf", "m-f16.gguf"]);
        assert!(c.notice.unwrap().contains("first GGUF"));
    }

    #[test]
    fn bare_other_repo_is_fetched_whole() {
        let paths = ["config.json", "model.safetensors", "sub/tok.json"];
        let c = choose(&paths, &Selection::all(), "r").unwrap();
        assert_eq!(c.paths.len(), 3);
        assert!(c.notice.is_none());
        let c = choose(&paths, &Selection::all().with_exclude("*.json"), "r").unwrap();
        assert_eq!(c.paths, vec!["model.safetensors"]);
    }

    #[test]
    fn globs_and_files() {
        let sel = Selection::all()
            .with_include("*.gguf")
            .with_exclude("*mmproj*");
        assert_eq!(pick(REPO, &sel).len(), 5);
        let sel = Selection::all().with_include("big/");
        assert_eq!(pick(REPO, &sel).len(), 2);
        // A file argument ending in `/` is a folder.
        let sel = Selection::files(["big/", "README.md"]);
        assert!(!sel.is_explicit_only());
        assert_eq!(
            pick(REPO, &sel),
            vec![
                "README.md",
                "big/model-Q5_K_M-00001-of-00002.gguf",
                "big/model-Q5_K_M-00002-of-00002.gguf"
            ]
        );
        assert_eq!(
            choose(REPO, &Selection::files(["nope/"]), "r"),
            Err(SelectError::MissingFile("nope/".into()))
        );
        // "bi/" is not a prefix of the folder "big/".
        assert!(choose(REPO, &Selection::files(["bi/"]), "r").is_err());
        let sel = Selection::files(["README.md"]).with_quant("Q8_0");
        assert_eq!(
            pick(REPO, &sel),
            vec!["README.md", "model-Q8_0.gguf", "mmproj-model-Q8_0.gguf"]
        );
        assert_eq!(
            choose(REPO, &Selection::files(["nope"]), "r"),
            Err(SelectError::MissingFile("nope".into()))
        );
        assert_eq!(
            choose(REPO, &Selection::all().with_include("*.bin"), "r"),
            Err(SelectError::Empty)
        );
        assert!(matches!(
            choose(REPO, &Selection::all().with_include("["), "r"),
            Err(SelectError::BadPattern(_))
        ));
    }
}
