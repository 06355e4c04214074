//! The metadata routes: a repository's info (`id`, `sha`, `siblings`), its refs, its tree in
//! pages of [`PAGE`] linked by `Link: rel="next"` URLs at the mirror, and paths-info; and a
//! file as they list it ([`entry_of`], [`file_entry`]): an LFS file with its pointer's git oid,
//! never a Xet hash.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, Response, StatusCode};
use sha1::{Digest as _, Sha1};

use super::mirror::{authorization, Mirror, View};
use super::PAGE;
use crate::names::escape;
use crate::serve::error::Refusal;
use crate::serve::upstream::{Entry, Failure};

/// A file the cache holds, as listed.
pub(super) fn entry_of(path: &str, etag: &str, size: u64) -> Entry {
    if is_lfs(etag) {
        Entry {
            path: path.to_string(),
            size,
            oid: pointer_oid(etag, size),
            lfs: Some(etag.to_string()),
        }
    } else {
        Entry {
            path: path.to_string(),
            size,
            oid: etag.to_string(),
            lfs: None,
        }
    }
}

pub(super) fn is_lfs(etag: &str) -> bool {
    etag.len() == 64
}

/// The LFS pointer file of a blob, as git stores it in the repository.
fn pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// The git blob id of the LFS pointer file of a blob (what the Hub lists as its `oid`).
fn pointer_oid(sha256: &str, size: u64) -> String {
    let text = pointer(sha256, size);
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", text.len()));
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

/// A file as the tree and paths-info APIs list it (an LFS file with its pointer's git oid).
fn file_entry(f: &Entry) -> serde_json::Value {
    match &f.lfs {
        Some(sha) => serde_json::json!({
            "type": "file", "path": f.path, "size": f.size, "oid": f.oid,
            "lfs": {"oid": sha, "size": f.size, "pointerSize": pointer(sha, f.size).len()},
        }),
        None => serde_json::json!({"type": "file", "path": f.path, "size": f.size, "oid": f.oid}),
    }
}

/// `POST /api/…/paths-info/{rev}` (form `paths=…`, repeated): the entries of those paths that
/// exist (files, and folders as `directory`), in the order asked; unknown paths are left out,
/// as the Hub does. At most [`PAGE`] paths are answered.
pub(super) async fn paths_info(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rev)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
    body: String,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    let asked: Vec<String> = url::form_urlencoded::parse(body.as_bytes())
        .filter(|(k, _)| k == "paths")
        .map(|(_, v)| v.trim_end_matches('/').to_string())
        .take(PAGE)
        .collect();
    let mut out = Vec::new();
    for p in &asked {
        if let Some(f) = at.listing.entries.iter().find(|f| &f.path == p) {
            out.push(file_entry(f));
        } else if at
            .listing
            .entries
            .iter()
            .any(|f| f.path.starts_with(&format!("{p}/")))
        {
            out.push(serde_json::json!({"type": "directory", "path": p, "size": 0, "oid": "0".repeat(40)}));
        }
    }
    Ok(super::json(StatusCode::OK, &out))
}

fn info_json(at: &View) -> serde_json::Value {
    serde_json::json!({
        "id": at.id,
        "modelId": at.id,
        "sha": at.listing.commit,
        "siblings": at.listing.entries.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect::<Vec<_>>(),
    })
}

pub(super) async fn info_main(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, "main", &headers).await?;
    Ok(super::json(StatusCode::OK, &info_json(&at)))
}

pub(super) async fn info(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rev)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    Ok(super::json(StatusCode::OK, &info_json(&at)))
}

/// `GET /api/…/refs`: the upstream's branches and tags when it answers, else the cache's.
pub(super) async fn refs(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (t, id) = Mirror::kind_id(&kind, &org, &name)?;
    let one = |name: &str, full: &str, commit: &str| serde_json::json!({"name": name, "ref": full, "targetCommit": commit});
    if let Some(up) = &m.upstream {
        let who = up
            .identity(authorization(&headers))
            .map_err(Refusal::failure)?;
        let fallback = match up.refs(t, &id, &who).await {
            Ok(r) => {
                let list = |l: &[crate::hub::GitRef]| -> Vec<serde_json::Value> {
                    l.iter()
                        .map(|g| one(&g.name, &g.full_name, &g.target_commit))
                        .collect()
                };
                return Ok(super::json(
                    StatusCode::OK,
                    &serde_json::json!({"branches": list(&r.branches), "tags": list(&r.tags), "converts": [], "pullRequests": []}),
                ));
            }
            Err(Failure::Down(why)) if !up.may_answer_offline(t, &id, &who) => {
                return Err(Refusal::unchecked(&id, &why))
            }
            Err(Failure::Down(why)) => Refusal::down(&id, "refs", Some(&why)),
            Err(f) => return Err(Refusal::failure(f)),
        };
        if m.held(t, &id).is_err() {
            return Err(fallback);
        }
    }
    let repo = m.held(t, &id)?;
    let mut branches = Vec::new();
    let mut tags = Vec::new();
    for (name, commit) in repo.list_refs() {
        if let Some(t) = name.strip_prefix("refs/tags/") {
            tags.push(one(t, &name, &commit));
        } else if !name.starts_with("refs/") {
            branches.push(one(&name, &format!("refs/heads/{name}"), &commit));
        }
    }
    Ok(super::json(
        StatusCode::OK,
        &serde_json::json!({"branches": branches, "tags": tags, "converts": [], "pullRequests": []}),
    ))
}

#[derive(serde::Deserialize)]
pub(super) struct TreeQuery {
    #[serde(default)]
    recursive: Option<String>,
    /// Where a page starts: the index of its first entry (opaque to clients, who follow
    /// `Link: rel="next"`).
    #[serde(default)]
    cursor: Option<usize>,
}

pub(super) async fn tree(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rest)): UrlPath<(String, String, String, String)>,
    Query(q): Query<TreeQuery>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (rev, below) = match rest.split_once('/') {
        Some((r, p)) => (r.to_string(), p.trim_end_matches('/').to_string()),
        None => (rest.clone(), String::new()),
    };
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    let recursive = q
        .recursive
        .as_deref()
        .is_some_and(|v| v == "true" || v == "1");
    let prefix = if below.is_empty() {
        String::new()
    } else {
        format!("{below}/")
    };
    let mut out = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for f in &at.listing.entries {
        let Some(rel) = f.path.strip_prefix(&prefix) else {
            continue;
        };
        match rel.split_once('/') {
            Some((dir, _)) if !recursive => {
                dirs.insert(format!("{prefix}{dir}"));
                continue;
            }
            Some((_, _)) => {
                // Recursive: every folder on the way is listed too, as the Hub does.
                let mut acc = prefix.clone();
                for seg in rel
                    .split('/')
                    .collect::<Vec<_>>()
                    .iter()
                    .rev()
                    .skip(1)
                    .rev()
                {
                    acc.push_str(seg);
                    dirs.insert(acc.clone());
                    acc.push('/');
                }
            }
            None => {}
        }
        out.push(file_entry(f));
    }
    if !below.is_empty() && out.is_empty() && dirs.is_empty() {
        return Err(Refusal::miss(
            "EntryNotFound",
            &format!("no folder '{}'", escape(&below)),
            Some(&at.listing.commit),
        ));
    }
    let mut all: Vec<serde_json::Value> = dirs
        .into_iter()
        .map(|d| serde_json::json!({"type": "directory", "path": d, "size": 0, "oid": "0".repeat(40)}))
        .collect();
    all.extend(out);
    // Pages of PAGE entries; the next one's URL points at this server, as the client
    // reached it (the Host it sent: it is only sent back to that client).
    let from = q.cursor.unwrap_or(0).min(all.len());
    let to = (from + PAGE).min(all.len());
    let mut resp = super::json(StatusCode::OK, &all[from..to]);
    // A host name and port only: nothing else of the header is echoed into the link.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".-:[]".contains(&c))
        });
    if let (true, Some(host)) = (to < all.len(), host) {
        let recursive = if recursive { "recursive=true&" } else { "" };
        let next = format!(
            "<http://{host}{}?{recursive}cursor={to}>; rel=\"next\"",
            uri.path()
        );
        if let Ok(v) = next.parse() {
            resp.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(resp)
}
