//! Partial downloads of older versions of a file (another ETag), found once per run and
//! discarded when that file is downloaded again.

use std::collections::HashMap;

use super::gate::{notice, Gate};
use super::Plan;
use crate::cache::Store;
use crate::key::FileKey;
use crate::transfer::LockedPartial;

/// Partial downloads of older versions that a run's files may leave behind, found once per
/// run: in the cache, every resume state in `blobs/` read once (by the file it is for), rather
/// than `blobs/` read and every state in it inspected again for each file (quadratic in a
/// repository of many files). The partials a run creates are its own files' current versions,
/// never stale, so the snapshot taken before it starts is enough. A local folder keeps partials
/// named after their file: it is asked per file.
pub(super) struct StalePartials {
    by_path: Option<HashMap<String, Vec<(String, crate::key::PartialPaths)>>>,
}

impl StalePartials {
    pub(super) fn of(store: &Store, plan: &Plan) -> StalePartials {
        let by_path = match store {
            Store::Cache(r) if plan.files.iter().any(|f| !f.cached) => {
                r.other_partials("").ok().map(|all| {
                    let mut map: HashMap<String, Vec<_>> = HashMap::new();
                    for (etag, paths) in all {
                        if let Some(info) = paths.inspect() {
                            map.entry(info.key.path.clone())
                                .or_default()
                                .push((etag, paths));
                        }
                    }
                    map
                })
            }
            _ => None,
        };
        StalePartials { by_path }
    }

    /// The partial downloads of other versions of `key`'s file.
    fn candidates(
        &self,
        store: &Store,
        key: &FileKey,
    ) -> std::io::Result<Vec<(String, crate::key::PartialPaths)>> {
        match &self.by_path {
            Some(map) => Ok(map
                .get(&key.path)
                .map(|v| {
                    v.iter()
                        .filter(|(etag, _)| !etag.eq_ignore_ascii_case(&key.etag))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()),
            None => store.other_partials(key),
        }
    }

    /// Deletes the partial downloads of `key.path` for an older version of it (another ETag),
    /// saying so with a notice: partial files are named by ETag, so the engine never meets them
    /// once the file changed on the Hub. `locked` is `f`'s own partial download. In the cache, a
    /// partial whose own lock is held (another process is downloading that version right now,
    /// e.g. at another revision) is left alone, and so is one whose state cannot be read (which
    /// file it was for is unknown). Failures only cost disk space: they are notices, not errors.
    pub(super) fn discard(
        &self,
        store: &Store,
        key: &FileKey,
        locked: &LockedPartial,
        rep: &Gate<'_>,
    ) {
        let say = |message: &str| notice(rep, Some(&key.path), message);
        let others = match self.candidates(store, key) {
            Ok(o) => o,
            Err(e) => {
                say(&format!(
                    "cannot look for partial downloads of older versions: {e}"
                ));
                return;
            }
        };
        for (_, paths) in others {
            let Some(info) = paths.inspect() else {
                continue;
            };
            if info.key.path != key.path {
                continue;
            }
            let discarded = match store {
                Store::Cache(_) => match paths.try_lock() {
                    Ok(Some(other)) => other.discard(),
                    // Being downloaded right now, or the lock is unusable: leave it.
                    Ok(None) | Err(_) => continue,
                },
                Store::Local(_) => locked.discard_other(&paths),
            };
            say(&format!(
                "remote file changed since the interrupted download; discarding {} of the old \
                 partial ({})",
                super::human_bytes(info.recorded_bytes),
                paths.data.display()
            ));
            if let Err(e) = discarded {
                say(&format!("cannot remove {}: {e}", paths.data.display()));
            }
        }
    }
}
