//! Fetching a tensor from a `weight-inspect serve` server, checked before it is handed over:
//! the whole tensor against `X-Weight-SHA256`, a slice against its `Content-Digest`.

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use futures::StreamExt;
use sha2::{Digest as _, Sha256};

use super::SHA256_HEADER;
use crate::names::escape;

/// Why a tensor could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GetError {
    /// The URL is not one of a served model (`http[s]://host:port/models/{model}`).
    #[error("'{0}' is not the URL of a served model (http://HOST:PORT/models/MODEL)")]
    BadUrl(String),
    /// The request failed.
    #[error("{url}: {source}")]
    Http {
        /// The URL asked.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error.
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
        /// The server's message (escaped).
        message: String,
    },
    /// The answer is not what was asked for, or its bytes do not match its digest: nothing
    /// was handed over.
    #[error("{url}: {what}")]
    Mismatch {
        /// The URL asked.
        url: String,
        /// What is wrong.
        what: String,
    },
    /// Writing the bytes failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl GetError {
    /// The class of failure, for exit codes.
    pub fn exit_class(&self) -> crate::exit::ExitClass {
        use crate::exit::ExitClass;
        match self {
            GetError::BadUrl(_) | GetError::Io { .. } => ExitClass::Local,
            GetError::Http { .. } => ExitClass::Network,
            GetError::Status { status: 404, .. } => ExitClass::NotFound,
            GetError::Status { .. } => ExitClass::Network,
            GetError::Mismatch { .. } => ExitClass::Integrity,
        }
    }
}

/// What [`get_tensor`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Got {
    /// Bytes written.
    pub bytes: u64,
    /// The bytes of the tensor they are (`None`: the whole tensor).
    pub range: Option<Range<u64>>,
    /// The SHA-256 of the whole tensor, as the server said it (checked when the whole tensor
    /// was fetched).
    pub tensor_sha256: String,
}

/// Largest model report [`describe`] reads.
pub const MAX_REPORT_BYTES: u64 = 64 << 20;

/// A tensor of a served model, as the model's report describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The tensor's name.
    pub name: String,
    /// Its element type, in its format's naming.
    pub dtype: crate::format::DType,
    /// Its dimensions in the file's own order (GGUF: `ne[0]` first).
    pub shape: Vec<u64>,
    /// Its size in bytes.
    pub n_bytes: u64,
    /// The file stores it big-endian (a big-endian GGUF).
    pub big_endian: bool,
}

/// The URL of the model at `model_url` with `tail` appended (checked: an http(s) URL).
fn model_url_with(model_url: &str, tail: &[&str]) -> Result<url::Url, GetError> {
    let mut url = url::Url::parse(model_url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| GetError::BadUrl(escape(model_url).into_owned()))?;
    {
        let mut segs = url
            .path_segments_mut()
            .map_err(|()| GetError::BadUrl(escape(model_url).into_owned()))?;
        segs.pop_if_empty();
        for part in tail {
            segs.push(part);
        }
    }
    Ok(url)
}

/// An error answer as [`GetError::Status`]: at most 64 KiB of its body read (a message, not a
/// download), its `error` field if it is JSON, escaped.
async fn status_error(url: &str, resp: reqwest::Response) -> GetError {
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(Ok(piece)) = stream.next().await {
        body.extend_from_slice(&piece[..piece.len().min((64 << 10) - body.len())]);
        if body.len() >= 64 << 10 {
            break;
        }
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or(body);
    GetError::Status {
        url: url.to_string(),
        status,
        message: escape(&message.chars().take(500).collect::<String>()).into_owned(),
    }
}

/// What the report of the model at `model_url` says of tensor `name` (the report read whole,
/// at most [`MAX_REPORT_BYTES`]).
pub async fn describe(
    client: &reqwest::Client,
    model_url: &str,
    name: &str,
) -> Result<Described, GetError> {
    let url = model_url_with(model_url, &[])?;
    let shown = url.to_string();
    let http = |source| GetError::Http {
        url: shown.clone(),
        source,
    };
    let bad = |what: String| GetError::Mismatch {
        url: shown.clone(),
        what,
    };
    let resp = client.get(url.clone()).send().await.map_err(http)?;
    if !resp.status().is_success() {
        return Err(status_error(&shown, resp).await);
    }
    let mut text = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(http)?;
        if (text.len() + piece.len()) as u64 > MAX_REPORT_BYTES {
            return Err(bad(format!(
                "a report larger than {MAX_REPORT_BYTES} bytes"
            )));
        }
        text.extend_from_slice(&piece);
    }
    #[derive(serde::Deserialize)]
    struct Tensor {
        name: String,
        dtype: String,
        shape: Vec<u64>,
        n_bytes: u64,
    }
    #[derive(serde::Deserialize)]
    struct Report {
        format: Option<String>,
        endianness: Option<String>,
        #[serde(default)]
        tensors: Vec<Tensor>,
    }
    let report: Report =
        serde_json::from_slice(&text).map_err(|e| bad(format!("not a model's report: {e}")))?;
    let t = report
        .tensors
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| GetError::Status {
            url: shown.clone(),
            status: 404,
            message: format!("no tensor '{}'", escape(name)),
        })?;
    let gguf = report
        .format
        .as_deref()
        .is_some_and(|f| f.starts_with("gguf"));
    let dtype = if gguf {
        crate::format::ggml::GgmlType::from_name(&t.dtype).map(crate::format::DType::Ggml)
    } else {
        crate::format::safetensors::Dtype::from_name(&t.dtype)
            .map(crate::format::DType::Safetensors)
    }
    .ok_or_else(|| bad(format!("unknown dtype '{}'", escape(&t.dtype))))?;
    Ok(Described {
        name: t.name,
        dtype,
        shape: t.shape,
        n_bytes: t.n_bytes,
        big_endian: report.endianness.as_deref() == Some("big"),
    })
}

/// Fetches tensor `name` (or bytes `range` of it) of the model at `model_url` into `dest`: the
/// body goes to a new file beside it as it arrives, hashed, and is renamed to `dest` only once
/// it matches — the whole tensor its `X-Weight-SHA256`, a slice its `Content-Digest`. Memory
/// stays flat whatever the tensor's size.
pub async fn get_tensor(
    client: &reqwest::Client,
    model_url: &str,
    name: &str,
    range: Option<Range<u64>>,
    dest: &Path,
) -> Result<Got, GetError> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let io = |source| GetError::Io {
        path: dest.to_path_buf(),
        source,
    };
    let mut b = tempfile::Builder::new();
    b.prefix(".wi-get-");
    // The mode a user expects of a file they asked for (0644 under the usual umask), not a
    // temporary file's 0600: the umask applies as the file is created.
    #[cfg(unix)]
    b.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = b.tempfile_in(dir).map_err(io)?;
    let got = fetch_checked(client, model_url, name, range, |piece| {
        tmp.write_all(piece).map_err(io)
    })
    .await?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(dest).map_err(|e| io(e.error))?;
    Ok(got)
}

/// [`get_tensor`] into memory: the bytes, once they matched their digest. The buffer grows as
/// bytes arrive (never sized from a length the server announced), up to that length.
pub async fn get_tensor_bytes(
    client: &reqwest::Client,
    model_url: &str,
    name: &str,
    range: Option<Range<u64>>,
) -> Result<(Vec<u8>, Got), GetError> {
    let mut out = Vec::new();
    let got = fetch_checked(client, model_url, name, range, |piece| {
        out.extend_from_slice(piece);
        Ok(())
    })
    .await?;
    Ok((out, got))
}

/// The body of a tensor (or a slice), each piece handed to `sink` as it arrives and hashed;
/// `Ok` only once every byte arrived and matched the digest (the caller keeps nothing before).
#[tracing::instrument(name = "get_tensor", skip_all, fields(model = model_url, name, range = ?range))]
async fn fetch_checked(
    client: &reqwest::Client,
    model_url: &str,
    name: &str,
    range: Option<Range<u64>>,
    mut sink: impl FnMut(&[u8]) -> Result<(), GetError>,
) -> Result<Got, GetError> {
    let mut tail = vec!["tensors"];
    tail.extend(name.split('/'));
    let url = model_url_with(model_url, &tail)?;
    let shown = url.to_string();
    let mut req = client.get(url.clone());
    if let Some(r) = &range {
        if r.start >= r.end {
            return Err(GetError::BadUrl(format!(
                "empty range {}..{}",
                r.start, r.end
            )));
        }
        req = req.header(
            reqwest::header::RANGE,
            format!("bytes={}-{}", r.start, r.end - 1),
        );
    }
    let http = |source| GetError::Http {
        url: shown.clone(),
        source,
    };
    let mismatch = |what: String| GetError::Mismatch {
        url: shown.clone(),
        what,
    };
    let resp = req.send().await.map_err(http)?;
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        return Err(status_error(&shown, resp).await);
    }
    let h = resp.headers();
    let tensor_sha = h
        .get(SHA256_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() == 64 && v.bytes().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| mismatch(format!("no {SHA256_HEADER} header")))?;
    let expected: [u8; 32] = match (&range, status) {
        (None, 200) => hex_digest(&tensor_sha),
        (Some(r), 206) => {
            let cr = h
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !cr.starts_with(&format!("bytes {}-{}/", r.start, r.end - 1)) {
                return Err(mismatch(format!(
                    "asked for bytes {}-{}, got Content-Range '{}'",
                    r.start,
                    r.end - 1,
                    escape(cr)
                )));
            }
            h.get("content-digest")
                .and_then(|v| v.to_str().ok())
                .and_then(sha256_of_digest_header)
                .ok_or_else(|| mismatch("no sha-256 Content-Digest for the slice".into()))?
        }
        (_, s) => return Err(mismatch(format!("unexpected status {s}"))),
    };
    let mut hasher = Sha256::new();
    let mut n = 0u64;
    // The length is announced (the server always does): what is taken is bounded by it.
    let want = resp
        .content_length()
        .ok_or_else(|| mismatch("no Content-Length".into()))?;
    let mut body = resp.bytes_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(http)?;
        n += piece.len() as u64;
        if n > want {
            return Err(mismatch(format!("a body longer than its {want} bytes")));
        }
        hasher.update(&piece);
        sink(&piece)?;
    }
    if n != want {
        return Err(mismatch(format!(
            "the body ended after {n} of its {want} bytes: nothing kept"
        )));
    }
    if <[u8; 32]>::from(hasher.finalize()) != expected {
        return Err(mismatch(format!(
            "the {n} bytes received do not match their digest: nothing kept"
        )));
    }
    Ok(Got {
        bytes: n,
        range,
        tensor_sha256: tensor_sha,
    })
}

fn hex_digest(h: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    let _ = hex::decode_to_slice(h, &mut out);
    out
}

/// The SHA-256 of a `Content-Digest: sha-256=:BASE64:` header.
fn sha256_of_digest_header(v: &str) -> Option<[u8; 32]> {
    v.split(',').find_map(|item| {
        let (alg, val) = item.trim().split_once('=')?;
        if !alg.trim().eq_ignore_ascii_case("sha-256") {
            return None;
        }
        let b64 = val.trim().strip_prefix(':')?.strip_suffix(':')?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        bytes.try_into().ok()
    })
}
