//! The Xet routes (with [`crate::MockHubBuilder::xet`]): the token endpoint
//! (`/api/{type}s/{repo}/xet-read-token/{rev}`), the CAS's reconstructions
//! (`/cas/v1|v2/reconstructions/{hash}`) and telemetry (`POST /v1/telemetry`) on the hub's
//! port, and the signed xorb URLs (`/xorbs/{hash}?expires=…&sig=…`) on the CDN's.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use weight_inspect::xet::hash::XetHash;
use weight_inspect::xet::reconstruction::{
    FetchInfo, ReconstructionV1, ReconstructionV2, XorbFetch, XorbRange,
};

use crate::body::BodyOf;
use crate::faults::{RequestCtx, Target};
use crate::repo::{self, FileEntry, Source};
use crate::server::{
    hub_error, hv, injected, lookup, parse_range, query_pairs, s3_error, serve_file, RangeReq,
    Shared,
};
use crate::xet::XetStore;

/// `GET /api/{type}s/{repo}/xet-read-token/{rev}`: a CAS access token, in the headers
/// huggingface_hub reads and in the JSON body hf_xet reads. The repository's access rules
/// apply as for a download.
pub(crate) fn read_token(
    shared: &Shared,
    xet: &XetStore,
    headers: &HeaderMap,
    key: &str,
    rev: &str,
) -> Response {
    if let Err(r) = lookup(shared, headers, key, rev, true) {
        return r;
    }
    let (token, exp) = xet.token();
    let cas_url = format!("{}/cas", shared.hub_url);
    let mut r =
        Json(json!({ "accessToken": token, "exp": exp, "casUrl": cas_url })).into_response();
    let h = r.headers_mut();
    h.insert("x-xet-cas-url", hv(&cas_url));
    h.insert("x-xet-access-token", hv(&token));
    h.insert("x-xet-token-expiration", hv(&exp.to_string()));
    r
}

/// `POST /v1/telemetry`: taken and dropped.
pub(crate) fn telemetry() -> Response {
    Json(json!({})).into_response()
}

fn cas_error(status: StatusCode, msg: &str) -> Response {
    (status, Json(json!({ "error": msg }))).into_response()
}

/// `/cas/…` on the hub: `GET /cas/v1/reconstructions/{hash}` and `/cas/v2/…`.
pub(crate) async fn reconstruction(
    shared: &Shared,
    xet: &Arc<XetStore>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response {
    let segs: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    let ["cas", version @ ("v1" | "v2"), "reconstructions", hash] = segs[..] else {
        return cas_error(StatusCode::NOT_FOUND, "Not Found");
    };
    if *method != Method::GET && *method != Method::HEAD {
        return cas_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    if version == "v2" && !xet.cfg.v2 {
        return cas_error(StatusCode::NOT_FOUND, "Not Found");
    }
    let plan = shared.faults.plan(&RequestCtx {
        target: Target::Cas,
        is_body: false,
        is_listing: false,
        subject: uri.path(),
    });
    if let Some(answer) = &plan.answer {
        return injected(shared, answer, uri);
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if !token.is_some_and(|t| xet.token_valid(t)) {
        return cas_error(
            StatusCode::UNAUTHORIZED,
            "a valid, unexpired Xet access token is required (Authorization: Bearer …)",
        );
    }
    let Ok(hash) = hash.parse::<XetHash>() else {
        return cas_error(StatusCode::BAD_REQUEST, "not a Xet hash");
    };
    let file = match xet.file(&hash) {
        Some(f) => Some(f),
        None => {
            // The Hub's CAS holds every file stored in Xet, whether or not this server was
            // asked about it (a client may hold its Xet hash from a listing it saved while
            // talking to an earlier run of this server): the files not yet made into chunks
            // are made now, once each, and the hash looked up again.
            ingest_every_file(shared, xet).await;
            xet.file(&hash)
        }
    };
    let Some(file) = file else {
        return cas_error(StatusCode::NOT_FOUND, "no file of this hash");
    };
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (first, last) = match parse_range(range, file.size) {
        RangeReq::Unsatisfiable => {
            let mut r = cas_error(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            r.headers_mut()
                .insert(header::CONTENT_RANGE, hv(&format!("bytes */{}", file.size)));
            return r;
        }
        RangeReq::Full if file.size == 0 => (1, 0),
        RangeReq::Full => (0, file.size - 1),
        RangeReq::Span(a, b) => (a, b),
    };
    let a = if first > last {
        crate::xet::Answer {
            offset_into_first_range: 0,
            terms: Vec::new(),
            fetches: BTreeMap::new(),
        }
    } else {
        xet.answer(&file, first, last)
    };
    let url = |h: &XetHash| xet.xorb_url(&shared.cdn_url, h);
    let body = if version == "v2" {
        let xorbs = a
            .fetches
            .iter()
            .map(|(h, list)| {
                let u = url(h);
                // One URL per range: a client asks each with a single `Range`.
                let fetches = list
                    .iter()
                    .map(|&(chunks, bytes)| XorbFetch {
                        url: u.clone(),
                        ranges: vec![XorbRange { chunks, bytes }],
                    })
                    .collect();
                (*h, fetches)
            })
            .collect();
        serde_json::to_value(ReconstructionV2 {
            offset_into_first_range: a.offset_into_first_range,
            terms: a.terms,
            xorbs,
        })
    } else {
        let fetch_info = a
            .fetches
            .iter()
            .map(|(h, list)| {
                let u = url(h);
                let infos = list
                    .iter()
                    .map(|&(range, url_range)| FetchInfo {
                        range,
                        url: u.clone(),
                        url_range,
                    })
                    .collect();
                (*h, infos)
            })
            .collect();
        serde_json::to_value(ReconstructionV1 {
            offset_into_first_range: a.offset_into_first_range,
            terms: a.terms,
            fetch_info,
        })
    };
    match body {
        Ok(v) => {
            shared.stats.with(|s| s.cas.reconstructions += 1);
            Json(v).into_response()
        }
        Err(e) => hub_error(StatusCode::INTERNAL_SERVER_ERROR, None, &e.to_string()),
    }
}

/// `GET /xorbs/{hash}?expires=…&sig=…` on the CDN: the xorb's bytes, exactly the `Range`
/// asked (206), or all of them (200). No credential; an expired URL or a bad signature is 403.
pub(crate) async fn xorb(
    shared: &Arc<Shared>,
    xet: &XetStore,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    hash: &str,
) -> Response {
    if *method != Method::GET && *method != Method::HEAD {
        return s3_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "Method not allowed",
        );
    }
    let Ok(h) = hash.parse::<XetHash>() else {
        return s3_error(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        );
    };
    let q = query_pairs(uri);
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let (Some(expires), Some(sig)) = (get("expires"), get("sig")) else {
        return s3_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
    };
    if let Err(msg) = xet.check_xorb_url(&h, expires, sig) {
        return s3_error(StatusCode::FORBIDDEN, "AccessDenied", &msg);
    }
    let Some(x) = xet.xorb(&h) else {
        return s3_error(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        );
    };
    let plan = shared.faults.plan(&RequestCtx {
        target: Target::Cas,
        is_body: *method == Method::GET,
        is_listing: false,
        subject: uri.path(),
    });
    if let Some(answer) = &plan.answer {
        return injected(shared, answer, uri);
    }
    let hex = h.to_string();
    let entry = Arc::new(FileEntry {
        path: format!("xorbs/{hex}"),
        size: x.bytes.len() as u64,
        sha256: hex.clone(),
        git_sha1: hex.clone(),
        source: Source {
            base: repo::Base::Memory(x.bytes.clone()),
            patches: Vec::new(),
        },
    });
    let mut hm = HeaderMap::new();
    hm.insert(header::ETAG, hv(&format!("\"{hex}\"")));
    hm.insert(header::CONTENT_TYPE, hv("application/octet-stream"));
    let resp = serve_file(shared, method, headers, &entry, &plan, hm, &BodyOf::Xorb).await;
    if *method == Method::GET && resp.status().is_success() {
        shared.stats.with(|s| s.cas.xorb_requests += 1);
    }
    resp
}

/// Makes every Xet-backed file of every repository and commit into chunks (each content once:
/// [`XetStore::file_for`] keeps what it made, so a later call costs a walk of the entries).
async fn ingest_every_file(shared: &Shared, xet: &Arc<XetStore>) {
    let entries: Vec<Arc<FileEntry>> = {
        let repos = shared.repos.read().unwrap_or_else(|e| e.into_inner());
        let mut seen = std::collections::HashSet::new();
        repos
            .values()
            .flat_map(|r| r.commits.values())
            .flat_map(|c| c.files.values())
            .filter(|f| shared.is_lfs(f) && seen.insert(f.sha256.clone()))
            .cloned()
            .collect()
    };
    for f in &entries {
        xet.file_for(f).await;
    }
}
