//! A repository's branches and tags: `GET /api/{type}s/{repo}/refs`.

use serde::Deserialize;

use super::listing::check_commit;
use super::request::Ctx;
use super::{HubClient, HubError, RepoRef};
use crate::names::CommitId;
use crate::net::redact;

/// Branches or tags kept from one answer; more is refused as an invalid answer (a repository
/// with this many is not one a mirror is asked about).
const MAX_REFS: usize = 10_000;

/// A branch or a tag and the commit it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRef {
    /// Its short name (`main`, `v1.0`), as the Hub lists it: print it through
    /// [`crate::names::escape`], never raw.
    pub name: String,
    /// Its full name (`refs/heads/main`, `refs/tags/v1.0`).
    pub full_name: String,
    /// The commit it points at.
    pub target_commit: CommitId,
}

/// A repository's branches and tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refs {
    /// Branches, in the Hub's order.
    pub branches: Vec<GitRef>,
    /// Tags, in the Hub's order.
    pub tags: Vec<GitRef>,
}

#[derive(Deserialize)]
struct RawRefs {
    #[serde(default)]
    branches: Vec<RawRef>,
    #[serde(default)]
    tags: Vec<RawRef>,
}

#[derive(Deserialize)]
struct RawRef {
    name: String,
    #[serde(rename = "ref", default)]
    full_name: Option<String>,
    #[serde(rename = "targetCommit")]
    target_commit: String,
}

impl HubClient {
    /// The repository's branches and tags (`GET /api/{type}s/{repo}/refs`), each with the
    /// commit it points at (checked: 40 hex digits).
    pub async fn refs(&self, repo: &RepoRef) -> Result<Refs, HubError> {
        repo.validate()?;
        let url = self.api_url(repo, "refs");
        let ctx = Ctx {
            repo,
            revision: &repo.revision,
            path: None,
        };
        let (raw, _, answered, _): (RawRefs, _, _, _) = self
            .get_json(&url, ctx, self.cfg.timeout, self.cfg.max_response_bytes)
            .await?;
        let at = redact(&answered);
        if raw.branches.len() + raw.tags.len() > MAX_REFS {
            return Err(HubError::InvalidResponse {
                url: at,
                reason: format!("more than {MAX_REFS} branches and tags"),
            });
        }
        let kept = |list: Vec<RawRef>, kind: &str| -> Result<Vec<GitRef>, HubError> {
            list.into_iter()
                .map(|r| {
                    Ok(GitRef {
                        full_name: r
                            .full_name
                            .unwrap_or_else(|| format!("refs/{kind}/{}", r.name)),
                        target_commit: check_commit(&r.target_commit, &at)?,
                        name: r.name,
                    })
                })
                .collect()
        };
        Ok(Refs {
            branches: kept(raw.branches, "heads")?,
            tags: kept(raw.tags, "tags")?,
        })
    }
}
