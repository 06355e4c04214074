//! Listing a repository: the commit a revision points at, and the tree at that commit.
//!
//! A listing is bounded in every direction: each page's body ([`HubConfig::max_response_bytes`]),
//! the pages ([`HubConfig::max_pages`]; a `next` link to a page already read is a pagination
//! loop and refused at once, and so is an empty page that links to another), and the totals over
//! all pages ([`HubConfig::max_listing_entries`],
//! [`HubConfig::max_listing_bytes`]). Entries whose path could not safely become a local file
//! name, whose size is past 2^63, or whose name collides with another's on a case-insensitive
//! file system are not fatal: they are set aside in [`RepoListing::refused`] with the reason.
//!
//! [`HubConfig::max_response_bytes`]: super::HubConfig::max_response_bytes
//! [`HubConfig::max_pages`]: super::HubConfig::max_pages
//! [`HubConfig::max_listing_entries`]: super::HubConfig::max_listing_entries
//! [`HubConfig::max_listing_bytes`]: super::HubConfig::max_listing_bytes

use std::collections::{BTreeMap, HashSet};

use reqwest::header::HeaderMap;
use serde::{Deserialize, Deserializer};

use super::request::Ctx;
use super::{encode_revision, HubClient, HubError, RepoRef};
use crate::names::{case_fold, check_repo_path, escape, is_commit_hash, CommitId, Etag, EtagKind};
use crate::net::{header_str, redact};

/// Largest file size accepted from a listing or a `HEAD`: 2^63 − 1 bytes. Anything larger is not
/// a file anyone can store, and would overflow the sums made of sizes.
pub(super) const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// One file of a repository listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    /// Path in the repository (checked with [`check_repo_path`]).
    pub path: String,
    /// Size in bytes (at most `MAX_FILE_SIZE`, 2^63 - 1).
    pub size: u64,
    /// Git blob SHA-1 (of the LFS pointer for LFS files), lowercase hex.
    pub git_oid: Etag,
    /// SHA-256 of the content for LFS files, lowercase hex.
    pub lfs_sha256: Option<Etag>,
    /// The file's Xet hash, when the Hub stores it in Xet (the listing's `xetHash`; one that is
    /// not a hash is left out, and the file is fetched through the resolve URL).
    pub xet_hash: Option<crate::xet::XetHash>,
}

impl RemoteFile {
    /// The file's ETag on the Hub, which names its blob in the cache: the LFS SHA-256, else the
    /// git blob SHA-1.
    pub fn etag(&self) -> &Etag {
        self.lfs_sha256.as_ref().unwrap_or(&self.git_oid)
    }
}

/// A listed entry that was not kept: its path could not safely become a local file name, its
/// size or hashes are impossible, or it collides with another entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RefusedEntry {
    /// The path as listed, with control characters escaped (safe to print).
    pub path: String,
    /// Why it was refused.
    pub reason: String,
}

/// The files of a repository at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoListing {
    /// The commit the revision resolved to (40 hex digits).
    pub commit: CommitId,
    /// Every file kept, in the server's order.
    pub files: Vec<RemoteFile>,
    /// Entries that were refused, in the server's order.
    pub refused: Vec<RefusedEntry>,
}

#[derive(Debug, Deserialize)]
struct RepoInfo {
    #[serde(default)]
    sha: Option<String>,
}

/// A size as listed: any JSON number, judged later (a negative, fractional or huge one is an
/// entry to refuse, not a listing to fail).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Size {
    Valid(u64),
    Invalid,
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Size>, D::Error> {
    let n: Option<serde_json::Number> = Option::deserialize(d)?;
    Ok(n.map(|n| match n.as_u64() {
        Some(v) if v <= MAX_FILE_SIZE => Size::Valid(v),
        _ => Size::Invalid,
    }))
}

#[derive(Debug, Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    oid: Option<String>,
    #[serde(default, deserialize_with = "size")]
    size: Option<Size>,
    #[serde(default)]
    lfs: Option<LfsInfo>,
    #[serde(default, rename = "xetHash")]
    xet_hash: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LfsInfo {
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default, deserialize_with = "size")]
    size: Option<Size>,
}

/// An entry of a listing page: one of ours, or something malformed (refused, not fatal).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PageEntry {
    Entry(TreeEntry),
    Other(serde::de::IgnoredAny),
}

impl TreeEntry {
    /// The file this entry describes, or why it is refused.
    fn into_remote(self) -> Result<RemoteFile, RefusedEntry> {
        let refuse = |reason: String| RefusedEntry {
            path: escape(&self.path).into_owned(),
            reason,
        };
        if let Err(reason) = check_repo_path(&self.path) {
            return Err(refuse(reason.to_string()));
        }
        let oid = match &self.oid {
            Some(o) => match Etag::parse(&o.to_ascii_lowercase()) {
                Ok(e) if e.kind() == EtagKind::GitSha1 => e,
                _ => return Err(refuse(format!("bad git oid '{}'", escape(o)))),
            },
            None => return Err(refuse("no git oid".into())),
        };
        let (lfs_sha256, size) = match &self.lfs {
            Some(l) => {
                let sha = l
                    .oid
                    .as_deref()
                    .or(l.sha256.as_deref())
                    .map(|s| s.trim_start_matches("sha256:").to_ascii_lowercase());
                let sha = match sha {
                    Some(s) => match Etag::parse(&s) {
                        Ok(e) if e.kind() == EtagKind::Sha256 => e,
                        _ => return Err(refuse(format!("bad LFS oid '{}'", escape(&s)))),
                    },
                    None => return Err(refuse("no LFS oid".into())),
                };
                (Some(sha), l.size.or(self.size))
            }
            None => (None, self.size),
        };
        let size = match size {
            Some(Size::Valid(s)) => s,
            Some(Size::Invalid) => {
                return Err(refuse(format!(
                    "impossible size (not a whole number of bytes up to {MAX_FILE_SIZE})"
                )))
            }
            None => return Err(refuse("no size".into())),
        };
        // Only a file whose content the LFS oid names can be fetched by its Xet hash (the
        // SHA-256 still decides).
        let xet_hash = self
            .xet_hash
            .as_deref()
            .filter(|_| lfs_sha256.is_some())
            .and_then(|h| h.parse().ok());
        Ok(RemoteFile {
            path: self.path,
            size,
            git_oid: oid,
            lfs_sha256,
            xet_hash,
        })
    }
}

/// Sorts the entries of one page into files kept and entries refused.
fn take_page(
    entries: Vec<PageEntry>,
    files: &mut Vec<RemoteFile>,
    refused: &mut Vec<RefusedEntry>,
) {
    for e in entries {
        let e = match e {
            PageEntry::Entry(e) if e.kind == "file" => e,
            PageEntry::Entry(_) => continue,
            PageEntry::Other(_) => {
                refused.push(RefusedEntry {
                    path: "?".into(),
                    reason: "a malformed listing entry".into(),
                });
                continue;
            }
        };
        match e.into_remote() {
            Ok(f) => files.push(f),
            Err(r) => refused.push(r),
        }
    }
}

/// Why a saved listing cannot be read (it is then asked of the Hub again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListingError {
    /// Not the JSON of a saved listing.
    #[error("malformed ({0})")]
    Malformed(String),
    /// huggingface_hub's `trees/{commit}.json` in a format version this program does not read.
    #[error("format_version {0} (this version reads {HF_TREE_FORMAT_VERSION})")]
    Version(u64),
}

/// A listing saved to disk (see [`save_tree`]): its files and refused entries, every entry
/// checked again as a listing page is (the file lives in a shared folder: it is input like any
/// other).
pub fn load_tree(bytes: &[u8]) -> Result<(Vec<RemoteFile>, Vec<RefusedEntry>), ListingError> {
    #[derive(Deserialize)]
    struct Saved {
        entries: Vec<PageEntry>,
        #[serde(default)]
        refused: Vec<SavedRefusal>,
    }
    #[derive(Deserialize)]
    struct SavedRefusal {
        path: String,
        reason: String,
    }
    let saved: Saved =
        serde_json::from_slice(bytes).map_err(|e| ListingError::Malformed(e.to_string()))?;
    let (mut files, mut refused) = (Vec::new(), Vec::new());
    take_page(saved.entries, &mut files, &mut refused);
    let files = refuse_collisions(files, &mut refused);
    refused.extend(saved.refused.into_iter().map(|r| RefusedEntry {
        path: escape(&r.path).into_owned(),
        reason: escape(&r.reason).into_owned(),
    }));
    Ok((files, refused))
}

/// The text [`load_tree`] reads: the files as the Hub lists them, and the refused entries.
pub fn save_tree(files: &[RemoteFile], refused: &[RefusedEntry]) -> String {
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|f| {
            let mut e = serde_json::json!({
                "type": "file",
                "path": f.path,
                "oid": f.git_oid,
                "size": f.size,
            });
            if let Some(sha) = &f.lfs_sha256 {
                e["lfs"] = serde_json::json!({"oid": sha, "size": f.size});
            }
            if let Some(x) = &f.xet_hash {
                e["xetHash"] = x.to_string().into();
            }
            e
        })
        .collect();
    serde_json::json!({"entries": entries, "refused": refused}).to_string()
}

/// The `format_version` of huggingface_hub's tree-listing cache (`trees/{commit}.json`).
pub const HF_TREE_FORMAT_VERSION: u64 = 1;

/// The listing as huggingface_hub caches it beside a snapshot (`trees/{commit}.json`, so that
/// huggingface_hub offline finds the snapshot complete, or not): `{"format_version": 1,
/// "files": {path: {"size", "blob_id", "lfs_sha256", "lfs_size"}}}`, the paths sorted and the
/// text indented by one space, as it writes the file itself.
pub fn save_hf_tree(files: &[RemoteFile]) -> String {
    let mut sorted: Vec<&RemoteFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut map = serde_json::Map::new();
    for f in sorted {
        let mut info = serde_json::Map::new();
        info.insert("size".into(), f.size.into());
        info.insert("blob_id".into(), f.git_oid.as_str().into());
        if let Some(sha) = &f.lfs_sha256 {
            info.insert("lfs_sha256".into(), sha.as_str().into());
            info.insert("lfs_size".into(), f.size.into());
        }
        if let Some(x) = &f.xet_hash {
            info.insert("xet_hash".into(), x.to_string().into());
        }
        map.insert(f.path.clone(), info.into());
    }
    let doc = serde_json::json!({"format_version": HF_TREE_FORMAT_VERSION, "files": map});
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    // Serializing a JSON value to memory cannot fail.
    let _ = serde::Serialize::serialize(&doc, &mut ser);
    String::from_utf8(out).unwrap_or_default()
}

/// huggingface_hub's cached listing (see [`save_hf_tree`]) read back: its files and the entries
/// refused, every entry checked as a listing page is (the file lives in a shared folder, and
/// another program wrote it). Another `format_version`, or text that is not such a listing, is
/// an error: the listing is then asked of the Hub.
pub fn load_hf_tree(bytes: &[u8]) -> Result<(Vec<RemoteFile>, Vec<RefusedEntry>), ListingError> {
    #[derive(Deserialize)]
    struct HfTree {
        format_version: u64,
        files: serde_json::Map<String, serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct HfEntry {
        #[serde(default, deserialize_with = "size")]
        size: Option<Size>,
        #[serde(default)]
        blob_id: Option<String>,
        #[serde(default)]
        lfs_sha256: Option<String>,
        #[serde(default, deserialize_with = "size")]
        lfs_size: Option<Size>,
        #[serde(default)]
        xet_hash: Option<String>,
    }
    let tree: HfTree =
        serde_json::from_slice(bytes).map_err(|e| ListingError::Malformed(e.to_string()))?;
    if tree.format_version != HF_TREE_FORMAT_VERSION {
        return Err(ListingError::Version(tree.format_version));
    }
    let (mut files, mut refused) = (Vec::new(), Vec::new());
    let entries =
        tree.files.into_iter().map(
            |(path, info)| match serde_json::from_value::<HfEntry>(info) {
                Ok(e) => PageEntry::Entry(TreeEntry {
                    kind: "file".into(),
                    path,
                    oid: e.blob_id,
                    size: e.size,
                    lfs: e.lfs_sha256.map(|sha| LfsInfo {
                        oid: Some(sha),
                        sha256: None,
                        size: e.lfs_size,
                    }),
                    xet_hash: e.xet_hash,
                }),
                Err(_) => PageEntry::Other(serde::de::IgnoredAny),
            },
        );
    take_page(entries.collect(), &mut files, &mut refused);
    let files = refuse_collisions(files, &mut refused);
    Ok((files, refused))
}

/// One page of a tree listing from its bytes, as [`HubClient::list_tree`] reads it (for the
/// fuzz target): the files kept and the entries refused, collisions included.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn parse_page(
    bytes: &[u8],
) -> Result<(Vec<RemoteFile>, Vec<RefusedEntry>), serde_json::Error> {
    let entries: Vec<PageEntry> = serde_json::from_slice(bytes)?;
    let (mut files, mut refused) = (Vec::new(), Vec::new());
    take_page(entries, &mut files, &mut refused);
    let files = refuse_collisions(files, &mut refused);
    Ok((files, refused))
}

/// Sets aside every file whose path collides with another's once case is folded (two names a
/// case-insensitive file system stores as one), or that is also a folder of another path (`a`
/// and `a/b`): which of them a local folder would end up holding cannot be told.
fn refuse_collisions(files: Vec<RemoteFile>, refused: &mut Vec<RefusedEntry>) -> Vec<RemoteFile> {
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for f in &files {
        *by_key.entry(case_fold(&f.path)).or_default() += 1;
    }
    let folders: HashSet<String> = by_key
        .keys()
        .flat_map(|k| {
            k.match_indices('/')
                .map(|(i, _)| k[..i].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut kept = Vec::with_capacity(files.len());
    for f in files {
        let key = case_fold(&f.path);
        if by_key[&key] > 1 {
            refused.push(RefusedEntry {
                path: escape(&f.path).into_owned(),
                reason: "another file's name differs from it only in case".into(),
            });
        } else if folders.contains(&key) {
            refused.push(RefusedEntry {
                path: escape(&f.path).into_owned(),
                reason: "it is also the folder of other files".into(),
            });
        } else {
            kept.push(f);
        }
    }
    kept
}

impl HubClient {
    /// The commit a revision points at: `GET /api/{type}s/{repo}/revision/{rev}` → `sha`.
    /// A full commit id is still asked about, so that a missing one is reported.
    pub async fn repo_commit(&self, repo: &RepoRef) -> Result<CommitId, HubError> {
        repo.validate()?;
        let url = self.api_url(
            repo,
            &format!("revision/{}", encode_revision(&repo.revision)),
        );
        let ctx = Ctx {
            repo,
            revision: &repo.revision,
            path: None,
        };
        let (info, headers, url, _): (RepoInfo, _, _, _) = self
            .get_json(&url, ctx, self.cfg.timeout, self.cfg.max_response_bytes)
            .await?;
        let sha = info
            .sha
            .or_else(|| header_str(&headers, "x-repo-commit").map(str::to_string))
            .ok_or_else(|| HubError::InvalidResponse {
                url: redact(&url),
                reason: "no commit ('sha') in the repository info".into(),
            })?;
        let commit = check_commit(&sha, &redact(&url))?;
        // A commit id names exactly one tree: an answer naming another commit is refused.
        if is_commit_hash(&repo.revision) && !commit.eq_ignore_ascii_case(&repo.revision) {
            return Err(HubError::CommitMismatch {
                url: redact(&url),
                asked: repo.revision.to_ascii_lowercase(),
                answered: commit.into_string(),
            });
        }
        Ok(commit)
    }

    /// Every file of the repository at its revision, and the commit the revision resolved to.
    ///
    /// The revision is resolved first ([`HubClient::repo_commit`]) and the tree is listed at
    /// that commit, so that a push in between cannot mix two commits.
    pub async fn list_files(&self, repo: &RepoRef) -> Result<RepoListing, HubError> {
        let commit = self.repo_commit(repo).await?;
        let (files, refused) = self.list_tree(repo, &commit).await?;
        Ok(RepoListing {
            commit,
            files,
            refused,
        })
    }

    /// The files of the tree at `revision` (a commit, preferably), following pagination within
    /// the bounds of the module docs; and the entries refused.
    pub async fn list_tree(
        &self,
        repo: &RepoRef,
        revision: &str,
    ) -> Result<(Vec<RemoteFile>, Vec<RefusedEntry>), HubError> {
        repo.validate()?;
        let mut url = self.api_url(
            repo,
            &format!("tree/{}?recursive=true", encode_revision(revision)),
        );
        let ctx = Ctx {
            repo,
            revision,
            path: None,
        };
        let cfg = &self.cfg;
        let mut files = Vec::new();
        let mut refused = Vec::new();
        let mut seen_pages: HashSet<url::Url> = HashSet::new();
        let (mut entries_total, mut bytes_total) = (0usize, 0u64);
        for _page in 0..cfg.max_pages {
            let (entries, headers, answered, bytes): (Vec<PageEntry>, _, _, _) = self
                .get_json(&url, ctx, cfg.timeout * 3, cfg.max_response_bytes)
                .await?;
            let invalid = |reason: String| HubError::InvalidResponse {
                url: redact(&answered),
                reason,
            };
            seen_pages.insert(answered.clone());
            let page_empty = entries.is_empty();
            entries_total = entries_total.saturating_add(entries.len());
            bytes_total = bytes_total.saturating_add(bytes as u64);
            if entries_total > cfg.max_listing_entries {
                return Err(invalid(format!(
                    "the listing has more than {} entries",
                    cfg.max_listing_entries
                )));
            }
            if bytes_total > cfg.max_listing_bytes {
                return Err(invalid(format!(
                    "the listing is larger than {} bytes",
                    cfg.max_listing_bytes
                )));
            }
            take_page(entries, &mut files, &mut refused);
            match next_link(&headers) {
                None => {
                    let files = refuse_collisions(files, &mut refused);
                    return Ok((files, refused));
                }
                Some(_) if page_empty => {
                    // The Hub never sends an empty page with more to come: an endless listing.
                    return Err(invalid(
                        "an empty page of the listing links to another one (an endless listing)"
                            .into(),
                    ));
                }
                Some(next) => {
                    let next = answered
                        .join(&next)
                        .map_err(|e| invalid(format!("bad next-page link: {e}")))?;
                    if !crate::net::same_origin(&next, self.base_url()) {
                        return Err(invalid(format!(
                            "next-page link to another host: {}",
                            redact(&next)
                        )));
                    }
                    if seen_pages.contains(&next) {
                        return Err(invalid(format!(
                            "pagination loop: the next-page link points back at {}",
                            redact(&next)
                        )));
                    }
                    url = next.to_string();
                }
            }
        }
        Err(HubError::InvalidResponse {
            url: escape(&url).into_owned(),
            reason: format!("more than {} pages of listing", cfg.max_pages),
        })
    }
}

pub(super) fn check_commit(sha: &str, url: &str) -> Result<CommitId, HubError> {
    CommitId::parse(&sha.trim().to_ascii_lowercase()).map_err(|e| HubError::InvalidResponse {
        url: url.to_string(),
        reason: e.to_string(),
    })
}

/// The `rel="next"` target of a `Link` header.
fn next_link(h: &HeaderMap) -> Option<String> {
    for v in h.get_all("link") {
        let Ok(s) = v.to_str() else { continue };
        for part in s.split(',') {
            let mut pieces = part.split(';');
            let target = pieces.next()?.trim();
            let is_next = pieces.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            if is_next {
                if let Some(t) = target.strip_prefix('<').and_then(|t| t.strip_suffix('>')) {
                    return Some(t.to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn entry(json: serde_json::Value) -> Result<RemoteFile, RefusedEntry> {
        serde_json::from_value::<TreeEntry>(json)
            .unwrap()
            .into_remote()
    }

    #[test]
    fn link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static("<https://h/api/models/a/b/tree/main?cursor=x>; rel=\"next\""),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://h/api/models/a/b/tree/main?cursor=x")
        );
        let mut h = HeaderMap::new();
        h.insert("link", HeaderValue::from_static("<a>; rel=\"prev\""));
        assert_eq!(next_link(&h), None);
    }

    /// A file the Hub stores in Xet carries its Xet hash; one that is not a hash, or on a file
    /// without an LFS oid, is left out (the file is still listed, fetched through the resolve
    /// URL); saved listings, ours and huggingface_hub's, keep it.
    #[test]
    fn xet_hashes_are_read_checked_and_saved() {
        let (oid, xet) = ("0".repeat(40), "1f".repeat(32));
        let lfs = serde_json::json!({"oid": "a".repeat(64), "size": 9});
        let f = entry(serde_json::json!({
            "type": "file", "path": "m", "oid": oid, "size": 9, "lfs": lfs, "xetHash": xet,
        }))
        .unwrap();
        assert_eq!(f.xet_hash.map(|h| h.to_string()), Some(xet.clone()));
        for bad in [serde_json::json!("zz"), serde_json::json!("1f".repeat(33))] {
            let f = entry(serde_json::json!({
                "type": "file", "path": "m", "oid": oid, "size": 9, "lfs": lfs, "xetHash": bad,
            }));
            assert_eq!(f.unwrap().xet_hash, None);
        }
        let small = entry(
            serde_json::json!({"type": "file", "path": "c", "oid": oid, "size": 9, "xetHash": xet}),
        )
        .unwrap();
        assert_eq!(small.xet_hash, None);
        let (ours, _) = load_tree(save_tree(std::slice::from_ref(&f), &[]).as_bytes()).unwrap();
        assert_eq!(ours, std::slice::from_ref(&f));
        let (theirs, _) = load_hf_tree(save_hf_tree(std::slice::from_ref(&f)).as_bytes()).unwrap();
        assert_eq!(theirs, [f]);
    }

    #[test]
    fn entries_are_checked_and_refused_not_fatal() {
        let oid = "0".repeat(40);
        let r =
            entry(serde_json::json!({"type": "file", "path": "../evil", "oid": oid, "size": 1}))
                .unwrap_err();
        assert_eq!(r.path, "../evil");
        let r = entry(
            serde_json::json!({"type": "file", "path": "a\n/etc/passwd", "oid": oid, "size": 1}),
        )
        .unwrap_err();
        assert_eq!(r.path, "a\\n/etc/passwd");
        assert!(r.reason.contains("control"), "{r:?}");
        for size in [
            serde_json::json!(9_223_372_036_854_775_808u64),
            serde_json::json!(18_446_744_073_709_551_615u64),
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(1e30),
        ] {
            let r =
                entry(serde_json::json!({"type": "file", "path": "m", "oid": oid, "size": size}))
                    .unwrap_err();
            assert!(r.reason.contains("impossible size"), "{size}: {r:?}");
        }
        let f = entry(serde_json::json!({
            "type": "file", "path": "m.gguf", "oid": oid, "size": 130,
            "lfs": {"oid": "A".repeat(64), "size": MAX_FILE_SIZE},
        }))
        .unwrap();
        assert_eq!(f.size, MAX_FILE_SIZE);
        assert_eq!(*f.etag(), "a".repeat(64));
        let r = entry(serde_json::json!({
            "type": "file", "path": "m.gguf", "oid": oid, "size": 130,
            "lfs": {"oid": "../../x", "size": 1},
        }))
        .unwrap_err();
        assert!(r.reason.contains("bad LFS oid"), "{r:?}");
    }

    #[test]
    fn a_page_with_malformed_entries_is_not_fatal() {
        let oid = "0".repeat(40);
        let page = format!(
            r#"[{{"type":"file","path":"a","oid":"{oid}","size":1}}, 7, {{"type":"file"}},
                {{"type":"directory","path":"d"}}, {{"type":"file","path":"A","oid":"{oid}","size":2}}]"#
        );
        let (files, refused) = parse_page(page.as_bytes()).unwrap();
        assert!(files.is_empty(), "{files:?}");
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert!(parse_page(b"{").is_err());
    }

    #[test]
    fn case_collisions_and_file_folder_clashes_are_refused() {
        let f = |p: &str| RemoteFile {
            path: p.into(),
            size: 1,
            git_oid: Etag::parse(&"0".repeat(40)).unwrap(),
            lfs_sha256: None,
            xet_hash: None,
        };
        let mut refused = Vec::new();
        let kept = refuse_collisions(
            vec![
                f("A.gguf"),
                f("a.gguf"),
                f("b.gguf"),
                f("dir"),
                f("dir/x"),
                f("Dir2/y"),
            ],
            &mut refused,
        );
        let kept: Vec<_> = kept.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(kept, ["b.gguf", "dir/x", "Dir2/y"]);
        let names: Vec<_> = refused.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(names, ["A.gguf", "a.gguf", "dir"]);
    }

    #[test]
    fn a_saved_listing_is_checked_again() {
        let files = vec![RemoteFile {
            path: "a.gguf".into(),
            size: 5,
            git_oid: Etag::parse(&"1".repeat(40)).unwrap(),
            lfs_sha256: Some(Etag::parse(&"2".repeat(64)).unwrap()),
            xet_hash: None,
        }];
        let refused = vec![RefusedEntry {
            path: "bad\\n".into(),
            reason: "r".into(),
        }];
        let text = save_tree(&files, &refused);
        let (f, r) = load_tree(text.as_bytes()).unwrap();
        assert_eq!(f, files);
        assert_eq!(r.len(), 1);
        // Tampered on disk: an unsafe path is refused as in a listing from the Hub.
        let evil = text.replace("a.gguf", "../a.gguf");
        let (f, r) = load_tree(evil.as_bytes()).unwrap();
        assert!(f.is_empty());
        assert_eq!(r.len(), 2);
        assert!(load_tree(b"[]").is_err());
    }

    #[test]
    fn huggingface_hubs_listing_round_trips_and_is_checked_again() {
        let files = vec![
            RemoteFile {
                path: "z.json".into(),
                size: 24,
                git_oid: Etag::parse(&"3".repeat(40)).unwrap(),
                lfs_sha256: None,
                xet_hash: None,
            },
            RemoteFile {
                path: "a.gguf".into(),
                size: 5,
                git_oid: Etag::parse(&"1".repeat(40)).unwrap(),
                lfs_sha256: Some(Etag::parse(&"2".repeat(64)).unwrap()),
                xet_hash: None,
            },
        ];
        let text = save_hf_tree(&files);
        // huggingface_hub's own layout: sorted, one space of indent, lfs fields only for LFS.
        let want = format!(
            "{{\n \"format_version\": 1,\n \"files\": {{\n  \"a.gguf\": {{\n   \"size\": 5,\n   \
             \"blob_id\": \"{}\",\n   \"lfs_sha256\": \"{}\",\n   \"lfs_size\": 5\n  }},\n  \
             \"z.json\": {{\n   \"size\": 24,\n   \"blob_id\": \"{}\"\n  }}\n }}\n}}",
            "1".repeat(40),
            "2".repeat(64),
            "3".repeat(40)
        );
        assert_eq!(text, want);
        let (mut f, r) = load_hf_tree(text.as_bytes()).unwrap();
        f.sort_by(|a, b| b.path.cmp(&a.path));
        assert_eq!((f, r.len()), (files, 0));
        // Written by another program into a shared folder: checked as a page from the Hub.
        let evil = text
            .replace("a.gguf", "../a.gguf")
            .replace("\"size\": 24", "\"size\": -1");
        let (f, r) = load_hf_tree(evil.as_bytes()).unwrap();
        assert!(f.is_empty() && r.len() == 2, "{f:?} {r:?}");
        let odd = r#"{"format_version": 1, "files": {"x": 7, "y": {"size": 1, "blob_id": "zz"}}}"#;
        let (f, r) = load_hf_tree(odd.as_bytes()).unwrap();
        assert!(f.is_empty() && r.len() == 2);
        assert!(load_hf_tree(br#"{"format_version": 2, "files": {}}"#).is_err());
        assert!(load_hf_tree(b"[]").is_err());
    }
}
