//! `--local-dir` mode: files at `{dir}/{path}`, download metadata under
//! `{dir}/.cache/huggingface/download/`, as huggingface_hub's `_local_folder.py` lays them out.
//!
//! ```text
//! {dir}/{path}                                               the file
//! {dir}/.cache/huggingface/.gitignore                        "*"
//! {dir}/.cache/huggingface/download/{path}.metadata          commit \n etag \n unix-time \n
//! {dir}/.cache/huggingface/download/{path}.lock              lock while it is written
//! {dir}/.cache/huggingface/download/{path}.{etag}.wi-partial        our partial download
//! {dir}/.cache/huggingface/download/{path}.{etag}.wi-partial.state  our resume state
//! ```
//!
//! huggingface_hub's own partial file is `{path}.{etag}.incomplete`; ours must not be (see the
//! [cache docs](super)).
//!
//! A file counts as complete when its metadata names the same ETag, its size is right and it
//! was not modified after the metadata was written (one second of slack, as huggingface_hub
//! allows).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{CachedFile, FRAMING_SUFFIX, PARTIAL_SUFFIX, STATE_SUFFIX};
use crate::key::{FileKey, PartialPaths};
use crate::names::{check_repo_path, etag_kind, is_commit_hash};
use crate::safe_fs::{self, create_dirs_below, write_atomic};

/// A local folder that receives files directly (no blobs, no symlinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDir {
    root: PathBuf,
}

/// The content of a `.metadata` file.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalMetadata {
    /// Commit the file was downloaded at.
    pub commit: String,
    /// ETag of the file.
    pub etag: String,
    /// Unix time (seconds) the metadata was written.
    pub timestamp: f64,
}

impl LocalDir {
    /// A local folder (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalDir { root: root.into() }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{dir}/.cache/huggingface`.
    pub fn huggingface_dir(&self) -> PathBuf {
        self.root.join(".cache").join("huggingface")
    }

    /// `{dir}/.cache/huggingface/download`.
    pub fn download_dir(&self) -> PathBuf {
        self.huggingface_dir().join("download")
    }

    /// Where the file `path` goes: `{dir}/{path}`.
    pub fn file_path(&self, path: &str) -> PathBuf {
        join_repo_path(&self.root, path)
    }

    /// `{download}/{path}.metadata`.
    pub fn metadata_path(&self, path: &str) -> PathBuf {
        join_repo_path(&self.download_dir(), &format!("{path}.metadata"))
    }

    /// `{download}/{path}.lock`.
    pub fn lock_path(&self, path: &str) -> PathBuf {
        join_repo_path(&self.download_dir(), &format!("{path}.lock"))
    }

    /// `{download}/{path}.{etag}.wi-partial`: our partial download.
    pub fn partial_path(&self, path: &str, etag: &str) -> PathBuf {
        join_repo_path(
            &self.download_dir(),
            &format!("{path}.{etag}{PARTIAL_SUFFIX}"),
        )
    }

    /// `{download}/{path}.{etag}.wi-manifest.json`: the manifest recorded when the file was
    /// verified.
    pub fn manifest_path(&self, path: &str, etag: &str) -> PathBuf {
        join_repo_path(
            &self.download_dir(),
            &format!("{path}.{etag}.wi-manifest.json"),
        )
    }

    /// Copies `{dir}/{path}` (a regular file, no link followed) to its partial download's name
    /// for `etag`, to be repaired there and renamed over it when verified; false when there is
    /// no such file. The file itself is never written (a reader that has it mapped keeps its
    /// bytes). The caller holds the path's lock.
    pub fn reopen_file(&self, path: &str, etag: &str) -> io::Result<bool> {
        safe_fs::copy_replace(&self.file_path(path), &self.partial_path(path, etag))
    }

    /// `{download}/{path}.{etag}.wi-partial.state`: our resume state, beside the partial file.
    pub fn state_path(&self, path: &str, etag: &str) -> PathBuf {
        join_repo_path(
            &self.download_dir(),
            &format!("{path}.{etag}{STATE_SUFFIX}"),
        )
    }

    /// Where `path` at `etag` is downloaded and locked (the lock is per path: it covers every
    /// version of the file).
    pub fn partial(&self, path: &str, etag: &str) -> PartialPaths {
        PartialPaths {
            data: self.partial_path(path, etag),
            state: self.state_path(path, etag),
            lock: self.lock_path(path),
            framing: join_repo_path(
                &self.download_dir(),
                &format!("{path}.{etag}{FRAMING_SUFFIX}"),
            ),
            watch: vec![join_repo_path(
                &self.download_dir(),
                &format!("{path}.{etag}.incomplete"),
            )],
        }
    }

    /// Partial downloads of `path` with another ETag than `current_etag` (every
    /// `{download}/{path}.*.wi-partial.state` whose middle is a hash): the ETags with their
    /// placements. They share `path`'s lock, which covers every version of the file.
    pub fn other_partials(
        &self,
        path: &str,
        current_etag: &str,
    ) -> io::Result<Vec<(String, PartialPaths)>> {
        check_repo_path(path).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unsafe path '{}': {e}", crate::names::escape(path)),
            )
        })?;
        let file = join_repo_path(&self.download_dir(), path);
        let (Some(dir), Some(base)) = (file.parent(), path.rsplit('/').next()) else {
            return Ok(Vec::new());
        };
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let prefix = format!("{base}.");
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(etag) = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|n| n.strip_suffix(STATE_SUFFIX))
            else {
                continue;
            };
            if etag_kind(etag).is_none() || etag.eq_ignore_ascii_case(current_etag) {
                continue;
            }
            out.push((etag.to_string(), self.partial(path, etag)));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Creates `.cache/huggingface/download` and the `.gitignore` huggingface_hub puts there.
    pub fn prepare(&self) -> io::Result<()> {
        create_dirs_below(&self.root, &self.download_dir())?;
        let gi = self.huggingface_dir().join(".gitignore");
        if fs::symlink_metadata(&gi).is_err() {
            write_atomic(&gi, b"*")?;
        }
        Ok(())
    }

    /// [`prepare`](Self::prepare), and the folders of `path` under the download folder (its
    /// partial download, state and lock go there), refusing links on the way.
    pub fn prepare_for(&self, path: &str, etag: &str) -> io::Result<()> {
        self.prepare()?;
        let partial = self.partial_path(path, etag);
        create_dirs_below(&self.root, partial.parent().unwrap_or(&self.root))
    }

    /// Reads the metadata of `path`, if present and well-formed.
    pub fn read_metadata(&self, path: &str) -> Option<LocalMetadata> {
        let bytes = safe_fs::read_bounded(&self.metadata_path(path), 4096).ok()??;
        parse_metadata(std::str::from_utf8(&bytes).ok()?)
    }

    /// Writes the metadata of `path`: commit, ETag, the current time.
    pub fn write_metadata(&self, path: &str, commit: &str, etag: &str) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let p = self.metadata_path(path);
        create_dirs_below(&self.root, p.parent().unwrap_or(&self.root))?;
        write_atomic(&p, format!("{commit}\n{etag}\n{now}\n").as_bytes())
    }

    /// The file of `key` if it is complete (see the module docs).
    pub fn find_complete(&self, key: &FileKey) -> Option<PathBuf> {
        self.complete_file(&key.path, &key.etag, key.size)
    }

    /// The file `path` if it is complete for `etag` and `size`.
    fn complete_file(&self, path: &str, etag: &str, size: u64) -> Option<PathBuf> {
        let md = self.read_metadata(path)?;
        if md.etag != etag {
            return None;
        }
        let file = self.file_path(path);
        let st = fs::symlink_metadata(&file).ok()?;
        if !st.is_file() || st.len() != size {
            return None;
        }
        let mtime = st
            .modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        if mtime - 1.0 <= md.timestamp {
            Some(file)
        } else {
            None
        }
    }

    /// Moves a finished partial file into place (replacing whatever is there, a planted link
    /// included, never writing through it) and writes its metadata. (The resume state is the
    /// download's to remove, once this returned.)
    pub fn commit(&self, partial: &Path, key: &FileKey) -> io::Result<PathBuf> {
        let (path, commit, etag) = (&key.path, &key.commit, &key.etag);
        let dst = self.file_path(path);
        let parent = dst.parent().unwrap_or(&self.root).to_path_buf();
        create_dirs_below(&self.root, &parent)?;
        fs::rename(partial, &dst)?;
        safe_fs::sync_dir(&parent)?;
        self.write_metadata(path, commit, etag)?;
        Ok(dst)
    }

    /// Every file with valid metadata whose content is still as downloaded, for offline use.
    /// With `commit`, only files downloaded at that commit.
    pub fn list_complete(&self, commit: Option<&str>) -> io::Result<Vec<CachedFile>> {
        let mut out = Vec::new();
        for (rel, _, _) in safe_fs::walk_relative(&self.download_dir())? {
            let Some(path) = rel.strip_suffix(".metadata") else {
                continue;
            };
            if check_repo_path(path).is_err() {
                continue;
            }
            let Some(md) = self.read_metadata(path) else {
                continue;
            };
            if commit.is_some_and(|c| c != md.commit) || etag_kind(&md.etag).is_none() {
                continue;
            }
            let file = self.file_path(path);
            let Ok(st) = fs::symlink_metadata(&file) else {
                continue;
            };
            if self.complete_file(path, &md.etag, st.len()).is_none() {
                continue;
            }
            out.push(CachedFile {
                path: path.to_string(),
                etag: md.etag,
                size: st.len(),
                local_path: file,
                commit: md.commit,
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

fn parse_metadata(text: &str) -> Option<LocalMetadata> {
    let mut lines = text.lines();
    let commit = lines.next()?.trim().to_string();
    let etag = lines.next()?.trim().to_string();
    let timestamp = lines.next()?.trim().parse::<f64>().ok()?;
    if !is_commit_hash(&commit) || etag.is_empty() || !timestamp.is_finite() {
        return None;
    }
    Some(LocalMetadata {
        commit,
        etag,
        timestamp,
    })
}

/// Joins a checked `/`-separated repository path onto `base`, segment by segment.
pub(crate) fn join_repo_path(base: &Path, path: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for seg in path.split('/') {
        p.push(seg);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_huggingface_hub() {
        let d = LocalDir::new("/x");
        assert_eq!(d.file_path("a/b.gguf"), PathBuf::from("/x/a/b.gguf"));
        assert_eq!(
            d.metadata_path("a/b.gguf"),
            PathBuf::from("/x/.cache/huggingface/download/a/b.gguf.metadata")
        );
        assert_eq!(
            d.lock_path("b.gguf"),
            PathBuf::from("/x/.cache/huggingface/download/b.gguf.lock")
        );
        assert_eq!(
            d.partial_path("b.gguf", "abc"),
            PathBuf::from("/x/.cache/huggingface/download/b.gguf.abc.wi-partial")
        );
        assert_eq!(
            d.state_path("a/b.gguf", "abc"),
            PathBuf::from("/x/.cache/huggingface/download/a/b.gguf.abc.wi-partial.state")
        );
    }

    #[test]
    fn metadata_round_trip_and_completeness() {
        let t = tempfile::tempdir().unwrap();
        let d = LocalDir::new(t.path());
        d.prepare().unwrap();
        assert_eq!(
            fs::read_to_string(d.huggingface_dir().join(".gitignore")).unwrap(),
            "*"
        );
        let commit = "c".repeat(40);
        let etag = "e".repeat(64);
        let partial = d.partial_path("sub/m.gguf", &etag);
        fs::create_dir_all(partial.parent().unwrap()).unwrap();
        fs::write(&partial, b"hello").unwrap();
        let key = FileKey::new("org/name", &commit, "sub/m.gguf", &etag, 5);
        let dst = d.commit(&partial, &key).unwrap();
        assert_eq!(fs::read(&dst).unwrap(), b"hello");
        let md = d.read_metadata("sub/m.gguf").unwrap();
        assert_eq!(md.commit, commit);
        assert_eq!(md.etag, etag);
        let text = fs::read_to_string(d.metadata_path("sub/m.gguf")).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(d.find_complete(&key).is_some());
        assert!(d
            .find_complete(&FileKey {
                size: 6,
                ..key.clone()
            })
            .is_none());
        assert!(d
            .find_complete(&FileKey {
                etag: "f".repeat(64),
                ..key
            })
            .is_none());
        let all = d.list_complete(None).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].path, "sub/m.gguf");
        assert!(d.list_complete(Some(&"d".repeat(40))).unwrap().is_empty());
        // Python writes e.g. "1712656091.123"; an integer timestamp is accepted too.
        assert!(parse_metadata(&format!("{commit}\n{etag}\n1712656091\n")).is_some());
        assert!(parse_metadata("garbage").is_none());
    }
}
