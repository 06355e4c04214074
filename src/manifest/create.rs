//! Making a manifest from files on disk.

use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::read::FileReader;
use super::{
    now_rfc3339, Manifest, ManifestError, ManifestFile, ModelSummary, Sha256Hex, Source,
    TensorDigest, DEFAULT_CHUNK_SIZE, FORMAT, MAX_FILES, MIN_CHUNK_SIZE, VERSION,
};
use crate::format::{self, Header};
use crate::names::{check_repo_path, escape};

/// How [`create`] makes a manifest.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CreateOptions {
    /// Bytes per chunk. Default [`DEFAULT_CHUNK_SIZE`] (16 MiB); at least
    /// [`MIN_CHUNK_SIZE`](super::MIN_CHUNK_SIZE).
    pub chunk_size: u64,
    /// Where the files came from. Default: found from the path when the files are in a Hugging
    /// Face cache snapshot (`…/models--org--name/snapshots/{commit}/…`), else none.
    pub source: Option<Source>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            source: None,
        }
    }
}

impl CreateOptions {
    /// The same options with `bytes` per chunk.
    #[must_use]
    pub fn with_chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// The same options with this source.
    #[must_use]
    pub fn with_source(mut self, source: Source) -> Self {
        self.source = Some(source);
        self
    }
}

/// Files that are a download in progress or a tool's bookkeeping, never part of a model.
fn is_bookkeeping(name: &str) -> bool {
    name.ends_with(".wi-partial")
        || name.ends_with(".wi-partial.state")
        || name.ends_with(".incomplete")
        || name.ends_with(".lock")
        || (name.starts_with('.') && name.ends_with(".tmp"))
}

/// Every regular file below `dir` (links to files followed, as a cache snapshot holds them;
/// `.cache/` folders and bookkeeping files left out), sorted.
fn files_below(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| ManifestError::io(&d, e))? {
            let e = e.map_err(|e| ManifestError::io(&d, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let ft = e
                .file_type()
                .map_err(|er| ManifestError::io(&e.path(), er))?;
            if ft.is_dir() {
                if name != ".cache" && name != ".git" {
                    stack.push(e.path());
                }
            } else if !is_bookkeeping(&name) && fs::metadata(e.path()).is_ok_and(|m| m.is_file()) {
                out.push(e.path());
                if out.len() > MAX_FILES {
                    return Err(ManifestError::Input(format!(
                        "{} holds more than {MAX_FILES} files",
                        dir.display()
                    )));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Everything below a model's folder, as a signature's verifier must see it (and as
/// `model_signing` walks it): nothing is skipped but what `leave_out` chooses.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Regular files and links to them, by path relative to the folder (`/`-separated), sorted.
    pub files: Vec<(String, PathBuf)>,
    /// Entries that are not regular files nor folders (links to folders, links to nothing,
    /// sockets, pipes, devices), by relative path, with what each is; sorted.
    pub other: Vec<(String, &'static str)>,
    /// The entries `leave_out` chose (not walked into), by relative path, each with whether it
    /// is a folder and the number of regular files it holds (1 for a file), sorted.
    pub left_out: Vec<(String, bool, usize)>,
}

/// Walks `dir` whole (links to files followed, links to folders not: they are listed in
/// [`Walk::other`]); `leave_out(rel)` says which entries are left out, their files counted.
/// Bounded: at most [`MAX_FILES`] entries in all.
pub(crate) fn walk(dir: &Path, leave_out: &dyn Fn(&str) -> bool) -> Result<Walk, ManifestError> {
    let mut out = Walk::default();
    let mut seen = 0usize;
    let mut stack: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| ManifestError::io(&d, e))? {
            let e = e.map_err(|e| ManifestError::io(&d, e))?;
            seen += 1;
            if seen > MAX_FILES {
                return Err(ManifestError::Input(format!(
                    "{} holds more than {MAX_FILES} files",
                    dir.display()
                )));
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let ft = e
                .file_type()
                .map_err(|er| ManifestError::io(&e.path(), er))?;
            if leave_out(&rel) {
                let files = if ft.is_dir() {
                    count_files(&e.path(), MAX_FILES)
                } else {
                    1
                };
                out.left_out.push((rel, ft.is_dir(), files));
            } else if ft.is_dir() {
                stack.push((e.path(), rel));
            } else if ft.is_file() {
                out.files.push((rel, e.path()));
            } else if ft.is_symlink() {
                match fs::metadata(e.path()) {
                    Ok(m) if m.is_file() => out.files.push((rel, e.path())),
                    Ok(m) if m.is_dir() => out.other.push((rel, "a link to a folder")),
                    Ok(_) => out.other.push((rel, "a link to a special file")),
                    Err(_) => out.other.push((rel, "a link to nothing")),
                }
            } else {
                out.other
                    .push((rel, "not a regular file (a socket, pipe or device)"));
            }
        }
    }
    out.files.sort();
    out.other.sort();
    out.left_out.sort();
    Ok(out)
}

/// The regular files below `dir` (links not followed), looking at `max` entries at most.
fn count_files(dir: &Path, max: usize) -> usize {
    let (mut n, mut seen) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            seen += 1;
            if seen > max {
                return n;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// A file named on the command line, with the files it stands for: the parts of a split GGUF
/// (named by its first part), the shards of a safetensors index.
fn files_of(file: &Path) -> Vec<PathBuf> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = file.parent().unwrap_or(Path::new(""));
    let mut out = vec![file.to_path_buf()];
    if let Some(parts) = format::gguf::split_shard_names(&name) {
        out.extend(parts.into_iter().map(|p| dir.join(p)));
    } else if name.ends_with(".safetensors.index.json") {
        let max = format::safetensors::MAX_INDEX_BYTES;
        if let Ok(bytes) = format::model::read_bounded(file, max, "safetensors index") {
            if let Ok(index) = format::safetensors::parse_index(&bytes) {
                out.extend(index.shard_files().into_iter().map(|s| dir.join(s)));
            }
        }
    }
    out
}

/// `…/models--org--name/snapshots/{commit}/…` → the repository and commit.
fn source_from_cache_path(p: &Path) -> Option<Source> {
    let parts: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let i = parts.iter().position(|c| c == "snapshots")?;
    let commit = parts.get(i + 1)?;
    let folder = parts.get(i.checked_sub(1)?)?;
    let (kind, rest) = folder.split_once("--")?;
    let repo = rest.replacen("--", "/", 1);
    let repo = match kind {
        "models" => repo,
        "datasets" => format!("datasets/{repo}"),
        _ => return None,
    };
    crate::names::is_commit_hash(commit).then(|| Source {
        repo,
        revision: None,
        commit: commit.clone(),
        url: None,
    })
}

/// The files a manifest of `paths` describes, named relative to their folder (see [`create`]).
pub(crate) struct Selection {
    /// The model's folder.
    pub base: PathBuf,
    /// Every file, by name relative to `base`, sorted.
    pub named: Vec<(String, PathBuf)>,
    /// Whether one file alone was named (not a folder, and it brought no other part).
    pub single_file: bool,
}

/// Chooses and names the files of `paths` as [`create`] describes.
pub(crate) fn select(paths: &[PathBuf]) -> Result<Selection, ManifestError> {
    let (base, files) = match paths {
        [one] if one.is_dir() => (one.clone(), files_below(one)?),
        _ => {
            let mut files = Vec::new();
            for p in paths {
                if p.is_dir() {
                    return Err(ManifestError::Input(format!(
                        "{} is a folder: give one folder alone, or files",
                        p.display()
                    )));
                }
                files.extend(files_of(p));
            }
            let base = files
                .first()
                .and_then(|f| f.parent())
                .map(Path::to_path_buf)
                .ok_or_else(|| ManifestError::Input("no file to describe".into()))?;
            (base, files)
        }
    };
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&base).map_err(|_| {
            ManifestError::Input(format!(
                "{} is not in {}: give files of one folder",
                f.display(),
                base.display()
            ))
        })?;
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        check_repo_path(&rel).map_err(|why| {
            ManifestError::Input(format!(
                "cannot name '{}' in a manifest: {why}",
                escape(&rel)
            ))
        })?;
        named.push((rel, f));
    }
    named.sort();
    named.dedup_by(|a, b| a.0 == b.0);
    if named.is_empty() {
        return Err(ManifestError::Input(format!(
            "no file in {}",
            base.display()
        )));
    }
    let single_file = named.len() == 1 && paths.len() == 1 && !paths[0].is_dir();
    Ok(Selection {
        base,
        named,
        single_file,
    })
}

/// Makes a manifest of `paths` (files and folders; see `weight-inspect manifest create`): one
/// folder is the model's folder and names its files relative to it; files are named relative to
/// their common folder (a split GGUF's first part brings its other parts, a safetensors index its
/// shards). Chunks and tensors are hashed in parallel, read by position.
pub fn create(paths: &[PathBuf], opts: &CreateOptions) -> Result<Manifest, ManifestError> {
    if opts.chunk_size < MIN_CHUNK_SIZE {
        return Err(ManifestError::Input(format!(
            "chunk size {} is below the minimum of {MIN_CHUNK_SIZE} bytes",
            opts.chunk_size
        )));
    }
    let Selection { base, named, .. } = select(paths)?;
    let mut out = Vec::with_capacity(named.len());
    for (rel, path) in &named {
        out.push(describe(rel, path, opts.chunk_size, true)?);
    }
    let source = opts
        .source
        .clone()
        .or_else(|| source_from_cache_path(&base));
    let m = Manifest {
        format: FORMAT.to_string(),
        version: VERSION,
        created: now_rfc3339(),
        generator: format!("weight-inspect {}", env!("CARGO_PKG_VERSION")),
        source,
        files: out,
    };
    m.validate()?;
    Ok(m)
}

/// A file's size and digests in `algorithm`, read by position, hashing only what is asked for:
/// the whole file (`shard` `None`, one digest), or each `shard`-byte piece (in parallel). A
/// file that changes while it is read is an error naming it.
pub(crate) fn file_digests(
    path: &Path,
    shard: Option<u64>,
    algorithm: super::HashAlgorithm,
) -> Result<(u64, Vec<Vec<u8>>), ManifestError> {
    let io = |e| ManifestError::io(path, e);
    let file = FileReader::open(path).map_err(io)?;
    let size = file.len();
    let digests = match shard {
        None => vec![super::read::digest(&file, 0..size, algorithm).map_err(io)?],
        Some(n) => {
            let n = n.max(1);
            (0..size.div_ceil(n))
                .into_par_iter()
                .map(|i| super::read::digest(&file, i * n..((i + 1) * n).min(size), algorithm))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(io)?
        }
    };
    file.unchanged().map_err(io)?;
    Ok((size, digests))
}

/// One file's entry: whole-file and chunk digests (side by side), and its tensors (when
/// `with_tensors`), read by position.
pub(crate) fn describe(
    rel: &str,
    path: &Path,
    chunk_size: u64,
    with_tensors: bool,
) -> Result<ManifestFile, ManifestError> {
    let io = |e| ManifestError::io(path, e);
    let file = FileReader::open(path).map_err(io)?;
    let size = file.len();
    let step = chunk_size.max(1);
    let (whole, chunks) = rayon::join(
        || file.sha256(0..size),
        || {
            (0..size.div_ceil(step))
                .into_par_iter()
                .map(|i| file.sha256(i * step..((i + 1) * step).min(size)))
                .collect::<std::io::Result<Vec<_>>>()
        },
    );
    let (whole, chunks) = (whole.map_err(io)?, chunks.map_err(io)?);
    let lower = rel.to_ascii_lowercase();
    let header = if with_tensors && (lower.ends_with(".gguf") || lower.ends_with(".safetensors")) {
        file.header().map_err(io)?
    } else {
        None
    };
    let (model, tensors) = match &header {
        Some(h) => summarize(h, &file).map_err(io)?,
        None => (None, Vec::new()),
    };
    file.unchanged().map_err(io)?;
    Ok(ManifestFile {
        path: rel.to_string(),
        size,
        sha256: Sha256Hex(whole),
        chunk_size,
        chunks: chunks.into_iter().map(Sha256Hex).collect(),
        model,
        tensors,
    })
}

/// The model summary and the digest of every tensor that lies inside the file, by offset.
fn summarize(
    h: &Header,
    file: &FileReader,
) -> std::io::Result<(Option<ModelSummary>, Vec<TensorDigest>)> {
    let format = match h {
        Header::Gguf(_) => "gguf",
        Header::Safetensors(_) => "safetensors",
    };
    let infos = h.tensors();
    let total_params = infos
        .iter()
        .map(|t| t.n_elements())
        .fold(0u64, u64::saturating_add);
    let mut tensors: Vec<TensorDigest> = infos
        .par_iter()
        .filter(|t| {
            let r = t.byte_range();
            r.start <= r.end && r.end <= file.len()
        })
        .map(|t| {
            Ok(TensorDigest {
                name: t.name.clone(),
                offset: t.offset,
                length: t.n_bytes,
                sha256: Sha256Hex(file.sha256(t.byte_range())?),
            })
        })
        .collect::<std::io::Result<_>>()?;
    tensors.sort_by(|a, b| (a.offset, &a.name).cmp(&(b.offset, &b.name)));
    Ok((
        Some(ModelSummary {
            format: format.to_string(),
            tensor_count: infos.len() as u64,
            total_params,
        }),
        tensors,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_from_cache_paths() {
        let c = "c".repeat(40);
        let s = source_from_cache_path(Path::new(&format!(
            "/h/hub/models--org--name/snapshots/{c}"
        )))
        .unwrap();
        assert_eq!(
            (s.repo.as_str(), s.commit.as_str()),
            ("org/name", c.as_str())
        );
        let s = source_from_cache_path(Path::new(&format!(
            "/h/hub/datasets--org--d/snapshots/{c}/sub"
        )))
        .unwrap();
        assert_eq!(s.repo, "datasets/org/d");
        assert!(source_from_cache_path(Path::new("/h/models--org--name/snapshots/main")).is_none());
        assert!(source_from_cache_path(Path::new("/tmp/model")).is_none());
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn a_file_truncated_while_it_is_hashed_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("w.bin");
        for shard in [None, Some(1 << 20)] {
            fs::write(&path, vec![1u8; 3 << 20]).unwrap();
            let p = path.clone();
            super::super::read::hook::before_first_read(&path, move || {
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_len(10)
                    .unwrap();
            });
            let e = file_digests(&path, shard, super::super::HashAlgorithm::Sha256)
                .unwrap_err()
                .to_string();
            assert!(e.contains("w.bin: it changed while it was read"), "{e}");
        }
        fs::write(&path, vec![1u8; 3 << 20]).unwrap();
        let p = path.clone();
        super::super::read::hook::before_first_read(&path, move || {
            fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(10)
                .unwrap();
        });
        let e = describe("w.bin", &path, 1 << 20, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.bin: it changed while it was read"), "{e}");
    }
}
