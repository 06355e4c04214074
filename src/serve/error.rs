//! Every answer that is not what was asked, in one type: [`Refusal`] carries its status, the
//! Hub's `X-Error-Code` where a client reads one, the message (names from the request escaped)
//! and the headers that go with it (`X-Repo-Commit`, `Content-Range` of a 416). Handlers return
//! `Result<Response, Refusal>`; the answer is made here, as JSON `{"error": …}`.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;

use crate::names::escape;

/// An answer that refuses, fails or reports a miss (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    status: StatusCode,
    code: Option<&'static str>,
    message: String,
    commit: Option<String>,
    /// The length a 416 answers `Content-Range: bytes */LEN` with.
    unsatisfiable: Option<u64>,
}

impl Refusal {
    /// `status` with `message` (already escaped where it holds names from the request).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code: None,
            message: message.into(),
            commit: None,
            unsatisfiable: None,
        }
    }

    /// With the Hub's `X-Error-Code`.
    pub fn code(mut self, code: &'static str) -> Refusal {
        self.code = Some(code);
        self
    }

    /// With `X-Repo-Commit`.
    pub fn commit(mut self, commit: Option<&str>) -> Refusal {
        self.commit = commit.map(str::to_string);
        self
    }

    /// 400: the client's request is wrong.
    pub fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404 with the Hub's error code.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::NOT_FOUND, message).code(code)
    }

    /// 416: the range starts past the end of a body of `len` bytes (`what`: "the tensor").
    pub fn unsatisfiable(what: &str, len: u64) -> Refusal {
        Refusal {
            unsatisfiable: Some(len),
            ..Refusal::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("{what} has {len} bytes"),
            )
        }
    }

    /// 500: the server failed (names escaped by the caller).
    pub fn internal(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// 502: the upstream answered wrongly.
    pub fn bad_gateway(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_GATEWAY, message)
    }

    /// 502 with [`crate::net::UPSTREAM_REFUSED`]: what the upstream served was refused by the
    /// mirror's own checks; asking again gets the same answer.
    pub fn upstream_refused(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_GATEWAY, message).code(crate::net::UPSTREAM_REFUSED)
    }

    /// 503: what was asked is not served now (a model changed on disk).
    pub fn unavailable(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 504: the upstream could not be reached for what the mirror lacks.
    pub fn gateway_timeout(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::GATEWAY_TIMEOUT, message).code(crate::net::UPSTREAM_UNREACHABLE)
    }

    /// 404 "no model" (the name escaped).
    pub fn no_model(model: &str) -> Refusal {
        Refusal::new(
            StatusCode::NOT_FOUND,
            format!("no model '{}'", escape(model)),
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> axum::response::Response {
        let mut r: Response<Body> =
            super::json(self.status, &serde_json::json!({ "error": self.message }));
        let h = r.headers_mut();
        if let Some(v) = self.code.and_then(|c| HeaderValue::from_str(c).ok()) {
            h.insert("x-error-code", v);
        }
        // The message where the Hub's clients read it (huggingface_hub shows it): one line of
        // visible ASCII, bounded (a header holds nothing else).
        let line: String = self
            .message
            .chars()
            .take(400)
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&line) {
            h.insert("x-error-message", v);
        }
        if let Some(v) = self.commit.and_then(|c| HeaderValue::from_str(&c).ok()) {
            h.insert("x-repo-commit", v);
        }
        if let Some(v) = self
            .unsatisfiable
            .and_then(|len| HeaderValue::from_str(&format!("bytes */{len}")).ok())
        {
            h.insert(header::CONTENT_RANGE, v);
        }
        r
    }
}
