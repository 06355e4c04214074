//! A Hub mirror of a Hugging Face cache: the routes `wi-fetch`, huggingface_hub and
//! llama.cpp read, answered from what the cache holds and, with an [`Upstream`], what it
//! fetches (pull-through, under the access model of [`super::upstream`]), with no Xet
//! anywhere (no `X-Xet-*` header, no `xetHash` in a listing: huggingface_hub would go to Xet's
//! servers for such an entry, past the mirror).
//!
//! - `GET /api/{models|datasets}/{org}/{name}[/revision/{rev}]`: `id`, `sha`, `siblings`;
//! - `GET /api/…/refs`: `branches[].targetCommit` (what llama.cpp reads), `tags`;
//! - `GET /api/…/tree/{rev}[/{path}]` (`recursive=true` lists every file below), in pages of
//!   1,000 entries linked by `Link: rel="next"` URLs at this server;
//! - `POST /api/…/paths-info/{rev}` (form `paths=…`): the entries of those paths;
//! - `HEAD` and `GET /[datasets/]{org}/{name}/resolve/{rev}/{path}`: the file, with
//!   `X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`, `Content-Length` and
//!   `Accept-Ranges` (one `Range` per request, as for tensors);
//! - errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound` with
//!   `X-Repo-Commit`), and never a name unescaped.
//!
//! Only files the snapshot lists are served, by their blob; a path is a key, never joined onto
//! a folder.
//!
//! Here, the router and the size of a listing's pages ([`PAGE`]); in the files beside it:
//! `mirror.rs`, the mirror's state and a repository at a revision as it answers for it (what
//! the cache holds, or what the upstream lists, with the sizes recorded when its files were
//! verified); `blobs.rs`, how a held blob is checked before it is served ([`BlobCheck`], the
//! model's signature); `metadata.rs`, the metadata routes (info, refs, the tree in pages,
//! paths-info) and a file's entry as they list it (its LFS pointer's oid); `resolve.rs`, the
//! `resolve` route: a file's headers, its bytes from the cache or from a pull, one range;
//! `refusal.rs`, what the mirror does not hold or may not answer, as the Hub says it, and a
//! failed pull.

mod blobs;
mod metadata;
mod mirror;
mod refusal;
mod resolve;

pub use blobs::BlobCheck;

use std::sync::Arc;

use axum::routing::get;
use axum::Router;

use super::labelled;
use super::upstream::{Memory, Upstream};
use crate::cache::HfCache;
use metadata::{info, info_main, paths_info, refs, tree};
use mirror::{Mirror, BLOB_DIRS, HASHED};
use resolve::{resolve_dataset, resolve_model};

// What the files of this module name as `super::…`, as they did in `hub.rs` (`super` was
// `serve` there).
use super::{json, source, upstream, PIECE};

/// The mirror's routes over the cache at `cache`, filled from `upstream` when there is one,
/// its blobs checked as `check` says.
pub(crate) fn router(cache: HfCache, upstream: Option<Arc<Upstream>>, check: BlobCheck) -> Router {
    let m = Arc::new(Mirror {
        cache,
        upstream,
        check,
        hashed: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        signed_ok: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        recorded: Memory::new(),
        manifest_sizes: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        local_views: Memory::new(),
        blob_dirs: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(BLOB_DIRS).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
    });
    Router::new()
        .route("/api/{kind}/{org}/{name}", labelled(get(info_main), "info"))
        .route(
            "/api/{kind}/{org}/{name}/revision/{*rev}",
            labelled(get(info), "info"),
        )
        .route("/api/{kind}/{org}/{name}/refs", labelled(get(refs), "refs"))
        .route(
            "/api/{kind}/{org}/{name}/tree/{*rest}",
            labelled(get(tree), "tree"),
        )
        .route(
            "/api/{kind}/{org}/{name}/paths-info/{*rev}",
            labelled(axum::routing::post(paths_info), "paths_info"),
        )
        .route(
            "/datasets/{org}/{name}/resolve/{rev}/{*path}",
            labelled(get(resolve_dataset), "resolve"),
        )
        .route(
            "/{org}/{name}/resolve/{rev}/{*path}",
            labelled(get(resolve_model), "resolve"),
        )
        .with_state(m)
}

/// Entries per page of a listing, as the Hub pages its tree API.
pub(crate) const PAGE: usize = 1000;
