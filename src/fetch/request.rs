//! What to fetch and how, as plain data: [`FetchRequest`], the one place a fetch's options
//! become a [`Fetcher`](super::Fetcher).
//!
//! `wi-fetch`'s command line and the Python package's `fetch`/`hf_hub_download`/
//! `snapshot_download` each fill a request (clap, and a Python dict through serde) and hand it
//! here: the reference is parsed, every value checked and the builder configured in one
//! function, so a new option is a field, a line in [`FetchRequest::builder`], and its flag or
//! keyword. Every field has a default (`Default`, or a field left out of a dict): the same
//! defaults as [`Fetcher::from_env`](super::Fetcher::from_env), which the environment
//! (`HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`, `WI_REMOTE_CACHE`…) fills where a field is
//! unset.
//!
//! ```
//! use weight_inspect::fetch::FetchRequest;
//!
//! let request: FetchRequest = serde_json::from_str(
//!     r#"{"repo": "org/model-GGUF:Q4_K_M", "connections": 8, "metadata_timeout": 2.5}"#,
//! )?;
//! let (repo, selection) = request.target()?;
//! assert_eq!((repo.id.as_str(), selection.quant.as_deref()), ("org/model-GGUF", Some("Q4_K_M")));
//! let builder = request.builder()?; // then .reporter(…), .build_blocking()
//! # drop(builder);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    parse_reference, FetchError, Fetcher, FetcherBuilder, RepoRef, Selection, VerifyLevel,
};
use crate::names::{escape, RepoType};
use crate::transfer::RequestSize;

/// A fetch, as plain data (see the module docs). Serialized with durations as seconds
/// (`2.5`); unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct FetchRequest {
    // What.
    /// `org/name`, `org/name:QUANT`, `hf.co/org/name:QUANT`, `https://huggingface.co/org/name`
    /// or `hf://org/name/path` (see [`parse_reference`]).
    pub repo: String,
    /// The repository type, over the reference's. Default: the reference's, else a model.
    pub repo_type: Option<RepoType>,
    /// Branch, tag or commit. Default `main`.
    pub revision: Option<String>,
    /// A quantization tag (any case), over the reference's.
    pub quant: Option<String>,
    /// Files by path in the repository (one ending in `/`: every file below it).
    pub files: Vec<String>,
    /// Globs of files to fetch.
    pub include: Vec<String>,
    /// Globs of files to leave out.
    pub exclude: Vec<String>,
    /// Leave out the multimodal projector a GGUF model chosen by tag brings along.
    pub no_mmproj: bool,

    // Where.
    /// The cache root. Default `HF_HUB_CACHE`, else `$HF_HOME/hub`.
    pub cache_dir: Option<PathBuf>,
    /// A plain folder instead of the cache (`{dir}/{path}`).
    pub local_dir: Option<PathBuf>,

    // The Hub.
    /// The Hub's URL (blank: the default). Default `HF_ENDPOINT`, else the public Hub.
    pub endpoint: Option<String>,
    /// The access token. Default `HF_TOKEN`, else the token file.
    pub token: Option<String>,
    /// Headers sent with every request to the Hub's origin (see [`FetcherBuilder::header`]).
    pub headers: Vec<(String, String)>,
    /// The `User-Agent` (printable ASCII). Default `weight-inspect/{version}`.
    pub user_agent: Option<String>,
    /// Timeout of one metadata request, in seconds. Default `HF_HUB_ETAG_TIMEOUT`, else 10.
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub metadata_timeout: Option<Duration>,
    /// First delay before a retry (doubling up to [`retry_max_delay`](Self::retry_max_delay)).
    /// Default 0.5 s.
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub retry_delay: Option<Duration>,
    /// Longest delay between retries, also the cap on `Retry-After`. Default 30 s.
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub retry_max_delay: Option<Duration>,

    // How.
    /// The cache only, never the network. Default `HF_HUB_OFFLINE`.
    pub offline: Option<bool>,
    /// When the Hub cannot be reached, the cache answers if it holds everything asked for
    /// ([`FetcherBuilder::cache_fallback`]), as huggingface_hub does. Default true (`wi-fetch
    /// --no-cache-fallback`, Python's `cache_fallback=False` turn it off).
    pub cache_fallback: bool,
    /// Download again what is complete on disk.
    pub force_download: bool,
    /// Pins the ranged requests in flight. Default: adaptive.
    pub connections: Option<usize>,
    /// The most ranged requests in flight while adapting. Default 32.
    pub max_connections: Option<usize>,
    /// The most files at once. Default 64.
    pub max_files: Option<usize>,
    /// Bytes per chunk. Default 16 MiB.
    pub chunk_size: Option<u64>,
    /// How much each ranged request asks for. Default shrinking.
    pub request_size: Option<RequestSize>,
    /// A connection silent this long is dropped, in seconds. Default
    /// `HF_HUB_DOWNLOAD_TIMEOUT`, else 20.
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub stall_timeout: Option<Duration>,
    /// How long to wait for another process downloading the same file while it makes no
    /// progress, in seconds. Default 600.
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub lock_timeout: Option<Duration>,

    // Checks.
    /// Run the tensor-level verifier on model files. Default true.
    pub verify: bool,
    /// How far files on disk are checked. Default fast.
    pub verify_level: Option<VerifyLevel>,
    /// A manifest the files must match: a file or an `http(s)://` URL (read when the fetcher is
    /// made, see [`FetchRequest::blocking_fetcher`]).
    pub manifest: Option<String>,
    /// The public key (a PEM file) the model's signature (its OpenSSF `model.sig`) must verify
    /// with: a repository that ships one is checked against it before any file, and its
    /// statement is what every file must be (see
    /// [`FetcherBuilder::signature`](super::FetcherBuilder::signature)).
    pub signature_public_key: Option<PathBuf>,
    /// Instead of a key: the certificates (PEM files) the signature's certificate must chain to.
    pub signature_certificate_chain: Vec<PathBuf>,
    /// Instead of a key: the identity (an email or a URI) that must have signed keyless,
    /// through Sigstore.
    pub signature_identity: Option<String>,
    /// With `signature_identity`: the OIDC issuer that must have vouched for it.
    pub signature_identity_provider: Option<String>,
    /// With `signature_identity`: the Sigstore instance's trusted root (`trusted_root.json`).
    pub signature_trust_config: Option<PathBuf>,
    /// Fail a repository that has no signature (needs a key, certificates or an identity).
    pub require_signature: bool,
    /// The signature's path in the repository. Default `model.sig`.
    pub signature_path: Option<String>,
    /// Use the manifest a repository publishes beside a model file. Default true.
    pub sidecars: bool,
    /// Fetch files the Hub stores in Xet through its CAS (`false`: through the resolve URL, the
    /// Hub's bridge). Default: true unless `HF_HUB_DISABLE_XET` is set.
    pub xet: Option<bool>,
    /// Record a manifest for every file that has none (for a lock file).
    pub ensure_manifests: bool,
    /// Check what is on disk, download nothing (`cache verify`).
    pub check_only: bool,
    /// With `check_only`: a file no listing knows fails the check.
    pub strict: bool,

    // The remote cache.
    /// A remote cache's URL (`s3://`, `gs://`, `az://`, `file://`); empty for none. Default
    /// `WI_REMOTE_CACHE`.
    pub remote_cache: Option<String>,
    /// Upload verified downloads to the remote cache. Default true.
    pub upload: bool,
    /// Upload the files taken from the cache too (`cache push`).
    pub upload_cached: bool,
    /// Fill a file the remote cache lacks together with the nodes that start at the same
    /// time (each chunk fetched from the Hub by one of them). Default true.
    pub coordinate: bool,
    /// This node's name in the bucket's leases and pieces. Default `WI_NODE_NAME`, else the
    /// host's name and the process's id.
    pub node_name: Option<String>,
    /// How long a chunk's lease holds without renewal, in seconds. Default 10, at most 120
    /// ([`MAX_LEASE`](crate::remote_cache::MAX_LEASE)).
    #[serde(with = "seconds")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub fill_lease: Option<Duration>,
}

impl Default for FetchRequest {
    fn default() -> Self {
        FetchRequest {
            repo: String::new(),
            repo_type: None,
            revision: None,
            quant: None,
            files: Vec::new(),
            include: Vec::new(),
            exclude: Vec::new(),
            no_mmproj: false,
            cache_dir: None,
            local_dir: None,
            endpoint: None,
            token: None,
            headers: Vec::new(),
            user_agent: None,
            metadata_timeout: None,
            retry_delay: None,
            retry_max_delay: None,
            offline: None,
            cache_fallback: true,
            force_download: false,
            connections: None,
            max_connections: None,
            max_files: None,
            chunk_size: None,
            request_size: None,
            stall_timeout: None,
            lock_timeout: None,
            verify: true,
            verify_level: None,
            manifest: None,
            signature_public_key: None,
            signature_certificate_chain: Vec::new(),
            signature_identity: None,
            signature_identity_provider: None,
            signature_trust_config: None,
            require_signature: false,
            signature_path: None,
            sidecars: true,
            xet: None,
            ensure_manifests: false,
            check_only: false,
            strict: false,
            remote_cache: None,
            upload: true,
            upload_cached: false,
            coordinate: true,
            node_name: None,
            fill_lease: None,
        }
    }
}

impl FetchRequest {
    /// A request for `repo` (a reference, see [`FetchRequest::repo`]) with every default.
    pub fn new(repo: impl Into<String>) -> Self {
        FetchRequest {
            repo: repo.into(),
            ..FetchRequest::default()
        }
    }

    /// The repository and the selection asked for: the reference parsed, the fields over it.
    pub fn target(&self) -> Result<(RepoRef, Selection), FetchError> {
        let reference =
            parse_reference(&self.repo).map_err(|e| FetchError::Invalid(e.to_string()))?;
        let kind = match (self.repo_type, reference.repo_type) {
            (Some(given), Some(named)) if given != named => {
                return Err(FetchError::Invalid(format!(
                    "'{}' names a {named} repository, but the repository type given is {given}",
                    crate::names::escape(&self.repo)
                )))
            }
            (given, named) => given.or(named).unwrap_or(RepoType::Model),
        };
        let mut repo = RepoRef::model(reference.repo).with_type(kind);
        if let Some(rev) = &self.revision {
            repo = repo.with_revision(rev.clone());
        }
        let mut files = self.files.clone();
        files.extend(reference.file);
        let selection = Selection {
            files,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            quant: self.quant.clone().or(reference.quant),
            no_mmproj: self.no_mmproj,
        };
        Ok((repo, selection))
    }

    /// The builder of the fetcher this request describes ([`Fetcher::from_env`] with every
    /// field set over it), every value checked; add what is not data (a reporter, a
    /// cancellation token) and build. The manifest is not read here: see
    /// [`blocking_fetcher`](Self::blocking_fetcher), or read it with
    /// [`Fetcher::read_manifest`](super::Fetcher::read_manifest).
    pub fn builder(&self) -> Result<FetcherBuilder, FetchError> {
        let mut b = Fetcher::from_env()
            .verify(self.verify)
            .sidecars(self.sidecars)
            .ensure_manifests(self.ensure_manifests)
            .force_download(self.force_download)
            .check_only(self.check_only)
            .strict(self.strict)
            .cache_fallback(self.cache_fallback);
        b = b.signature(self.signature_policy()?);
        if let Some(x) = self.xet {
            b = b.xet(x);
        }
        if let Some(e) = self.endpoint.as_deref().filter(|e| !e.trim().is_empty()) {
            b = b.endpoint(e);
        }
        if let Some(t) = &self.token {
            b = b.token(t);
        }
        for (name, value) in &self.headers {
            b = b
                .header(name, value)
                .map_err(|e| FetchError::Invalid(format!("header '{}': {e}", escape(name))))?;
        }
        if let Some(ua) = &self.user_agent {
            if !ua.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) {
                return Err(invalid("user_agent", "is not a valid header value"));
            }
            b = b.user_agent(ua);
        }
        if let Some(t) = positive("metadata_timeout", self.metadata_timeout)? {
            b = b.metadata_timeout(t);
        }
        if self.retry_delay.is_some() || self.retry_max_delay.is_some() {
            // The one not given keeps the engine's default.
            let defaults = crate::transfer::EngineConfig::default();
            let min = self.retry_delay.unwrap_or(defaults.base_delay);
            let max = self.retry_max_delay.unwrap_or(defaults.max_delay);
            if min > max {
                return Err(invalid("retry_delay", "is longer than retry_max_delay"));
            }
            b = b.retry_delays(min, max);
        }
        if let Some(d) = &self.cache_dir {
            b = b.cache_dir(d);
        }
        if let Some(d) = &self.local_dir {
            b = b.local_dir(d);
        }
        if let Some(o) = self.offline {
            b = b.offline(o);
        }
        if let Some(n) = at_least_one("max_connections", self.max_connections)? {
            b = b.max_connections(n);
        }
        // Pinned after the adaptive cap: `connections` wins when both are given.
        if let Some(n) = at_least_one("connections", self.connections)? {
            b = b.connections(n);
        }
        if let Some(n) = at_least_one("max_files", self.max_files)? {
            b = b.max_files(n);
        }
        if let Some(c) = at_least_one("chunk_size", self.chunk_size)? {
            b = b.chunk_size(c);
        }
        if let Some(s) = self.request_size {
            b = b.request_size(s);
        }
        if let Some(t) = positive("stall_timeout", self.stall_timeout)? {
            b = b.stall_timeout(t);
        }
        if let Some(t) = positive("lock_timeout", self.lock_timeout)? {
            b = b.lock_timeout(t);
        }
        if let Some(l) = self.verify_level {
            b = b.verify_level(l);
        }
        self.remote(b)
    }

    /// The remote cache named (`None`: `WI_REMOTE_CACHE`; empty: none), opened, with the
    /// upload settings.
    fn remote(&self, b: FetcherBuilder) -> Result<FetcherBuilder, FetchError> {
        let given = self.remote_cache.as_deref().map(str::trim);
        #[cfg(feature = "remote-cache")]
        {
            use crate::remote_cache::RemoteCache;
            let remote = match given {
                Some("") => None,
                Some(url) => Some(RemoteCache::open(url)),
                None => RemoteCache::from_env(),
            };
            let Some(remote) = remote else {
                return Ok(b);
            };
            let remote = remote.map_err(|e| FetchError::Invalid(e.to_string()))?;
            let coordination = if self.coordinate {
                let mut how = super::Coordination::default();
                if let Some(n) = self.node_name.as_deref().map(str::trim) {
                    if n.is_empty() {
                        return Err(invalid("node_name", "must not be empty"));
                    }
                    how.node = n.to_string();
                }
                if let Some(t) = positive("fill_lease", self.fill_lease)? {
                    if t > crate::remote_cache::MAX_LEASE {
                        return Err(invalid(
                            "fill_lease",
                            &format!(
                                "must be at most {} seconds (a node that stops holds its chunks that long)",
                                crate::remote_cache::MAX_LEASE.as_secs()
                            ),
                        ));
                    }
                    how.lease = t;
                }
                Some(how)
            } else {
                None
            };
            Ok(b.remote_cache(Some(remote))
                .upload(self.upload)
                .upload_cached(self.upload_cached)
                .coordinate(coordination))
        }
        #[cfg(not(feature = "remote-cache"))]
        match given {
            Some(url) if !url.is_empty() => Err(FetchError::Invalid(format!(
                "remote cache {}: this build has no remote-cache support (the `remote-cache` \
                 feature)",
                escape(url)
            ))),
            _ => Ok(b),
        }
    }

    /// The signature policy the request's `signature_*` fields describe, the key or
    /// certificates read.
    fn signature_policy(&self) -> Result<Option<super::SignaturePolicy>, FetchError> {
        let trust = super::SignatureTrust {
            public_key: self.signature_public_key.clone(),
            certificate_chain: self.signature_certificate_chain.clone(),
            identity: self.signature_identity.clone(),
            identity_provider: self.signature_identity_provider.clone(),
            trust_config: self.signature_trust_config.clone(),
        };
        let policy = super::SignaturePolicy::from_trust(&trust, self.require_signature)?;
        let Some(mut policy) = policy else {
            return Ok(None);
        };
        if let Some(p) = &self.signature_path {
            crate::names::check_repo_path(p)
                .map_err(|why| invalid("signature_path", &format!("'{}': {why}", escape(p))))?;
            policy.path.clone_from(p);
        }
        Ok(Some(policy))
    }

    /// The fetcher this request describes, on its own runtime: [`builder`](Self::builder),
    /// `extra` applied to it (a reporter, a cancellation token), built, and the
    /// [`manifest`](Self::manifest) read (from a file, or from a URL with the fetcher's own
    /// client: the token goes only to the Hub's origin).
    pub fn blocking_fetcher(
        &self,
        extra: impl FnOnce(FetcherBuilder) -> FetcherBuilder,
    ) -> Result<super::BlockingFetcher, FetchError> {
        let mut fetcher = extra(self.builder()?).build_blocking()?;
        if let Some(m) = &self.manifest {
            let doc = fetcher.read_manifest(m)?;
            fetcher.set_manifest(doc);
        }
        Ok(fetcher)
    }
}

fn invalid(field: &str, why: &str) -> FetchError {
    FetchError::Invalid(format!("{field} {why}"))
}

fn at_least_one<T: PartialEq + Default + Copy>(
    field: &str,
    v: Option<T>,
) -> Result<Option<T>, FetchError> {
    match v {
        Some(n) if n == T::default() => Err(invalid(field, "must be at least 1")),
        other => Ok(other),
    }
}

fn positive(field: &str, v: Option<Duration>) -> Result<Option<Duration>, FetchError> {
    match v {
        Some(d) if d.is_zero() => Err(invalid(field, "must be positive")),
        other => Ok(other),
    }
}

/// An optional duration as seconds (`2.5`); a negative, infinite or NaN one is refused.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(s) => Duration::try_from_secs_f64(s).map(Some).map_err(|_| {
                serde::de::Error::custom(format!(
                    "{s} is not a duration in seconds (a finite number, 0 or more)"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dict_of_some_fields_is_a_request_with_the_rest_defaulted() {
        let r: FetchRequest = serde_json::from_str(
            r#"{"repo": "hf.co/org/m-GGUF:q8_0", "files": ["a.gguf"], "metadata_timeout": 2.5,
                "headers": [["X-A", "1"]], "request_size": "whole-part", "verify_level": "full",
                "repo_type": "dataset"}"#,
        )
        .unwrap();
        assert_eq!(r.metadata_timeout, Some(Duration::from_millis(2500)));
        assert!(r.verify && r.sidecars && r.upload && !r.force_download);
        assert_eq!(r.request_size, Some(RequestSize::WholePart));
        let (repo, sel) = r.target().unwrap();
        assert_eq!(
            (repo.id.as_str(), repo.repo_type, repo.revision.as_str()),
            ("org/m-GGUF", RepoType::Dataset, "main")
        );
        assert_eq!(
            (sel.quant.as_deref(), sel.files.as_slice()),
            (Some("q8_0"), &["a.gguf".to_string()][..])
        );
        // Round trip: what is serialized reads back the same.
        let again: FetchRequest =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again, r);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused_naming_them() {
        let e = serde_json::from_str::<FetchRequest>(r#"{"repo": "a/b", "conections": 2}"#)
            .unwrap_err();
        assert!(e.to_string().contains("conections"), "{e}");
        let e = serde_json::from_str::<FetchRequest>(r#"{"metadata_timeout": -1}"#).unwrap_err();
        assert!(e.to_string().contains("-1"), "{e}");
        for (r, field) in [
            (
                FetchRequest {
                    connections: Some(0),
                    ..FetchRequest::new("a/b")
                },
                "connections must be at least 1",
            ),
            (
                FetchRequest {
                    max_files: Some(0),
                    ..FetchRequest::new("a/b")
                },
                "max_files must be at least 1",
            ),
            (
                FetchRequest {
                    metadata_timeout: Some(Duration::ZERO),
                    ..FetchRequest::new("a/b")
                },
                "metadata_timeout must be positive",
            ),
            (
                FetchRequest {
                    user_agent: Some("bad\nagent".into()),
                    ..FetchRequest::new("a/b")
                },
                "user_agent is not a valid header value",
            ),
            (
                FetchRequest {
                    headers: vec![("Range".into(), "bytes=0-1".into())],
                    ..FetchRequest::new("a/b")
                },
                "header 'Range'",
            ),
            (
                FetchRequest {
                    remote_cache: Some("ftp://nowhere".into()),
                    ..FetchRequest::new("a/b")
                },
                "ftp",
            ),
        ] {
            let e = r.builder().map(|_| ()).unwrap_err();
            assert!(e.to_string().contains(field), "{e} (expected {field})");
            assert_eq!(e.exit_class(), crate::exit::ExitClass::Local, "{e}");
        }
        assert!(FetchRequest::new("hf://org").target().is_err());
    }

    /// A node may not ask for a lease that would hold its chunks for ages if it stopped (the
    /// other nodes would wait for them: issue 48).
    #[cfg(feature = "remote-cache")]
    #[test]
    fn a_fill_lease_past_the_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = url::Url::from_directory_path(dir.path()).unwrap();
        let r = |secs: u64| FetchRequest {
            remote_cache: Some(bucket.to_string()),
            fill_lease: Some(Duration::from_secs(secs)),
            ..FetchRequest::new("a/b")
        };
        let e = r(1_000_000_000_000_000_000)
            .builder()
            .map(|_| ())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("fill_lease must be at most 120 seconds"),
            "{e}"
        );
        assert_eq!(e.exit_class(), crate::exit::ExitClass::Local, "{e}");
        assert!(r(120).builder().is_ok());
    }
}
