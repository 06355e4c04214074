"""`weight_inspect.hf_hub_download` / `snapshot_download` against huggingface_hub itself: both
libraries make the same calls on the repository's mock Hub, each into a cache of its own, and
must return the same paths, leave the same cache tree, raise the same exception classes, and
read each other's caches offline."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple

import numpy as np
import pytest
import safetensors.numpy as stnp

import weight_inspect as wi
from test_fetch import Hub

hf = pytest.importorskip("huggingface_hub")
import huggingface_hub.errors as hf_errors  # noqa: E402

REPO = "demo/tiny"
FOLDER = "models--demo--tiny"
SIZE = 2 << 20  # bytes of the tensor: above the mock's LFS threshold


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    repo = root / "demo" / "tiny"
    (repo / "sub").mkdir(parents=True)
    w = np.random.default_rng(5).standard_normal(SIZE // 4).astype(np.float32)
    stnp.save_file({"w": w}, str(repo / "model.safetensors"))
    (repo / "config.json").write_text('{"model_type": "tiny"}\n')
    (repo / "sub" / "notes.txt").write_text("below a folder\n")
    (repo / "README.md").write_text("# tiny\n")
    locked = root / "demo" / "locked"
    locked.mkdir(parents=True)
    (locked / "config.json").write_text("{}\n")
    return root


@pytest.fixture(scope="module")
def hub(repos: Path) -> Iterator[Hub]:
    h = Hub(repos, "--gated", "demo/locked", "--lfs-threshold", str(1 << 20))
    yield h
    h.stop()


def tree(root: Path) -> Dict[str, Any]:
    """Every entry under a repository folder: a link's target, a file's SHA-256, a folder.
    Our own entries (`.wi-*`) are left out."""
    out: Dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".wi-")]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if ".wi-" in name:
                continue
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def both(
    tmp_path: Path, call: Callable[..., Any], **kw: Any
) -> Tuple[Tuple[Path, Any], Tuple[Path, Any]]:
    """`call` by huggingface_hub and by us (same name), each into a cache of its own:
    ((its cache, its result or exception), (ours, ours))."""
    out = []
    for lib, name in ((hf, "hf"), (wi, "wi")):
        cache = (tmp_path / name).resolve()
        try:
            got: Any = getattr(lib, call.__name__)(cache_dir=cache, **kw)
        except Exception as e:  # noqa: BLE001 - compared below
            got = e
        out.append((cache, got))
    return out[0], out[1]


def test_signatures_match_huggingface_hub() -> None:
    import inspect

    for name in ("hf_hub_download", "snapshot_download"):
        theirs = inspect.signature(getattr(hf, name)).parameters
        ours = inspect.signature(getattr(wi, name)).parameters
        # huggingface_hub's, in its order, then ours (keyword-only, off by default).
        assert list(ours) == list(theirs) + [
            "remote_cache",
            "public_key",
            "certificate_chain",
            "identity",
            "identity_provider",
            "trust_config",
            "require_signature",
        ], name
        for p in theirs.values():
            assert ours[p.name].kind == p.kind, (name, p.name)
            assert ours[p.name].default == p.default, (name, p.name)
        extra = ours["remote_cache"]
        assert extra.kind == inspect.Parameter.KEYWORD_ONLY and extra.default is None, name


def test_hf_hub_download_same_paths_and_cache_tree(hub: Hub, tmp_path: Path) -> None:
    for filename, sub in (("model.safetensors", None), ("config.json", None), ("notes.txt", "sub")):
        (hc, theirs), (wc, ours) = both(
            tmp_path, hf.hf_hub_download, repo_id=REPO, filename=filename, subfolder=sub,
            endpoint=hub.url, token=False,
        )
        assert isinstance(theirs, str) and isinstance(ours, str), (theirs, ours)
        assert os.path.relpath(ours, wc) == os.path.relpath(theirs, hc)
        assert Path(ours).read_bytes() == Path(theirs).read_bytes()
        rel = os.path.relpath(ours, wc)
        assert rel.startswith(f"{FOLDER}/snapshots/") and rel.endswith(filename)
    assert tree(wc / FOLDER) == tree(hc / FOLDER)
    assert any(v[0] == "link" for v in tree(wc / FOLDER).values())


def test_hf_hub_download_to_a_local_dir(hub: Hub, tmp_path: Path) -> None:
    tmp_path = tmp_path.resolve()
    theirs = hf.hf_hub_download(REPO, "config.json", local_dir=tmp_path / "h", endpoint=hub.url)
    ours = wi.hf_hub_download(REPO, "config.json", local_dir=tmp_path / "w", endpoint=hub.url)
    assert os.path.relpath(ours, tmp_path / "w") == os.path.relpath(theirs, tmp_path / "h")
    assert Path(ours).read_bytes() == Path(theirs).read_bytes()


def test_snapshot_download_same_folder_tree_and_listing(hub: Hub, tmp_path: Path) -> None:
    (hc, theirs), (wc, ours) = both(
        tmp_path, hf.snapshot_download, repo_id=REPO, endpoint=hub.url, token=False
    )
    assert isinstance(theirs, str) and isinstance(ours, str), (theirs, ours)
    assert os.path.relpath(ours, wc) == os.path.relpath(theirs, hc)
    t_h, t_w = tree(hc / FOLDER), tree(wc / FOLDER)
    assert t_w == t_h
    listings = [k for k in t_h if k.startswith("trees/")]
    assert len(listings) == 1
    # The listing is the same document, byte for byte.
    assert (wc / FOLDER / listings[0]).read_bytes() == (hc / FOLDER / listings[0]).read_bytes()
    doc = json.loads((wc / FOLDER / listings[0]).read_text())
    assert doc["format_version"] == 1
    assert set(doc["files"]) == {"model.safetensors", "config.json", "sub/notes.txt", "README.md"}
    assert "lfs_sha256" in doc["files"]["model.safetensors"]


def test_snapshot_download_patterns(hub: Hub, tmp_path: Path) -> None:
    (hc, theirs), (wc, ours) = both(
        tmp_path, hf.snapshot_download, repo_id=REPO, endpoint=hub.url,
        allow_patterns=["*.json", "sub/"], ignore_patterns="README*", max_workers=2,
    )
    assert os.path.relpath(ours, wc) == os.path.relpath(theirs, hc)
    files = sorted(p.relative_to(ours).as_posix() for p in Path(ours).rglob("*") if not p.is_dir())
    assert files == ["config.json", "sub/notes.txt"]
    assert tree(wc / FOLDER) == tree(hc / FOLDER)


def _same_error(theirs: Any, ours: Any, expected: type) -> None:
    assert isinstance(theirs, expected), repr(theirs)
    assert type(ours).__name__ == type(theirs).__name__, (ours, theirs)
    assert isinstance(ours, type(theirs)), type(ours).__mro__
    assert isinstance(ours, wi.NotFoundError) and ours.exit_code == 4


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(repo_id="demo/nope", filename="config.json"), hf_errors.RepositoryNotFoundError),
        (dict(repo_id=REPO, filename="absent.bin"), hf_errors.RemoteEntryNotFoundError),
        (dict(repo_id=REPO, filename="config.json", revision="no-such-branch"), hf_errors.RevisionNotFoundError),
        (dict(repo_id="demo/locked", filename="config.json"), hf_errors.GatedRepoError),
        (dict(repo_id=REPO, filename="config.json", local_files_only=True), hf_errors.LocalEntryNotFoundError),
    ],
)
def test_hf_hub_download_errors_are_huggingface_hubs(
    hub: Hub, tmp_path: Path, kw: Dict[str, Any], expected: type
) -> None:
    (_, theirs), (_, ours) = both(tmp_path, hf.hf_hub_download, endpoint=hub.url, token=False, **kw)
    _same_error(theirs, ours, expected)
    # And each is caught as weight_inspect's own class.
    assert isinstance(ours, getattr(wi, expected.__name__))


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(repo_id="demo/nope"), hf_errors.RepositoryNotFoundError),
        (dict(repo_id=REPO, revision="no-such-branch"), hf_errors.RevisionNotFoundError),
        (dict(repo_id=REPO, local_files_only=True), hf_errors.LocalEntryNotFoundError),
    ],
)
def test_snapshot_download_errors_are_huggingface_hubs(
    hub: Hub, tmp_path: Path, kw: Dict[str, Any], expected: type
) -> None:
    (_, theirs), (_, ours) = both(tmp_path, hf.snapshot_download, endpoint=hub.url, token=False, **kw)
    _same_error(theirs, ours, expected)


def test_an_unreachable_hub_falls_back_to_the_cache(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    first = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url)
    dead = "http://127.0.0.1:9"  # nothing listens there
    again = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=dead, etag_timeout=2)
    assert again == first
    with pytest.raises(hf_errors.LocalEntryNotFoundError):
        wi.hf_hub_download(REPO, "README.md", cache_dir=cache, endpoint=dead, etag_timeout=2)


def test_hf_hub_offline_env_is_honoured(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "c"
    got = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url) == got
    with pytest.raises(wi.LocalEntryNotFoundError):
        wi.hf_hub_download(REPO, "README.md", cache_dir=cache, endpoint=hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert wi.hf_hub_download(REPO, "config.json") == got


def test_force_download_replaces_a_damaged_file(hub: Hub, tmp_path: Path, repos: Path) -> None:
    cache = tmp_path / "c"
    p = Path(wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url))
    blob = p.resolve()
    blob.chmod(0o644)
    good = blob.read_bytes()
    blob.write_bytes(b"x" * (len(good) - 1) + b"\n")  # same size: trusted by name
    same = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url)
    assert Path(same).read_bytes() != good
    q = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url, force_download=True)
    assert Path(q).read_bytes() == (repos / "demo" / "tiny" / "config.json").read_bytes()


def test_a_cached_file_is_served_after_one_failed_request(hub: Hub, tmp_path: Path) -> None:
    """As huggingface_hub: when the Hub fails, the first metadata request is not retried
    before the cache answers; an uncached file is then asked for again, with retries."""
    cache = tmp_path / "c"
    first = wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url)
    hub.fault("status=503,path=/api/*")
    try:
        hub.reset_stats()
        assert wi.hf_hub_download(REPO, "config.json", cache_dir=cache, endpoint=hub.url) == first
        assert hub.stats()["total_requests"] == 1
        hub.clear_faults()
        hub.fault("status=503,path=/api/*,times=1")
        hub.reset_stats()
        got = wi.hf_hub_download(REPO, "README.md", cache_dir=cache, endpoint=hub.url)
        assert Path(got).read_text() == "# tiny\n"
        assert hub.stats()["by_status"].get("503") == 1
    finally:
        hub.clear_faults()


def test_dry_run_is_huggingface_hubs(hub: Hub, tmp_path: Path) -> None:
    (hc, theirs), (wc, ours) = both(tmp_path, hf.hf_hub_download, repo_id=REPO, filename="model.safetensors",
                                    endpoint=hub.url, dry_run=True)
    assert isinstance(ours, hf.DryRunFileInfo), ours
    assert (ours.commit_hash, ours.file_size, ours.filename, ours.is_cached, ours.will_download) == (
        theirs.commit_hash, theirs.file_size, theirs.filename, False, True)
    assert Path(ours.local_path).relative_to(wc) == Path(theirs.local_path).relative_to(hc)
    assert not (wc / FOLDER / "blobs").exists() and not (wc / FOLDER / "snapshots").exists()
    # Once downloaded: cached, and downloaded again only when forced.
    path = wi.hf_hub_download(REPO, "model.safetensors", cache_dir=wc, endpoint=hub.url)
    again = wi.hf_hub_download(REPO, "model.safetensors", cache_dir=wc, endpoint=hub.url, dry_run=True)
    assert (again.local_path, again.is_cached, again.will_download) == (path, True, False)
    forced = wi.hf_hub_download(REPO, "model.safetensors", cache_dir=wc, endpoint=hub.url, dry_run=True,
                                force_download=True)
    assert (forced.is_cached, forced.will_download) == (True, True)
    # Offline the cache answers; a file it lacks is huggingface_hub's error.
    off = wi.hf_hub_download(REPO, "model.safetensors", cache_dir=wc, local_files_only=True, dry_run=True)
    assert off.is_cached and off.commit_hash == theirs.commit_hash
    with pytest.raises(hf_errors.LocalEntryNotFoundError):
        wi.hf_hub_download(REPO, "README.md", cache_dir=wc, local_files_only=True, dry_run=True)


def test_snapshot_dry_run_is_huggingface_hubs(hub: Hub, tmp_path: Path) -> None:
    (hc, theirs), (wc, ours) = both(tmp_path, hf.snapshot_download, repo_id=REPO, endpoint=hub.url,
                                    dry_run=True, allow_patterns=["*.json", "sub/"])
    key = lambda i: (i.filename, i.file_size, i.commit_hash, i.is_cached, i.will_download)  # noqa: E731
    assert sorted(map(key, ours)) == sorted(map(key, theirs)) and len(ours) == 2
    assert sorted(Path(i.local_path).relative_to(wc) for i in ours) == sorted(
        Path(i.local_path).relative_to(hc) for i in theirs)
    assert not (wc / FOLDER / "snapshots").exists(), "a dry run downloads nothing"
    assert wi.snapshot_download(REPO, cache_dir=wc, endpoint=hub.url, dry_run=True, allow_patterns="*.bin") == []
    for kw in ({"local_files_only": True}, {"endpoint": "http://127.0.0.1:9", "etag_timeout": 2}):
        with pytest.raises(hf_errors.DryRunError):
            wi.snapshot_download(REPO, cache_dir=wc, dry_run=True, **kw)  # type: ignore[arg-type]


def test_headers_and_user_agent_go_to_the_hub_only(hub: Hub, tmp_path: Path) -> None:
    hub.reset_stats()
    wi.snapshot_download(
        REPO, cache_dir=tmp_path / "c", endpoint=hub.url, token=False,
        headers={"X-Trace": "run-7"}, library_name="mylib", library_version="2.0", user_agent={"ci": "yes"},
    )
    reqs = hub.stats()["requests"]
    origin = [r for r in reqs if r["listener"] == "hub"]
    cdn = [r for r in reqs if r["listener"] == "cdn"]
    assert origin and cdn, reqs
    for r in origin:
        assert "x-trace" in r["headers"], r
    for r in cdn:
        assert "x-trace" not in r["headers"], r
    for r in reqs:
        assert r["user_agent"].startswith("weight-inspect/") and "; mylib/2.0; ci/yes" in r["user_agent"], r
    with pytest.raises(wi.LocalError, match="header .range. is set by the client"):
        wi.hf_hub_download(REPO, "config.json", cache_dir=tmp_path / "d", endpoint=hub.url,
                           headers={"Range": "bytes=0-1"})


def test_unsupported_arguments(tmp_path: Path) -> None:
    # huggingface_hub's message, from the native layer (the one owner of the repository types).
    for call in (
        lambda: wi.hf_hub_download(REPO, "config.json", repo_type="bucket", cache_dir=tmp_path),
        lambda: wi.snapshot_download(REPO, repo_type="models", cache_dir=tmp_path),
        lambda: wi.fetch(REPO, repo_type="bucket", cache_dir=tmp_path, offline=True),
    ):
        with pytest.raises(ValueError, match=r"Invalid repo type: \w+\. Accepted repo types are"):
            call()
    assert not any(tmp_path.iterdir()), "nothing written"


def test_an_incomplete_snapshot_is_named_by_the_library(hub: Hub, tmp_path: Path) -> None:
    """Offline, a whole-repository fetch of a snapshot that lacks a file its saved listing
    names fails natively with the folder and what is missing: the drop-in only renames it."""
    cache = (tmp_path / "c").resolve()
    summary = wi.fetch(REPO, include=["*"], cache_dir=cache, endpoint=hub.url)
    folder = summary["folder"]
    assert folder == str(cache / FOLDER / "snapshots" / summary["commit"])
    assert wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True) == folder
    os.unlink(Path(folder) / "config.json")
    with pytest.raises(wi.NotFoundError) as e:
        wi.fetch(REPO, include=["*"], cache_dir=cache, offline=True)
    assert e.value.reason == "incomplete_snapshot", e.value
    assert e.value.snapshot_path == folder and e.value.missing == ["config.json"]
    assert "config.json" in str(e.value) and e.value.exit_code == 4
    with pytest.raises(wi.IncompleteSnapshotError) as d:
        wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True)
    assert d.value.snapshot_path == folder and d.value.missing == ["config.json"]
    # A file asked for by name is not a snapshot: huggingface_hub's LocalEntryNotFoundError.
    with pytest.raises(wi.LocalEntryNotFoundError) as f:
        wi.hf_hub_download(REPO, "config.json", cache_dir=cache, local_files_only=True)
    assert not isinstance(f.value, wi.IncompleteSnapshotError)
    # What the patterns leave out is not missing.
    assert wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True, ignore_patterns="*.json") == folder


def test_huggingface_hubs_cache_read_back_by_ours_offline(hub: Hub, tmp_path: Path) -> None:
    cache = (tmp_path / "hf").resolve()
    folder = hf.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url)
    one = hf.hf_hub_download(REPO, "sub/notes.txt", cache_dir=cache, endpoint=hub.url)
    before = tree(cache / FOLDER)
    assert wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True) == folder
    assert wi.hf_hub_download(REPO, "notes.txt", subfolder="sub", cache_dir=cache, local_files_only=True) == one
    # Nothing of huggingface_hub's was changed.
    assert tree(cache / FOLDER) == before
    # Its listing tells us the snapshot is incomplete once a file is gone.
    os.unlink(Path(folder) / "README.md")
    with pytest.raises(hf_errors.IncompleteSnapshotError) as e:
        wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True)
    assert isinstance(e.value, wi.LocalEntryNotFoundError) and "README.md" in str(e.value)
    assert e.value.snapshot_path == folder
    # The patterns count: without README.md the rest is complete.
    assert wi.snapshot_download(REPO, cache_dir=cache, local_files_only=True, ignore_patterns="*.md") == folder


def test_ours_read_back_by_huggingface_hub_offline(hub: Hub, tmp_path: Path) -> None:
    cache = (tmp_path / "wi").resolve()
    folder = wi.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url)
    script = (
        "import sys, huggingface_hub as h\n"
        "print(h.snapshot_download(sys.argv[1], cache_dir=sys.argv[2]))\n"
        "print(h.hf_hub_download(sys.argv[1], 'model.safetensors', cache_dir=sys.argv[2]))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")

    def offline_hf() -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [sys.executable, "-c", script, REPO, str(cache)], env=env, capture_output=True, text=True
        )

    r = offline_hf()
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [folder, os.path.join(folder, "model.safetensors")]
    # huggingface_hub reads our listing: a file gone makes the snapshot incomplete for it too.
    os.unlink(Path(folder) / "config.json")
    r = offline_hf()
    assert r.returncode != 0 and "IncompleteSnapshotError" in r.stderr, r.stderr


def test_a_planted_link_in_the_cache_is_never_written_through(hub: Hub, tmp_path: Path) -> None:
    """The cache is a shared folder: a link planted where the listing goes (``trees/``) leads no
    write outside it, and the download itself still succeeds."""
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (cache / FOLDER).mkdir(parents=True)
    os.symlink(outside, cache / FOLDER / "trees")
    path = wi.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url, token=False)
    assert (Path(path) / "config.json").is_file()
    assert list(outside.iterdir()) == [], "a listing was written through the link"


def test_the_default_cache_is_the_librarys(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the legacy variable, with `~`: huggingface_hub and the library honour both, so the
    # drop-ins (whose returned paths are made from the cache) must land where the fetcher wrote.
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", "~/legacy-cache")
    cache = tmp_path / "legacy-cache"
    got = wi.snapshot_download(REPO, endpoint=hub.url, allow_patterns="*.json")
    assert Path(got).parent.parent == cache / FOLDER and (Path(got) / "config.json").is_file()
    one = wi.hf_hub_download(REPO, "README.md", endpoint=hub.url)
    assert Path(one).is_relative_to(cache) and Path(one).read_text() == "# tiny\n"
    # The same cache offline.
    assert wi.snapshot_download(REPO, allow_patterns="*.json", local_files_only=True) == got


# Progress: the bars huggingface_hub draws, drawn by ours from the fetch's events.


class Bars:
    """What a ``tqdm_class`` (a subclass of ``base``) was asked to draw: each bar made, in
    order, with its arguments, and where it ended (count, total, description, closed). It
    writes to a buffer of its own, never to stderr."""

    def __init__(self, base: Any = None) -> None:
        self.made: list[Any] = []
        made = self.made

        class Recorder(base or pytest.importorskip("tqdm.auto").tqdm):  # type: ignore[misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.wi_kwargs = dict(kwargs)
                self.wi_closed = False
                made.append(self)
                super().__init__(*args, file=io.StringIO(), **kwargs)
                self.wi_disabled = self.disable  # (closing disables a bar)

            def close(self) -> None:
                self.wi_closed = True
                super().close()

        self.cls = Recorder

    def described(self) -> list[Tuple[Any, ...]]:
        """Each bar: its arguments (but huggingface_hub's switches), count, total, description."""
        out = []
        for b in self.made:
            kw = {k: v for k, v in b.wi_kwargs.items() if k not in ("disable", "name")}
            out.append((sorted(kw.items()), b.n, b.total, b.desc))
        return out


def sizes(repos: Path) -> Dict[str, int]:
    """The repository's files and their sizes (not the mock's own files)."""
    base = repos / "demo" / "tiny"
    return {
        p.relative_to(base).as_posix(): p.stat().st_size
        for p in base.rglob("*")
        if p.is_file() and not p.name.startswith(".mock-hub")
    }


def test_tqdm_class_gets_huggingface_hubs_snapshot_bars(hub: Hub, repos: Path, tmp_path: Path) -> None:
    total, n = sum(sizes(repos).values()), len(sizes(repos))
    runs = {}
    for lib, name in ((hf, "hf"), (wi, "wi")):
        first, again = Bars(), Bars()
        lib.snapshot_download(REPO, cache_dir=tmp_path / name, endpoint=hub.url, tqdm_class=first.cls)
        lib.snapshot_download(REPO, cache_dir=tmp_path / name, endpoint=hub.url, tqdm_class=again.cls)
        runs[name] = (first, again)
    (hf_first, hf_again), (wi_first, wi_again) = runs["hf"], runs["wi"]
    assert len(wi_first.made) == 3, wi_first.described()
    # Bytes received, bytes written, then the files: "Fetching N files", total N, updated to N.
    transfer, written, fetching = wi_first.made
    assert fetching.wi_kwargs == {"desc": f"Fetching {n} files", "total": n}
    assert fetching.n == n
    assert (transfer.n, transfer.total, transfer.desc) == (total, total, "Download complete")
    assert (written.n, written.total, written.desc) == (total, total, "Reconstruction complete: ")
    assert transfer.wi_kwargs["unit"] == "B" and transfer.wi_kwargs["unit_scale"] is True
    assert all(b.wi_closed for b in wi_first.made), "every bar closed"
    # Exactly huggingface_hub's bars: their arguments, and where they end.
    assert wi_first.described() == hf_first.described()
    # Everything cached: the files counted, no byte.
    assert [b.n for b in wi_again.made] == [0, 0, n]
    assert wi_again.described() == hf_again.described()


def test_tqdm_class_gets_huggingface_hubs_file_bar(hub: Hub, repos: Path, tmp_path: Path) -> None:
    size = sizes(repos)["model.safetensors"]
    got = {}
    for lib, name in ((hf, "hf"), (wi, "wi")):
        bars, none = Bars(), Bars()
        cache = tmp_path / name
        for filename, sub in (("model.safetensors", None), ("notes.txt", "sub")):
            lib.hf_hub_download(REPO, filename, subfolder=sub, cache_dir=cache, endpoint=hub.url,
                                tqdm_class=bars.cls)
        # Cached, a dry run, offline: nothing is downloaded, no bar.
        lib.hf_hub_download(REPO, "model.safetensors", cache_dir=cache, endpoint=hub.url, tqdm_class=none.cls)
        lib.hf_hub_download(REPO, "README.md", cache_dir=cache, endpoint=hub.url, tqdm_class=none.cls,
                            dry_run=True)
        lib.hf_hub_download(REPO, "model.safetensors", cache_dir=cache, local_files_only=True,
                            tqdm_class=none.cls)
        assert none.made == [], name
        got[name] = bars
    ours = got["wi"].made
    assert len(ours) == 2 and all(b.wi_closed for b in ours)
    assert ours[0].wi_kwargs == {"unit": "B", "unit_scale": True, "total": size, "initial": 0,
                                 "desc": "model.safetensors"}
    assert ours[0].n == size
    assert got["wi"].described()[0] == got["hf"].described()[0]
    # The name the CDN gives a file; huggingface_hub falls back to the URL's end when a server
    # sends none (the mock's origin), we always show the name.
    assert (ours[1].wi_kwargs["desc"], ours[1].n) == ("notes.txt", sizes(repos)["sub/notes.txt"])


def test_snapshot_dry_run_and_offline_bars_are_huggingface_hubs(hub: Hub, tmp_path: Path) -> None:
    got = {}
    for lib, name in ((hf, "hf"), (wi, "wi")):
        dry, offline = Bars(), Bars()
        cache = tmp_path / name
        lib.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url, dry_run=True,
                              allow_patterns=["*.json", "sub/"], tqdm_class=dry.cls)
        lib.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url, allow_patterns="*.json")
        lib.snapshot_download(REPO, cache_dir=cache, local_files_only=True, allow_patterns="*.json",
                              tqdm_class=offline.cls)
        assert offline.made == [], name  # the cache answers before any bar is drawn
        got[name] = dry
    assert got["wi"].made[2].wi_kwargs == {"desc": "[dry-run] Fetching 2 files", "total": 2}
    assert got["wi"].made[2].n == 2
    assert got["wi"].described() == got["hf"].described()


class Terminal(io.StringIO):
    """A stderr that says it is a terminal: tqdm draws the default byte bars on one only."""

    def isatty(self) -> bool:
        return True


def drawn(text: str) -> set[str]:
    """The descriptions of the bars drawn on a stream."""
    return {m for m in re.findall(r"(?:^|\r|\n)([^\r\n:|\x1b]+?):", text) if m.strip()}


def test_default_bars_on_a_terminal_and_what_turns_them_off(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("TQDM_POSITION", raising=False)

    def run(cache: Path) -> str:
        err = Terminal()
        with monkeypatch.context() as m:
            m.setattr(sys, "stderr", err)
            wi.snapshot_download(REPO, cache_dir=cache, endpoint=hub.url, allow_patterns=["*.json", "*.md"])
            wi.hf_hub_download(REPO, "model.safetensors", cache_dir=cache, endpoint=hub.url)
        return err.getvalue()

    shown = run(tmp_path / "a")
    assert drawn(shown) >= {"Fetching 2 files", "Download complete", "Reconstruction complete",
                            "model.safetensors"}, shown
    assert "100%" in shown
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    assert run(tmp_path / "b") == ""
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    # huggingface_hub's own switch, for every bar or for a group.
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    disable_progress_bars()
    try:
        assert run(tmp_path / "c") == ""
    finally:
        enable_progress_bars()
    disable_progress_bars("huggingface_hub.http_get")
    try:
        grouped = run(tmp_path / "d")
    finally:
        enable_progress_bars()
    assert "Fetching 2 files" in drawn(grouped) and "model.safetensors" not in drawn(grouped), grouped
    # A tqdm_class of one's own draws whatever the environment says, as in huggingface_hub ...
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    size = len('{"model_type": "tiny"}\n')
    bars = Bars()
    wi.snapshot_download(REPO, cache_dir=tmp_path / "e", endpoint=hub.url, allow_patterns="*.json",
                         tqdm_class=bars.cls)
    assert [(b.n, b.wi_disabled) for b in bars.made] == [(size, False), (size, False), (1, False)]
    # ... but huggingface_hub's tqdm, or a subclass of it, honours it.
    theirs = Bars(hf.utils.tqdm)
    wi.snapshot_download(REPO, cache_dir=tmp_path / "f", endpoint=hub.url, allow_patterns="*.json",
                         tqdm_class=theirs.cls)
    assert [b.wi_disabled for b in theirs.made] == [True, True, True]


def test_default_bars_off_a_terminal_are_huggingface_hubs(
    hub: Hub, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal huggingface_hub draws "Fetching N files", no byte bar: so do we."""
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("TQDM_POSITION", raising=False)
    err = {}
    for lib, name in ((hf, "hf"), (wi, "wi")):
        capfd.readouterr()
        lib.snapshot_download(REPO, cache_dir=tmp_path / name, endpoint=hub.url, allow_patterns="*.json")
        lib.hf_hub_download(REPO, "model.safetensors", cache_dir=tmp_path / name, endpoint=hub.url)
        err[name] = capfd.readouterr().err
    assert drawn(err["wi"]) == drawn(err["hf"]) == {"Fetching 1 files"}, err


def test_without_tqdm_nothing_is_drawn_but_a_tqdm_class_is(hub: Hub, repos: Path, tmp_path: Path) -> None:
    """tqdm is optional: without it (nor huggingface_hub, which needs it) the drop-ins draw
    nothing, and a tqdm_class of one's own still gets its bars."""
    script = textwrap.dedent(
        """
        import sys
        for m in ("tqdm", "tqdm.auto", "huggingface_hub"):
            sys.modules[m] = None  # not installed
        import weight_inspect as wi

        class Bar:
            made = []
            def __init__(self, **kw):
                self.kw, self.n, self.total = kw, 0, kw.get("total")
                Bar.made.append(self)
            def update(self, n=1):
                self.n += n
            def close(self):
                pass

        endpoint, cache = sys.argv[1], sys.argv[2]
        wi.snapshot_download("demo/tiny", cache_dir=cache + "/a", endpoint=endpoint)
        wi.hf_hub_download("demo/tiny", "config.json", cache_dir=cache + "/b", endpoint=endpoint)
        wi.snapshot_download("demo/tiny", cache_dir=cache + "/c", endpoint=endpoint, tqdm_class=Bar)
        print(repr([(b.kw.get("desc"), b.n, b.total) for b in Bar.made]))
        """
    )
    # TQDM_POSITION=-1 would draw huggingface_hub's bars even on a pipe.
    r = subprocess.run([sys.executable, "-c", script, hub.url, str(tmp_path)], capture_output=True,
                       text=True, env=dict(os.environ, TQDM_POSITION="-1"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    total, n = sum(sizes(repos).values()), len(sizes(repos))
    assert r.stdout.strip() == repr([
        ("Downloading bytes", total, total),
        ("Reconstructing (incomplete total...)", total, total),
        (f"Fetching {n} files", n, n),
    ])
