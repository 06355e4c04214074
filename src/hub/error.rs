//! The Hub client's error type.

use std::time::Duration;

/// What a token hint says, appended to "needs a token" errors.
pub(crate) const TOKEN_HINT: &str =
    "a token is needed: set HF_TOKEN, or save one in the token file ($HF_HOME/token)";

/// An error talking to the Hub. Every variant names the repository, revision, path or URL it
/// concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The repository does not exist, or it is private and the token (if any) cannot see it.
    #[error("repository '{repo}' not found{}", if *token_sent { "" } else { " (if it is private or gated, a token is needed: set HF_TOKEN, or save one in the token file ($HF_HOME/token))" })]
    RepoNotFound {
        /// `org/name`.
        repo: String,
        /// Whether an `Authorization` header was sent.
        token_sent: bool,
    },
    /// The repository exists but has no such branch, tag or commit.
    #[error("revision '{revision}' not found in repository '{repo}'")]
    RevisionNotFound {
        /// `org/name`.
        repo: String,
        /// The revision asked for.
        revision: String,
    },
    /// The repository and revision exist but have no such file.
    #[error("file '{path}' not found in repository '{repo}' at revision '{revision}'")]
    EntryNotFound {
        /// `org/name`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// Path in the repository.
        path: String,
    },
    /// A gated repository: the user must accept its conditions and send a token.
    #[error("repository '{repo}' is gated: {}", if *token_sent { "this token has not been granted access (request access on the repository's page)" } else { TOKEN_HINT })]
    GatedRepo {
        /// `org/name`.
        repo: String,
        /// Whether an `Authorization` header was sent.
        token_sent: bool,
        /// The server's message, if any.
        message: String,
    },
    /// The server refused access (401/403) without saying why.
    #[error("access to repository '{repo}' denied (HTTP {status} from {url}): {}", if *token_sent { "the token was refused or has no access" } else { TOKEN_HINT })]
    AccessDenied {
        /// `org/name`.
        repo: String,
        /// The URL asked for.
        url: String,
        /// 401 or 403.
        status: u16,
        /// Whether an `Authorization` header was sent.
        token_sent: bool,
    },
    /// A 404 without an error code (the Hub names what is missing in `X-Error-Code`; a mirror
    /// may not).
    #[error("{} not found (HTTP 404 from {url}{})", fmt_missing(repo, revision, path.as_deref()), fmt_message(message))]
    NotFound {
        /// `org/name`.
        repo: String,
        /// The revision asked for, escaped.
        revision: String,
        /// The path in the repository, escaped, when a file was asked for.
        path: Option<String>,
        /// The URL asked for.
        url: String,
        /// The server's message, if any.
        message: String,
    },
    /// A connection, timeout or transport error, after retries.
    #[error("request to {url} failed after {attempts} attempt(s) in {:.1}s: {}", elapsed.as_secs_f64(), crate::net::cause(source))]
    Network {
        /// The URL asked for.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// Time spent, retries included.
        elapsed: Duration,
        /// The last transport error.
        #[source]
        source: reqwest::Error,
    },
    /// An answer whose body stopped coming: no byte for the metadata timeout.
    #[error(
        "{url}: the answer stalled: no byte for {:.1}s after {received} byte(s) of its body",
        waited.as_secs_f64()
    )]
    Stalled {
        /// The URL that answered (without its query).
        url: String,
        /// How long nothing came.
        waited: Duration,
        /// Body bytes received before it stalled.
        received: u64,
    },
    /// The server kept answering a transient error status (408, 429, 5xx) until retries ran out.
    #[error("{url} answered HTTP {status} after {attempts} attempt(s) in {:.1}s{}", elapsed.as_secs_f64(), fmt_message(message))]
    ServerError {
        /// The URL asked for.
        url: String,
        /// The last status.
        status: u16,
        /// How many attempts were made.
        attempts: u32,
        /// Time spent, retries included.
        elapsed: Duration,
        /// The server's message, if any.
        message: String,
    },
    /// A status this client does not expect.
    #[error("unexpected answer HTTP {status} from {url}{}", fmt_message(message))]
    UnexpectedStatus {
        /// The URL asked for.
        url: String,
        /// The status.
        status: u16,
        /// The server's message, if any.
        message: String,
    },
    /// An answer that does not have the expected shape (missing header, bad JSON, too large).
    #[error("invalid answer from {url}: {reason}")]
    InvalidResponse {
        /// The URL asked for.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A path that could not safely become a local file name (`..`, absolute, `\`, empty
    /// segments, control characters…). It is refused: nothing is written for it. (Unsafe paths
    /// a *server* lists are set aside in [`super::RepoListing::refused`] instead.)
    #[error("refusing unsafe path '{path}' in repository '{repo}': {reason}")]
    UnsafePath {
        /// `org/name`.
        repo: String,
        /// The path as listed.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A repository id that is not `name` or `org/name`.
    #[error("invalid repository id '{repo}': {reason}")]
    InvalidRepoId {
        /// The id given.
        repo: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A revision that cannot name a ref file safely.
    #[error("invalid revision '{revision}': {reason}")]
    InvalidRevision {
        /// The revision given.
        revision: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The endpoint is not an http(s) URL.
    #[error("invalid Hub endpoint '{endpoint}': {reason}")]
    InvalidEndpoint {
        /// The endpoint given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
    /// A redirect that is not followed: to another host (for API requests), to another scheme,
    /// from https to http, a loop, or too many hops.
    #[error("{url}: {source}")]
    Redirect {
        /// The URL that answered with the redirect (without its query).
        url: String,
        /// What is wrong with it.
        #[source]
        source: crate::net::RedirectError,
    },
    /// A revision that is a commit id, answered with another commit: what is fetched for it
    /// would not be that commit's files (and a ref named like the commit would lie).
    #[error(
        "{url}: asked for commit {asked}, the server answered with commit {answered}: refusing \
         files that are not that commit's"
    )]
    CommitMismatch {
        /// The URL asked (without its query).
        url: String,
        /// The commit asked for.
        asked: String,
        /// The commit the answer named.
        answered: String,
    },
    /// A mirror's own checks refused what its upstream served (`X-Error-Code:
    /// UpstreamContentRefused`: a model signature that does not hold or name the file, bytes
    /// that differ): asked once, the same answer would come again.
    #[error("{url}: {message}")]
    MirrorRefused {
        /// The URL asked (without its query).
        url: String,
        /// The mirror's reason (escaped).
        message: String,
    },
    /// The token cannot be sent (not one word of visible ASCII: a line break, a control
    /// character…): refused, naming where it came from, rather than sent without it.
    #[error(transparent)]
    Token(#[from] crate::env::TokenError),
    /// The HTTP client could not be built (the reason, reqwest's own cause, said: "builder
    /// error" alone tells nobody that the system has no CA certificates).
    #[error("cannot build the HTTP client: {}", crate::net::cause(.0))]
    Client(#[source] reqwest::Error),
}

/// What a 404 without an error code concerns, as a sentence's subject.
fn fmt_missing(repo: &str, revision: &str, path: Option<&str>) -> String {
    match path {
        Some(p) => format!("file '{p}' of repository '{repo}' at revision '{revision}'"),
        None => format!("repository '{repo}' (or its revision '{revision}')"),
    }
}

fn fmt_message(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl HubError {
    /// True when access was refused (gated, a 401 or 403 without more): another token, not
    /// another name, is the fix ([`ExitClass::Denied`](crate::exit::ExitClass::Denied)).
    pub fn is_denied(&self) -> bool {
        matches!(
            self,
            HubError::GatedRepo { .. } | HubError::AccessDenied { .. }
        )
    }

    /// True for "not found" and "access denied" errors (repository, revision, file, gated,
    /// private): retrying will not help, the user must change the request or the token.
    pub fn is_not_found_or_denied(&self) -> bool {
        matches!(
            self,
            HubError::RepoNotFound { .. }
                | HubError::RevisionNotFound { .. }
                | HubError::EntryNotFound { .. }
                | HubError::GatedRepo { .. }
                | HubError::AccessDenied { .. }
                | HubError::NotFound { .. }
        )
    }

    /// True when the answer contradicts what was asked in a way that concerns the integrity of
    /// what would be fetched (a commit id answered with another commit).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            HubError::CommitMismatch { .. } | HubError::MirrorRefused { .. }
        )
    }

    /// True for transport failures and server errors after retries, malformed answers and
    /// redirects that are not followed.
    pub fn is_network_or_server(&self) -> bool {
        matches!(
            self,
            HubError::Network { .. }
                | HubError::Stalled { .. }
                | HubError::ServerError { .. }
                | HubError::UnexpectedStatus { .. }
                | HubError::InvalidResponse { .. }
                | HubError::Redirect { .. }
        )
    }
}
