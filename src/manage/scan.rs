//! Listing a cache without hashing: every repository folder, its revisions, files, partial
//! downloads and blobs ([`scan`]).

use super::*;

/// Everything [`scan`] found in a cache (the document `wi-fetch cache ls --json` prints).
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// The cache root.
    pub root: PathBuf,
    /// Bytes of every regular file below the repositories listed (links not followed, so each
    /// blob counts once), and of the shared store's entries they link to, each counted once
    /// (with every entry of the store, linked or not, when all repositories are listed).
    pub size_on_disk: u64,
    /// The repositories, by cache id.
    pub repos: Vec<RepoReport>,
    /// huggingface_hub's shared blob store (`{cache}/blobs/`), when the cache has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_store: Option<SharedStoreReport>,
    /// Entries that are not what the layout says (a link where a folder should be, an unreadable
    /// ref…), one sentence each.
    pub warnings: Vec<String>,
    /// Flat downloads of an older llama.cpp (filled by the caller from
    /// [`scan_llama_cpp_legacy`]; left out of the JSON when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub llama_cpp_legacy: Vec<LegacyFile>,
}

/// huggingface_hub's shared blob store of a cache ([`crate::cache::shared`]).
#[derive(Debug, Clone, Serialize)]
pub struct SharedStoreReport {
    /// `{cache}/blobs`.
    pub path: PathBuf,
    /// Its entries (one file each, named by its Xet hash).
    pub entries: usize,
    /// Bytes of its entries.
    pub size_on_disk: u64,
    /// Entries no repository's blob links to, by Xet hash, with their sizes: `cache prune`
    /// removes them.
    pub unreferenced: BTreeMap<String, u64>,
}

/// One repository folder.
#[derive(Debug, Clone, Serialize)]
pub struct RepoReport {
    /// `model/org/name`, as `hf cache ls` names it.
    pub cache_id: String,
    /// `org/name`.
    pub repo_id: String,
    /// `model`, `dataset` or `space`.
    pub repo_type: String,
    /// The repository folder.
    pub path: PathBuf,
    /// Bytes of its regular files (each blob once, partial downloads included), a blob kept in
    /// the shared store counted at its size (as `hf cache ls` counts it).
    pub size_on_disk: u64,
    /// Of `size_on_disk`, the bytes of its blobs kept in the shared store, which other
    /// repositories may link to too (the cache's total counts each once).
    pub shared_bytes: u64,
    /// Distinct files: blobs linked from a snapshot, plus regular files in snapshots.
    pub nb_files: usize,
    /// Latest access time of its blobs, Unix seconds.
    pub last_accessed: Option<u64>,
    /// Latest modification time of its blobs, Unix seconds.
    pub last_modified: Option<u64>,
    /// Refs (`main`, `refs/pr/1`…) and the commit each names.
    pub refs: BTreeMap<String, String>,
    /// Snapshot folders, by commit.
    pub revisions: Vec<RevisionReport>,
    /// Partial downloads in `blobs/`, by any tool.
    pub partials: Vec<PartialReport>,
    /// Blobs no snapshot links to, with their sizes.
    pub unreferenced_blobs: BTreeMap<String, u64>,
    /// True when a download holds one of its locks right now.
    pub in_use: bool,
}

/// One snapshot folder: a commit.
#[derive(Debug, Clone, Serialize)]
pub struct RevisionReport {
    /// The commit (the folder name).
    pub commit: String,
    /// Refs naming it; empty for a detached revision.
    pub refs: Vec<String>,
    /// `snapshots/{commit}`.
    pub snapshot_path: PathBuf,
    /// Bytes of the distinct blobs (and regular files) it holds.
    pub size_on_disk: u64,
    /// Entries in the snapshot folder.
    pub nb_files: usize,
    /// Latest modification time of its files, Unix seconds.
    pub last_modified: Option<u64>,
    /// Its files, by path; partial downloads of files at this commit (from our resume states)
    /// are listed here too, as `partial`.
    pub files: Vec<FileReport>,
}

/// A file of a revision.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// Path in the repository.
    pub path: String,
    /// The blob it links to (`None` for a regular file in the snapshot, or a dangling link to
    /// something that is not a blob name).
    pub etag: Option<String>,
    /// Size on disk (of the blob, or of the partial download's data file).
    pub size: Option<u64>,
    /// Complete, partial or damaged.
    pub state: FileState,
    /// For a partial download: the bytes its resume state records (what a resume keeps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumable_bytes: Option<u64>,
    /// What is wrong with a damaged file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Its blob is a link to the shared store's entry of this Xet hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
}

/// The state of a file in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileState {
    /// Linked to a blob of the right size (or a regular file in the snapshot).
    Complete,
    /// Being downloaded, or interrupted: a partial download with a resume state.
    Partial,
    /// The link dangles or leaves `blobs/`, or the blob's size differs from the recorded
    /// manifest.
    Damaged,
}

/// Which tool left a partial download.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartialTool {
    /// `blobs/{etag}.wi-partial` with its resume state.
    WiFetch,
    /// `blobs/{etag}.incomplete`.
    HuggingfaceHub,
    /// `blobs/{oid}.downloadInProgress`.
    LlamaCpp,
}

/// A partial download in `blobs/`.
#[derive(Debug, Clone, Serialize)]
pub struct PartialReport {
    /// The ETag it is named by.
    pub etag: String,
    /// The tool that wrote it.
    pub tool: PartialTool,
    /// The data file (absent for a resume state left without one).
    pub data_path: Option<PathBuf>,
    /// Our resume state, if any.
    pub state_path: Option<PathBuf>,
    /// Beside our resume state, the log of a Xet file's chunk boundaries, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub framing_path: Option<PathBuf>,
    /// Path in the repository (recorded in our resume state).
    pub path: Option<String>,
    /// The commit it was resolved at (recorded in our resume state).
    pub commit: Option<String>,
    /// The file's full size (recorded in our resume state).
    pub size: Option<u64>,
    /// Bytes the files take (data file, state and log).
    pub bytes_on_disk: u64,
    /// Bytes a resume keeps: what our state records; for huggingface_hub and llama.cpp, which
    /// append, the data file's length.
    pub resumable_bytes: u64,
    /// A download holds its lock right now.
    pub in_use: bool,
    /// An older version of a file whose newer version is complete in a ref'd revision (or,
    /// for another tool's partial, whose blob is complete): `cache prune` removes it.
    pub stale: bool,
}

/// Seconds since the epoch of a time, if it has one.
pub(super) fn unix(t: io::Result<SystemTime>) -> Option<u64> {
    t.ok()?.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// The cache a command works on: the root it names, and how `--llama-cpp` changes it.
///
/// `llama_cpp = false`: `--cache-dir`, else `HF_HUB_CACHE`, else `$HF_HOME/hub` (as fetch).
/// `llama_cpp = true`: `--cache-dir`, else `LLAMA_CACHE`, else the same Hugging Face cache
/// (llama.cpp's own order).
pub fn cache_root_from(explicit: Option<&Path>, llama_cpp: bool, env: EnvLookup<'_>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if llama_cpp {
        if let Some(dir) = crate::env::llama_cache_from(env) {
            return dir;
        }
    }
    cache_dir_from(env)
}

/// The folder older llama.cpp versions kept their flat downloads in: `LLAMA_CACHE`, else
/// `$XDG_CACHE_HOME/llama.cpp`, else `~/.cache/llama.cpp` (`~/Library/Caches/llama.cpp` on
/// macOS).
pub fn llama_cpp_legacy_dir_from(env: EnvLookup<'_>) -> Option<PathBuf> {
    crate::env::llama_cpp_legacy_dir_from(env)
}

/// What a repository folder name says: (`model`, `org/name`) for `models--org--name` (see
/// [`parse_repo_folder_name`]).
pub(crate) fn parse_folder_name(name: &str) -> Option<(&'static str, String)> {
    parse_repo_folder_name(name).map(|(ty, id)| (ty.as_str(), id))
}

/// The cache's view of repository `id` of type `ty` (`model`, `dataset`, `space`, as
/// [`parse_folder_name`] gives them) below `root`: every path of it is named there.
pub(super) fn repo_cache(root: &Path, ty: &str, id: &str) -> RepoCache {
    HfCache::new(root).repo(ty.parse().unwrap_or_default(), id)
}

/// Lists the cache at `root`: every repository folder (`models--…`, `datasets--…`,
/// `spaces--…`), or only those whose cache id or repo id is in `only` (`org/name` means the
/// model).
pub fn scan(root: &Path, only: &[String]) -> Result<CacheReport, ManageError> {
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        _ => {
            return Err(ManageError::NoCache {
                path: root.to_path_buf(),
            })
        }
    }
    let mut warnings = Vec::new();
    let mut names: Vec<String> = fs::read_dir(root)
        .map_err(io_err(root))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| parse_folder_name(n).is_some())
        .collect();
    names.sort();
    let mut repos = Vec::new();
    for name in names {
        let Some((ty, id)) = parse_folder_name(&name) else {
            continue;
        };
        let cache_id = format!("{ty}/{id}");
        if !only.is_empty() && !only.iter().any(|o| matches_repo(o, ty, &id)) {
            continue;
        }
        let dir = root.join(&name);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                warnings.push(format!(
                    "{} is {}, not a folder: left out",
                    dir.display(),
                    describe(&dir)
                ));
                continue;
            }
            Err(_) => continue,
        }
        repos.push(scan_repo(root, &dir, ty, &id, cache_id, &mut warnings));
    }
    let own: u64 = repos.iter().map(|r| r.size_on_disk - r.shared_bytes).sum();
    let (shared_store, shared_size) = shared_store_report(root, &repos, only.is_empty());
    Ok(CacheReport {
        root: root.to_path_buf(),
        size_on_disk: own + shared_size,
        repos,
        shared_store,
        warnings,
        llama_cpp_legacy: Vec::new(),
    })
}

/// The shared store's report, and the bytes the listed repositories' links into it take (each
/// entry once; with `all`, every entry of the store).
fn shared_store_report(
    root: &Path,
    repos: &[RepoReport],
    all: bool,
) -> (Option<SharedStoreReport>, u64) {
    let store = crate::cache::shared::SharedStore::new(root);
    if !store.is_marked() {
        return (None, 0);
    }
    let links = store.links();
    let linked_by_listed: BTreeSet<String> = repos
        .iter()
        .flat_map(|r| r.revisions.iter().flat_map(|v| v.files.iter()))
        .filter_map(|f| f.shared.clone())
        .collect();
    let mut report = SharedStoreReport {
        path: store.dir(),
        entries: 0,
        size_on_disk: 0,
        unreferenced: BTreeMap::new(),
    };
    let mut counted = 0;
    for (hash, _, len) in store.entries() {
        report.entries += 1;
        report.size_on_disk += len;
        if !links.contains_key(&hash) {
            report.unreferenced.insert(hash.to_string(), len);
        }
        if all || linked_by_listed.contains(&hash.to_string()) {
            counted += len;
        }
    }
    (Some(report), counted)
}

/// Whether the user's `o` (`org/name`, `model/org/name`, a folder name) names this repository.
pub(super) fn matches_repo(o: &str, ty: &str, id: &str) -> bool {
    let o = o.trim();
    o.eq_ignore_ascii_case(id) && ty == "model"
        || o.eq_ignore_ascii_case(&format!("{ty}/{id}"))
        || o.eq_ignore_ascii_case(&format!("{ty}s/{id}"))
        || o == repo_folder_name(ty.parse().unwrap_or_default(), id)
}

/// What is at `path`, in words.
pub(super) fn describe(path: &Path) -> &'static str {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => "a symbolic link",
        Ok(m) if m.is_dir() => "a folder",
        Ok(m) if m.is_file() => "a file",
        Ok(_) => "a special file",
        Err(_) => "missing",
    }
}

/// The entries of a folder that must be a real folder: `None` (and a warning) when it is a link
/// or something else; empty when missing.
pub(super) fn real_dir_entries(
    dir: &Path,
    warnings: &mut Vec<String>,
) -> Option<Vec<fs::DirEntry>> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            warnings.push(format!(
                "{} is {}, not a folder: not read",
                dir.display(),
                describe(dir)
            ));
            return None;
        }
        Err(_) => return Some(Vec::new()),
    }
    match fs::read_dir(dir) {
        Ok(rd) => Some(rd.filter_map(|e| e.ok()).collect()),
        Err(e) => {
            warnings.push(format!("{}: {e}", dir.display()));
            None
        }
    }
}

/// The blob `link` (at `snapshots/{commit}/{rel}`) points to: the ETag when its target, taken
/// lexically from the link's folder, is `{repo}/blobs/{etag}`.
pub(super) fn link_etag(repo_dir: &Path, link: &Path) -> Option<String> {
    let target = fs::read_link(link).ok()?;
    let base = if target.is_absolute() {
        PathBuf::new()
    } else {
        link.parent()?.to_path_buf()
    };
    let mut out = PathBuf::new();
    for c in base.join(&target).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    let name = out.file_name()?.to_str()?.to_string();
    (out.parent()? == repo_dir.join("blobs") && etag_kind(&name).is_some()).then_some(name)
}

pub(super) fn lock_held(path: &Path) -> bool {
    matches!(FileLock::probe(path), Ok(LockProbe::Held))
}

/// The ETag a lock, blob or partial file name starts with, with the rest of the name.
pub(super) fn split_etag(name: &str) -> Option<(&str, &str)> {
    for len in [64, 40] {
        if let (Some(head), Some(tail)) = (name.get(..len), name.get(len..)) {
            if etag_kind(head).is_some() {
                return Some((head, tail));
            }
        }
    }
    None
}

/// Everything one repository folder holds, as the planner needs it.
#[derive(Debug, Default, Clone)]
pub(super) struct RepoScan {
    /// Complete blobs and their sizes.
    blobs: BTreeMap<String, u64>,
    /// Other files in `blobs/` by kind: (name, size).
    other_blob_files: Vec<(String, u64)>,
    /// Snapshot commit → entries (rel path → entry).
    snapshots: BTreeMap<String, BTreeMap<String, SnapEntry>>,
    /// Ref name → commit.
    refs: BTreeMap<String, String>,
    /// Partial downloads.
    partials: Vec<PartialReport>,
    /// `.wi-manifests/{etag}.json` files: etag → size.
    manifests: BTreeMap<String, u64>,
    /// `.wi-trees/{commit}.json`: commit → size.
    trees: BTreeMap<String, u64>,
    /// `.no_exist/{commit}` folders.
    no_exist: BTreeSet<String>,
    /// Lock files: etag → held.
    locks: BTreeMap<String, bool>,
    /// Blobs that are links to the shared store: etag → (the entry's Xet hash, its path).
    shared: BTreeMap<String, (crate::xet::XetHash, PathBuf)>,
}

#[derive(Debug, Clone)]
pub(super) struct SnapEntry {
    /// The blob a link points to.
    etag: Option<String>,
    /// Size of a regular file in the snapshot (llama.cpp's and huggingface_hub's fallback).
    regular: Option<u64>,
}

pub(super) fn read_repo(rc: &RepoCache, warnings: &mut Vec<String>) -> RepoScan {
    let dir = rc.dir();
    let mut s = RepoScan {
        refs: read_refs(dir, warnings),
        ..RepoScan::default()
    };
    let found = read_blobs(rc, &mut s, warnings);
    // locks
    if let Some(entries) = real_dir_entries(rc.locks_dir(), warnings) {
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((etag, ".lock")) = split_etag(&name) {
                s.locks.insert(etag.to_string(), lock_held(&e.path()));
            }
        }
    }
    s.partials = partial_reports(rc, found, &s.locks);
    // snapshots
    if let Some(entries) = real_dir_entries(&dir.join("snapshots"), warnings) {
        for e in entries {
            let commit = e.file_name().to_string_lossy().into_owned();
            let sdir = e.path();
            if !fs::symlink_metadata(&sdir).is_ok_and(|m| m.is_dir()) {
                warnings.push(format!(
                    "{} is {}, not a folder",
                    sdir.display(),
                    describe(&sdir)
                ));
                continue;
            }
            s.snapshots
                .insert(commit, read_snapshot(dir, &sdir, warnings));
        }
    }
    // our own areas
    for (sub, map) in [
        (".wi-manifests", &mut s.manifests),
        (".wi-trees", &mut s.trees),
    ] {
        if let Some(entries) = real_dir_entries(&dir.join(sub), warnings) {
            for e in entries {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(key) = name.strip_suffix(".json").filter(|k| is_lower_hex(k)) {
                    let len = fs::symlink_metadata(e.path()).map_or(0, |m| m.len());
                    map.insert(key.to_string(), len);
                }
            }
        }
    }
    if let Some(entries) = real_dir_entries(&dir.join(".no_exist"), warnings) {
        for e in entries {
            s.no_exist
                .insert(e.file_name().to_string_lossy().into_owned());
        }
    }
    s
}

/// The refs of the repository folder `dir`: ref name → commit (what is not a regular file
/// holding a commit id is left out, with a warning).
fn read_refs(dir: &Path, warnings: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut refs = BTreeMap::new();
    let refs_dir = dir.join("refs");
    if fs::symlink_metadata(&refs_dir).is_ok_and(|m| !m.is_dir()) {
        warnings.push(format!(
            "{} is {}, not a folder: not read",
            refs_dir.display(),
            describe(&refs_dir)
        ));
    } else if let Ok(list) = safe_fs::walk_relative(&refs_dir) {
        for (rel, full, ft) in list {
            if !ft.is_file() {
                warnings.push(format!("ref {} is not a regular file", full.display()));
                continue;
            }
            match safe_fs::read_bounded(&full, MAX_REF_BYTES) {
                Ok(Some(b)) => {
                    let c = String::from_utf8_lossy(&b).trim().to_string();
                    if is_commit_hash(&c) {
                        refs.insert(rel, c);
                    } else {
                        warnings.push(format!("ref {} does not hold a commit id", full.display()));
                    }
                }
                _ => warnings.push(format!("ref {} is unreadable", full.display())),
            }
        }
    }
    refs
}

/// Our partial download of one ETag: its data file, resume state and log of chunk boundaries.
type Ours = (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>);

/// The partial downloads found in `blobs/`: ours (by ETag), and other tools' (ETag, tool, path,
/// size).
#[derive(Default)]
struct BlobPartials {
    ours: BTreeMap<String, Ours>,
    foreign: Vec<(String, PartialTool, PathBuf, u64)>,
}

/// Reads `blobs/` of the repository folder `dir` into `s` (complete blobs, other files), and
/// returns the partial downloads found there.
fn read_blobs(rc: &RepoCache, s: &mut RepoScan, warnings: &mut Vec<String>) -> BlobPartials {
    let dir = rc.dir();
    let store = rc.shared_store();
    let mut ours: BTreeMap<String, Ours> = BTreeMap::new();
    let mut foreign: Vec<(String, PartialTool, PathBuf, u64)> = Vec::new();
    if let Some(entries) = real_dir_entries(&dir.join("blobs"), warnings) {
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_symlink() {
                // A link into the shared store (marked, its entry a regular file) is the blob.
                let in_store = split_etag(&name)
                    .filter(|(_, rest)| rest.is_empty())
                    .zip(store.target(&p))
                    .and_then(|((etag, _), (hash, entry))| {
                        let len = fs::symlink_metadata(&entry).ok()?.len();
                        store.resolve(&p, len)?;
                        Some((etag, hash, entry, len))
                    });
                if let Some((etag, hash, entry, len)) = in_store {
                    s.blobs.insert(etag.to_string(), len);
                    s.shared.insert(etag.to_string(), (hash, entry));
                    continue;
                }
            }
            if !m.is_file() {
                warnings.push(format!("{} is {}", p.display(), describe(&p)));
                continue;
            }
            match split_etag(&name) {
                Some((etag, "")) => {
                    s.blobs.insert(etag.to_string(), m.len());
                }
                Some((etag, PARTIAL_SUFFIX)) => {
                    ours.entry(etag.to_string()).or_default().0 = Some(p)
                }
                Some((etag, STATE_SUFFIX)) => ours.entry(etag.to_string()).or_default().1 = Some(p),
                Some((etag, FRAMING_SUFFIX)) => {
                    ours.entry(etag.to_string()).or_default().2 = Some(p)
                }
                Some((etag, HF_INCOMPLETE_SUFFIX)) => {
                    foreign.push((etag.to_string(), PartialTool::HuggingfaceHub, p, m.len()))
                }
                Some((etag, LLAMA_IN_PROGRESS_SUFFIX)) => {
                    foreign.push((etag.to_string(), PartialTool::LlamaCpp, p, m.len()))
                }
                _ => s.other_blob_files.push((name, m.len())),
            }
        }
    }
    BlobPartials { ours, foreign }
}

/// The report of each partial download found in `blobs/`, ours first (with what its state
/// records), in use when its lock is held (`locks`).
fn partial_reports(
    rc: &RepoCache,
    found: BlobPartials,
    locks: &BTreeMap<String, bool>,
) -> Vec<PartialReport> {
    let BlobPartials { ours, foreign } = found;
    let mut partials = Vec::new();
    for (etag, (data, state, framing)) in ours {
        let info = rc.partial(&etag).inspect();
        let len = |p: &Option<PathBuf>| {
            p.as_ref()
                .and_then(|p| fs::symlink_metadata(p).ok())
                .map_or(0, |m| m.len())
        };
        partials.push(PartialReport {
            in_use: locks.get(&etag).copied().unwrap_or(false),
            path: info.as_ref().map(|i| i.key.path.clone()),
            commit: info.as_ref().map(|i| i.key.commit.clone()),
            size: info.as_ref().map(|i| i.key.size),
            resumable_bytes: info.as_ref().map_or(0, |i| i.recorded_bytes),
            bytes_on_disk: len(&data) + len(&state) + len(&framing),
            etag,
            tool: PartialTool::WiFetch,
            data_path: data,
            state_path: state,
            framing_path: framing,
            stale: false,
        });
    }
    for (etag, tool, p, len) in foreign {
        partials.push(PartialReport {
            in_use: locks.get(&etag).copied().unwrap_or(false),
            path: None,
            commit: None,
            size: None,
            resumable_bytes: len,
            bytes_on_disk: len,
            etag,
            tool,
            data_path: Some(p),
            state_path: None,
            framing_path: None,
            stale: false,
        });
    }
    partials
}

/// The entries of the snapshot folder `sdir` (of the repository folder `dir`), by path: the
/// blob each link points to, the size of each regular file.
fn read_snapshot(
    dir: &Path,
    sdir: &Path,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, SnapEntry> {
    let mut files = BTreeMap::new();
    match safe_fs::walk_relative(sdir) {
        Ok(list) => {
            for (rel, full, ft) in list {
                let entry = if ft.is_symlink() {
                    SnapEntry {
                        etag: link_etag(dir, &full),
                        regular: None,
                    }
                } else if ft.is_file() {
                    SnapEntry {
                        etag: None,
                        regular: fs::symlink_metadata(&full).ok().map(|m| m.len()),
                    }
                } else {
                    SnapEntry {
                        etag: None,
                        regular: None,
                    }
                };
                files.insert(rel, entry);
            }
        }
        Err(e) => warnings.push(format!("{}: {e}", sdir.display())),
    }
    files
}

/// The size the manifest recorded for `etag` gives `path`, if there is one.
pub(super) fn recorded_size(rc: &RepoCache, etag: &str, path: &str) -> Option<u64> {
    let file = safe_fs::open_read(&rc.manifest_path(etag)).ok()?;
    let bytes = safe_fs::read_limited(file, crate::manifest::MAX_MANIFEST_BYTES).ok()?;
    let m = crate::manifest::Manifest::parse(&bytes).ok()?;
    m.files.iter().find(|f| f.path == path).map(|f| f.size)
}

/// Bytes of the regular files below a repository's folder, links not followed, leaving out
/// wi-fetch's own records (`.wi-manifests/`, `.wi-trees/`, `.wi-xet/`: not the repository's files, and
/// `hf cache ls` does not count them).
pub(super) fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let own = d == dir
                && matches!(
                    e.file_name().to_str(),
                    Some(".wi-manifests" | ".wi-trees" | ".wi-xet")
                );
            if ft.is_dir() && !own {
                stack.push(e.path());
            } else if ft.is_file() {
                total += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

/// The etags a ref'd revision links to, and its complete paths with their etags.
pub(super) fn refd_view(s: &RepoScan) -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let refd: BTreeSet<&String> = s.refs.values().collect();
    let mut etags = BTreeSet::new();
    let mut paths: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (commit, files) in &s.snapshots {
        if !refd.contains(commit) {
            continue;
        }
        for (rel, e) in files {
            if let Some(etag) = &e.etag {
                etags.insert(etag.clone());
                if s.blobs.contains_key(etag) {
                    paths.entry(rel.clone()).or_default().insert(etag.clone());
                }
            } else if e.regular.is_some() {
                paths.entry(rel.clone()).or_default();
            }
        }
    }
    (etags, paths)
}

/// Marks the partials that prune removes: ours, for a path whose newer version is complete in a
/// ref'd revision while no ref'd revision uses the partial's ETag; other tools', when their
/// blob is complete already.
pub(super) fn mark_stale(s: &mut RepoScan) {
    let (refd_etags, refd_paths) = refd_view(s);
    for p in &mut s.partials {
        p.stale = match p.tool {
            PartialTool::WiFetch => match &p.path {
                Some(path) => {
                    !refd_etags.contains(&p.etag)
                        && refd_paths
                            .get(path)
                            .is_some_and(|etags| !etags.contains(&p.etag))
                }
                // A state without its data file.
                None => p.data_path.is_none(),
            },
            _ => s.blobs.contains_key(&p.etag),
        };
    }
}

/// A partial download of `path`, as a file of its revision.
fn partial_file(p: &PartialReport, path: &str) -> FileReport {
    FileReport {
        path: path.to_string(),
        etag: Some(p.etag.clone()),
        size: Some(p.bytes_on_disk),
        state: FileState::Partial,
        resumable_bytes: Some(p.resumable_bytes),
        problem: None,
        shared: None,
    }
}

pub(super) fn scan_repo(
    root: &Path,
    dir: &Path,
    ty: &str,
    id: &str,
    cache_id: String,
    warnings: &mut Vec<String>,
) -> RepoReport {
    let rc = repo_cache(root, ty, id);
    debug_assert_eq!(rc.dir(), dir);
    let mut s = read_repo(&rc, warnings);
    mark_stale(&mut s);
    let mut by_commit: HashMap<String, Vec<String>> = HashMap::new();
    for (r, c) in &s.refs {
        by_commit.entry(c.clone()).or_default().push(r.clone());
    }
    let refs_of = |commit: &str| {
        let mut refs = by_commit.get(commit).cloned().unwrap_or_default();
        refs.sort();
        refs
    };
    let mut seen = RepoSeen::default();
    let mut revisions = Vec::new();
    for (commit, files) in &s.snapshots {
        let sdir = dir.join("snapshots").join(commit);
        let mut rev = RevisionSums::default();
        let mut reports: Vec<FileReport> = files
            .iter()
            .map(|(rel, e)| snapshot_file(&rc, &s, &sdir, rel, e, &mut seen, &mut rev))
            .collect();
        for p in s
            .partials
            .iter()
            .filter(|p| p.commit.as_deref() == Some(commit.as_str()))
        {
            if let Some(path) = &p.path {
                if !files.contains_key(path) {
                    reports.push(partial_file(p, path));
                }
            }
        }
        reports.sort_by(|a, b| a.path.cmp(&b.path));
        revisions.push(RevisionReport {
            commit: commit.clone(),
            refs: refs_of(commit),
            snapshot_path: sdir,
            size_on_disk: rev.size,
            nb_files: files.len(),
            last_modified: rev.modified,
            files: reports,
        });
    }
    // A download interrupted before its snapshot had any file: the revision exists only in its
    // partial downloads' resume states, and is listed with them.
    let mut pending: BTreeMap<&str, Vec<FileReport>> = BTreeMap::new();
    for p in &s.partials {
        if let (Some(commit), Some(path)) = (&p.commit, &p.path) {
            if !s.snapshots.contains_key(commit) {
                pending
                    .entry(commit)
                    .or_default()
                    .push(partial_file(p, path));
            }
        }
    }
    for (commit, mut reports) in pending {
        reports.sort_by(|a, b| a.path.cmp(&b.path));
        revisions.push(RevisionReport {
            commit: commit.to_string(),
            refs: refs_of(commit),
            snapshot_path: dir.join("snapshots").join(commit),
            size_on_disk: 0,
            nb_files: 0,
            last_modified: None,
            files: reports,
        });
    }
    let unreferenced_blobs = s
        .blobs
        .iter()
        .filter(|(e, _)| !seen.referenced.contains(*e))
        .map(|(e, l)| (e.clone(), *l))
        .collect();
    let shared_bytes: u64 = s.shared.keys().filter_map(|e| s.blobs.get(e)).sum();
    RepoReport {
        cache_id,
        repo_id: id.to_string(),
        repo_type: ty.to_string(),
        path: dir.to_path_buf(),
        size_on_disk: tree_size(dir) + shared_bytes,
        shared_bytes,
        nb_files: seen.referenced.len() + seen.regular_files,
        last_accessed: seen.last_accessed,
        last_modified: seen.last_modified,
        refs: s.refs.clone(),
        revisions,
        in_use: s.locks.values().any(|h| *h),
        partials: s.partials,
        unreferenced_blobs,
    }
}

/// What the snapshots of a repository hold, summed over them: the blobs their links point
/// to, their regular files, and the latest access and change of either.
#[derive(Default)]
struct RepoSeen {
    referenced: BTreeSet<String>,
    regular_files: usize,
    last_accessed: Option<u64>,
    last_modified: Option<u64>,
}

/// What one snapshot holds, summed: the blobs counted (each once), its size, its latest change.
#[derive(Default)]
struct RevisionSums {
    blobs: BTreeSet<String>,
    size: u64,
    modified: Option<u64>,
}

/// The report of the entry `rel` of the snapshot folder `sdir` (a link to a blob, or a
/// regular file), counted in `seen` and `rev`. A dangling link, a blob of another size than
/// its recorded manifest says, or anything else in its place is damaged, and says why.
fn snapshot_file(
    rc: &RepoCache,
    s: &RepoScan,
    sdir: &Path,
    rel: &str,
    e: &SnapEntry,
    seen: &mut RepoSeen,
    rev: &mut RevisionSums,
) -> FileReport {
    let full = sdir.join(rel);
    let blob_times = |etag: &str| {
        let m = fs::symlink_metadata(rc.dir().join("blobs").join(etag)).ok()?;
        Some((unix(m.accessed()), unix(m.modified())))
    };
    let (state, etag, fsize, problem) = match (&e.etag, e.regular) {
        (Some(etag), _) => match s.blobs.get(etag) {
            Some(&len) => {
                if rev.blobs.insert(etag.clone()) {
                    rev.size += len;
                }
                seen.referenced.insert(etag.clone());
                if let Some((a, m)) = blob_times(etag) {
                    seen.last_accessed = seen.last_accessed.max(a);
                    seen.last_modified = seen.last_modified.max(m);
                    rev.modified = rev.modified.max(m);
                }
                match recorded_size(rc, etag, rel) {
                    Some(want) if want != len => (
                        FileState::Damaged,
                        Some(etag.clone()),
                        Some(len),
                        Some(format!(
                            "size {len} differs from the recorded manifest's {want}"
                        )),
                    ),
                    _ => (FileState::Complete, Some(etag.clone()), Some(len), None),
                }
            }
            None => (
                FileState::Damaged,
                Some(etag.clone()),
                None,
                Some("the link dangles: its blob is missing".to_string()),
            ),
        },
        (None, Some(len)) => {
            rev.size += len;
            seen.regular_files += 1;
            if let Ok(m) = fs::symlink_metadata(&full) {
                seen.last_accessed = seen.last_accessed.max(unix(m.accessed()));
                seen.last_modified = seen.last_modified.max(unix(m.modified()));
                rev.modified = rev.modified.max(unix(m.modified()));
            }
            (FileState::Complete, None, Some(len), None)
        }
        (None, None) => (
            FileState::Damaged,
            None,
            None,
            Some(
                if fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
                    "the link points outside blobs/".to_string()
                } else {
                    format!("{} where a file or link should be", describe(&full))
                },
            ),
        ),
    };
    FileReport {
        path: rel.to_string(),
        size: fsize,
        state,
        resumable_bytes: None,
        problem,
        shared: etag
            .as_ref()
            .and_then(|e| s.shared.get(e))
            .map(|(h, _)| h.to_string()),
        etag,
    }
}
