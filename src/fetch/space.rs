//! The free-space check made before anything is downloaded.

use std::fs;
use std::path::Path;

use super::{FetchError, Plan};
use crate::cache::Store;

/// Bytes the file system has allocated to `path` (a preallocated partial file holds its full
/// size, a sparse one only what was written); 0 when it does not exist or is not a file.
pub(crate) fn allocated_bytes(path: &Path) -> u64 {
    let Ok(m) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_file() {
        return 0;
    }
    use std::os::unix::fs::MetadataExt as _;
    m.blocks().saturating_mul(512).min(m.len())
}

/// Bytes the files still to fetch will take on disk beyond what they already hold, and those
/// files (largest first). In the cache, paths that share an ETag share one blob and count once;
/// a partial file from an earlier run already holds the blocks it has (partial files are
/// preallocated), so only the rest counts.
pub(crate) fn space_needed(store: &Store, plan: &Plan) -> (u64, Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut files: Vec<(u64, &str)> = Vec::new();
    let mut needed: u64 = 0;
    for f in plan.files.iter().filter(|f| !f.cached) {
        if matches!(store, Store::Cache(_)) && !seen.insert(f.etag.as_str()) {
            continue;
        }
        let held = allocated_bytes(&store.partial(&plan.key(f)).data);
        let n = f.size.saturating_sub(held);
        if n > 0 {
            needed = needed.saturating_add(n);
            files.push((n, &f.path));
        }
    }
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    (
        needed,
        files.into_iter().map(|(_, p)| p.to_string()).collect(),
    )
}

/// Fails early when the selected files cannot fit.
pub(crate) fn check_space(store: &Store, plan: &Plan) -> Result<(), FetchError> {
    let (needed, files) = space_needed(store, plan);
    if needed == 0 {
        return Ok(());
    }
    let dir = store.data_dir();
    let available =
        fs4::available_space(&dir).map_err(|e| FetchError::io("check free space in", &dir, e))?;
    if needed > available {
        return Err(FetchError::DiskSpace {
            dir: dir.parent().map(Path::to_path_buf).unwrap_or(dir),
            needed,
            available,
            files,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{HfCache, LocalDir};
    use crate::fetch::PlannedFile;
    use crate::names::RepoType;
    use std::path::PathBuf;

    fn plan(files: &[(&str, u64, &str)]) -> Plan {
        Plan {
            repo: "org/name".into(),
            revision: "main".into(),
            commit: "c".repeat(40),
            folder: PathBuf::from("snapshots").join("c".repeat(40)),
            files: files
                .iter()
                .map(|&(path, size, etag)| PlannedFile {
                    path: path.into(),
                    size,
                    etag: etag.into(),
                    local_path: PathBuf::from(path),
                    cached: false,
                    partial_bytes: 0,
                    sidecar: None,
                    xet_hash: None,
                })
                .collect(),
            notice: None,
            refused: Vec::new(),
            offline: false,
            missing: Vec::new(),
            unreachable: None,
            witness: None,
            unlisted: Vec::new(),
            signature_listed: None,
        }
    }

    /// In the cache, paths sharing an ETag share one blob and count once; in a local folder
    /// each path is a file of its own. A preallocated partial already holds its blocks.
    #[test]
    fn space_needed_dedupes_blobs_and_counts_preallocated_partials() {
        let t = tempfile::tempdir().unwrap();
        let (e1, e2) = ("a".repeat(64), "b".repeat(64));
        let p = plan(&[
            ("x.bin", 1000, &e1),
            ("copy/x.bin", 1000, &e1),
            ("y.bin", 5000, &e2),
        ]);
        let cache = Store::Cache(HfCache::new(t.path().join("c")).repo(RepoType::Model, "o/n"));
        assert_eq!(
            space_needed(&cache, &p),
            (6000, vec!["y.bin".to_string(), "x.bin".to_string()])
        );
        let local = Store::Local(LocalDir::new(t.path().join("l")));
        assert_eq!(space_needed(&local, &p).0, 7000);
        // A partial file with all its blocks (as the engine preallocates them).
        cache.prepare().unwrap();
        let y = p.files.iter().find(|f| f.etag == e2).unwrap();
        fs::write(&cache.partial(&p.key(y)).data, vec![1u8; 5000]).unwrap();
        assert_eq!(space_needed(&cache, &p), (1000, vec!["x.bin".to_string()]));
    }
}
