//! Opening a store: the URL's scheme (`s3://`, `gs://`, `az://`, `file://`), its options and
//! the credentials read from the environment, the retries of one request, a URL's credentials
//! kept out of every message, and the advice when a bucket does not exist.

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::{RemoteCache, RemoteCacheError, STORE_RETRIES};
use crate::names::escape;

impl RemoteCacheError {
    /// When the store answered that its bucket (or container) does not exist (S3's
    /// `NoSuchBucket`, GCS's "bucket does not exist", Azure's `ContainerNotFound`): one line
    /// saying so, and how to create it. Said once per run, not per file.
    pub fn missing_bucket(&self) -> Option<String> {
        let RemoteCacheError::Store { store, source, .. } = self else {
            return None;
        };
        let cause = match source.as_ref() {
            object_store::Error::NotFound { source, .. }
            | object_store::Error::Generic { source, .. } => source,
            _ => return None,
        };
        let mut text = String::new();
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&**cause);
        while let Some(c) = cur {
            text.push_str(&c.to_string());
            text.push('\n');
            cur = c.source();
        }
        let missing = ["NoSuchBucket", "ContainerNotFound", "bucket does not exist"]
            .iter()
            .any(|code| text.contains(code));
        missing.then(|| bucket_advice(store))
    }
}

/// `the bucket 'NAME' of the remote cache URL does not exist: create it (…)`, with the tool of
/// the store's kind.
fn bucket_advice(store: &str) -> String {
    let (scheme, rest) = store.split_once("://").unwrap_or(("", store));
    let bucket = rest.split('/').next().unwrap_or(rest);
    let how = match scheme {
        "s3" | "s3a" => format!(
            "`aws s3 mb s3://{bucket}` (with `--endpoint-url` for an S3-compatible server), or \
             the server's own tool (Garage: `garage bucket create {bucket}`, MinIO: `mc mb \
             ALIAS/{bucket}`)"
        ),
        "gs" => format!("`gcloud storage buckets create gs://{bucket}`"),
        "az" | "azure" | "abfs" | "abfss" => {
            format!("`az storage container create --name {bucket}`")
        }
        _ => "the store's own tool".to_string(),
    };
    format!(
        "the bucket '{bucket}' of the remote cache {store} does not exist: create it with {how}, \
         or give another --remote-cache; nothing was uploaded"
    )
}

/// The bucket (or container) a cloud store's URL names: its host, which must be there.
fn host<'u>(
    parsed: &'u url::Url,
    missing: &str,
    bad: &dyn Fn(String) -> RemoteCacheError,
) -> Result<&'u str, RemoteCacheError> {
    match parsed.host_str() {
        Some(h) if !h.is_empty() => Ok(h),
        _ => Err(bad(missing.to_string())),
    }
}

/// `builder` with each option given set on it (`set`), its name read as the store's own
/// configuration key `K`; an unknown one is refused, named (never its value: it may be a
/// secret).
fn configured<B, K: std::str::FromStr>(
    builder: B,
    options: &[(String, String)],
    store: &str,
    bad: &dyn Fn(String) -> RemoteCacheError,
    set: impl Fn(B, K, String) -> B,
) -> Result<B, RemoteCacheError> {
    options.iter().try_fold(builder, |b, (k, v)| {
        let key: K = k
            .parse()
            .map_err(|_| bad(format!("unknown {store} option '{}'", escape(k))))?;
        Ok(set(b, key, v.clone()))
    })
}

impl RemoteCache {
    /// Opens the store a URL names: `s3://bucket[/prefix]` (configured from the `AWS_*`
    /// variables; plain HTTP only when `AWS_ALLOW_HTTP` is true or `AWS_ENDPOINT_URL` is an
    /// `http://` URL), `gs://bucket[/prefix]` (the `GOOGLE_*` variables),
    /// `az://container[/prefix]` (the `AZURE_*` variables), or `file:///absolute/path`.
    /// Nothing is asked of the store yet.
    pub fn open(url: &str) -> Result<RemoteCache, RemoteCacheError> {
        RemoteCache::open_with_options(url, std::iter::empty::<(&str, &str)>())
    }

    /// [`open`](Self::open), with the store's settings given rather than read from the
    /// environment alone: object_store's configuration keys (for S3 `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_region`, `aws_endpoint`, `aws_allow_http`, …, what the
    /// `AWS_*` variables set, which they override; for GCS `google_…`, for Azure `azure_…`). A key the store does not know is refused,
    /// named; values are never shown (they may be secrets). `file://` takes none.
    pub fn open_with_options<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<RemoteCache, RemoteCacheError> {
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.into()))
            .collect();
        let bad = |reason: String| RemoteCacheError::Config {
            url: escape(&without_userinfo(url)).into_owned(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a URL ({e})")))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Credentials belong in the environment, never in a URL that gets printed.
            return Err(bad(
                "credentials in the URL are refused: use AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY"
                    .into(),
            ));
        }
        let mut local_root = None;
        let (store, prefix): (Arc<dyn ObjectStore>, &str) = match parsed.scheme() {
            "s3" | "s3a" => {
                let bucket = host(&parsed, "no bucket (s3://BUCKET/PREFIX)", &bad)?;
                let b = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(format!("s3://{bucket}"))
                    .with_retry(retry())
                    .with_config(
                        object_store::aws::AmazonS3ConfigKey::Client(
                            object_store::ClientConfigKey::ConnectTimeout,
                        ),
                        "5s",
                    );
                let mut b = configured(b, &options, "S3", &bad, |b, k, v| b.with_config(k, v))?;
                let endpoint = options
                    .iter()
                    .find(|(k, _)| {
                        k == "aws_endpoint" || k == "aws_endpoint_url" || k == "endpoint"
                    })
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
                    .or_else(|| std::env::var("AWS_ENDPOINT").ok())
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    // The endpoint was given explicitly, as plain HTTP: that is the ask.
                    b = b.with_allow_http(true);
                }
                let s3 = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(s3), parsed.path())
            }
            "gs" => {
                let bucket = host(&parsed, "no bucket (gs://BUCKET/PREFIX)", &bad)?;
                let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(format!("gs://{bucket}"))
                    .with_retry(retry());
                let b = configured(b, &options, "GCS", &bad, |b, k, v| b.with_config(k, v))?;
                let gcs = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(gcs), parsed.path())
            }
            "az" | "azure" => {
                let container = host(&parsed, "no container (az://CONTAINER/PREFIX)", &bad)?;
                let b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .with_retry(retry());
                let b = configured(b, &options, "Azure", &bad, |b, k, v| b.with_config(k, v))?;
                let az = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(az), parsed.path())
            }
            "file" => {
                if let Some((k, _)) = options.first() {
                    return Err(bad(format!(
                        "a file:// store takes no options (got '{}')",
                        escape(k)
                    )));
                }
                if parsed.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(bad("file URLs name a local path: file:///PATH".into()));
                }
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                local_root = Some(dir);
                (Arc::new(fs), "")
            }
            other => {
                return Err(bad(format!(
                    "unsupported scheme '{}' (s3://, gs://, az:// or file://)",
                    escape(other)
                )));
            }
        };
        let prefix = prefix.trim_matches('/');
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            store
        } else {
            let p = ObjectPath::parse(prefix).map_err(|e| bad(format!("bad prefix: {e}")))?;
            Arc::new(object_store::prefix::PrefixStore::new(store, p))
        };
        let mut shown = parsed.clone();
        shown.set_query(None);
        shown.set_fragment(None);
        Ok(RemoteCache {
            store,
            local_root,
            url: escape(shown.as_str().trim_end_matches('/')).into_owned(),
            clock: Arc::default(),
        })
    }

    /// A store in this process's memory, shared by the clones of the value returned (the
    /// tests' bucket: it honours conditional writes as S3 does).
    #[cfg(any(test, feature = "test-util"))]
    pub fn in_memory() -> RemoteCache {
        RemoteCache {
            store: Arc::new(object_store::memory::InMemory::new()),
            url: "memory://bucket".into(),
            local_root: None,
            clock: Arc::default(),
        }
    }

    /// The remote cache `WI_REMOTE_CACHE` names, if it names one (what `wi-fetch` and the
    /// Python package use when none is given).
    pub fn from_env() -> Option<Result<RemoteCache, RemoteCacheError>> {
        std::env::var("WI_REMOTE_CACHE")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .map(|u| RemoteCache::open(u.trim()))
    }
}

/// Retries of one request: a bucket is one source among others, so a store that is down is
/// given up on in moments (the Hub takes over), not after object_store's default of ten retries
/// over three minutes.
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: STORE_RETRIES,
        retry_timeout: std::time::Duration::from_secs(20),
    }
}

/// `url` with whatever sits between `://` and an `@` before the path replaced by `***`: a
/// URL that carries credentials is never shown with them.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// What object_store returns when S3 answers an upload with 404 `NoSuchBucket`: said as a
    /// bucket that does not exist, with the command that creates it; another 404 is not.
    #[test]
    fn a_missing_bucket_is_said_with_how_to_create_it() {
        use super::RemoteCacheError;
        let s3_404 = |body: &str| {
            // object_store's `RetryError` displays the status and the body S3 sent.
            let source = std::io::Error::other(format!(
                "Error performing PUT http://127.0.0.1:3900/models/blobs/sha256/ab in 3.2ms - \
                 Server returned non-2xx status code: 404 Not Found: {body}"
            ));
            RemoteCacheError::Store {
                store: "s3://models/team".into(),
                action: "upload",
                key: "blobs/sha256/ab".into(),
                source: Box::new(object_store::Error::NotFound {
                    path: "team/blobs/sha256/ab".into(),
                    source: Box::new(source),
                }),
            }
        };
        let e = s3_404(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket</Code>\
             <Message>Bucket not found: models</Message></Error>",
        );
        let said = e.missing_bucket().expect("a missing bucket");
        assert!(
            said.starts_with(
                "the bucket 'models' of the remote cache s3://models/team does not exist"
            ),
            "{said}"
        );
        assert!(said.contains("`aws s3 mb s3://models`"), "{said}");
        let other = s3_404("<Error><Code>NoSuchKey</Code></Error>");
        assert_eq!(other.missing_bucket(), None);
        assert_eq!(
            super::bucket_advice("gs://b/p")
                .split(": create it with ")
                .nth(1),
            Some(
                "`gcloud storage buckets create gs://b`, or give another --remote-cache; nothing was uploaded"
            )
        );
    }

    use super::*;

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(without_userinfo("s3://k:secret@b/p"), "s3://***@b/p");
        assert_eq!(without_userinfo("s3://b/p@x"), "s3://b/p@x");
        assert_eq!(without_userinfo("not a url"), "not a url");
        let e = RemoteCache::open("s3://AKID:s3cr3t@bucket/x").unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }

    #[test]
    fn options_are_checked_and_their_values_never_shown() {
        let e = RemoteCache::open_with_options("s3://b/p", [("aws_secret_acess_key", "s3cr3t")])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown S3 option 'aws_secret_acess_key'"),
            "{e}"
        );
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let e = RemoteCache::open_with_options("file:///tmp/x", [("aws_region", "r")]).unwrap_err();
        assert!(e.to_string().contains("takes no options"), "{e}");
        let ok = RemoteCache::open_with_options(
            "s3://b/p",
            [
                ("AWS_ENDPOINT", "http://127.0.0.1:9"),
                ("aws_access_key_id", "k"),
                ("aws_secret_access_key", "s3cr3t"),
                ("aws_region", "garage"),
            ],
        )
        .unwrap();
        assert_eq!(ok.url(), "s3://b/p");
        assert!(!format!("{ok:?}").contains("s3cr3t"));
    }

    #[test]
    fn google_and_azure_stores_open_from_their_settings() {
        let gs = RemoteCache::open_with_options(
            "gs://team-models/hf",
            [
                ("google_bucket", "team-models"),
                ("google_service_account_key", "{}"),
            ],
        );
        // The key given is not a service account: refused when the store is built, named.
        let e = gs.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("remote cache 'gs://team-models/hf'"),
            "{e}"
        );
        let gs = RemoteCache::open_with_options("gs://team-models/hf", [("google_bucket", "x")]);
        assert_eq!(gs.unwrap().url(), "gs://team-models/hf");
        let az = RemoteCache::open_with_options(
            "az://models/hf",
            [
                ("azure_storage_account_name", "devstoreaccount1"),
                ("azure_storage_account_key", "a2V5"),
            ],
        )
        .unwrap();
        assert_eq!(az.url(), "az://models/hf");
        let e = RemoteCache::open_with_options("az://models", [("aws_region", "x")]).unwrap_err();
        assert!(
            e.to_string().contains("unknown Azure option 'aws_region'"),
            "{e}"
        );
        let e = RemoteCache::open("gs:///x").unwrap_err();
        assert!(e.to_string().contains("no bucket"), "{e}");
    }
}
