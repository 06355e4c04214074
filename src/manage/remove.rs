//! Carrying out a planned removal below the root only ([`execute`]).

use super::*;

/// Checks that `path` is strictly below `root`, made only of plain names, and that every folder
/// between them is a real folder (not a link), so that removing `path` (never following it)
/// touches nothing outside the cache.
pub(crate) fn check_inside(root: &Path, path: &Path) -> Result<(), ManageError> {
    let refuse = |reason: &str| ManageError::Outside {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let rel = path
        .strip_prefix(root)
        .map_err(|_| refuse("not inside the cache"))?;
    let comps: Vec<Component<'_>> = rel.components().collect();
    if comps.is_empty() {
        return Err(refuse("it is the cache root"));
    }
    let mut cur = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        let Component::Normal(name) = c else {
            return Err(refuse("'..', '.' or an absolute part in its name"));
        };
        cur.push(name);
        if i + 1 < comps.len() {
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(refuse(&format!("{} is not a real folder", cur.display()))),
                Err(e) => {
                    return Err(ManageError::Io {
                        path: cur,
                        source: e,
                    })
                }
            }
        }
    }
    Ok(())
}

/// Removes `path` below `root`: a file or link itself (a link is never followed), or a folder
/// with everything in it (links inside removed as links). Returns the bytes of regular files
/// removed. A missing path is fine.
pub(crate) fn remove_below(root: &Path, path: &Path) -> Result<u64, ManageError> {
    check_inside(root, path)?;
    remove_tree(path)
}

pub(super) fn remove_tree(path: &Path) -> Result<u64, ManageError> {
    let m = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(path)(e)),
    };
    if !m.is_dir() {
        let len = if m.is_file() { m.len() } else { 0 };
        return match fs::remove_file(path) {
            Ok(()) => Ok(len),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io_err(path)(e)),
        };
    }
    let mut total = 0;
    for e in fs::read_dir(path).map_err(io_err(path))? {
        let e = e.map_err(io_err(path))?;
        total += remove_tree(&e.path())?;
    }
    match fs::remove_dir(path) {
        Ok(()) => Ok(total),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(total),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Removes the empty folders from `dir` up to (not including) `stop`.
pub(super) fn remove_empty_parents(dir: &Path, stop: &Path) {
    let mut cur = dir.to_path_buf();
    while cur.starts_with(stop) && cur != stop {
        if fs::remove_dir(&cur).is_err() {
            break;
        }
        if !cur.pop() {
            break;
        }
    }
}

/// Carries out a planned removal: each item is removed (its lock taken first, without waiting:
/// one a download holds now is skipped), whole repositories only when none of their locks is
/// held. Returns the removal as done: `freed_bytes` counts what was removed.
pub fn execute(mut plan: Removal) -> Removal {
    plan.dry_run = false;
    let root = plan.root.clone();
    let mut done = Vec::new();
    let mut links_now = None;
    for item in std::mem::take(&mut plan.items) {
        // Hold the item's lock (or every lock of a repository) while removing it.
        let mut guards = Vec::new();
        let mut busy = false;
        let lock_files: Vec<PathBuf> = match (item.kind, &item.lock) {
            (ItemKind::Repo, _) => item
                .repo
                .as_deref()
                .and_then(|id| id.split_once('/'))
                .map(|(ty, rid)| repo_cache(&root, ty, rid).locks_dir().to_path_buf())
                .and_then(|d| fs::read_dir(d).ok())
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
            (_, Some(l)) => vec![l.clone()],
            // A lock folder: every lock in it.
            (ItemKind::Lock, None) => fs::read_dir(&item.path)
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for l in &lock_files {
            match FileLock::probe(l) {
                Ok(LockProbe::Free(lock)) => guards.push(lock),
                Ok(LockProbe::Absent) => {}
                Ok(LockProbe::Held) => busy = true,
                Err(_) => {}
            }
        }
        if busy {
            plan.skipped.push(Skipped {
                path: item.path,
                reason: "a running download holds its lock".into(),
            });
            continue;
        }
        if item.kind == ItemKind::SharedBlob {
            // The links left once every other item is gone (they come first): scanned once.
            let links = links_now
                .get_or_insert_with(|| crate::cache::shared::SharedStore::new(&root).links());
            match sweep_shared(&root, &item.what, links) {
                Ok(crate::cache::shared::Swept::Freed(_)) => done.push(item),
                Ok(crate::cache::shared::Swept::Linked(n)) => plan.skipped.push(Skipped {
                    path: item.path,
                    reason: format!("{n} link(s) in the cache refer to it now"),
                }),
                Ok(crate::cache::shared::Swept::Unknown) => plan.skipped.push(Skipped {
                    path: item.path,
                    reason: "its .refs file cannot be read: it may be in use".into(),
                }),
                Ok(crate::cache::shared::Swept::Absent) => {}
                Err(e) => plan.skipped.push(Skipped {
                    path: item.path,
                    reason: e.to_string(),
                }),
            }
            continue;
        }
        match remove_below(&root, &item.path) {
            Ok(_) => {
                if item.kind == ItemKind::SnapshotFile {
                    if let Some(parent) = item.path.parent() {
                        // Up to the snapshot folder, which stays (refs may name it).
                        let snap = item
                            .path
                            .ancestors()
                            .find(|a| {
                                a.parent().and_then(Path::file_name) == Some("snapshots".as_ref())
                            })
                            .map(Path::to_path_buf);
                        if let Some(snap) = snap {
                            remove_empty_parents(parent, &snap);
                        }
                    }
                }
                done.push(item);
            }
            Err(e) => plan.skipped.push(Skipped {
                path: item.path,
                reason: e.to_string(),
            }),
        }
        drop(guards);
    }
    // The entries that keep links: their `.refs` named the links removed.
    let touched = std::mem::take(&mut plan.shared_touched);
    if !touched.is_empty() {
        let links =
            links_now.get_or_insert_with(|| crate::cache::shared::SharedStore::new(&root).links());
        for hash in touched {
            if let Err(e) = sweep_shared(&root, &hash.to_string(), links) {
                tracing::debug!("shared store entry {hash}: .refs not rewritten: {e}");
            }
        }
    }
    plan.freed_bytes = done.iter().map(|i| i.bytes).sum();
    plan.items = done;
    plan
}

/// Sweeps the shared store's entry `hash` of the cache at `root` (see
/// [`crate::cache::shared::SharedStore::sweep`]), with `links`, the links the cache holds now
/// (the sweep checks each again under the entry's lock).
fn sweep_shared(
    root: &Path,
    hash: &str,
    links: &HashMap<crate::xet::XetHash, Vec<PathBuf>>,
) -> io::Result<crate::cache::shared::Swept> {
    let store = crate::cache::shared::SharedStore::new(root);
    let Some(h) = crate::cache::shared::parse_name(hash) else {
        return Ok(crate::cache::shared::Swept::Absent);
    };
    store.sweep(&h, links.get(&h).map_or(&[][..], Vec::as_slice))
}
