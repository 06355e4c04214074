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
use crate::manifest::Document;
use crate::names::escape;
use crate::signature::{verify_signature, Signer, MAX_SIGNATURE_BYTES};

/// A signature that held: who signed, and the statement as the document every file is checked
/// against.
pub(super) struct Signed {
    /// Who signed.
    pub signer: Signer,
    /// The signed statement.
    pub doc: Document,
    /// The signature's path in the repository (a file that needs no other check).
    pub path: String,
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
    /// in a notice.
    pub required: bool,
}

impl SignaturePolicy {
    /// A policy for `model.sig`.
    pub fn new(trust: crate::signature::TrustPolicy, required: bool) -> SignaturePolicy {
        SignaturePolicy {
            trust,
            path: "model.sig".to_string(),
            required,
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
        let unsigned = |why: String| FetchError::Unsigned {
            repo: repo.id.clone(),
            path: p.path.clone(),
            why,
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
                    if p.required {
                        return Err(unsigned(format!(
                            "not in the cache at commit {commit} (fetch it online first)"
                        )));
                    }
                    notice(
                        rep,
                        None,
                        &format!(
                            "no signature '{}' in the cache at commit {commit}: not checked",
                            escape(&p.path)
                        ),
                    );
                    return Ok(None);
                }
            }
        } else {
            let url = self.hub.resolve_url(repo, commit, &p.path);
            let limit = usize::try_from(MAX_SIGNATURE_BYTES).unwrap_or(usize::MAX);
            match self
                .hub
                .get_small(&url, Some((repo, commit, &p.path)), limit)
                .await
            {
                Ok(b) => b,
                Err(e) if e.is_not_found_or_denied() => {
                    if p.required {
                        return Err(unsigned(format!(
                            "the repository has no such file at commit {commit}"
                        )));
                    }
                    notice(
                        rep,
                        None,
                        &format!(
                            "the repository has no signature '{}': its files are not checked \
                             against one",
                            escape(&p.path)
                        ),
                    );
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            }
        };
        let verified = verify_signature(&bytes, &p.trust).map_err(FetchError::Signature)?;
        if let Some(l) = locked.filter(|l| !verified.signer.same_as(&l.signer)) {
            return Err(FetchError::Locked {
                file: p.path.clone(),
                what: format!(
                    "signed by {}, where the lock file pins {}",
                    verified.signer, l.signer
                ),
            });
        }
        let mut kept = None;
        if (!self.offline || from_bucket) && self.writes() {
            match keep(store, repo, commit, &p.path, &bytes) {
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
            self.signature_to_bucket(repo, commit, local, &p.path, &bytes, rep)
                .await;
        }
        #[cfg(not(feature = "remote-cache"))]
        let _ = kept;
        for n in &verified.notes {
            notice(rep, None, n);
        }
        Ok(Some(Arc::new(Signed {
            signer: verified.signer,
            doc: Document::OpenSsf(verified.statement),
            path: p.path.clone(),
        })))
    }
}

impl Fetcher {
    /// What `f` must be under a verified signature: what the statement says of its path; the
    /// signature itself needs nothing more; a file it does not name is refused.
    pub(super) fn signed_expectation(
        s: &Signed,
        f: &super::PlannedFile,
    ) -> Result<Option<Expect>, FetchError> {
        if f.path == s.path {
            return Ok(None);
        }
        let Some(e) = Expect::from_document(&s.doc, &f.path, Origin::Signed) else {
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
