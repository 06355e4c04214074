//! Who asks the upstream: a request's identity (`Identity`, `Asker`: the mirror, an anonymous
//! client or a client's token) and its fetchers, and whether the upstream lets it have a
//! repository's files (`authorize`: grants remembered, a repository known to be public).
//!
//! **Access** (the README's access model): without [`Upstream::forward_token`] every client
//! is the mirror (its token, the fetcher's, asks the upstream, and never reaches a client:
//! answers are built here, never copied from the upstream). With it, a request's identity is
//! its bearer token (the scheme in any case) or anonymous ([`Identity`]), and the upstream is
//! asked as that identity, never with the mirror's token. A file of a repository is served
//! only after the upstream said yes to that identity for that repository ([`Upstream::authorize`],
//! a `HEAD` on the file; the yes remembered for [`Upstream::ttl`], keyed by a hash of the
//! token). A no, an error or an upstream that cannot be asked is a no, except for a
//! repository known to be public: one whose file the upstream last let an anonymous request
//! have, whose held bytes are then served to anyone while the upstream is down.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::upstream::{disagreement, Entry, Failure, Upstream};
use crate::fetch::{FetchError, Fetcher, FetcherBuilder};
use crate::hub::RepoRef;
use crate::names::RepoType;

/// Fetchers kept for forwarded tokens; past this many, they are all dropped and made again.
const TOKEN_FETCHERS: usize = 64;

/// Metadata requests: one retry, within 3 seconds, before the mirror falls back on what it
/// holds (downloads keep the fetcher's own retries).
fn quick_retry() -> crate::net::RetryPolicy {
    crate::net::RetryPolicy {
        max_retries: 1,
        max_elapsed: Some(Duration::from_secs(3)),
        ..crate::net::RetryPolicy::default()
    }
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
    pub(super) asker: Asker,
    pub(super) clients: Arc<Clients>,
}

/// The fetchers of one asker: metadata asked quickly, files fetched with the usual retries.
pub(super) struct Clients {
    pub(super) meta: Fetcher,
    pub(super) pull: Fetcher,
}

impl Clients {
    pub(super) fn new(builder: FetcherBuilder) -> Result<Clients, FetchError> {
        Ok(Clients {
            meta: builder.clone().hub_retry(quick_retry()).build()?,
            pull: builder.build()?,
        })
    }
}

impl Upstream {
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
}
