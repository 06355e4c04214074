//! A model's signature checked before any of its files (see [`FetcherBuilder::signature`]): the
//! repository's `model.sig` at the commit being fetched, verified against the caller's
//! [`SignaturePolicy`], its statement then what every file must be.
//!
//! [`FetcherBuilder::signature`]: super::FetcherBuilder::signature

use std::sync::Arc;

use sha1::{Digest as _, Sha1};

use super::gate::{notice, Gate};
use super::integrity::{Expect, Origin};
use super::lock::LockedRepo;
use super::{FetchError, Fetcher, RepoRef};
use crate::cache::Store;
use crate::key::FileKey;
use crate::names::escape;
use crate::signature::{verify_signature, Signer, MAX_SIGNATURE_BYTES};

/// A signature that held: who signed, and the statement every file is checked against.
pub(crate) struct Signed {
    /// Who signed.
    pub signer: Signer,
    /// The signature's path in the repository (a file that needs no other check).
    pub path: String,
    read: Arc<Read>,
}

impl Signed {
    /// The signed statement.
    pub fn statement(&self) -> &crate::manifest::OpenSsfDocument {
        &self.read.verified.statement
    }

    /// The model the statement names.
    pub fn model(&self) -> &str {
        self.statement().model_name()
    }

    /// The statement's subject digest, hex.
    pub fn statement_sha256(&self) -> Option<String> {
        self.statement().subject_sha256().map(|d| d.to_string())
    }

    /// What the statement says of the file at `path` (looked up by path, not by a scan: a
    /// statement may name a few hundred thousand files).
    fn expectation(&self, path: &str) -> Option<Expect> {
        let i = *self.read.by_path.get(path)?;
        Some(Expect {
            file: self.statement().files().get(i)?.clone(),
            origin: Origin::Signed,
        })
    }
}

/// Whom a model's signature must come from, and where the repository keeps it.
#[derive(Debug, Clone)]
pub struct SignaturePolicy {
    /// Who must have signed: a public key, or the certificates the signing certificate must
    /// chain to.
    pub trust: crate::signature::TrustPolicy,
    /// The signature's path in the repository (`model_signing`'s default, `model.sig`).
    pub path: String,
    /// Whether a repository without it fails (`wi-fetch --require-signature`); otherwise one
    /// that ships it is checked against it, and one that does not is fetched as before, said
    /// in a notice. A signature the repository's listing names but that cannot be read is
    /// refused either way.
    pub required: bool,
    /// The signatures verified under this policy (shared by its clones).
    verified: Arc<Memo>,
}

impl SignaturePolicy {
    /// A policy for `model.sig`.
    pub fn new(trust: crate::signature::TrustPolicy, required: bool) -> SignaturePolicy {
        SignaturePolicy {
            trust,
            path: "model.sig".to_string(),
            required,
            verified: Arc::default(),
        }
    }

    /// The policy the tools' options describe ([`SignatureTrust`]): `None` when they name
    /// nobody and no signature is `required` (asking for one without saying whom from is an
    /// error, as is naming the signer two ways).
    pub fn from_trust(
        t: &SignatureTrust,
        required: bool,
    ) -> Result<Option<SignaturePolicy>, FetchError> {
        use crate::signature::{
            CertificateRoots, KeylessPolicy, PublicKey, TrustPolicy, TrustedRoot,
        };
        let ways = usize::from(t.public_key.is_some())
            + usize::from(!t.certificate_chain.is_empty())
            + usize::from(t.identity.is_some());
        if ways > 1 {
            return Err(FetchError::Invalid(
                "a public key, a certificate chain and an identity are three ways to say who \
                 signs: give one"
                    .into(),
            ));
        }
        let trust = if let Some(k) = &t.public_key {
            TrustPolicy::Key(PublicKey::read(k).map_err(FetchError::Signature)?)
        } else if !t.certificate_chain.is_empty() {
            TrustPolicy::Certificates(
                CertificateRoots::read(&t.certificate_chain).map_err(FetchError::Signature)?,
            )
        } else if let Some(identity) = &t.identity {
            let (Some(issuer), Some(root)) = (&t.identity_provider, &t.trust_config) else {
                return Err(FetchError::Invalid(
                    "a keyless signer's identity needs its identity provider (the OIDC issuer) \
                     and the instance's trusted root (trust config)"
                        .into(),
                ));
            };
            TrustPolicy::Sigstore(KeylessPolicy {
                root: TrustedRoot::read(root).map_err(FetchError::Signature)?,
                identity: identity.clone(),
                issuer: issuer.clone(),
            })
        } else if required {
            return Err(FetchError::Invalid(
                "a signature is required, but not whom it must come from: give a public key, a \
                 certificate chain or an identity"
                    .into(),
            ));
        } else {
            return Ok(None);
        };
        Ok(Some(SignaturePolicy::new(trust, required)))
    }
}

impl SignatureTrust {
    /// Whether it names no signer.
    pub fn is_empty(&self) -> bool {
        self.public_key.is_none() && self.certificate_chain.is_empty() && self.identity.is_none()
    }
}

/// Whom a model's signature must come from, as the tools' options say it: one of a public key
/// file, certificate files, or a keyless identity with its OIDC issuer and the instance's
/// trusted root.
#[derive(Debug, Clone, Default)]
pub struct SignatureTrust {
    /// A public key (PEM file).
    pub public_key: Option<std::path::PathBuf>,
    /// Certificates (PEM files) the signing certificate must chain to.
    pub certificate_chain: Vec<std::path::PathBuf>,
    /// Keyless: the identity (an email or a URI).
    pub identity: Option<String>,
    /// Keyless: the OIDC issuer that must have vouched for it.
    pub identity_provider: Option<String>,
    /// Keyless: the Sigstore instance's trusted root (`trusted_root.json`).
    pub trust_config: Option<std::path::PathBuf>,
}

/// Signatures kept once read and verified, by repository, commit, path and whether read
/// offline: each is fetched and verified once however many fetches of that commit need it at
/// once (single flight: the others wait for the first), at most [`MEMO_ENTRIES`] of them and
/// [`MEMO_BYTES`] of signature in all (the oldest forgotten first). What was not found, or
/// failed, is not kept: the next fetch asks again.
struct Memo {
    cells: std::sync::Mutex<lru::LruCache<MemoKey, Arc<Cell>>>,
}

/// One signature's place in the memo: filled once (`None`: the repository has none).
type Cell = tokio::sync::OnceCell<Option<Arc<Read>>>;

type MemoKey = (crate::names::RepoType, String, String, String, bool);

/// Signatures kept at most.
const MEMO_ENTRIES: usize = 32;
/// Bytes of signature kept at most (one signature may be up to [`MAX_SIGNATURE_BYTES`]).
const MEMO_BYTES: usize = 64 << 20;

impl Default for Memo {
    fn default() -> Self {
        Memo {
            cells: std::sync::Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(MEMO_ENTRIES).expect("not zero"),
            )),
        }
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

impl Memo {
    /// The cell of `key`: filled once, by the first fetch that asks.
    fn cell(&self, key: MemoKey) -> Arc<Cell> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.get_or_insert(key, Arc::default).clone()
    }

    /// Forgets `key` (what it found is not to be kept), and the oldest signatures while more
    /// than [`MEMO_BYTES`] are kept.
    fn settle(&self, key: &MemoKey, keep: bool) {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        if !keep {
            cells.pop(key);
            return;
        }
        let weight = |c: &Cell| {
            c.get()
                .and_then(Option::as_ref)
                .map_or(0, |r| r.bytes.len())
        };
        let mut total: usize = cells.iter().map(|(_, c)| weight(c)).sum();
        while total > MEMO_BYTES && cells.len() > 1 {
            match cells.pop_lru() {
                Some((k, c)) if &k == key => {
                    // The newest is kept; put back as the most recent.
                    cells.put(k, c);
                    break;
                }
                Some((_, c)) => total -= weight(&c),
                None => break,
            }
        }
    }
}

/// A signature read and verified.
struct Read {
    bytes: Vec<u8>,
    verified: crate::signature::VerifiedSignature,
    /// Each file of the statement, by path.
    by_path: std::collections::HashMap<String, usize>,
    /// Read from the remote cache (offline).
    from_bucket: bool,
}

/// The id the Hub gives a file kept in git (not LFS): the SHA-1 of `blob {len}\0` and its bytes.
fn git_blob_id(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

impl Fetcher {
    /// The repository's signature at `commit`, verified: `None` without a policy, or when the
    /// repository does not ship one and none is required. Online it is read from the Hub and
    /// kept in the store beside the files (so that an offline run, and `model_signing verify`
    /// on the snapshot, find it); offline, from the store.
    pub(super) async fn signed(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        pins: Option<&LockedRepo>,
        listed: Option<Option<u64>>,
        rep: &Gate<'_>,
    ) -> Result<Option<Arc<Signed>>, FetchError> {
        let locked = pins.and_then(|p| p.signature.as_ref());
        let policy = match (&self.signature, locked) {
            (None, None) => return Ok(None),
            (None, Some(l)) => {
                return Err(FetchError::Locked {
                    file: l.path.clone(),
                    what: format!(
                        "the lock file pins the model's signature, made by {}: say whom it must \
                         come from (--public-key, WI_SIGNATURE_KEY or --certificate-chain)",
                        l.signer
                    ),
                })
            }
            (Some(p), None) => p.clone(),
            (Some(p), Some(l)) => SignaturePolicy {
                path: l.path.clone(),
                required: true,
                ..p.clone()
            },
        };
        let p = &policy;
        let key = (
            repo.repo_type,
            repo.id.clone(),
            commit.to_string(),
            p.path.clone(),
            self.offline,
        );
        let cell = p.verified.cell(key.clone());
        let read = cell
            .get_or_try_init(|| self.read_signature(repo, commit, store, p, listed, rep))
            .await;
        p.verified.settle(&key, matches!(&read, Ok(Some(_))));
        let Some(read) = read?.clone() else {
            return Ok(None);
        };
        let verified = &read.verified;
        if let Some(l) = locked {
            if !verified.signer.same_as(&l.signer) {
                return Err(FetchError::Locked {
                    file: p.path.clone(),
                    what: format!(
                        "signed by {}, where the lock file pins {}",
                        verified.signer, l.signer
                    ),
                });
            }
            let statement = verified.statement.subject_sha256().map(|d| d.to_string());
            if let (Some(want), Some(got)) = (&l.statement_sha256, &statement) {
                if want != got {
                    return Err(FetchError::Locked {
                        file: p.path.clone(),
                        what: format!(
                            "its statement is sha256:{got}, where the lock file pins \
                             sha256:{want} (another signing of the model, by the same signer)"
                        ),
                    });
                }
            }
        }
        let mut kept = None;
        if (!self.offline || read.from_bucket) && self.writes() {
            match keep(store, repo, commit, &p.path, &read.bytes) {
                Ok(key) => kept = store.data_path(&key),
                Err(e) => notice(
                    rep,
                    None,
                    &format!(
                        "the signature '{}' could not be kept in the cache: {e}",
                        escape(&p.path)
                    ),
                ),
            }
        }
        #[cfg(feature = "remote-cache")]
        if let Some(local) = kept.as_deref().filter(|_| !self.offline) {
            self.signature_to_bucket(repo, commit, local, &p.path, &read.bytes, rep)
                .await;
        }
        #[cfg(not(feature = "remote-cache"))]
        let _ = kept;
        for n in &verified.notes {
            notice(rep, None, n);
        }
        Ok(Some(Arc::new(Signed {
            signer: verified.signer.clone(),
            path: p.path.clone(),
            read,
        })))
    }

    /// The signature at `commit` read (offline from the store, else the bucket; online from
    /// the Hub) and verified under `p`: `None` when the repository has none and none is
    /// required (said in a notice). `listed`: what the listing the plan was made from says of
    /// it (see [`Plan::signature_listed`](super::Plan)); without a listing, a `HEAD` asks.
    async fn read_signature(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        p: &SignaturePolicy,
        listed: Option<Option<u64>>,
        rep: &Gate<'_>,
    ) -> Result<Option<Arc<Read>>, FetchError> {
        let unsigned = |why: String| FetchError::Unsigned {
            repo: repo.id.clone(),
            path: p.path.clone(),
            why,
        };
        let too_large = |n: u64| {
            unsigned(format!(
                "it is {n} bytes, more than the {} a signature may have: refused unread",
                crate::units::human_bytes(MAX_SIGNATURE_BYTES)
            ))
        };
        // None, and none required: said, and the files fetched unchecked.
        let absent = |required: String, said: String| -> Result<Option<Arc<Read>>, FetchError> {
            if p.required {
                return Err(unsigned(required));
            }
            notice(rep, None, &said);
            Ok(None)
        };
        let online_absent = || {
            absent(
                format!("the repository has no such file at commit {commit}"),
                format!(
                    "the repository has no signature '{}': its files are not checked against one",
                    escape(&p.path)
                ),
            )
        };
        let mut from_bucket = false;
        let bytes = if self.offline {
            let read = store.open_committed(commit, &p.path).and_then(|f| {
                crate::safe_fs::read_limited(f, MAX_SIGNATURE_BYTES).map_err(|e| match e {
                    crate::safe_fs::Limited::Io(e) => e,
                    crate::safe_fs::Limited::TooLarge(n) => std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{n} bytes or more, past the {MAX_SIGNATURE_BYTES} read"),
                    ),
                })
            });
            let found = match read {
                Ok(b) => Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    return Err(FetchError::io(
                        "read the signature in",
                        store.root().to_path_buf(),
                        e,
                    ))
                }
            };
            let found = match found {
                Some(b) => Some(b),
                None => {
                    let b = self.signature_from_bucket(repo, commit, &p.path).await?;
                    from_bucket = b.is_some();
                    b
                }
            };
            match found {
                Some(b) => b,
                None => {
                    return absent(
                        format!("not in the cache at commit {commit} (fetch it online first)"),
                        format!(
                            "no signature '{}' in the cache at commit {commit}: not checked",
                            escape(&p.path)
                        ),
                    )
                }
            }
        } else {
            // What the Hub says of the file first: whether it is there, and its size (a
            // signature past the bound is refused unread).
            let (size, etag) = match listed {
                Some(None) => return online_absent(),
                Some(Some(size)) => (size, None),
                None => match self.hub.file_metadata(repo, commit, &p.path).await {
                    Ok(m) => (m.size, Some(m.etag)),
                    Err(e) if e.is_not_found_or_denied() => return online_absent(),
                    Err(e) => return Err(e.into()),
                },
            };
            if size > MAX_SIGNATURE_BYTES {
                return Err(too_large(size));
            }
            let url = self.hub.resolve_url(repo, commit, &p.path);
            let limit = usize::try_from(MAX_SIGNATURE_BYTES).unwrap_or(usize::MAX);
            let bytes = match self
                .hub
                .get_small(&url, Some((repo, commit, &p.path)), limit)
                .await
            {
                Ok(b) => b,
                // Named by the Hub, yet not to be had: never taken for "no signature".
                Err(e) if e.is_not_found_or_denied() => {
                    return Err(unsigned(format!(
                        "the repository lists it ({size} bytes) at commit {commit}, but reading \
                         it failed: {e}"
                    )))
                }
                Err(
                    e @ (crate::hub::HubError::Network { .. }
                    | crate::hub::HubError::Stalled { .. }
                    | crate::hub::HubError::ServerError { .. }),
                ) => return Err(e.into()),
                Err(e) => {
                    return Err(unsigned(format!(
                        "the repository lists it ({size} bytes) at commit {commit}, but it could \
                         not be read: {e}"
                    )))
                }
            };
            if bytes.len() as u64 != size {
                return Err(unsigned(format!(
                    "the Hub says {size} bytes, it sent {}",
                    bytes.len()
                )));
            }
            if let Some(etag) = etag.filter(|e| e.as_str().len() == 40) {
                if git_blob_id(&bytes) != etag.as_str() {
                    return Err(unsigned(
                        "its bytes are not the file the Hub describes (another git blob id)".into(),
                    ));
                }
            }
            bytes
        };
        let verified = verify_signature(&bytes, &p.trust).map_err(FetchError::Signature)?;
        let by_path = verified
            .statement
            .files()
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        Ok(Some(Arc::new(Read {
            bytes,
            verified,
            by_path,
            from_bucket,
        })))
    }
}

impl Fetcher {
    /// Whether this fetcher checks a model's signature (see [`FetcherBuilder::signature`]).
    ///
    /// [`FetcherBuilder::signature`]: super::FetcherBuilder::signature
    pub fn checks_signatures(&self) -> bool {
        self.signature.is_some()
    }

    #[cfg(feature = "serve")]
    /// The model's signature at `commit` of `repo`, read and verified under this fetcher's
    /// policy once for every caller (see [`SignaturePolicy`]), without a fetch of any file:
    /// `None` without a policy, or when the repository has none and none is required. `listed`:
    /// what the caller's listing of the commit says of it (`Some(None)`: not there,
    /// `Some(Some(size))`: there); `None` lets a `HEAD` ask. What a mirror checks every answer
    /// against.
    pub(crate) async fn signature_at(
        &self,
        repo: &RepoRef,
        commit: &str,
        listed: Option<Option<u64>>,
    ) -> Result<Option<Arc<Signed>>, FetchError> {
        let store = self.store_for(repo);
        let quiet = crate::progress::NoProgress;
        let gate = Gate::new(&quiet);
        self.signed(repo, commit, &store, None, listed, &gate).await
    }

    /// What a fetch says of the signature it checked: who signed, what the statement is, and
    /// how each file it names was checked (`reports`, of `files`): hashed now, or taken from
    /// the cache as checked before (at the fast level, a cached file's bytes are not read).
    pub(super) fn signature_check(
        &self,
        s: &Signed,
        files: &[super::PlannedFile],
        reports: &[super::FileReport],
    ) -> super::SignatureCheck {
        let mut check = super::SignatureCheck {
            path: s.path.clone(),
            signer: s.signer.clone(),
            model: s.model().to_string(),
            statement_sha256: s.statement_sha256(),
            files_hashed: 0,
            files_from_cache: Vec::new(),
            files_not_covered: Vec::new(),
        };
        let by_path: std::collections::HashMap<&str, &super::PlannedFile> =
            files.iter().map(|f| (f.path.as_str(), f)).collect();
        for r in reports {
            let Some(f) = by_path.get(r.path.as_str()) else {
                continue;
            };
            if !matches!(Self::signed_expectation(s, f, None), Ok(Some(_))) {
                if r.path != s.path {
                    check.files_not_covered.push(r.path.clone());
                }
                continue;
            }
            if r.cached && self.verify_level == super::VerifyLevel::Fast {
                check.files_from_cache.push(r.path.clone());
            } else {
                check.files_hashed += 1;
            }
        }
        check
    }

    #[cfg(feature = "serve")]
    /// The signature's path in the repository, under a policy.
    pub(crate) fn signature_path(&self) -> Option<&str> {
        self.signature.as_ref().map(|p| p.path.as_str())
    }

    #[cfg(feature = "serve")]
    /// What the file at `path` (`size` bytes, the Hub's `etag`) must be under the verified
    /// signature `s`: `None` for the signature itself; a refusal for a file it does not name, or
    /// that it describes otherwise than the Hub does.
    pub(crate) fn signed_file(
        s: &Signed,
        path: &str,
        size: u64,
        etag: &str,
    ) -> Result<Option<crate::manifest::FileExpectation>, FetchError> {
        let f = super::PlannedFile {
            path: path.to_string(),
            size,
            etag: etag.to_string(),
            local_path: std::path::PathBuf::new(),
            cached: false,
            partial_bytes: 0,
            sidecar: None,
            xet_hash: None,
        };
        Ok(Self::signed_expectation(s, &f, None)?.map(|e| e.file))
    }

    /// What `f` must be under a verified signature: what the statement says of its path; the
    /// signature itself needs nothing more; a file the signer left out, as `model_signing`'s
    /// verifier honours it (a path the statement's `ignore_paths` lists, or git's files at the
    /// top: `.gitattributes`, `.github/`, `.gitignore`), needs nothing either and is fetched
    /// unchecked, `rep` told so naming it; any other file it does not name is refused.
    pub(super) fn signed_expectation(
        s: &Signed,
        f: &super::PlannedFile,
        rep: Option<&Gate<'_>>,
    ) -> Result<Option<Expect>, FetchError> {
        if f.path == s.path {
            return Ok(None);
        }
        let Some(e) = s.expectation(&f.path) else {
            if let Some(why) = crate::signature::left_out_by_signer(s.statement(), &f.path) {
                if let Some(rep) = rep {
                    notice(
                        rep,
                        Some(&f.path),
                        &format!(
                            "not covered by the model's signature ({}): fetched without a \
                             signature check",
                            why.describe()
                        ),
                    );
                }
                return Ok(None);
            }
            return Err(FetchError::NotSigned {
                file: f.path.clone(),
            });
        };
        e.agrees_with(f)?;
        Ok(Some(e))
    }
}

impl Fetcher {
    /// Offline with a remote cache: the signature the bucket keeps beside the files of
    /// `commit` (its index entry names its blob; the blob is checked against its name, the
    /// signature then against the policy like any other).
    async fn signature_from_bucket(
        &self,
        repo: &RepoRef,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, FetchError> {
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = &self.read_from {
            let Some(entry) = remote
                .index_entry(repo.repo_type, &repo.id, commit, path)
                .await?
            else {
                return Ok(None);
            };
            return Ok(remote.read_blob(&entry.sha256, MAX_SIGNATURE_BYTES).await?);
        }
        let _ = (repo, commit, path);
        Ok(None)
    }

    /// Online with a remote cache to fill: the signature uploaded beside the files it signs
    /// (blob, manifest, index entry), so that nodes reading the bucket offline check their
    /// files against it. A failure is a notice.
    #[cfg(feature = "remote-cache")]
    async fn signature_to_bucket(
        &self,
        repo: &RepoRef,
        commit: &str,
        local: &std::path::Path,
        path: &str,
        bytes: &[u8],
        rep: &Gate<'_>,
    ) {
        let Some(remote) = &self.upload_to else {
            return;
        };
        let chunk_size = self.engine.config().chunk_size;
        let manifest = crate::manifest::ManifestFile {
            path: path.to_string(),
            size: bytes.len() as u64,
            sha256: crate::manifest::Sha256Hex(sha2::Sha256::digest(bytes).into()),
            chunk_size,
            chunks: bytes
                .chunks(usize::try_from(chunk_size).unwrap_or(usize::MAX).max(1))
                .map(|c| crate::manifest::Sha256Hex(sha2::Sha256::digest(c).into()))
                .collect(),
            model: None,
            tensors: Vec::new(),
        };
        let etag = git_blob_id(bytes);
        let up = crate::remote_cache::Upload {
            repo_type: repo.repo_type,
            repo_id: &repo.id,
            commit,
            revision: &repo.revision,
            path,
            etag: &etag,
            local,
            manifest: &manifest,
            replace: false,
            index: true,
        };
        if let Err(e) = remote.upload(&up, &|_| {}).await {
            notice(
                rep,
                None,
                &format!(
                    "the signature '{}' could not be kept in {remote}: {e}",
                    escape(path)
                ),
            );
        }
    }
}

/// Puts the signature's bytes in the store as the Hub names a file kept in git.
fn keep(
    store: &Store,
    repo: &RepoRef,
    commit: &str,
    path: &str,
    bytes: &[u8],
) -> std::io::Result<FileKey> {
    let key = FileKey::new(
        &repo.id,
        commit,
        path,
        git_blob_id(bytes),
        bytes.len() as u64,
    );
    if store.has_complete(&key) {
        return Ok(key);
    }
    store.prepare_for(&key)?;
    let partial = store.partial(&key).data;
    let tmp = crate::safe_fs::tempfile(&partial)?;
    std::fs::write(tmp.path(), bytes)?;
    let tmp_path = tmp.into_temp_path();
    tmp_path.persist(&partial).map_err(|e| e.error)?;
    store.commit(&partial, &key, &repo.revision)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    #[test]
    fn git_blob_ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            super::git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}
