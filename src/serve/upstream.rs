//! Pull-through: what the mirror does not hold, asked of an upstream Hub (`serve --upstream`).
//!
//! - **Metadata** (a revision's commit and files, a repository's refs) is asked of the
//!   upstream through the library's [`HubClient`] and remembered for [`Upstream::ttl`]; when the
//!   upstream cannot be reached, the last answer is served however old (stale), and without
//!   one the mirror answers from what its cache holds, or 504 for what it lacks.
//! - **Files** are fetched by the library's own [`Fetcher`] into the mirror's cache (ranged,
//!   resumable, every byte checked against the upstream's SHA-256), once: concurrent requests
//!   for a blob follow the one fetch ([`Pull`]), and are served its prefix as it lands on disk
//!   (the [`Event::Prefix`] of the download). The last byte of a file is held back until the
//!   fetch ended well (the whole file matched its digest and is in the cache), so that no
//!   client ever receives a complete file that was not checked, or that the mirror does not
//!   hold; a download that fails or rewrites bytes already sent cuts the answers in
//!   flight short (their `Content-Length` tells their clients).
//! - **Access** (the README's access model): without [`Upstream::forward_token`] every client
//!   is the mirror (its token, the fetcher's, asks the upstream, and never reaches a client:
//!   answers are built here, never copied from the upstream). With it, a request's identity is
//!   its bearer token (the scheme in any case) or anonymous ([`Identity`]), and the upstream is
//!   asked as that identity, never with the mirror's token. A file of a repository is served
//!   only after the upstream said yes to that identity for that repository ([`Upstream::authorize`],
//!   a `HEAD` on the file; the yes remembered for [`Upstream::ttl`], keyed by a hash of the
//!   token). A no, an error or an upstream that cannot be asked is a no, except for a
//!   repository known to be public: one whose file the upstream last let an anonymous request
//!   have, whose held bytes are then served to anyone while the upstream is down.
//! - **A client's bad input** (an invalid revision, name or path, a token no header can carry)
//!   is that client's 4xx ([`Failure::Invalid`]); only the upstream failing to answer at all
//!   (a transport failure) pauses the questions asked of it for everyone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use crate::fetch::{FetchError, Fetcher, FetcherBuilder};
use crate::hub::{HubError, Refs, RepoRef};
use crate::names::{is_commit_hash, RepoType};
use crate::progress::{Event, Reporter};
use crate::selection::Selection;

/// Answers remembered per kind (listings, refs, access); past this many, or past
/// [`REMEMBERED_WEIGHT`] entries in all, the oldest are forgotten.
const REMEMBERED: usize = 1024;

/// Entries (a listing's files, a repository's refs) remembered per kind in all: a bound on the
/// memory of what is remembered (about 150 bytes an entry), whatever the repositories asked
/// about.
const REMEMBERED_WEIGHT: usize = 1_000_000;

/// Fetchers kept for forwarded tokens; past this many, they are all dropped and made again.
const TOKEN_FETCHERS: usize = 64;

/// After the upstream failed to answer, metadata is not asked of it again for this long: the
/// mirror answers at once from what it remembers or holds (offline, it must not make every
/// client wait for the upstream's timeouts).
const DOWN_PAUSE: Duration = Duration::from_secs(5);

/// Metadata requests: one retry, within 3 seconds, before the mirror falls back on what it
/// holds (downloads keep the fetcher's own retries).
fn quick_retry() -> crate::net::RetryPolicy {
    crate::net::RetryPolicy {
        max_retries: 1,
        max_elapsed: Some(Duration::from_secs(3)),
        ..crate::net::RetryPolicy::default()
    }
}

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

/// What [`Upstream::authorize`] found.
#[derive(Debug)]
pub(crate) enum Access {
    /// The upstream said yes just now, and described the file as listed.
    Checked,
    /// It said yes to this identity for this repository less than a TTL ago.
    Granted,
    /// It cannot be asked, and the repository is known to be public: held bytes may be served.
    Public,
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

/// Who asks: the mirror itself (without [`Upstream::forward_token`]), an anonymous client, or a
/// client's token (by its fingerprint, never the token itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Asker {
    /// The mirror's own identity (every client, without `--forward-token`).
    Mirror,
    /// A client without a bearer token, asked with no token.
    Anonymous,
    /// A client's bearer token: the first 16 bytes of its SHA-256.
    Token([u8; 16]),
}

/// A request's identity, and the fetchers that ask the upstream as it.
#[derive(Clone)]
pub(crate) struct Identity {
    asker: Asker,
    clients: Arc<Clients>,
}

struct Remembered<T> {
    at: Instant,
    value: Arc<T>,
    weight: usize,
}

/// Answers kept by key, at most [`REMEMBERED`] of them and [`REMEMBERED_WEIGHT`] in weight.
pub(crate) struct Memory<K, T> {
    map: Mutex<HashMap<K, Remembered<T>>>,
}

/// How many entries an answer holds (what [`REMEMBERED_WEIGHT`] bounds).
pub(crate) trait Weight {
    fn weight(&self) -> usize;
}

impl Weight for Listing {
    fn weight(&self) -> usize {
        self.entries.len().max(1)
    }
}

impl Weight for Refs {
    fn weight(&self) -> usize {
        (self.branches.len() + self.tags.len()).max(1)
    }
}

impl Weight for () {
    fn weight(&self) -> usize {
        1
    }
}

impl Weight for std::collections::HashMap<String, (String, u64)> {
    fn weight(&self) -> usize {
        self.len().max(1)
    }
}

impl Weight for String {
    fn weight(&self) -> usize {
        1
    }
}

impl Weight for bool {
    fn weight(&self) -> usize {
        1
    }
}

impl<K: std::hash::Hash + Eq + Clone, T: Weight> Memory<K, T> {
    pub(crate) fn new() -> Self {
        Memory {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `key` and its age.
    pub(crate) fn get(&self, key: &K) -> Option<(Arc<T>, Duration)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).map(|r| (r.value.clone(), r.at.elapsed()))
    }

    fn forget(&self, key: &K) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub(crate) fn put(&self, key: K, value: Arc<T>) {
        let weight = value.weight();
        if weight > REMEMBERED_WEIGHT {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&key);
        let mut total: usize = map.values().map(|r| r.weight).sum();
        while !map.is_empty() && (map.len() >= REMEMBERED || total + weight > REMEMBERED_WEIGHT) {
            let Some(oldest) = map.iter().min_by_key(|(_, r)| r.at).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some(r) = map.remove(&oldest) {
                total -= r.weight;
            }
        }
        map.insert(
            key,
            Remembered {
                at: Instant::now(),
                value,
                weight,
            },
        );
    }
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
    builder: FetcherBuilder,
    fetcher: Arc<Clients>,
    forward_token: bool,
    ttl: Duration,
    listings: Memory<ListingKey, Listing>,
    refs: Memory<RefsKey, Refs>,
    /// Repositories whose files the upstream let an asker have (a yes, for [`Upstream::ttl`]).
    grants: Memory<GrantKey, ()>,
    /// Whether the upstream last let an anonymous request have a repository's file (public) or
    /// not: what decides, while it is down, whether held bytes are served to anyone.
    public: Memory<RepoKey, bool>,
    /// The fetchers of anonymous clients under `--forward-token` (no token).
    anonymous: Arc<Clients>,
    pulls: Mutex<HashMap<PullKey, Arc<Pull>>>,
    /// Files whose pull the mirror's own checks refused (a signature that does not hold or
    /// name them, bytes that differ), by commit and path: the same answer for [`Upstream::ttl`]
    /// without fetching the file from the upstream again for every client that asks.
    refused: Memory<RefusedKey, String>,
    for_tokens: Mutex<HashMap<[u8; 16], Arc<Clients>>>,
    /// When the upstream last failed to answer (see [`DOWN_PAUSE`]).
    down_since: Mutex<Option<Instant>>,
    /// Stops every fetch (each saves its resume state): the server is stopping.
    cancel: tokio_util::sync::CancellationToken,
    /// Whether the mirror has a token of its own.
    own_token: bool,
    /// Reads the model's signature from the cache when the upstream cannot be asked (the
    /// signature is checked against the policy's key, whichever way it came).
    offline: Fetcher,
}

/// The model's signature at a commit, as the mirror checks every answer against it.
pub(crate) type Signature = Option<Arc<crate::fetch::Signed>>;

/// The fetchers of one asker: metadata asked quickly, files fetched with the usual retries.
struct Clients {
    meta: Fetcher,
    pull: Fetcher,
}

impl Clients {
    fn new(builder: FetcherBuilder) -> Result<Clients, FetchError> {
        Ok(Clients {
            meta: builder.clone().hub_retry(quick_retry()).build()?,
            pull: builder.build()?,
        })
    }
}

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
    /// upstream let it have them (see the module docs). Default false: every client is the
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
    fn paused(&self) -> bool {
        let d = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        d.is_some_and(|t| t.elapsed() < DOWN_PAUSE)
    }

    /// `r`, with what it says of the upstream recorded: a transport failure pauses the questions
    /// asked of it ([`DOWN_PAUSE`]); any answer ends a pause.
    fn asked<T>(&self, r: Result<T, HubError>) -> Result<T, Failure> {
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

    /// The identity of a request whose `Authorization` header is `authorization` (see the
    /// module docs): the mirror without `--forward-token`; else its bearer token (the scheme
    /// in any case), or anonymous (no header, `Basic`, an empty token).
    pub(crate) fn identity(&self, authorization: Option<&str>) -> Result<Identity, Failure> {
        if !self.forward_token {
            return Ok(Identity {
                asker: Asker::Mirror,
                clients: self.fetcher.clone(),
            });
        }
        let token = authorization
            .and_then(|a| a.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Ok(Identity {
                asker: Asker::Anonymous,
                clients: self.anonymous.clone(),
            });
        };
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Failure::Invalid(
                "the bearer token holds characters a token cannot have".into(),
            ));
        }
        let mut fp = [0u8; 16];
        fp.copy_from_slice(&Sha256::digest(token.as_bytes())[..16]);
        let mut map = self.for_tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(&fp) {
            return Ok(Identity {
                asker: Asker::Token(fp),
                clients: f.clone(),
            });
        }
        if map.len() >= TOKEN_FETCHERS {
            map.clear();
        }
        let f = Arc::new(
            Clients::new(self.builder.clone().token(token))
                .map_err(|e| Failure::Down(e.to_string()))?,
        );
        map.insert(fp, f.clone());
        Ok(Identity {
            asker: Asker::Token(fp),
            clients: f,
        })
    }

    /// Whether what the mirror remembers or holds of `id` may be answered to `who` without
    /// asking the upstream (it is down): always without `--forward-token`; with it, for a
    /// repository known to be public, or one the upstream let `who` have less than
    /// [`Upstream::ttl`] ago.
    pub(crate) fn may_answer_offline(&self, kind: RepoType, id: &str, who: &Identity) -> bool {
        !self.forward_token || self.known_public(kind, id) || self.granted(kind, id, who.asker)
    }

    /// Whether the upstream last let an anonymous request have a file of `id`.
    fn known_public(&self, kind: RepoType, id: &str) -> bool {
        self.public
            .get(&(kind, id.to_string()))
            .is_some_and(|(p, _)| *p)
    }

    fn granted(&self, kind: RepoType, id: &str, asker: Asker) -> bool {
        self.grants
            .get(&(kind, id.to_string(), asker))
            .is_some_and(|(_, age)| age < self.ttl)
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

    /// Who the clients are to the upstream, in a sentence for the operator (printed at start).
    pub fn access_note(&self) -> &'static str {
        match (self.forward_token, self.own_token) {
            (true, true) => {
                "each client is served what its own token (or none) can read, the upstream asked \
                 for each; the mirror's token (HF_TOKEN) serves no client"
            }
            (true, false) => {
                "each client is served what its own token (or none) can read, the upstream asked \
                 for each"
            }
            (false, true) => {
                "serving what HF_TOKEN can read to every client (--forward-token asks the \
                 upstream for each client instead)"
            }
            (false, false) => {
                "serving what an anonymous request can read to every client (--forward-token \
                 asks the upstream for each client)"
            }
        }
    }

    /// Whether clients' tokens are forwarded.
    pub(crate) fn forwards_tokens(&self) -> bool {
        self.forward_token
    }

    /// Whether the upstream lets `who` have the files of `id`, asked with a `HEAD` on `path`
    /// at `commit` ([`Access::Checked`], with what the upstream said of the file) unless it
    /// said yes to `who` for `id` less than [`Upstream::ttl`] ago ([`Access::Granted`]). When
    /// the upstream cannot be asked, a repository known to be public is [`Access::Public`]
    /// (its held bytes may be served), any other a [`Failure::Down`]: no.
    ///
    /// With `fresh` (a file the mirror does not hold, so that what it announces of it is the
    /// upstream's word now) the upstream is always asked; what its `HEAD` says must agree with
    /// `want` (the listing's size and ETag), else [`Failure::Disagrees`], and no yes is
    /// remembered.
    pub(crate) async fn authorize(
        &self,
        kind: RepoType,
        id: &str,
        commit: &str,
        want: &Entry,
        who: &Identity,
        fresh: bool,
    ) -> Result<Access, Failure> {
        let path = want.path.as_str();
        if !fresh && self.granted(kind, id, who.asker) {
            return Ok(Access::Granted);
        }
        let repo = RepoRef::model(id).with_type(kind);
        let asked = if self.paused() {
            Err(Failure::Down("it failed a moment ago".into()))
        } else {
            self.asked(
                who.clients
                    .meta
                    .hub()
                    .file_metadata(&repo, commit, path)
                    .await,
            )
        };
        let repo_key = (kind, id.to_string());
        let grant_key = (kind, id.to_string(), who.asker);
        match asked {
            Ok(meta) if meta.size != want.size || meta.etag.as_str() != want.etag() => Err(
                Failure::Disagrees(disagreement(want, meta.size, meta.etag.as_str())),
            ),
            Ok(_) => {
                self.grants.put(grant_key, Arc::new(()));
                match who.asker {
                    Asker::Anonymous => self.public.put(repo_key, Arc::new(true)),
                    // Whether anyone may have it (what decides while the upstream is down),
                    // asked anonymously once a TTL.
                    Asker::Token(_)
                        if self
                            .public
                            .get(&repo_key)
                            .is_none_or(|(_, age)| age >= self.ttl) =>
                    {
                        let anonymous = self
                            .anonymous
                            .meta
                            .hub()
                            .file_metadata(&repo, commit, path)
                            .await;
                        match anonymous {
                            Ok(_) => self.public.put(repo_key, Arc::new(true)),
                            Err(e) if e.is_not_found_or_denied() => {
                                self.public.put(repo_key, Arc::new(false));
                            }
                            Err(_) => {}
                        }
                    }
                    _ => {}
                }
                Ok(Access::Checked)
            }
            Err(Failure::Down(why)) => {
                if self.forward_token && self.known_public(kind, id) {
                    Ok(Access::Public)
                } else {
                    Err(Failure::Down(why))
                }
            }
            Err(f) => {
                self.grants.forget(&grant_key);
                if matches!((&f, who.asker), (Failure::Refused(_), Asker::Anonymous)) {
                    self.public.put(repo_key, Arc::new(false));
                }
                Err(f)
            }
        }
    }

    /// The branches of `id` the upstream last said point at `commit` (asked for a revision,
    /// or listed by its refs).
    fn branches_at(&self, kind: RepoType, id: &str, commit: &str) -> Vec<String> {
        let mut out: Vec<String> = {
            let map = self.listings.map.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .filter(|((k, i, rev, _), r)| {
                    *k == kind && i == id && !is_commit_hash(rev) && r.value.commit == commit
                })
                .map(|((_, _, rev, _), _)| rev.clone())
                .collect()
        };
        {
            let map = self.refs.map.lock().unwrap_or_else(|e| e.into_inner());
            for ((k, i, _), r) in map.iter() {
                if *k == kind && i == id {
                    out.extend(
                        r.value
                            .branches
                            .iter()
                            .filter(|b| b.target_commit.as_str() == commit)
                            .map(|b| b.name.clone()),
                    );
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The fetch of `entry` of `id` at `commit` into the cache: the one running, or a new one.
    /// Once the file is there, the branches the upstream said point at `commit` are recorded in
    /// the cache, so that the mirror answers for them offline.
    pub(crate) fn pull(
        self: &Arc<Self>,
        kind: RepoType,
        id: &str,
        commit: &str,
        entry: &Entry,
        who: &Identity,
    ) -> Result<Arc<Pull>, Failure> {
        let clients = who.clients.clone();
        let key = (kind, id.to_string(), entry.etag().to_string());
        let refused_key = (
            kind,
            id.to_string(),
            commit.to_string(),
            entry.path.clone(),
            entry.etag().to_string(),
        );
        let repo_cache = self.cache().repo(kind, id);
        let (tx, _) = watch::channel(PullState::default());
        let pull = Arc::new(Pull {
            state: tx,
            partial: repo_cache.partial_path(entry.etag()),
            blob: repo_cache.blob_path(entry.etag()),
            root: self.cache().root().to_path_buf(),
            size: entry.size,
        });
        if let Some((why, _)) = self
            .refused
            .get(&refused_key)
            .filter(|(_, age)| *age < self.ttl)
        {
            crate::metrics::global().upstream("refused_again");
            pull.state.send_modify(|s| {
                s.end = Some(Err(PullError {
                    network: false,
                    refused: true,
                    message: (*why).clone(),
                }))
            });
            return Ok(pull);
        }
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pulls.get(&key) {
            return Ok(p.clone());
        }
        pulls.insert(key.clone(), pull.clone());
        drop(pulls);
        crate::metrics::global().upstream("started");
        let (up, p) = (self.clone(), pull.clone());
        let (id, commit, path) = (id.to_string(), commit.to_string(), entry.path.clone());
        let want = entry.clone();
        // The fetch runs on a thread of its own, driven by the runtime's handle: it outlives
        // the request that started it (a client that leaves does not stop it), and the
        // library's fetch future need not be `Send` to be spawned.
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let repo = RepoRef::model(&id).with_type(kind).with_revision(&commit);
            let follow = Follow { state: &p.state };
            let r = handle.block_on(clients.pull.fetch_reporting(
                &repo,
                &Selection::files([path]),
                &follow,
            ));
            // The file verified must be the one the mirror announced (its size and ETag are
            // in the answers' headers): a listing that disagrees with the upstream's own HEAD
            // ends the answers short, never complete with other bytes.
            let r = r.map_err(|e| PullError {
                network: e.exit_class() == crate::exit::ExitClass::Network,
                refused: e.exit_class() == crate::exit::ExitClass::Integrity,
                message: e.to_string(),
            });
            let r =
                r.and_then(
                    |summary| match summary.files.iter().find(|f| f.path == want.path) {
                        Some(f) if f.size == want.size && f.etag == want.etag() => Ok(()),
                        Some(f) => Err(PullError {
                            network: false,
                            refused: false,
                            message: disagreement(&want, f.size, &f.etag),
                        }),
                        None => Err(PullError {
                            network: false,
                            refused: false,
                            message: format!(
                                "'{}' was not fetched",
                                crate::names::escape(&want.path)
                            ),
                        }),
                    },
                );
            crate::metrics::global().upstream(if r.is_ok() { "done" } else { "failed" });
            if let Err(e) = &r {
                if e.refused {
                    // Bytes the mirror's checks refused are not kept, not even as a partial
                    // download to resume (asking again gets the same answer): discarded under
                    // the partial's lock, unless another process holds it.
                    let partial = repo_cache.partial(want.etag());
                    if let Ok(Some(locked)) = partial.try_lock() {
                        if let Err(err) = locked.discard() {
                            tracing::warn!(
                                partial = %partial.data.display(),
                                "a refused download could not be removed: {err}"
                            );
                        }
                    }
                    if up.ttl > Duration::ZERO {
                        up.refused.put(refused_key, Arc::new(e.message.clone()));
                    }
                }
            }
            if r.is_ok() {
                for branch in up.branches_at(kind, &id, &commit) {
                    // (A ref that cannot be written only costs an offline answer for it.)
                    let _ = repo_cache.write_ref(&branch, &commit);
                }
            }
            // Forgotten before the end is told: a request after this starts a new fetch
            // (which finds the file in the cache, or resumes it).
            up.pulls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            p.state.send_modify(|s| s.end = Some(r));
        });
        Ok(pull)
    }
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

/// Why a pull failed.
#[derive(Debug, Clone)]
pub(crate) struct PullError {
    /// The upstream could not be reached (else it answered wrongly, or the cache failed).
    pub network: bool,
    /// What it served was refused by the mirror's checks (a signature that does not hold, a
    /// file it does not name, bytes that differ): the same again if asked again.
    pub refused: bool,
    pub message: String,
}

/// Where one pull stands.
#[derive(Debug, Clone, Default)]
pub(crate) struct PullState {
    /// Bytes from the start on disk (see [`Event::Prefix`]).
    pub prefix: u64,
    /// Bumped when bytes already on disk are thrown away: what was sent of them may be wrong.
    pub epoch: u64,
    /// How the fetch ended.
    pub end: Option<Result<(), PullError>>,
}

impl PullState {
    /// Bytes from the start that may be sent: the prefix, but never the last byte before the
    /// fetch has ended well — the file verified, in the cache, its branches recorded — so that
    /// a client holding the whole file can count on the mirror holding it too.
    pub fn sendable(&self, size: u64) -> u64 {
        if matches!(self.end, Some(Ok(()))) {
            size
        } else {
            self.prefix.min(size.saturating_sub(1))
        }
    }
}

/// One fetch of a blob into the mirror's cache, followed by the requests waiting for it.
#[derive(Debug)]
pub(crate) struct Pull {
    pub state: watch::Sender<PullState>,
    /// The partial download, then (once complete) the blob.
    pub partial: PathBuf,
    pub blob: PathBuf,
    /// The cache's root: files below it are opened without following links.
    pub root: PathBuf,
    pub size: u64,
}

/// The reporter of one pull: its prefix, verification and rewrites.
struct Follow<'a> {
    state: &'a watch::Sender<PullState>,
}

impl Reporter for Follow<'_> {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::Prefix { bytes, .. } => self.state.send_modify(|s| s.prefix = *bytes),
            Event::Discarded { .. } => self.state.send_modify(|s| {
                s.prefix = 0;
                s.epoch += 1;
            }),
            _ => {}
        }
    }
}

impl Pull {
    /// Waits until there is something to send of `from..to` (or nothing is asked), or the
    /// fetch failed: `Err` with why, before any answer is made.
    pub async fn started(&self, from: u64, to: u64) -> Result<(), PullError> {
        let mut rx = self.state.subscribe();
        loop {
            {
                let s = rx.borrow_and_update();
                if let Some(Err(e)) = &s.end {
                    return Err(e.clone());
                }
                if from >= to || s.sendable(self.size) > from || s.end.is_some() {
                    return Ok(());
                }
            }
            if rx.changed().await.is_err() {
                return Err(PullError {
                    network: false,
                    refused: false,
                    message: "the fetch ended".into(),
                });
            }
        }
    }

    /// The bytes `from..to` of the file, each as soon as it may be sent (see
    /// [`PullState::sendable`]), read in pieces of `piece` bytes; an error when the fetch
    /// fails, or rewrites bytes this body has already sent.
    pub fn body(
        self: Arc<Self>,
        from: u64,
        to: u64,
        piece: usize,
    ) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
        struct Reading {
            pull: Arc<Pull>,
            rx: watch::Receiver<PullState>,
            pos: u64,
            to: u64,
            file: Option<Arc<std::fs::File>>,
            /// The pull's epoch when this body's first byte was read.
            epoch: Option<u64>,
            piece: usize,
        }
        let rx = self.state.subscribe();
        let start = Reading {
            pull: self,
            rx,
            pos: from,
            to,
            file: None,
            epoch: None,
            piece,
        };
        futures::stream::try_unfold(start, |mut r| async move {
            loop {
                if r.pos >= r.to {
                    return Ok(None);
                }
                let (avail, done, epoch) = {
                    let s = r.rx.borrow_and_update();
                    if let Some(Err(e)) = &s.end {
                        return Err(std::io::Error::other(format!(
                            "the upstream fetch failed: {}",
                            e.message
                        )));
                    }
                    if r.epoch.is_some_and(|e| e != s.epoch) {
                        return Err(std::io::Error::other(
                            "bytes already sent were fetched again",
                        ));
                    }
                    (
                        s.sendable(r.pull.size),
                        matches!(s.end, Some(Ok(()))),
                        s.epoch,
                    )
                };
                let until = avail.min(r.to);
                if r.pos < until {
                    let file = match &r.file {
                        Some(f) => f.clone(),
                        None => {
                            let (root, partial, blob) = (
                                r.pull.root.clone(),
                                r.pull.partial.clone(),
                                r.pull.blob.clone(),
                            );
                            let opened = tokio::task::spawn_blocking(move || {
                                // The partial file becomes the blob once complete (the same
                                // file, renamed): whichever is there.
                                let first = if done { &blob } else { &partial };
                                crate::safe_fs::open_read_below(&root, first).or_else(|e| {
                                    if e.kind() == std::io::ErrorKind::NotFound {
                                        crate::safe_fs::open_read_below(&root, &blob)
                                    } else {
                                        Err(e)
                                    }
                                })
                            })
                            .await
                            .map_err(std::io::Error::other)??;
                            let f = Arc::new(opened);
                            r.file = Some(f.clone());
                            f
                        }
                    };
                    if r.epoch.is_none() {
                        r.epoch = Some(epoch);
                    }
                    let (pos, n) = (r.pos, (until - r.pos).min(r.piece as u64) as usize);
                    let bytes = tokio::task::spawn_blocking(move || {
                        use std::os::unix::fs::FileExt as _;
                        let mut buf = vec![0u8; n];
                        file.read_exact_at(&mut buf, pos)?;
                        Ok::<_, std::io::Error>(bytes::Bytes::from(buf))
                    })
                    .await
                    .map_err(std::io::Error::other)??;
                    r.pos += n as u64;
                    return Ok(Some((bytes, r)));
                }
                if r.rx.changed().await.is_err() {
                    return Err(std::io::Error::other("the upstream fetch ended"));
                }
            }
        })
    }
}
