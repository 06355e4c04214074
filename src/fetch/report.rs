//! What a fetch reports: the plan of what would be fetched, and what happened to every file.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::Verification;
use crate::key::FileKey;

/// One file of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PlannedFile {
    /// Path in the repository.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag: SHA-256 (LFS) or git blob SHA-1.
    pub etag: String,
    /// Where the file is (or will be) on disk.
    pub local_path: PathBuf,
    /// True when it is already complete on disk.
    pub cached: bool,
    /// Bytes an earlier, interrupted run of this very version recorded in its resume state
    /// (re-hashed before use); 0 without a valid state. Not the partial file's length: partial
    /// files are preallocated to their full size.
    pub partial_bytes: u64,
    /// The manifest published beside it in the repository (`{path}.wi-manifest.json`), when
    /// the listing has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<String>,
    /// Its Xet hash, when the Hub stores it in Xet: it is then fetched through the Hub's CAS
    /// (unless Xet is turned off), and the hash checked with its SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub xet_hash: Option<crate::xet::XetHash>,
}

/// What a selection resolves to (see [`Fetcher::resolve`](super::Fetcher::resolve)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Plan {
    /// The repository, `org/name` (with `datasets/` in front for datasets).
    pub repo: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// The folder that holds the commit's files: its snapshot folder in the cache
    /// (`snapshots/{commit}`, what `huggingface_hub.snapshot_download` returns), or the local
    /// folder.
    pub folder: PathBuf,
    /// The selected files, in repository order.
    pub files: Vec<PlannedFile>,
    /// A note for the user (e.g. which model of a GGUF repository was chosen).
    pub notice: Option<String>,
    /// Files of the listing that were refused and left out (unsafe names, impossible sizes,
    /// names that collide), with why; names escaped.
    pub refused: Vec<crate::hub::RefusedEntry>,
    /// True when resolved from disk only.
    pub offline: bool,
    /// Offline: files asked for by name that are not on disk (each fails on its own while the
    /// others are served).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// With a lock file: why the files in [`missing`](Self::missing), absent from the cache,
    /// could not be asked of the Hub (it could not be reached); each then fails naming it
    /// ([`FetchError::Unfetched`](super::FetchError::Unfetched), exit code 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// Offline from a remote cache without a lock file: the bucket's ref and index said what
    /// the revision and its files are, and nothing checked it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness: Option<Witness>,
    /// Checking (`cache verify`): files in the snapshot folder that neither the listing (the
    /// Hub's, or the one saved for the commit) nor the lock file knows, escaped. Empty when
    /// there is neither to judge by.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<String>,
    /// With a signature asked for, what the listing the plan was made from says of it: `None`
    /// when no listing was read (explicit files, offline), `Some(None)` when it does not name
    /// it, `Some(Some(size))` when it does (a signature named there that cannot be read is a
    /// refusal, never "no signature").
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) signature_listed: Option<Option<u64>>,
}

/// Who said what a plan's files are, when nobody checked it: offline, a remote cache's ref (for
/// a revision that is not a commit) and its index entries stand in for the Hub's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Witness {
    /// The store, by its URL (never with credentials).
    pub store: String,
    /// The revision asked for, escaped.
    pub revision: String,
    /// The commit the bucket's ref named (or the revision, when it is one).
    pub commit: String,
    /// True when the commit came from the bucket's ref.
    pub from_ref: bool,
    /// What is said to the user, one line.
    pub message: String,
}

impl Witness {
    /// The bucket at `store` as the only witness of `revision` → `commit` and of the files'
    /// SHA-256.
    #[cfg_attr(not(feature = "remote-cache"), allow(dead_code))]
    pub(crate) fn bucket(store: &str, revision: &str, commit: &str) -> Witness {
        let from_ref = revision != commit;
        let revision = crate::names::escape(revision).into_owned();
        let message = if from_ref {
            format!(
                "{revision} → {commit} from the bucket's ref, not checked against the Hub, nor \
                 is what its index says each file is ({store}); pin with a lock file"
            )
        } else {
            format!(
                "the files of {commit} are what the bucket's index says, not checked against \
                 the Hub ({store}); pin with a lock file"
            )
        };
        Witness {
            store: store.to_string(),
            revision,
            commit: commit.to_string(),
            from_ref,
            message,
        }
    }
}

impl Plan {
    /// The identity of one of this plan's files (see [`FileKey`]).
    pub fn key(&self, f: &PlannedFile) -> FileKey {
        FileKey::new(&self.repo, &self.commit, &f.path, &f.etag, f.size)
    }

    /// Total size of the selected files (saturating: listed sizes are hostile).
    pub fn total_bytes(&self) -> u64 {
        sum(self.files.iter().map(|f| f.size))
    }

    /// Size of the files already complete on disk.
    pub fn cached_bytes(&self) -> u64 {
        sum(self.files.iter().filter(|f| f.cached).map(|f| f.size))
    }

    /// Bytes still to download (partial downloads counted as present).
    pub fn bytes_to_fetch(&self) -> u64 {
        sum(self
            .files
            .iter()
            .filter(|f| !f.cached)
            .map(|f| f.size.saturating_sub(f.partial_bytes)))
    }
}

fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// Python's name for it (`weight_inspect.types.FetchedFile`).
#[cfg_attr(feature = "schema", schemars(rename = "FetchedFile"))]
pub struct FileReport {
    /// Path in the repository.
    pub path: String,
    /// Where it is on disk (a snapshot path in the cache, or the file in the local folder).
    pub local_path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// The ETag (the blob's name in the cache).
    pub etag: String,
    /// True when it was already complete on disk (nothing transferred).
    pub cached: bool,
    /// Bytes received in this run, re-fetched ones included.
    pub transferred: u64,
    /// Bytes fetched twice: after faults (cut connections, corrupted chunks, …), and what a
    /// connection received past the end of a range split from under it (all that had arrived
    /// when it stopped).
    pub refetched: u64,
    /// Copies of chunks that did not match the manifest, each unlike the others (corrupted on
    /// the way), thrown away and fetched again.
    pub corrupt_copies: u32,
    /// Bytes reused from an earlier, interrupted run (after re-checking their hashes).
    pub resumed: u64,
    /// Of [`resumed`](Self::resumed), bytes kept from a damaged copy being repaired (its chunks
    /// that still matched), not from an earlier run.
    #[serde(default)]
    pub kept_from_damaged: u64,
    /// Failed attempts that were retried.
    pub retries: u32,
    /// The same, by cause.
    pub retry_causes: crate::transfer::RetryCauses,
    /// Times an idle connection took over the second half of a slow one's range.
    pub splits: u64,
    /// Time spent on this file.
    #[serde(rename = "elapsed_secs", serialize_with = "secs")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub elapsed: Duration,
    /// The tensor-level verifier's verdict (GGUF and safetensors files, when enabled).
    pub verification: Option<Verification>,
    /// Bytes per chunk of the file's recorded manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<u64>,
    /// The digest of the file's recorded manifest (see
    /// [`ManifestFile::chunks_digest`](crate::manifest::ManifestFile::chunks_digest)), when one
    /// is recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// Its upload to the remote cache, when it was downloaded in this run and one is set (see
    /// [`FetcherBuilder::remote_cache`](super::FetcherBuilder)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload: Option<UploadReport>,
    /// What its download read from the remote cache, when it found the file there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_read: Option<RemoteRead>,
    /// What its download read through the Hub's CAS, when the file came that way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xet: Option<XetRead>,
    /// The check of the remote cache's copy (`cache verify --remote-cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_check: Option<RemoteCheck>,
    /// This node's part in filling the file's blob together with the nodes that started with
    /// it, when the remote cache lacked it and honours conditional writes.
    #[cfg(feature = "remote-cache")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<crate::remote_cache::FillReport>,
}

/// What `cache verify --remote-cache` found of a file's copy in the remote cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RemoteCheck {
    /// The store, by its URL (never with credentials).
    pub store: String,
    /// `sound`, `damaged`, `missing` (no blob of the file's SHA-256) or `failed` (the store
    /// could not be read).
    pub outcome: String,
    /// Chunks checked against the blob's manifest (0 without one: the whole file only).
    pub chunks: usize,
    /// What is wrong, or why it could not be checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a file's download read through the Hub's CAS (Xet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct XetRead {
    /// The file's Xet hash, as the Hub announced it.
    pub hash: String,
    /// Whether the file's Xet hash, computed over the chunks the CAS delivered (as its xorbs
    /// framed them), is the one announced (the SHA-256 is always checked, and decides).
    pub checked: bool,
    /// Why it was not checked or differs, when it does not vouch for the file: bytes that came
    /// without their chunks' boundaries (from the bridge), or chunks that make another hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
    /// Bytes of the file that came through the CAS (the rest from the bridge).
    pub bytes: u64,
    /// Bytes of xorbs received (compressed).
    pub xorb_bytes: u64,
    /// Xorb ranges asked.
    pub xorb_requests: u64,
    /// Reconstructions asked (one per range of the file).
    pub reconstructions: u64,
    /// Bytes copied from an older version of the file held in the cache (chunks the new
    /// version shares with it), not fetched.
    pub reused: u64,
    /// Why the CAS stopped being read before the end (the rest came from the bridge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
}

/// What a file's download read from the remote cache (a team's bucket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RemoteRead {
    /// The object read, by its URL (never with credentials).
    pub from: String,
    /// Bytes received from it and kept (0 when its bytes were thrown away: a copy that did
    /// not make the file, downloaded again from the Hub).
    pub bytes: u64,
    /// What was wrong with the bucket's copy (chunks that failed the manifest, a blob that is
    /// not the file, an unusable manifest): those bytes came from the Hub, and the copy is
    /// replaced by the upload after the verified download.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// Why it stopped being read before the end (the rest came from the Hub).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// Chunks read from it that did not match the manifest (wrong in the bucket, fetched from
    /// the Hub instead): counted in the file's `corrupt_copies` too.
    #[serde(skip_serializing_if = "is_zero")]
    pub damaged_chunks: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RemoteRead {
    /// The store the object was read from (its URL without the object's key).
    pub fn store(&self) -> &str {
        self.from
            .rsplit_once("/blobs/sha256/")
            .or_else(|| self.from.rsplit_once("/fills/sha256/"))
            .map_or(self.from.as_str(), |(store, _)| store)
    }
}

/// What happened to a file's upload to the remote cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UploadReport {
    /// The store, by its URL (never with credentials).
    pub to: String,
    /// `sent` (the blob was uploaded), `already_there` (only its index entry was written, if
    /// `indexed`), `another_node` (filled together with other nodes, one of which uploads it)
    /// or `failed`.
    pub outcome: String,
    /// Bytes of the blob sent.
    pub bytes: u64,
    /// Whether its index entry and ref were written: never by an offline run, which checked
    /// nothing against the Hub (the blob and its manifest only).
    pub indexed: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of [`Fetcher::fetch`](super::Fetcher::fetch).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FetchSummary {
    /// The repository.
    pub repo: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// The folder that holds the commit's files (see [`Plan::folder`]).
    pub folder: PathBuf,
    /// Every selected file, in repository order.
    pub files: Vec<FileReport>,
    /// A note for the user (e.g. which model of a GGUF repository was chosen and how to get
    /// the others).
    pub notice: Option<String>,
    /// See [`Plan::witness`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness: Option<Witness>,
    /// Set when the Hub could not be reached and the cache answered instead
    /// ([`FetcherBuilder::cache_fallback`](super::FetcherBuilder::cache_fallback)): why the Hub
    /// could not be reached. The files were checked as an offline fetch checks them, at the
    /// fetch's verification level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// See [`Plan::unlisted`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<String>,
    /// The model's signature, when it was checked
    /// ([`FetcherBuilder::signature`](super::FetcherBuilder::signature)): where, and who
    /// signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureCheck>,
    /// Wall time.
    #[serde(rename = "elapsed_secs", serialize_with = "secs")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub elapsed: Duration,
    /// The connections the fetch used (those of the fetcher's engine during the fetch: the
    /// most at once, and the mean over its wall time).
    pub connections: crate::transfer::ConnectionUse,
    /// The files downloading at once (the most, and the mean over the wall time).
    pub files_at_once: crate::transfer::ConnectionUse,
    /// The path the adaptive connection count took: start, peak, each change, and why it
    /// settled (the engine's, since the fetcher was built).
    pub connection_path: crate::transfer::ConnectionPath,
}

/// A model's signature that held (see [`FetchSummary::signature`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SignatureCheck {
    /// The signature's path in the repository.
    pub path: String,
    /// Who signed.
    pub signer: crate::signature::Signer,
    /// What the statement says was signed: the model's name (the folder, or the one file, its
    /// signer signed). A signature binds content, not a repository or a commit: the same signed
    /// files, in another repository or an older commit, carry the same statement.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// The statement's subject digest (SHA-256, hex): the signed content as a whole. Two
    /// signings of different content differ here; a lock file pins it, so that a locked fetch
    /// refuses another signing by the same signer (an older version, another model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement_sha256: Option<String>,
    /// Files of this fetch whose bytes were hashed against the signature: as they arrived, or
    /// read again (`--verify full`). Not in a lock file.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub files_hashed: u64,
    /// Files of this fetch taken from the cache as an earlier fetch checked them, their bytes
    /// not hashed again now (`--verify full` hashes them), by path. Not in a lock file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_from_cache: Vec<String>,
    /// Files of this fetch the signature does not cover (its signer left them out: the
    /// statement's `ignore_paths`, git's files), fetched without a signature check, by path. Not
    /// in a lock file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_not_covered: Vec<String>,
}

impl SignatureCheck {
    /// What a lock file pins of it: the path, the signer and the statement, not what one fetch
    /// did.
    pub fn pinned(&self) -> SignatureCheck {
        SignatureCheck {
            files_hashed: 0,
            files_from_cache: Vec::new(),
            files_not_covered: Vec::new(),
            ..self.clone()
        }
    }
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl FetchSummary {
    /// Total size of the files.
    pub fn total_bytes(&self) -> u64 {
        sum(self.files.iter().map(|f| f.size))
    }

    /// Bytes received in this run.
    pub fn transferred(&self) -> u64 {
        sum(self.files.iter().map(|f| f.transferred))
    }

    /// Bytes fetched again after faults.
    pub fn refetched(&self) -> u64 {
        sum(self.files.iter().map(|f| f.refetched))
    }

    /// Copies of chunks that failed their manifest and were thrown away, over all files.
    pub fn corrupt_copies(&self) -> u64 {
        sum(self.files.iter().map(|f| u64::from(f.corrupt_copies)))
    }

    /// Bytes reused from interrupted runs.
    pub fn resumed(&self) -> u64 {
        sum(self.files.iter().map(|f| f.resumed))
    }

    /// Chunks read from the remote cache that were wrong there (see
    /// [`RemoteRead::damaged_chunks`]).
    pub fn bucket_damaged_chunks(&self) -> u32 {
        self.files
            .iter()
            .filter_map(|f| f.remote_read.as_ref())
            .map(|r| r.damaged_chunks)
            .sum()
    }

    /// Of [`resumed`](Self::resumed), bytes kept from damaged copies being repaired.
    pub fn kept_from_damaged(&self) -> u64 {
        sum(self.files.iter().map(|f| f.kept_from_damaged))
    }

    /// Failed attempts that were retried, over all files.
    pub fn retries(&self) -> u64 {
        self.files.iter().map(|f| u64::from(f.retries)).sum()
    }

    /// Retried attempts by cause, over every file.
    pub fn retry_causes(&self) -> crate::transfer::RetryCauses {
        let mut c = crate::transfer::RetryCauses::default();
        for f in &self.files {
            c.add(&f.retry_causes);
        }
        c
    }

    /// Slow ranges split between connections, over every file.
    pub fn splits(&self) -> u64 {
        self.files.iter().map(|f| f.splits).sum()
    }

    /// Files that were already on disk.
    pub fn cached_count(&self) -> usize {
        self.files.iter().filter(|f| f.cached).count()
    }

    /// Files verified, and how many of them passed.
    pub fn verified(&self) -> (usize, usize) {
        let v: Vec<_> = self
            .files
            .iter()
            .filter_map(|f| f.verification.as_ref())
            .collect();
        (v.len(), v.iter().filter(|v| v.valid).count())
    }
}

/// A sum that saturates instead of overflowing.
fn sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}
