//! The `resolve` route (`HEAD` and `GET`, models and datasets): the file a snapshot lists, with
//! the Hub's headers ([`file_headers`]), checked against the access model and the model's
//! signature, answered from its held blob once that is checked, else from a pull through the
//! upstream; one `Range` per request.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, Method, Response, StatusCode};

use super::blobs::{BlobCheck, Unservable};
use super::mirror::Mirror;
use super::refusal::refused_pull;
use crate::names::escape;
use crate::serve::error::Refusal;
use crate::serve::range;
use crate::serve::upstream::{Access, Entry, Failure};

pub(super) async fn resolve_model(
    State(m): State<Arc<Mirror>>,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response<Body>, Refusal> {
    // (The request taken whole: its headers are read, not copied.)
    let (method, headers) = (req.method(), req.headers());
    resolve(&m, "models", &org, &name, &rev, &path, method, headers).await
}

pub(super) async fn resolve_dataset(
    State(m): State<Arc<Mirror>>,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response<Body>, Refusal> {
    // (The request taken whole: its headers are read, not copied.)
    let (method, headers) = (req.method(), req.headers());
    resolve(&m, "datasets", &org, &name, &rev, &path, method, headers).await
}

/// The headers of a file's answer (a part of it with `part`): never compressed, its length
/// always said.
fn file_headers(
    f: &Entry,
    commit: &str,
    part: Option<&std::ops::Range<u64>>,
) -> axum::http::response::Builder {
    use axum::http::HeaderValue;
    let len = f.size;
    let (from, to) = part.map_or((0, len), |r| (r.start, r.end));
    let mut resp = Response::builder()
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )
        .header(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"))
        .header(header::CONTENT_LENGTH, HeaderValue::from(to - from));
    if let Ok(etag) = HeaderValue::try_from(format!("\"{}\"", f.etag())) {
        resp = resp
            .header(header::ETAG, etag.clone())
            .header("x-linked-etag", etag);
    }
    resp = resp
        .header("x-linked-size", HeaderValue::from(len))
        .header("x-repo-commit", commit);
    if let Some(r) = part {
        resp = resp.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{len}", r.start, r.end - 1),
        );
    }
    resp
}

#[allow(clippy::too_many_arguments)]
async fn resolve(
    m: &Mirror,
    kind: &str,
    org: &str,
    name: &str,
    rev: &str,
    path: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, who) = m.view(kind, org, name, rev, headers).await?;
    let commit = at.listing.commit.as_str();
    let Some(f) = at.listing.entries.iter().find(|f| f.path == path) else {
        if at.offline {
            return Err(Refusal::down(&at.id, path, None));
        }
        return Err(Refusal::miss(
            "EntryNotFound",
            &format!(
                "'{}' is not in '{}' at {commit}",
                escape(path),
                escape(&at.id),
            ),
            Some(commit),
        ));
    };
    let part = range::requested(headers, f.size, "the file", &format!("\"{}\"", f.etag()))?;
    let (from, to) = part.as_ref().map_or((0, f.size), |r| (r.start, r.end));
    let resp = file_headers(f, commit, part.as_ref());
    // A blob of any size is looked at (a damaged one is named, not taken for missing); a link
    // in its place is no blob.
    let blob_path = at.repo.blob_path(f.etag());
    let blobs = m.blobs(&blob_path);
    let held_size = blobs.as_ref().and_then(|d| d.file_size(f.etag()));
    let mut held = held_size.map(|_| blob_path.clone());
    if let (Some(up), Some(who)) = (&m.upstream, &who) {
        // Whether this client may have the file: the upstream says, for a file to fetch, and
        // for every file when each client is asked for (`--forward-token`).
        let fresh = held.is_none() && at.upstream;
        if up.forwards_tokens() || fresh {
            match up.authorize(at.kind, &at.id, commit, f, who, fresh).await {
                Ok(Access::Checked | Access::Granted | Access::Public) => {}
                Err(Failure::Down(why)) if held.is_none() => {
                    return Err(Refusal::down(&at.id, path, Some(&why)))
                }
                Err(Failure::Down(why)) => return Err(Refusal::unchecked(&at.id, &why)),
                Err(f) => return Err(Refusal::failure(f)),
            }
        }
    }
    // Under a signature policy every answer is checked against the model's signature at its
    // commit, whatever filled the cache (a pull before the key was set, wi-fetch without one):
    // a file it does not name, or describes otherwise, is refused before a byte of it leaves.
    let signed = match (&m.upstream, &who) {
        (Some(up), Some(who)) if up.checks_signatures() => {
            let sig = up
                .signature(at.kind, &at.id, commit, &at.listing, who)
                .await
                .map_err(|why| refused_pull(path, &why))?;
            match sig {
                Some(s) => crate::fetch::Fetcher::signed_file(&s, path, f.size, f.etag())
                    .map_err(|e| {
                        Refusal::upstream_refused(format!(
                            "'{}' is not served: {}",
                            escape(path),
                            escape(&e.to_string())
                        ))
                    })?
                    .map(|e| (s, e)),
                None => None,
            }
        }
        _ => None,
    };
    // A HEAD of a held blob of the right size reads nothing more (at the size level).
    if method == Method::HEAD
        && m.check == BlobCheck::Size
        && signed.is_none()
        && held_size == Some(f.size)
    {
        return Ok(resp.body(Body::empty()).unwrap_or_default());
    }
    // A held blob, checked before anything of it is answered: one that is not what it was
    // when verified is fetched again where the upstream can be asked, else refused.
    let mut opened = None;
    if let Some(blob) = held.clone() {
        let opened_blob = match &blobs {
            Some(dir) => m.open_blob(dir, blob.clone(), f).await,
            None => Err(Unservable::Unreadable),
        };
        let opened_blob = match (opened_blob, &signed) {
            (Ok(o), Some((s, e))) => m.check_signed(&blob, o, s, path, e).await,
            (r, _) => r,
        };
        match opened_blob {
            Ok(o) => opened = Some(o),
            Err(Unservable::Unreadable) => held = None,
            Err(Unservable::Damaged(why)) => {
                tracing::warn!(
                    repo = %escape(&at.id),
                    path = %escape(path),
                    blob = %blob.display(),
                    "the blob of '{}' in '{}' is damaged: {why}",
                    escape(path),
                    escape(&at.id),
                );
                let refetch = m.upstream.is_some() && at.upstream && who.is_some();
                if !refetch {
                    return Err(Refusal::internal(format!(
                        "the mirror's copy of '{}' is damaged ({why}); it is not served",
                        escape(path)
                    )));
                }
                // Out of the way (a reader holding it keeps its bytes): fetched anew below.
                let _ = std::fs::remove_file(&blob);
                held = None;
            }
        }
    }
    let Some((file, stamp)) = opened.filter(|_| held.is_some()) else {
        return match (&m.upstream, at.upstream, &who) {
            (Some(up), true, Some(who)) => {
                if method == Method::HEAD {
                    return Ok(resp.body(Body::empty()).unwrap_or_default());
                }
                let pull = up
                    .pull(at.kind, &at.id, commit, f, who)
                    .map_err(Refusal::failure)?;
                if let Err(why) = pull.started(from, to).await {
                    return Err(refused_pull(path, &why));
                }
                Ok(resp
                    .body(Body::from_stream(pull.body(from, to, super::PIECE)))
                    .unwrap_or_default())
            }
            (Some(_), _, _) => Err(Refusal::down(&at.id, path, None)),
            (None, _, _) => Err(Refusal::miss(
                "EntryNotFound",
                "its blob is gone",
                Some(commit),
            )),
        };
    };
    if method == Method::HEAD || from == to {
        return Ok(resp.body(Body::empty()).unwrap_or_default());
    }
    let (id, path) = (at.id.clone(), path.to_string());
    let body = super::source::body(file, stamp, from..to, super::PIECE, move |why| {
        tracing::warn!(
            repo = %escape(&id),
            path = %escape(&path),
            "the blob of '{}' in '{}' changed while it was sent: {}",
            escape(&path),
            escape(&id),
            escape(why),
        );
    });
    Ok(resp.body(Body::from_stream(body)).unwrap_or_default())
}
