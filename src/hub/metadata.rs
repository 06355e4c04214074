//! A file's metadata: `HEAD` on its resolve URL.

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING};
use url::Url;

use super::listing::{check_commit, MAX_FILE_SIZE};
use super::request::Ctx;
use super::{validate_repo_path, HubClient, HubError, RepoRef};
use crate::names::escape;
use crate::names::{normalize_etag, CommitId, Etag};
use crate::net::{self, header_str, redact, Chain};

/// What a `HEAD` on a file's resolve URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMetadata {
    /// The commit the revision resolved to.
    pub commit: CommitId,
    /// The ETag without `W/` and quotes, lowercase: SHA-256 for LFS files, git SHA-1 otherwise.
    pub etag: Etag,
    /// The file size (at most 2^63 − 1).
    pub size: u64,
    /// Where the bytes are: the CDN URL of a redirect, else the resolve URL itself.
    pub location: String,
    /// The file's Xet hash (`X-Xet-Hash`), when the Hub stores it in Xet and the ETag is its
    /// SHA-256 (one that is not a hash is left out: the file comes through the resolve URL).
    pub xet_hash: Option<crate::xet::XetHash>,
}

impl HubClient {
    /// `HEAD` on the file's resolve URL: commit, ETag, size and location.
    ///
    /// Sends `Accept-Encoding: identity`; reads `X-Repo-Commit` (required), `X-Linked-Etag` else
    /// `ETag`, and `X-Linked-Size` else `Content-Length` when the answer is not a redirect. A
    /// redirect that carries the file's metadata (`X-Linked-Etag`: the Hub's answer for LFS
    /// files, pointing at the CDN) is read, not followed; another redirect is followed when its
    /// joined target is on the Hub's origin (a renamed repository, `resolve-cache`), and taken as
    /// the file's location otherwise. The token only ever goes to the Hub's origin.
    pub async fn file_metadata(
        &self,
        repo: &RepoRef,
        revision: &str,
        path: &str,
    ) -> Result<FileMetadata, HubError> {
        repo.validate()?;
        validate_repo_path(&repo.id, path)?;
        let ctx = Ctx {
            repo,
            revision,
            path: Some(path),
        };
        let start = self.parse_url(&self.resolve_url(repo, revision, path))?;
        let mut chain = Chain::new(start, self.base_url());
        loop {
            let url = chain.url().clone();
            let resp = self
                .send(&url, |u| {
                    self.request(reqwest::Method::HEAD, u, &chain)
                        .header(ACCEPT_ENCODING, HeaderValue::from_static("identity"))
                        .timeout(self.cfg.timeout)
                })
                .await?;
            let status = resp.status();
            if status.is_redirection() {
                let target = net::location(&url, status, resp.headers()).map_err(|source| {
                    HubError::Redirect {
                        url: redact(&url),
                        source,
                    }
                })?;
                let describes_file = resp.headers().contains_key("x-linked-etag");
                if describes_file || !net::same_origin(&target, self.base_url()) {
                    return metadata_from(resp.headers(), true, target.to_string(), &url);
                }
                chain.go(target).map_err(|source| HubError::Redirect {
                    url: redact(&url),
                    source,
                })?;
                continue;
            }
            if !status.is_success() {
                return Err(self.error_from(resp, &url, ctx).await);
            }
            return metadata_from(resp.headers(), false, url.to_string(), &url);
        }
    }
}

fn metadata_from(
    h: &HeaderMap,
    redirect: bool,
    location: String,
    url: &Url,
) -> Result<FileMetadata, HubError> {
    let invalid = |reason: String| HubError::InvalidResponse {
        url: redact(url),
        reason,
    };
    let commit = header_str(h, "x-repo-commit")
        .ok_or_else(|| invalid("no X-Repo-Commit header: is this a Hugging Face Hub?".into()))?;
    let commit = check_commit(commit, &redact(url))?;
    let etag = header_str(h, "x-linked-etag")
        .or_else(|| header_str(h, "etag"))
        .ok_or_else(|| invalid("no ETag header".into()))?;
    let etag = normalize_etag(etag);
    let etag = Etag::parse(&etag).map_err(|_| {
        invalid(format!(
            "ETag '{}' is neither a SHA-256 nor a git SHA-1",
            escape(&etag)
        ))
    })?;
    let size = header_str(h, "x-linked-size")
        .or_else(|| {
            if redirect {
                None
            } else {
                header_str(h, "content-length")
            }
        })
        .ok_or_else(|| invalid("no file size (X-Linked-Size or Content-Length)".into()))?;
    let size = size
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&s| s <= MAX_FILE_SIZE)
        .ok_or_else(|| invalid(format!("impossible size '{}'", escape(size))))?;
    let xet_hash = header_str(h, "x-xet-hash")
        .filter(|_| etag.kind() == crate::names::EtagKind::Sha256)
        .and_then(|x| x.trim().parse().ok());
    Ok(FileMetadata {
        commit,
        etag,
        size,
        location,
        xet_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_headers_are_checked() {
        let url = Url::parse("http://h/o/n/resolve/main/m").unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            "x-repo-commit",
            HeaderValue::from_static("cccccccccccccccccccccccccccccccccccccccc"),
        );
        h.insert(
            "x-linked-etag",
            HeaderValue::from_str(&format!("\"{}\"", "A".repeat(64))).unwrap(),
        );
        h.insert(
            "x-linked-size",
            HeaderValue::from_static("9223372036854775807"),
        );
        let m = metadata_from(&h, true, "x".into(), &url).unwrap();
        assert_eq!(m.etag, "a".repeat(64));
        assert_eq!(m.size, MAX_FILE_SIZE);
        assert_eq!(m.xet_hash, None);
        // The Xet hash, when the Hub stores the file in Xet; one that is not a hash is left out.
        h.insert(
            "x-xet-hash",
            HeaderValue::from_str(&"2e".repeat(32)).unwrap(),
        );
        let m = metadata_from(&h, true, "x".into(), &url).unwrap();
        assert_eq!(m.xet_hash.map(|x| x.to_string()), Some("2e".repeat(32)));
        h.insert("x-xet-hash", HeaderValue::from_static("not-a-hash"));
        assert_eq!(
            metadata_from(&h, true, "x".into(), &url).unwrap().xet_hash,
            None
        );
        h.insert(
            "x-linked-size",
            HeaderValue::from_static("9223372036854775808"),
        );
        let e = metadata_from(&h, true, "x".into(), &url).unwrap_err();
        assert!(e.to_string().contains("impossible size"), "{e}");
        h.insert("x-linked-etag", HeaderValue::from_static("../../x"));
        assert!(metadata_from(&h, true, "x".into(), &url).is_err());
    }
}
