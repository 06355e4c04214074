//! What the mirror does not hold or may not answer, as the Hub says it: [`Refusal`]'s mirror
//! answers (404 with the Hub's `X-Error-Code`, 504 when the upstream cannot be reached or
//! asked, the upstream's refusal as the client's) and a pull that failed ([`refused_pull`]).

use axum::http::StatusCode;

use crate::hub::HubError;
use crate::names::escape;
use crate::serve::error::Refusal;
use crate::serve::upstream::Failure;

/// A pull of `path` (or the signature it is checked against) that failed: 504 when the
/// upstream could not be reached, 502 when it answered wrongly, and 502
/// `UpstreamContentRefused` when the mirror's checks refused what it served.
pub(super) fn refused_pull(path: &str, why: &super::upstream::PullError) -> Refusal {
    let message = format!(
        "fetching '{}' from the upstream failed: {}",
        escape(path),
        escape(&why.message)
    );
    if why.network {
        Refusal::gateway_timeout(message)
    } else if why.refused {
        Refusal::upstream_refused(message)
    } else {
        Refusal::bad_gateway(message)
    }
}

/// What the mirror does not hold or may not answer, as the Hub says it (`X-Error-Code`).
impl Refusal {
    /// 404 with the Hub's `code`, and `X-Repo-Commit` when the commit is known.
    pub(super) fn miss(code: &'static str, message: &str, commit: Option<&str>) -> Refusal {
        Refusal::not_found(code, message).commit(commit)
    }

    /// The upstream cannot be reached and the cache does not hold what was asked: 504, never
    /// a 401 or 404 that would tell the client the repository does not exist.
    pub(super) fn down(id: &str, what: &str, why: Option<&str>) -> Refusal {
        Refusal::gateway_timeout(format!(
            "'{}' ({}) is not here and the upstream cannot be reached{}",
            escape(id),
            escape(what),
            why.map(|w| format!(": {}", escape(w))).unwrap_or_default()
        ))
    }

    /// The mirror holds what was asked, but may not answer it: the upstream cannot be asked
    /// whether this client may have it, and the repository is not known to be public.
    pub(super) fn unchecked(id: &str, why: &str) -> Refusal {
        Refusal::gateway_timeout(format!(
            "'{}': the upstream cannot be reached to ask whether this client may have it \
             (only a public repository's files are served without asking): {}",
            escape(id),
            escape(why)
        ))
    }

    /// The upstream's answer (or its absence) as this client's.
    pub(super) fn failure(f: Failure) -> Refusal {
        match f {
            Failure::Refused(e) => Refusal::hub(&e),
            Failure::Invalid(why) => Refusal::bad_request(escape(&why)),
            Failure::Disagrees(why) => Refusal::bad_gateway(why),
            Failure::Down(why) => Refusal::gateway_timeout(format!(
                "the upstream cannot be reached: {}",
                escape(&why)
            )),
        }
    }

    /// The upstream's refusal, as the Hub would say it.
    fn hub(e: &HubError) -> Refusal {
        let (status, code) = match e {
            HubError::RevisionNotFound { .. } => (StatusCode::NOT_FOUND, "RevisionNotFound"),
            HubError::EntryNotFound { .. } => (StatusCode::NOT_FOUND, "EntryNotFound"),
            HubError::GatedRepo { .. } => (StatusCode::UNAUTHORIZED, "GatedRepo"),
            HubError::AccessDenied { .. } => (StatusCode::UNAUTHORIZED, "RepoNotFound"),
            _ => (StatusCode::NOT_FOUND, "RepoNotFound"),
        };
        Refusal::new(status, escape(&e.to_string())).code(code)
    }
}
