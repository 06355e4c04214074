//! Planning removals on a scan: `cache rm` ([`plan_removal`]) and `cache prune`
//! ([`plan_prune`]), nothing touched yet.

use super::*;

/// What a removal removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A whole repository folder (and its lock folder).
    Repo,
    /// A snapshot folder: a revision.
    Revision,
    /// A ref naming a removed revision.
    Ref,
    /// One file of a snapshot (the link, or the regular file).
    SnapshotFile,
    /// A blob.
    Blob,
    /// A partial download's data file.
    Partial,
    /// A resume state.
    ResumeState,
    /// A manifest recorded when a blob was verified.
    Manifest,
    /// A saved file listing of a commit.
    Tree,
    /// The `.no_exist/{commit}` markers of a commit.
    NoExist,
    /// A lock file nobody holds.
    Lock,
    /// An ETag note of llama.cpp, or another file of a tool.
    Note,
    /// A flat download of an older llama.cpp.
    LegacyFile,
    /// An entry of huggingface_hub's shared blob store that no link will refer to: collected
    /// under its lock, and only if no link refers to it then.
    SharedBlob,
}

/// One thing to remove.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// What it is.
    pub kind: ItemKind,
    /// The repository (cache id), if any.
    pub repo: Option<String>,
    /// What it is in words: the commit, the file path, the ETag.
    pub what: String,
    /// The path removed (a folder is removed with everything below it).
    pub path: PathBuf,
    /// Bytes it frees.
    pub bytes: u64,
    /// The ETag whose lock must be free for it to be removed.
    #[serde(skip)]
    pub(super) lock: Option<PathBuf>,
}

/// Something left alone, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// What was left.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// What a removal does (or did, after [`execute`]).
#[derive(Debug, Clone, Serialize)]
pub struct Removal {
    /// The cache root.
    pub root: PathBuf,
    /// True when nothing was (or will be) removed.
    pub dry_run: bool,
    /// What is (or was) removed.
    pub items: Vec<Item>,
    /// Bytes the items free.
    pub freed_bytes: u64,
    /// What is left because a download holds its lock, or its removal failed.
    pub skipped: Vec<Skipped>,
    /// Targets that matched nothing in the cache.
    pub not_found: Vec<String>,
    /// Repositories removed whole, revisions removed (counts, as `hf cache rm` says them).
    pub repos_removed: usize,
    /// Revisions removed (including those of repositories removed whole).
    pub revisions_removed: usize,
    /// Entries of the shared store whose links the removal touches, which keep other links:
    /// their `.refs` is rewritten to name only the links left.
    #[serde(skip)]
    pub(super) shared_touched: BTreeSet<crate::xet::XetHash>,
}

impl Removal {
    /// This removal followed by `other` (the llama.cpp files of the same targets, say): their
    /// items, freed bytes and skipped entries together.
    #[must_use]
    pub fn merge(mut self, other: Removal) -> Removal {
        self.freed_bytes += other.freed_bytes;
        self.items.extend(other.items);
        self.skipped.extend(other.skipped);
        self.shared_touched.extend(other.shared_touched);
        self
    }

    pub(super) fn new(root: &Path) -> Self {
        Removal {
            root: root.to_path_buf(),
            dry_run: true,
            items: Vec::new(),
            freed_bytes: 0,
            skipped: Vec::new(),
            not_found: Vec::new(),
            repos_removed: 0,
            revisions_removed: 0,
            shared_touched: BTreeSet::new(),
        }
    }

    pub(super) fn push(
        &mut self,
        kind: ItemKind,
        repo: &str,
        what: String,
        path: PathBuf,
        bytes: u64,
        lock: Option<PathBuf>,
    ) {
        if self.items.iter().any(|i| i.path == path) {
            return;
        }
        self.items.push(Item {
            kind,
            repo: Some(repo.to_string()),
            what,
            path,
            bytes,
            lock,
        });
    }

    /// Moves items whose lock is held to `skipped` (a dry run says what a real run would do).
    pub(super) fn probe_locks(&mut self) {
        let (keep, held): (Vec<Item>, Vec<Item>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|i| i.lock.as_deref().is_none_or(|l| !lock_held(l)));
        self.items = keep;
        for i in held {
            self.skipped.push(Skipped {
                path: i.path,
                reason: "a running download holds its lock".to_string(),
            });
        }
        self.freed_bytes = self.items.iter().map(|i| i.bytes).sum();
    }
}

/// The repository a target names, in the scan.
pub(super) struct Selected<'a> {
    repo: &'a RepoReport,
    commits: BTreeSet<String>,
    files: BTreeSet<(String, String)>,
    whole: bool,
}

pub(super) fn find_repo<'a>(report: &'a CacheReport, ty: &str, id: &str) -> Option<&'a RepoReport> {
    report
        .repos
        .iter()
        .find(|r| r.repo_type == ty && r.repo_id == id)
        .or_else(|| {
            let mut it = report
                .repos
                .iter()
                .filter(|r| r.repo_type == ty && r.repo_id.eq_ignore_ascii_case(id));
            let first = it.next();
            if it.next().is_some() {
                None
            } else {
                first
            }
        })
}

pub(super) fn resolve_revision(repo: &RepoReport, rev: &str) -> Option<String> {
    if let Some(c) = repo.refs.get(rev) {
        return Some(c.clone());
    }
    let lower = rev.to_ascii_lowercase();
    if lower.len() >= 7 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut it = repo
            .revisions
            .iter()
            .filter(|r| r.commit.starts_with(&lower));
        let first = it.next()?;
        if it.next().is_none() {
            return Some(first.commit.clone());
        }
    }
    None
}

/// Plans `cache rm TARGET…` on a scan of the cache (see [`Target::parse`]): snapshots, the refs
/// naming them and the blobs no remaining snapshot uses; whole repositories with everything in
/// them (partial downloads included) and their lock folder. Removing every revision of a
/// repository removes the repository.
pub fn plan_removal(report: &CacheReport, targets: &[Target], raw: &[String]) -> Removal {
    let mut out = Removal::new(&report.root);
    let mut selected: BTreeMap<String, Selected<'_>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        let name = raw.get(i).cloned().unwrap_or_default();
        let mut found = false;
        match t {
            Target::Commit(c) => {
                for r in &report.repos {
                    if r.revisions.iter().any(|v| &v.commit == c) {
                        found = true;
                        selected
                            .entry(r.cache_id.clone())
                            .or_insert_with(|| Selected::new(r))
                            .commits
                            .insert(c.clone());
                    }
                }
            }
            Target::Repo {
                repo_type,
                id,
                alt,
                revision,
                path,
            } => {
                let repo = find_repo(report, repo_type.as_deref().unwrap_or("model"), id)
                    .or_else(|| alt.as_ref().and_then(|(ty, id)| find_repo(report, ty, id)));
                if let Some(repo) = repo {
                    let sel = selected
                        .entry(repo.cache_id.clone())
                        .or_insert_with(|| Selected::new(repo));
                    let commits: Vec<String> = match revision {
                        Some(rev) => resolve_revision(repo, rev).into_iter().collect(),
                        None => repo.revisions.iter().map(|r| r.commit.clone()).collect(),
                    };
                    match path {
                        Some(p) => {
                            for c in &commits {
                                let has = repo.revisions.iter().any(|r| {
                                    &r.commit == c
                                        && r.files.iter().any(|f| {
                                            (f.path == *p || f.path.starts_with(&format!("{p}/")))
                                                && f.state != FileState::Partial
                                        })
                                });
                                if has {
                                    found = true;
                                    for f in repo
                                        .revisions
                                        .iter()
                                        .filter(|r| &r.commit == c)
                                        .flat_map(|r| &r.files)
                                        .filter(|f| f.state != FileState::Partial)
                                        .filter(|f| {
                                            f.path == *p || f.path.starts_with(&format!("{p}/"))
                                        })
                                    {
                                        sel.files.insert((c.clone(), f.path.clone()));
                                    }
                                }
                            }
                        }
                        None if revision.is_none() => {
                            found = true;
                            sel.whole = true;
                        }
                        None => {
                            found = !commits.is_empty();
                            sel.commits.extend(commits);
                        }
                    }
                }
            }
        }
        if !found {
            out.not_found.push(name);
        }
    }
    for sel in selected.values() {
        let all = sel
            .repo
            .revisions
            .iter()
            .all(|r| sel.commits.contains(&r.commit));
        if sel.whole || (all && !sel.commits.is_empty()) {
            plan_whole_repo(&mut out, sel.repo);
        } else {
            plan_revisions(&mut out, sel.repo, &sel.commits, &sel.files, false);
        }
    }
    plan_shared(&mut out, false);
    out.probe_locks();
    out
}

/// Plans the shared store's entries that no link will refer to once the removal is done: those
/// whose links it removes (`shared_touched`) and, for `prune`, every entry no link refers to.
/// Each is an item of its size (counted once, whatever number of links it had); the others
/// touched stay in `shared_touched`, their `.refs` to be rewritten.
fn plan_shared(out: &mut Removal, prune: bool) {
    let store = crate::cache::shared::SharedStore::new(&out.root);
    if !store.is_marked() {
        out.shared_touched.clear();
        return;
    }
    let links = store.links();
    let removed: Vec<PathBuf> = out.items.iter().map(|i| i.path.clone()).collect();
    let gone = |p: &PathBuf| removed.iter().any(|r| p.starts_with(r));
    let mut candidates = std::mem::take(&mut out.shared_touched);
    if prune {
        candidates.extend(store.entries().into_iter().map(|(h, _, _)| h));
    }
    for hash in candidates {
        let left = links.get(&hash).is_some_and(|l| l.iter().any(|p| !gone(p)));
        let entry = store.entry_path(&hash);
        match fs::symlink_metadata(&entry) {
            Ok(m) if m.is_file() && !left => out.items.push(Item {
                kind: ItemKind::SharedBlob,
                repo: None,
                what: hash.to_string(),
                path: entry,
                bytes: m.len(),
                lock: None,
            }),
            _ => {
                out.shared_touched.insert(hash);
            }
        }
    }
}

impl<'a> Selected<'a> {
    fn new(repo: &'a RepoReport) -> Self {
        Selected {
            repo,
            commits: BTreeSet::new(),
            files: BTreeSet::new(),
            whole: false,
        }
    }
}

pub(super) fn repo_cache_of(root: &Path, repo: &RepoReport) -> RepoCache {
    repo_cache(root, &repo.repo_type, &repo.repo_id)
}

pub(super) fn plan_whole_repo(out: &mut Removal, repo: &RepoReport) {
    out.repos_removed += 1;
    out.revisions_removed += repo.revisions.len();
    let lock = repo_cache_of(&out.root, repo).locks_dir().to_path_buf();
    // Its links into the shared store go with it; their entries are planned apart.
    out.push(
        ItemKind::Repo,
        &repo.cache_id,
        repo.cache_id.clone(),
        repo.path.clone(),
        repo.size_on_disk - repo.shared_bytes,
        None,
    );
    for f in repo.revisions.iter().flat_map(|r| &r.files) {
        if let Some(h) = f
            .shared
            .as_deref()
            .and_then(crate::cache::shared::parse_name)
        {
            out.shared_touched.insert(h);
        }
    }
    if fs::symlink_metadata(&lock).is_ok() {
        out.push(
            ItemKind::Lock,
            &repo.cache_id,
            "lock folder".into(),
            lock,
            0,
            None,
        );
    }
}

/// Plans the removal of `commits` (whole snapshots) and `files` (commit, path) of `repo`, then of
/// the blobs (and their recorded manifests) that no remaining snapshot links to — only those the
/// removed entries used, unless `all_orphans` (prune).
pub(super) fn plan_revisions(
    out: &mut Removal,
    repo: &RepoReport,
    commits: &BTreeSet<String>,
    files: &BTreeSet<(String, String)>,
    all_orphans: bool,
) {
    let id = &repo.cache_id;
    let rc = repo_cache_of(&out.root, repo);
    let lock_of = |etag: &str| Some(rc.lock_path(etag));
    let mut freed_candidates: BTreeSet<String> = BTreeSet::new();
    let mut remaining: BTreeSet<String> = BTreeSet::new();
    for r in &repo.revisions {
        let gone = commits.contains(&r.commit);
        if gone {
            out.revisions_removed += 1;
            let regular: u64 = r
                .files
                .iter()
                .filter(|f| f.etag.is_none() && f.state == FileState::Complete)
                .filter_map(|f| f.size)
                .sum();
            out.push(
                ItemKind::Revision,
                id,
                r.commit.clone(),
                r.snapshot_path.clone(),
                regular,
                None,
            );
            for name in &r.refs {
                out.push(
                    ItemKind::Ref,
                    id,
                    format!("{name} → {}", r.commit),
                    repo.path.join("refs").join(name),
                    0,
                    None,
                );
            }
            let ne = repo.path.join(".no_exist").join(&r.commit);
            if fs::symlink_metadata(&ne).is_ok() {
                out.push(ItemKind::NoExist, id, r.commit.clone(), ne, 0, None);
            }
            // Our listing of the commit and huggingface_hub's (`trees/`, written beside it).
            for area in [".wi-trees", "trees"] {
                let tree = repo.path.join(area).join(format!("{}.json", r.commit));
                if let Ok(m) = fs::symlink_metadata(&tree) {
                    out.push(ItemKind::Tree, id, r.commit.clone(), tree, m.len(), None);
                }
            }
        }
        for f in &r.files {
            if f.state == FileState::Partial {
                continue;
            }
            let file_gone = gone || files.contains(&(r.commit.clone(), f.path.clone()));
            if file_gone && !gone {
                let bytes = if f.etag.is_none() {
                    f.size.unwrap_or(0)
                } else {
                    0
                };
                out.push(
                    ItemKind::SnapshotFile,
                    id,
                    format!("{}:{}", r.commit, f.path),
                    r.snapshot_path.join(&f.path),
                    bytes,
                    None,
                );
            }
            if let Some(e) = &f.etag {
                if file_gone {
                    freed_candidates.insert(e.clone());
                } else {
                    remaining.insert(e.clone());
                }
            }
        }
    }
    if all_orphans {
        freed_candidates.extend(repo.unreferenced_blobs.keys().cloned());
    }
    for etag in freed_candidates.difference(&remaining) {
        let blob = repo.path.join("blobs").join(etag);
        if let Ok(m) = fs::symlink_metadata(&blob) {
            // A link into the shared store: the link goes (its entry is planned apart).
            let store = rc.shared_store();
            if let Some((hash, _)) = m.is_symlink().then(|| store.target(&blob)).flatten() {
                out.shared_touched.insert(hash);
                out.push(
                    ItemKind::Blob,
                    id,
                    etag.clone(),
                    blob.clone(),
                    0,
                    lock_of(etag),
                );
            } else if m.is_file() {
                out.push(
                    ItemKind::Blob,
                    id,
                    etag.clone(),
                    blob,
                    m.len(),
                    lock_of(etag),
                );
            }
        }
        // Its recorded manifest and, for a file fetched through the Hub's CAS, its record: they
        // describe that blob only.
        for man in [rc.manifest_path(etag), rc.xet_record_path(etag)] {
            if let Ok(m) = fs::symlink_metadata(&man) {
                out.push(
                    ItemKind::Manifest,
                    id,
                    etag.clone(),
                    man,
                    m.len(),
                    lock_of(etag),
                );
            }
        }
    }
}

/// Plans `cache prune` on a scan (every repository in it; scan only those to prune): detached
/// revisions (no ref names them, as `hf cache prune` defines them) and the blobs only they
/// used; blobs no snapshot links to; stale partial downloads and their resume states (see
/// [`PartialReport::stale`]) and resume states without data; recorded manifests and llama.cpp
/// ETag notes of blobs that are gone; saved listings and `.no_exist` markers of commits with
/// neither snapshot nor ref; lock files nobody holds whose blob has no partial download; lock
/// folders of repositories that are gone.
pub fn plan_prune(report: &CacheReport, only_listed: bool) -> Removal {
    let mut out = Removal::new(&report.root);
    for repo in &report.repos {
        let detached: BTreeSet<String> = repo
            .revisions
            .iter()
            .filter(|r| r.refs.is_empty())
            .map(|r| r.commit.clone())
            .collect();
        plan_revisions(&mut out, repo, &detached, &BTreeSet::new(), true);
        let rc = repo_cache_of(&out.root, repo);
        // What is left after the revisions and blobs above go.
        let removed: BTreeSet<PathBuf> = out.items.iter().map(|i| i.path.clone()).collect();
        let partial_left = plan_stale_partials(&mut out, repo, &rc);
        let left = Left {
            removed: &removed,
            detached: &detached,
            partials: &partial_left,
        };
        plan_records_left_over(&mut out, repo, &rc, &left);
        plan_free_locks(&mut out, repo, &rc, &partial_left);
    }
    if !only_listed {
        plan_lock_folders(&mut out, report);
    }
    plan_shared(&mut out, !only_listed);
    out.probe_locks();
    out
}

/// Plans the stale partial downloads of `repo` (their data files and resume states). The
/// ETags of the partial downloads left.
fn plan_stale_partials(out: &mut Removal, repo: &RepoReport, rc: &RepoCache) -> BTreeSet<String> {
    let mut partial_left: BTreeSet<String> = BTreeSet::new();
    for p in &repo.partials {
        if !p.stale {
            partial_left.insert(p.etag.clone());
            continue;
        }
        let what = match &p.path {
            Some(path) => format!("{path} ({})", p.etag),
            None => p.etag.clone(),
        };
        for (path, kind) in [
            (&p.data_path, ItemKind::Partial),
            (&p.state_path, ItemKind::ResumeState),
            (&p.framing_path, ItemKind::ResumeState),
        ] {
            if let Some(path) = path {
                let len = fs::symlink_metadata(path).map_or(0, |m| m.len());
                out.push(
                    kind,
                    &repo.cache_id,
                    what.clone(),
                    path.clone(),
                    len,
                    Some(rc.lock_path(&p.etag)),
                );
            }
        }
    }
    partial_left
}

/// The entries of the folder `sub` of `repo`: name, path and size of each (none when it is
/// not a folder).
fn read_dir_names(repo: &RepoReport, sub: &str) -> Vec<(String, PathBuf, u64)> {
    let d = repo.path.join(sub);
    if !fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
        return Vec::new();
    }
    fs::read_dir(&d)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let len = fs::symlink_metadata(e.path()).map_or(0, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), e.path(), len)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a repository keeps once its detached revisions go: the paths planned for removal
/// (those revisions and the blobs only they used), the `detached` commits, and the ETags of
/// the `partials` (downloads) left.
struct Left<'a> {
    removed: &'a BTreeSet<PathBuf>,
    detached: &'a BTreeSet<String>,
    partials: &'a BTreeSet<String>,
}

/// Plans what `repo` records of things that are gone once what is planned goes (see
/// [`Left`]): manifests and llama.cpp ETag notes of blobs neither left nor partially
/// downloaded; saved listings and `.no_exist` markers of commits with neither snapshot nor
/// ref.
fn plan_records_left_over(out: &mut Removal, repo: &RepoReport, rc: &RepoCache, left: &Left<'_>) {
    let Left {
        removed,
        detached,
        partials: partial_left,
    } = *left;
    let id = &repo.cache_id;
    let lock_of = |etag: &str| rc.lock_path(etag);
    let blob_left = |etag: &str| {
        let p = repo.path.join("blobs").join(etag);
        !removed.contains(&p) && fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
    };
    let commits_left: BTreeSet<&String> = repo
        .revisions
        .iter()
        .map(|r| &r.commit)
        .filter(|c| !detached.contains(*c))
        .chain(repo.refs.values())
        .collect();
    for (name, path, len) in read_dir_names(repo, ".wi-manifests")
        .into_iter()
        .chain(read_dir_names(repo, ".wi-xet"))
    {
        if let Some(etag) = name
            .strip_suffix(".json")
            .filter(|e| etag_kind(e).is_some())
        {
            if !blob_left(etag) && !partial_left.contains(etag) {
                out.push(
                    ItemKind::Manifest,
                    id,
                    etag.to_string(),
                    path,
                    len,
                    Some(lock_of(etag)),
                );
            }
        }
    }
    for (name, path, len) in read_dir_names(repo, ".wi-trees")
        .into_iter()
        .chain(read_dir_names(repo, "trees"))
    {
        if let Some(c) = name.strip_suffix(".json").filter(|c| is_commit_hash(c)) {
            if !commits_left.contains(&c.to_string()) {
                out.push(ItemKind::Tree, id, c.to_string(), path, len, None);
            }
        }
    }
    for (name, path, _) in read_dir_names(repo, ".no_exist") {
        if !commits_left.contains(&name) {
            out.push(ItemKind::NoExist, id, name, path, 0, None);
        }
    }
    for (name, path, len) in read_dir_names(repo, "blobs") {
        if let Some((etag, LLAMA_ETAG_SUFFIX)) = split_etag(&name) {
            if !blob_left(etag) && !partial_left.contains(etag) {
                out.push(
                    ItemKind::Note,
                    id,
                    name.clone(),
                    path,
                    len,
                    Some(lock_of(etag)),
                );
            }
        }
    }
}

/// Plans the lock files of `repo` whose blob has no partial download left (`partial_left`);
/// whether one is held is probed once the plan is made.
fn plan_free_locks(
    out: &mut Removal,
    repo: &RepoReport,
    rc: &RepoCache,
    partial_left: &BTreeSet<String>,
) {
    if !fs::symlink_metadata(rc.locks_dir()).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let Ok(rd) = fs::read_dir(rc.locks_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((etag, ".lock")) = split_etag(&name) {
            if !partial_left.contains(etag) {
                out.push(
                    ItemKind::Lock,
                    &repo.cache_id,
                    etag.to_string(),
                    e.path(),
                    0,
                    Some(e.path()),
                );
            }
        }
    }
}

/// Plans the lock folders of repositories no longer in the cache; one a running download
/// holds a lock in is skipped, and said.
fn plan_lock_folders(out: &mut Removal, report: &CacheReport) {
    let locks = report.root.join(".locks");
    if !fs::symlink_metadata(&locks).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let Ok(rd) = fs::read_dir(&locks) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if parse_folder_name(&name).is_none()
            || fs::symlink_metadata(report.root.join(&name)).is_ok()
        {
            continue;
        }
        let held = fs::read_dir(e.path())
            .map(|rd| rd.flatten().any(|l| lock_held(&l.path())))
            .unwrap_or(false);
        if held {
            out.skipped.push(Skipped {
                path: e.path(),
                reason: "a running download holds a lock in it".into(),
            });
        } else {
            out.items.push(Item {
                kind: ItemKind::Lock,
                repo: None,
                what: format!("lock folder of {name}"),
                path: e.path(),
                bytes: 0,
                lock: None,
            });
        }
    }
}
