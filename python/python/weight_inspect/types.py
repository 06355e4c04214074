"""The shapes of what :mod:`weight_inspect` returns as dicts, for type checkers.

:func:`weight_inspect.fetch` returns a :class:`FetchSummary` (with ``dry_run=True`` a
:class:`Plan`); they are what ``wi-fetch --json`` and ``wi-fetch --dry-run --json`` print,
made by the library from the same structures. The reports of :func:`weight_inspect.inspect`
and :func:`weight_inspect.manifest_check` are ``weight-inspect --json``'s and ``weight-inspect
manifest check --json``'s (described in the README) and typed as plain dicts.

Every class here is checked against ``schema/types.schema.json``, which the Rust types generate
(``python/tests/test_types_schema.py``): the same keys, the same required ones, compatible types.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "CertificateSigner",
    "ConnectionPath",
    "ConnectionUse",
    "FetchRequest",
    "FetchSummary",
    "FetchedFile",
    "Plan",
    "PlannedFile",
    "RefusedEntry",
    "RemoteCheck",
    "RemoteRead",
    "ResidencyStats",
    "RetryCauses",
    "SignatureCheck",
    "Signer",
    "UploadReport",
    "Verification",
    "Witness",
    "XetRead",
]


class FetchRequest(TypedDict, total=False):
    """What to fetch and how: the library's one request type (``weight_inspect::fetch::
    FetchRequest``), which ``wi-fetch``'s command line fills too. Every key is optional (a key
    left out takes the default; the environment fills what huggingface_hub reads from it);
    durations are seconds."""

    repo: str
    repo_type: str | None
    revision: str | None
    quant: str | None
    files: list[str]
    include: list[str]
    exclude: list[str]
    no_mmproj: bool
    cache_dir: str | None
    local_dir: str | None
    endpoint: str | None
    token: str | None
    headers: list[tuple[str, str]]
    user_agent: str | None
    metadata_timeout: float | None
    retry_delay: float | None
    retry_max_delay: float | None
    offline: bool | None
    cache_fallback: bool
    force_download: bool
    connections: int | None
    max_connections: int | None
    max_files: int | None
    chunk_size: int | None
    request_size: str | None
    stall_timeout: float | None
    lock_timeout: float | None
    verify: bool
    verify_level: str | None
    manifest: str | None
    #: The public key (a PEM file) the model's signature (its OpenSSF ``model.sig``) must verify
    #: with: checked before any file, its statement then what every file must be.
    signature_public_key: str | None
    #: Instead of a key: the certificates (PEM files) the signing certificate must chain to.
    signature_certificate_chain: list[str]
    #: Keyless, through Sigstore: the identity (an email or a URI) that must have signed.
    signature_identity: str | None
    #: The OIDC issuer that must have vouched for it.
    signature_identity_provider: str | None
    #: The Sigstore instance's trusted root (``trusted_root.json``).
    signature_trust_config: str | None
    #: Fail a repository that has no signature.
    require_signature: bool
    #: The signature's path in the repository (``model.sig``).
    signature_path: str | None
    sidecars: bool
    #: Fetch files the Hub stores in Xet through its CAS (default: unless ``HF_HUB_DISABLE_XET``).
    xet: bool | None
    ensure_manifests: bool
    check_only: bool
    strict: bool
    remote_cache: str | None
    upload: bool
    upload_cached: bool
    #: Fill a file the remote cache lacks together with the nodes that start at the same time.
    coordinate: bool
    #: This node's name in the bucket's leases and pieces.
    node_name: str | None
    #: How long a chunk's lease holds without renewal, in seconds.
    fill_lease: float | None


class Verification(TypedDict):
    """The tensor-level check of a GGUF or safetensors file (:attr:`FetchedFile.verification`)."""

    #: Whether the verifier found no error.
    valid: bool
    #: ``gguf``, ``gguf-split``, ``safetensors``, … when recognised.
    format: str | None
    errors: list[str]
    warnings: list[str]
    #: For the parts of a split GGUF: the first part's path, whose verification covered the set.
    covered_by: NotRequired[str]


class RetryCauses(TypedDict):
    """Retried attempts by cause."""

    #: The connection was cut after it delivered bytes.
    cut: int
    #: No answer, or no byte, within the timeouts.
    timeout: int
    #: Connecting or reading failed before any byte arrived.
    network: int
    #: The server answered 5xx or 408.
    server: int
    #: The server answered 429.
    throttled: int
    #: An answer that did not match the request.
    bad_answer: int
    #: The CDN refused the signed location (a fresh one was asked for).
    cdn_refused: int
    #: The remote cache failed, and the range was asked of the Hub instead.
    mirror: int


class UploadReport(TypedDict):
    """A file's upload to a remote cache."""

    #: The store, by its URL.
    to: str
    #: ``sent``, ``already_there``, ``another_node`` (filled together with other nodes, one of
    #: which uploads it) or ``failed``.
    outcome: str
    bytes: int
    #: Whether its index entry and ref were written (never offline).
    indexed: bool
    error: NotRequired[str]


# What a file's download read from a remote cache. Its key ``from`` is a Python keyword, hence
# the functional form: ``from``, the object read (by its URL); ``bytes`` received from it and
# kept; ``damaged``, what was wrong with the bucket's copy (those bytes came from the Hub);
# ``left``, why it stopped being read before the end (the rest came from the Hub);
# ``damaged_chunks``, chunks read from it that did not match the manifest.
RemoteRead = TypedDict(
    "RemoteRead",
    {
        "from": str,
        "bytes": int,
        "damaged": NotRequired[str],
        "left": NotRequired[str],
        "damaged_chunks": NotRequired[int],
    },
)


class XetRead(TypedDict):
    """What a file's download read through the Hub's CAS (Xet)."""

    #: The file's Xet hash, as the Hub announced it.
    hash: str
    #: Whether the Xet hash computed over the chunks the CAS delivered is the one announced
    #: (the SHA-256 is always checked, and decides what is kept).
    checked: bool
    #: Why it does not vouch for the file (bytes that came without their chunks' boundaries,
    #: or chunks that make another hash): the file is then held to its SHA-256 alone.
    unchecked: NotRequired[str]
    #: Bytes of the file that came through the CAS (the rest from the bridge).
    bytes: int
    #: Bytes of xorbs received (compressed).
    xorb_bytes: int
    xorb_requests: int
    reconstructions: int
    #: Bytes copied from an older version of the file the cache held, not fetched.
    reused: int
    #: Why the CAS stopped being read before the end (the rest came from the bridge).
    left: NotRequired[str]


class FillReport(TypedDict):
    """This node's part in filling a file's blob together with the nodes that started with it."""

    #: This node's name.
    node: str
    #: Chunks this node fetched from the Hub for the fleet.
    fetched: int
    #: Of those, chunks taken over from a node that stopped renewing its lease.
    taken_over: int
    #: Pieces this node wrote to the bucket.
    shared: int
    #: The nodes whose pieces this node read, with how many each.
    read_from: dict[str, int]
    #: Pieces found damaged (deleted from the bucket), by key.
    damaged: list[str]
    #: Chunks this node fetched from the Hub itself, without their lease, after waiting past
    #: the bound for another node's piece.
    waited_out: int
    #: Why coordinating stopped early, or why a piece could not be shared.
    trouble: NotRequired[str]


class RemoteCheck(TypedDict):
    """What ``cache verify --remote-cache`` found of a file's copy in the remote cache."""

    store: str
    #: ``sound``, ``damaged``, ``missing`` or ``failed``.
    outcome: str
    #: Chunks checked against the blob's manifest.
    chunks: int
    error: NotRequired[str]


class Witness(TypedDict):
    """Offline from a remote cache without a lock file: who said what the files are, unchecked."""

    #: The store, by its URL.
    store: str
    revision: str
    commit: str
    #: Whether the commit came from the bucket's ref.
    from_ref: bool
    message: str


class ConnectionUse(TypedDict):
    """Connections (or files) in use at once: the most, and the mean over the wall time."""

    peak: int
    mean: float


class ConnectionPath(TypedDict):
    """The path the adaptive connection count took."""

    start: int
    peak: int
    now: int
    #: Why it stopped changing; ``None`` while it was still adapting.
    settled: Literal["fixed", "ceiling", "no-gain", "fewer-faster", "more-stopped-paying"] | None
    #: Each change: seconds since the first body byte, and the new count.
    steps: list[tuple[float, int]]


class RefusedEntry(TypedDict):
    """An entry of a repository's listing left out (see :attr:`Plan.refused`)."""

    #: The path as listed, escaped.
    path: str
    reason: str


class FetchedFile(TypedDict):
    """One file of a :class:`FetchSummary`."""

    #: Its path in the repository.
    path: str
    #: Where it is on disk (a snapshot link in the cache, or a file in ``local_dir``).
    local_path: str
    size: int
    #: The SHA-256 of its bytes (checked).
    sha256: str
    #: The Hub's ETag: the SHA-256 for a file stored in LFS, the git blob id otherwise.
    etag: str
    #: Whether it was already on disk.
    cached: bool
    #: Bytes received for it in this call, and of those, bytes received again (a chunk that
    #: failed its check, a connection cut).
    transferred: int
    refetched: int
    #: Copies of a chunk thrown away because their bytes were wrong (the network's).
    corrupt_copies: int
    #: Bytes kept from an interrupted download.
    resumed: int
    #: Of ``resumed``, bytes kept from a damaged copy being repaired.
    kept_from_damaged: int
    retries: int
    #: Retries by cause.
    retry_causes: RetryCauses
    splits: int
    elapsed_secs: float
    #: The tensor-level check of a GGUF or safetensors file, or ``None``.
    verification: Verification | None
    chunk_size: NotRequired[int]
    #: The manifest the file was checked against, when there was one.
    manifest: NotRequired[str]
    #: Its upload to a remote cache, when it was downloaded with one set.
    upload: NotRequired[UploadReport]
    #: What its download read from the remote cache, when the bucket held it.
    remote_read: NotRequired[RemoteRead]
    #: What its download read through the Hub's CAS, when the file came that way.
    xet: NotRequired[XetRead]
    #: The check of the remote cache's copy (``cache verify --remote-cache``).
    remote_check: NotRequired[RemoteCheck]
    #: This node's part in filling the blob with the nodes that started with it.
    fill: NotRequired[FillReport]


class CertificateSigner(TypedDict):
    """Whose certificate signed a model (:attr:`Signer.certificate`); keyless, the identity as
    ``subject`` and the OIDC issuer that vouched for it as ``issuer``."""

    #: The signing certificate's subject (RFC 4514).
    subject: str
    issuer: str
    #: The subject of the trusted certificate the path ends at.
    root: str


class Signer(TypedDict):
    """Who signed a model, as its verified signature shows (:attr:`SignatureCheck.signer`)."""

    method: Literal["key", "certificate", "sigstore"]
    #: The key's fingerprint (model_signing's key hint), or the SHA-256 of the signing
    #: certificate's DER.
    fingerprint: str
    curve: str
    certificate: NotRequired[CertificateSigner]


class SignatureCheck(TypedDict):
    """A model's signature that held (:attr:`FetchSummary.signature`)."""

    #: Its path in the repository.
    path: str
    signer: Signer
    #: What the statement says was signed: the model's name (the folder, or the one file).
    model: NotRequired[str]
    #: The statement's subject digest (SHA-256, hex): the signed content as a whole. A signature
    #: binds content, not a repository or a commit.
    statement_sha256: NotRequired[str]
    #: Files of this fetch whose bytes were hashed against the signature.
    files_hashed: NotRequired[int]
    #: Files taken from the cache as an earlier fetch checked them, not hashed now.
    files_from_cache: NotRequired[list[str]]
    #: Files its signer left out (``ignore_paths``, git's files), fetched without a check.
    files_not_covered: NotRequired[list[str]]


class FetchSummary(TypedDict):
    """What :func:`weight_inspect.fetch` returns (``wi-fetch --json``)."""

    repo: str
    revision: str
    #: The commit the revision named.
    commit: str
    #: The folder that holds the commit's files: the snapshot folder in the cache
    #: (``snapshots/{commit}``, what ``snapshot_download`` returns), or the local folder.
    folder: str
    files: list[FetchedFile]
    #: A note for the user (which model a bare GGUF repository got).
    notice: str | None
    #: Offline from a remote cache without a lock file: the bucket's ref and index said what
    #: the files are, unchecked.
    witness: NotRequired[Witness]
    #: The Hub could not be reached and the cache answered (``cache_fallback``): why.
    unreachable: NotRequired[str]
    #: Checking: files in the snapshot folder no listing or lock file knows (escaped).
    unlisted: NotRequired[list[str]]
    #: The model's signature and who signed it, when it was checked (``signature_public_key``…).
    signature: NotRequired[SignatureCheck]
    elapsed_secs: float
    #: How many connections were used, and files at once.
    connections: ConnectionUse
    files_at_once: ConnectionUse
    connection_path: ConnectionPath


class PlannedFile(TypedDict):
    """One file of a :class:`Plan`."""

    path: str
    size: int
    etag: str
    local_path: str
    cached: bool
    #: Bytes an interrupted download of it keeps (what a resume starts from).
    partial_bytes: int
    sidecar: NotRequired[str]
    #: Its Xet hash, when the Hub stores it in Xet.
    xet_hash: NotRequired[str]


class Plan(TypedDict):
    """What ``fetch(..., dry_run=True)`` returns (``wi-fetch --dry-run --json``)."""

    repo: str
    revision: str
    commit: str
    #: The folder that holds (or will hold) the commit's files (see :class:`FetchSummary`).
    folder: str
    files: list[PlannedFile]
    notice: str | None
    #: Entries of the listing left out, each with the reason (an unsafe name, …).
    refused: list[RefusedEntry]
    offline: bool
    #: Offline: files asked for by name that are not on disk.
    missing: NotRequired[list[str]]
    #: With a lock file: why the files in ``missing`` could not be asked of the Hub.
    unreachable: NotRequired[str]
    #: See :class:`FetchSummary`.
    witness: NotRequired[Witness]
    unlisted: NotRequired[list[str]]


class ResidencyStats(TypedDict):
    """What a model's residency limit has done (:attr:`weight_inspect.Model.residency`).

    Bytes are counted in whole pages of the tensors' data.
    """

    #: The limit (``open(path, max_resident=...)``).
    limit: int
    #: Bytes of the tensors recorded as resident now, held or not.
    resident: int
    #: Bytes of the tensors held now: those with an array (or any view) still alive.
    held: int
    #: Tensors asked for that were recorded as resident, and that were not.
    hits: int
    misses: int
    #: Tensors released to stay under the limit, and their bytes.
    evictions: int
    evicted_bytes: int
    #: Bytes of the tensors missed that were not in memory when asked for (read from storage).
    paged_in: int
