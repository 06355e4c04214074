//! Pull-through: what the mirror does not hold, asked of an upstream Hub (`serve --upstream`).
//! Here: the `Upstream` type, the metadata it answers (listings, refs, the model's signature)
//! and why it gave no answer (`Failure`); a file's fetch is `upstream_pull.rs`, who asks
//! `upstream_access.rs`, what is remembered `upstream_memory.rs`.
//!
//! - **Metadata** (a revision's commit and files, a repository's refs) is asked of the
//!   upstream through the library's [`HubClient`] and remembered for [`Upstream::ttl`]; when the
//!   upstream cannot be reached, the last answer is served however old (stale), and without
//!   one the mirror answers from what its cache holds, or 504 for what it lacks.
//! - **A client's bad input** (an invalid revision, name or path, a token no header can carry)
//!   is that client's 4xx ([`Failure::Invalid`]); only the upstream failing to answer at all
//!   (a transport failure) pauses the questions asked of it for everyone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fetch::{FetchError, Fetcher, FetcherBuilder};
use crate::hub::{HubError, Refs, RepoRef};
use crate::names::{is_commit_hash, RepoType};

pub(crate) use super::upstream_access::{Access, Identity};
use super::upstream_access::{Asker, Clients};
pub(crate) use super::upstream_memory::Memory;
use super::upstream_pull::Pull;
pub(crate) use super::upstream_pull::PullError;

/// After the upstream failed to answer, metadata is not asked of it again for this long: the
/// mirror answers at once from what it remembers or holds (offline, it must not make every
/// client wait for the upstream's timeouts).
const DOWN_PAUSE: Duration = Duration::from_secs(5);

/// A file of a listing, as the mirror lists and serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Path in the repository.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Git blob id (of the LFS pointer, for an LFS file).
    pub oid: String,
    /// SHA-256 of an LFS file's content.
    pub lfs: Option<String>,
}

impl Entry {
    /// The blob's name in the cache (the Hub's ETag).
    pub fn etag(&self) -> &str {
        self.lfs.as_deref().unwrap_or(&self.oid)
    }
}

/// A revision's commit and files, as the upstream answered.
#[derive(Debug)]
pub(crate) struct Listing {
    pub commit: String,
    pub entries: Vec<Entry>,
}

/// Why the upstream gave no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// It could not be reached, or failed (network, 5xx, a broken answer): the mirror falls
    /// back on what it holds, where the access model lets it.
    Down(String),
    /// It answered that there is no such thing, or that it is not for this client.
    Refused(HubError),
    /// The client's request cannot be asked of the upstream (an invalid revision, name or path,
    /// a token no header can carry): that client's 400, nothing else changes.
    Invalid(String),
    /// The upstream's answers disagree with each other (its listing and its `HEAD` on a file):
    /// 502, naming the disagreement.
    Disagrees(String),
}

impl From<HubError> for Failure {
    fn from(e: HubError) -> Failure {
        if e.is_not_found_or_denied() {
            Failure::Refused(e)
        } else if matches!(
            e,
            HubError::InvalidRevision { .. }
                | HubError::InvalidRepoId { .. }
                | HubError::UnsafePath { .. }
        ) {
            Failure::Invalid(e.to_string())
        } else {
            Failure::Down(e.to_string())
        }
    }
}

/// Whether `e` says the upstream could not be reached at all (no answer came): what pauses the
/// questions asked of it ([`DOWN_PAUSE`]). An HTTP answer, even an error, is an answer.
fn unreachable(e: &HubError) -> bool {
    matches!(e, HubError::Network { .. } | HubError::Stalled { .. })
}

/// What the mirror announced of `want` against what the upstream said or gave (`size`, `etag`).
pub(crate) fn disagreement(want: &Entry, size: u64, etag: &str) -> String {
    format!(
        "the upstream disagrees with itself about '{}': its listing says {} bytes (ETag {}), \
         the file is {size} bytes (ETag {})",
        crate::names::escape(&want.path),
        want.size,
        crate::names::escape(want.etag()),
        crate::names::escape(etag),
    )
}

type ListingKey = (RepoType, String, String, Asker);
type RefsKey = (RepoType, String, Asker);
type PullKey = (RepoType, String, String);
/// A file at a commit (kind, repository, commit, path, ETag).
type RefusedKey = (RepoType, String, String, String, String);
type RepoKey = (RepoType, String);
type GrantKey = (RepoType, String, Asker);

/// The upstream of a mirror (see the module docs).
pub struct Upstream {
    pub(super) builder: FetcherBuilder,
    pub(super) fetcher: Arc<Clients>,
    pub(super) forward_token: bool,
    pub(super) ttl: Duration,
    pub(super) listings: Memory<ListingKey, Listing>,
    pub(super) refs: Memory<RefsKey, Refs>,
    /// Repositories whose files the upstream let an asker have (a yes, for [`Upstream::ttl`]).
    pub(super) grants: Memory<GrantKey, ()>,
    /// Whether the upstream last let an anonymous request have a repository's file (public) or
    /// not: what decides, while it is down, whether held bytes are served to anyone.
    pub(super) public: Memory<RepoKey, bool>,
    /// The fetchers of anonymous clients under `--forward-token` (no token).
    pub(super) anonymous: Arc<Clients>,
    pub(super) pulls: Mutex<HashMap<PullKey, Arc<Pull>>>,
    /// Files whose pull the mirror's own checks refused (a signature that does not hold or
    /// name them, bytes that differ), by commit and path: the same answer for [`Upstream::ttl`]
    /// without fetching the file from the upstream again for every client that asks.
    pub(super) refused: Memory<RefusedKey, String>,
    pub(super) for_tokens: Mutex<HashMap<[u8; 16], Arc<Clients>>>,
    /// When the upstream last failed to answer (see [`DOWN_PAUSE`]).
    down_since: Mutex<Option<Instant>>,
    /// Stops every fetch (each saves its resume state): the server is stopping.
    cancel: tokio_util::sync::CancellationToken,
    /// Whether the mirror has a token of its own.
    pub(super) own_token: bool,
    /// Reads the model's signature from the cache when the upstream cannot be asked (the
    /// signature is checked against the policy's key, whichever way it came).
    offline: Fetcher,
}

/// The model's signature at a commit, as the mirror checks every answer against it.
pub(crate) type Signature = Option<Arc<crate::fetch::Signed>>;

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("fetcher", &self.fetcher.pull)
            .field("forward_token", &self.forward_token)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// An upstream asked through fetchers built from `builder`: its endpoint is the upstream,
    /// its token the mirror's own, its cache folder the cache the mirror serves and fills (its
    /// cancellation token is replaced by the upstream's own, see [`Upstream::stop`]).
    /// Metadata is remembered for 10 seconds; client tokens are not forwarded.
    pub fn new(builder: FetcherBuilder) -> Result<Upstream, FetchError> {
        // The mirror checks every byte against the upstream's digest; whether a file is a
        // valid model is for whoever loads it (the tensor routes verify what they serve).
        let cancel = tokio_util::sync::CancellationToken::new();
        let builder = builder.verify(false).cancellation(cancel.clone());
        let own_token = builder.has_token();
        let offline = builder.clone().offline(true).build()?;
        Ok(Upstream {
            fetcher: Arc::new(Clients::new(builder.clone())?),
            anonymous: Arc::new(Clients::new(builder.clone().no_token())?),
            builder,
            forward_token: false,
            ttl: Duration::from_secs(10),
            listings: Memory::new(),
            refs: Memory::new(),
            grants: Memory::new(),
            public: Memory::new(),
            pulls: Mutex::new(HashMap::new()),
            refused: Memory::new(),
            for_tokens: Mutex::new(HashMap::new()),
            down_since: Mutex::new(None),
            own_token,
            offline,
            cancel,
        })
    }

    /// Whether the mirror checks what it serves against the model's signature.
    pub(crate) fn checks_signatures(&self) -> bool {
        self.fetcher.pull.checks_signatures()
    }

    /// The model's signature at `commit` of `id` (see [`Signature`]), read once for every
    /// request of that commit (the policy keeps it), as `who` (the upstream is asked as the
    /// client asks), or from the cache when the upstream cannot be reached. `listing`: the
    /// commit's listing, which says whether the repository has one.
    pub(crate) async fn signature(
        &self,
        kind: RepoType,
        id: &str,
        commit: &str,
        listing: &Listing,
        who: &Identity,
    ) -> Result<Signature, PullError> {
        let Some(path) = self.fetcher.pull.signature_path() else {
            return Ok(None);
        };
        let listed = listing
            .entries
            .iter()
            .find(|e| e.path == path)
            .map(|e| e.size);
        let repo = RepoRef::model(id).with_type(kind).with_revision(commit);
        let asked = if self.paused() {
            None
        } else {
            match who
                .clients
                .pull
                .signature_at(&repo, commit, Some(listed))
                .await
            {
                Err(e) if e.exit_class() == crate::exit::ExitClass::Network => None,
                r => Some(r),
            }
        };
        let r = match asked {
            Some(r) => r,
            None => self.offline.signature_at(&repo, commit, None).await,
        };
        r.map_err(|e| PullError {
            network: e.exit_class() == crate::exit::ExitClass::Network,
            refused: e.exit_class() == crate::exit::ExitClass::Integrity,
            message: e.to_string(),
        })
    }

    /// How long an upstream answer about metadata is used before it is asked again (it is
    /// still served, however old, while the upstream cannot be reached). Default 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Ask the upstream as each client (its `Authorization: Bearer …`, or no token) instead of
    /// with the mirror's token, and serve a repository's files to a client only once the
    /// upstream let it have them (see `upstream_access.rs`). Default false: every client is the
    /// mirror, and is served what the mirror's token can read.
    pub fn forward_token(mut self, yes: bool) -> Self {
        self.forward_token = yes;
        self
    }

    /// Stops the fetches running (each saves its resume state, for the next request to resume)
    /// and any started later: the server is stopping.
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// The cache the mirror serves and fills.
    pub fn cache(&self) -> &crate::cache::HfCache {
        self.fetcher.pull.cache()
    }

    /// Whether the upstream failed to answer less than [`DOWN_PAUSE`] ago.
    pub(super) fn paused(&self) -> bool {
        let d = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        d.is_some_and(|t| t.elapsed() < DOWN_PAUSE)
    }

    /// `r`, with what it says of the upstream recorded: a transport failure pauses the questions
    /// asked of it ([`DOWN_PAUSE`]); any answer ends a pause.
    pub(super) fn asked<T>(&self, r: Result<T, HubError>) -> Result<T, Failure> {
        match &r {
            Err(e) if unreachable(e) => {
                *self.down_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
            // The library refused the request itself: nothing was asked.
            Err(HubError::InvalidRevision { .. } | HubError::InvalidRepoId { .. })
            | Err(HubError::UnsafePath { .. }) => {}
            _ => *self.down_since.lock().unwrap_or_else(|e| e.into_inner()) = None,
        }
        r.map_err(Failure::from)
    }

    /// The files of `id` at `rev` for `who`, and whether the upstream answered (`false`: the
    /// last answer, however old, served because the upstream is down and the access model lets
    /// `who` have it). An answer less than [`Upstream::ttl`] old is used without asking.
    pub(crate) async fn listing(
        &self,
        kind: RepoType,
        id: &str,
        rev: &str,
        who: &Identity,
    ) -> Result<(Arc<Listing>, bool), Failure> {
        let key = (kind, id.to_string(), rev.to_string(), who.asker);
        let known = self.listings.get(&key);
        // A commit's files never change.
        if let Some((l, age)) = &known {
            if age < &self.ttl || is_commit_hash(rev) {
                return Ok((l.clone(), true));
            }
        }
        let asked = if self.paused() {
            Err(Failure::Down("it failed a moment ago".into()))
        } else {
            let repo = RepoRef::model(id).with_type(kind).with_revision(rev);
            self.asked(who.clients.meta.hub().list_files(&repo).await)
        };
        match asked {
            Ok(l) => {
                let listing = Arc::new(Listing {
                    commit: l.commit.to_string(),
                    entries: l
                        .files
                        .into_iter()
                        .map(|f| Entry {
                            path: f.path,
                            size: f.size,
                            oid: f.git_oid.to_string(),
                            lfs: f.lfs_sha256.map(|s| s.to_string()),
                        })
                        .collect(),
                });
                self.listings.put(key, listing.clone());
                Ok((listing, true))
            }
            Err(Failure::Down(why)) => match known {
                Some((l, _)) if self.may_answer_offline(kind, id, who) => Ok((l, false)),
                _ => Err(Failure::Down(why)),
            },
            Err(f) => {
                self.listings.forget(&key);
                Err(f)
            }
        }
    }

    /// The branches and tags of `id`, remembered as [`Upstream::listing`] remembers.
    pub(crate) async fn refs(
        &self,
        kind: RepoType,
        id: &str,
        who: &Identity,
    ) -> Result<Arc<Refs>, Failure> {
        let key = (kind, id.to_string(), who.asker);
        let known = self.refs.get(&key);
        if let Some((r, age)) = &known {
            if age < &self.ttl {
                return Ok(r.clone());
            }
        }
        let asked = if self.paused() {
            Err(Failure::Down("it failed a moment ago".into()))
        } else {
            let repo = RepoRef::model(id).with_type(kind);
            self.asked(who.clients.meta.hub().refs(&repo).await)
        };
        match asked {
            Ok(r) => {
                let r = Arc::new(r);
                self.refs.put(key, r.clone());
                Ok(r)
            }
            Err(Failure::Down(why)) => match known {
                Some((r, _)) if self.may_answer_offline(kind, id, who) => Ok(r),
                _ => Err(Failure::Down(why)),
            },
            Err(f) => {
                self.refs.forget(&key);
                Err(f)
            }
        }
    }
}
