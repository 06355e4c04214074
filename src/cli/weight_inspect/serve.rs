//! `weight-inspect serve` and `weight-inspect get`: the command lines over
//! `weight_inspect::serve`.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::names::escape;
use crate::serve::{client, Catalog, ServeError};

pub(super) const SERVE_HELP: &str = "\
Routes: GET /models (the models served); GET /models/MODEL (its report, as --json prints it, \
each tensor's sha256 once known, and serving.state: hashing, verified or changed); GET and \
HEAD /models/MODEL/tensors/NAME (the tensor's bytes, read from the file, with Content-Length, \
ETag and X-Weight-SHA256: the SHA-256 of the whole tensor, every tensor hashed in the background \
from the start). One Range per request (bytes=A-B, A-, -N): 206 with Content-Range and, on a \
GET, Content-Digest (sha-256 of the bytes sent); 416 past the end; several ranges, or a \
malformed one, 400. A model file changed on disk since it was opened (truncated, copied over, \
written in place) is no longer served: 503, named in /models and in the log.\n\n\
A MODEL is named by its file name (a folder's models by their path below it). Models that fail \
verification are refused. Listens on loopback unless --addr says otherwise; prints \
`listening on http://ADDR` once it is ready. Ctrl-C stops it.\n\n\
A link inside a folder served that points outside it is refused, as is a blob of a served \
cache that is a link.\n\n\
A PATH that is a Hugging Face cache is served as a Hub mirror (HF_ENDPOINT=http://ADDR for \
wi-fetch, huggingface_hub and llama.cpp). With --upstream URL it fetches what it does not hold \
from that Hub, once, verified, into the cache (its own token, HF_TOKEN, never reaches a client; \
credentials in the URL are refused), \
serving a file's prefix to the clients waiting for it as it arrives; offline it serves what it \
holds and answers 504 for what it lacks. Every client is served what HF_TOKEN can read, unless \
--forward-token: then the upstream is asked as each client (its bearer token, or none), and a \
gated or private repository's files go only to a client the upstream said yes to.\n\n\
Connections: at most --max-connections at once, at most --max-connections-per-client of them \
from one client address (one more from it is closed as soon as it is accepted); one whose \
client is slower than --client-timeout to send its headers, a request's whole body, or to take \
an answer's bytes, is closed (a body too slow is answered 408). Request bodies (paths-info's \
form) are at most 1 MiB: 413 past it.\n\n\
Exit codes: 0 stopped; 1 usage, I/O, a link out of a folder served, or the address cannot be \
bound; 2 a model is invalid.";

pub(super) const GET_HELP: &str = "\
URL is a served model's, http://HOST:PORT/models/MODEL. The bytes go to a new file beside \
FILE (or a temporary one, for stdout) as they arrive and are handed over only once they match: \
the whole tensor its X-Weight-SHA256, a slice (--range) its Content-Digest.\n\n\
Exit codes: 0 written; 1 usage or I/O; 2 the bytes do not match their digest (nothing written); \
3 network or server failure; 4 no such model or tensor.";

#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// Model files or folders to serve, or a Hugging Face cache to serve as a Hub mirror.
    #[arg(required_unless_present = "upstream", value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8090", value_name = "ADDR")]
    addr: SocketAddr,
    /// Connections open at once; more wait to be accepted.
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Connections open at once from one client address (default 32, or --max-connections
    /// when lower); one more from that address is closed as soon as it is accepted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections_per_client: Option<u32>,
    /// Seconds a client may take to send a request's headers (or its next request on a
    /// kept-alive connection), a request's whole body, or to take the bytes of an answer,
    /// before its connection is closed.
    #[arg(long, default_value_t = 60, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    client_timeout: u64,
    /// Pull-through: fetch what the mirror does not hold from this Hub (e.g.
    /// https://huggingface.co), verified, into the cache it serves.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// With --upstream: the Hugging Face cache served and filled (default: a cache among the
    /// PATHs, else HF_HUB_CACHE, else ~/.cache/huggingface/hub).
    #[arg(long, value_name = "DIR", requires = "upstream")]
    cache_dir: Option<PathBuf>,
    /// With --upstream: seconds an upstream answer about a repository (its commit, files,
    /// refs) is used before it is asked again; still used, however old, while the upstream
    /// cannot be reached.
    #[arg(long, default_value_t = 10, value_name = "SECS", requires = "upstream")]
    metadata_ttl: u64,
    /// With --upstream: ask the upstream as each client (its Authorization: Bearer token, or
    /// none) instead of with the mirror's HF_TOKEN, and serve a gated or private repository's
    /// files only to a client the upstream said yes to.
    #[arg(long, requires = "upstream")]
    forward_token: bool,
    /// With --upstream: bytes per chunk of a download (16M, 1MiB…; default 16 MiB), the unit
    /// in which a file being fetched is handed to the clients waiting for it, and of resuming.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", requires = "upstream")]
    chunk_size: Option<u64>,
    /// With --upstream: the ranged requests to the upstream in flight at once, across every
    /// file being fetched (by default the count adapts to the link, from 16 up to 32). Fewer
    /// hand a file's first chunks to its waiting clients sooner on a slow upstream, and ask
    /// less of a shared one.
    #[arg(long, value_name = "N", requires = "upstream", value_parser = clap::value_parser!(u32).range(1..))]
    upstream_connections: Option<u32>,
    /// Keep at most SIZE bytes (8G, 512MiB…) of the served models' tensors in memory: once the
    /// tensors answered pass it, the least recently answered ones not being sent are released
    /// from the process and the page cache (for models larger than memory or a container's
    /// limit). Counted in /metrics (weight_inspect_residency_*).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    max_resident: Option<u64>,
    /// How far a blob of the Hub mirror's cache is checked before it is served: `size` (its
    /// size against the one recorded when it was verified), or `hash` (also its bytes against
    /// its name, hashed once per change of the file). A damaged blob is fetched again from
    /// --upstream, else answered 500 and named in the log.
    #[arg(long, value_enum, default_value_t = CheckBlobs::Size, value_name = "LEVEL")]
    check_blobs: CheckBlobs,
    /// A manifest of the models served (weight-inspect's, llama-gguf-hash lines, an OpenSSF
    /// model-signing bundle; repeatable): each tensor it names is served only once its bytes
    /// match it (else 503, named in /models/MODEL), from the start.
    #[arg(long, value_name = "FILE")]
    manifest: Vec<PathBuf>,
    /// With --upstream: check every file pulled through against its model's OpenSSF signature
    /// (the repository's model.sig), as coming from this signer, before it is served or cached:
    /// a signature that does not hold, a file it does not name, or bytes that differ from it
    /// end the answer short and leave nothing in the cache. A repository without a signature is
    /// served as before (unless --require-signature).
    #[command(flatten)]
    signer: crate::cli::signer::SignerArgs,
    /// With --upstream: refuse the files of a repository that ships no signature.
    #[arg(long, requires = "upstream")]
    require_signature: bool,
}

/// `--check-blobs`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CheckBlobs {
    Size,
    Hash,
}

fn parse_size(s: &str) -> Result<u64, String> {
    crate::units::parse_size(s).map_err(|e| e.to_string())
}

/// The upstream of `serve --upstream`: the mirror's own token and download settings from the
/// environment (HF_TOKEN, HF_HUB_DOWNLOAD_TIMEOUT…), never HF_ENDPOINT (which may well point
/// at this mirror).
fn upstream(args: &ServeArgs, url: &str) -> Result<crate::serve::Upstream, String> {
    let parsed = url::Url::parse(url)
        .map_err(|e| format!("--upstream {}: {e}", escape(&without_userinfo(url))))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // It would be printed, and never sent: the upstream's token is HF_TOKEN.
        return Err(format!(
            "--upstream {}: credentials in the URL are refused: set HF_TOKEN to the upstream's token",
            escape(&without_userinfo(url))
        ));
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("--upstream {}: not an http(s) URL", escape(url)));
    }
    let cache = args
        .cache_dir
        .clone()
        .or_else(|| {
            args.paths
                .iter()
                .find(|p| crate::serve::is_hf_cache(p))
                .cloned()
        })
        .unwrap_or_else(crate::cache::default_cache_dir);
    // The mirror decides itself what it answers when its upstream cannot be reached (its
    // metadata TTL): its fetcher never answers from the cache in the upstream's place.
    let mut builder = crate::fetch::Fetcher::from_env()
        .endpoint(url.trim_end_matches('/'))
        .cache_dir(cache)
        .cache_fallback(false);
    if let Some(c) = args.chunk_size {
        builder = builder.chunk_size(c);
    }
    if let Some(n) = args.upstream_connections {
        builder = builder.connections(n as usize);
    }
    let policy =
        crate::fetch::SignaturePolicy::from_trust(&args.signer.trust(), args.require_signature)
            .map_err(|e| e.to_string())?;
    builder = builder.signature(policy);
    Ok(crate::serve::Upstream::new(builder)
        .map_err(|e| e.to_string())?
        .ttl(std::time::Duration::from_secs(args.metadata_ttl))
        .forward_token(args.forward_token))
}

/// `url` with whatever sits between `://` and an `@` before the path replaced by `***`, for
/// messages.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[derive(Debug, clap::Args)]
pub(super) struct GetArgs {
    /// The model's URL: http://HOST:PORT/models/MODEL.
    #[arg(value_name = "URL")]
    url: String,
    /// The tensor's name.
    #[arg(value_name = "TENSOR")]
    tensor: String,
    /// Write to FILE (default: stdout, when it is not a terminal).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Only bytes A to B of the tensor (inclusive, as HTTP ranges count).
    #[arg(long, value_name = "A-B", value_parser = parse_range)]
    range: Option<std::ops::Range<u64>>,
    /// Print what was written as JSON on stderr.
    #[arg(long)]
    json: bool,
}

fn parse_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s.split_once('-').ok_or("A-B, e.g. 0-1023")?;
    let a: u64 = a.trim().parse().map_err(|_| "A-B, e.g. 0-1023")?;
    let b: u64 = b.trim().parse().map_err(|_| "A-B, e.g. 0-1023")?;
    if b < a {
        return Err("the range ends before it starts".into());
    }
    Ok(a..b + 1)
}

fn runtime() -> Result<tokio::runtime::Runtime, u8> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("weight-inspect: error: cannot start the runtime: {e}");
            1
        })
}

pub(super) fn serve(args: ServeArgs) -> u8 {
    let max_connections = args.max_connections as usize;
    let max_per_client = match args.max_connections_per_client {
        Some(n) if n > args.max_connections => {
            eprintln!(
                "weight-inspect: error: --max-connections-per-client {n} is more than --max-connections {}",
                args.max_connections
            );
            return 1;
        }
        Some(n) => n as usize,
        None => max_connections.min(32),
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let mut manifests = Vec::new();
    for m in &args.manifest {
        match crate::manifest::Document::read(m) {
            Ok(d) => manifests.push(d),
            Err(e) => {
                eprintln!(
                    "weight-inspect: error: --manifest {}: {}",
                    m.display(),
                    escape(&e.to_string())
                );
                return 1;
            }
        }
    }
    if args.upstream.is_none() && (!args.signer.trust().is_empty() || args.require_signature) {
        eprintln!(
            "weight-inspect: error: a signer (--public-key, --certificate-chain, --identity) or \
             --require-signature is for what --upstream pulls through: give --upstream"
        );
        return 1;
    }
    let opened = match &args.upstream {
        Some(url) => match rt.block_on(async { upstream(&args, url) }) {
            Ok(up) => Catalog::open_checked(&args.paths, Some(up), args.max_resident, &manifests),
            Err(e) => {
                eprintln!("weight-inspect: error: {e}");
                return 1;
            }
        },
        None => Catalog::open_checked(&args.paths, None, args.max_resident, &manifests),
    };
    let check = match args.check_blobs {
        CheckBlobs::Size => crate::serve::BlobCheck::Size,
        CheckBlobs::Hash => crate::serve::BlobCheck::Hash,
    };
    let catalog = match opened {
        Ok(c) => Arc::new(c.check_blobs(check)),
        Err(e) => {
            eprintln!("weight-inspect: error: {}", escape(&e.to_string()));
            // A model that fails verification is 2; a file that cannot be read, a link out of
            // the folder served, two models of one name, 1.
            let invalid = matches!(&e, ServeError::Open { source, .. }
                if matches!(source.downcast_ref::<crate::format::model::OpenError>(),
                    Some(o) if !matches!(o, crate::format::model::OpenError::Io { .. })));
            return if invalid { 2 } else { 1 };
        }
    };
    let code = rt.block_on(async {
        let listener = match tokio::net::TcpListener::bind(args.addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("weight-inspect: error: cannot listen on {}: {e}", args.addr);
                return 1;
            }
        };
        let addr = listener.local_addr().map_or(args.addr, |a| a);
        for name in catalog.names() {
            eprintln!("weight-inspect: serving {}", escape(name));
        }
        if let Some(c) = catalog.hub_cache() {
            eprintln!(
                "weight-inspect: serving the Hugging Face cache {} as a Hub mirror (HF_ENDPOINT=http://{addr})",
                c.display()
            );
        }
        if let Some(url) = &args.upstream {
            eprintln!(
                "weight-inspect: fetching what it does not hold from {}",
                escape(url)
            );
        }
        if let Some(note) = catalog.access_note() {
            eprintln!("weight-inspect: {note}");
        }
        eprintln!("weight-inspect: listening on http://{addr}");
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let limits = crate::serve::Limits {
            max_connections,
            max_per_client,
            client_timeout: std::time::Duration::from_secs(args.client_timeout),
        };
        match crate::serve::serve_with(listener, catalog, limits, stop).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("weight-inspect: error: {e}");
                1
            }
        }
    });
    // Downloads that were pulling through stop and save their state; their threads get a
    // moment to do so.
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    code
}

pub(super) fn get(args: GetArgs) -> u8 {
    let to_stdout = args.output.is_none();
    if to_stdout && std::io::stdout().is_terminal() {
        eprintln!("weight-inspect: error: the tensor's bytes are binary: give -o FILE, or redirect stdout");
        return 1;
    }
    let scratch = match (&args.output, tempfile::tempdir()) {
        (Some(_), _) => None,
        (None, Ok(d)) => Some(d),
        (None, Err(e)) => {
            eprintln!("weight-inspect: error: cannot make a temporary folder: {e}");
            return 1;
        }
    };
    let dest = match (&args.output, &scratch) {
        (Some(p), _) => p.clone(),
        (None, Some(d)) => d.path().join("tensor"),
        (None, None) => unreachable!("a scratch folder for stdout"),
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let client = match reqwest::Client::builder().no_proxy().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weight-inspect: error: {e}");
            return 1;
        }
    };
    let got = rt.block_on(client::get_tensor(
        &client,
        &args.url,
        &args.tensor,
        args.range.clone(),
        &dest,
    ));
    let got = match got {
        Ok(g) => g,
        Err(e) => {
            eprintln!("weight-inspect: error: {}", escape(&e.to_string()));
            return e.exit_class().code() as u8;
        }
    };
    if to_stdout {
        let copied = std::fs::File::open(&dest).and_then(|mut f| {
            let mut out = std::io::stdout().lock();
            std::io::copy(&mut f, &mut out)?;
            out.flush()
        });
        if let Err(e) = copied {
            eprintln!("weight-inspect: error: writing to stdout: {e}");
            return 1;
        }
    }
    if args.json {
        eprintln!("{}", serde_json::to_string(&got).unwrap_or_default());
    } else {
        eprintln!(
            "weight-inspect: {} bytes of '{}' checked (tensor sha256 {})",
            got.bytes,
            escape(&args.tensor),
            got.tensor_sha256
        );
    }
    0
}
