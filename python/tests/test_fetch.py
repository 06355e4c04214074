"""`weight_inspect.fetch` against the repository's mock Hub (`mock-hub`, built by
`cargo test --workspace`): downloads, the cache, failures by class, and Ctrl-C."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np
import pytest
import safetensors.numpy as stnp

import weight_inspect as wi
from conftest import ROOT, cli, need

SIZE = 8 << 20  # bytes of the model's tensor


def _mock_hub() -> Path:
    env = os.environ.get("WI_MOCK_HUB")
    p = Path(env) if env else ROOT / "target" / "debug" / "mock-hub"
    return need(p, f"no mock-hub binary at {p} (cargo build -p mock-server, or set WI_MOCK_HUB)")


class Hub:
    def __init__(self, root: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(_mock_hub()), "--root", str(root), "--addr", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def control(self, method: str, path: str, body: Optional[bytes] = None) -> Any:
        """A request to the mock's control API (``/_mock/…``): its JSON answer."""
        req = urllib.request.Request(f"{self.url}/_mock/{path}", data=body, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
        return json.loads(text) if text.strip() else None

    def stats(self) -> Dict[str, Any]:
        """The counters (``GET /_mock/stats``)."""
        doc: Dict[str, Any] = self.control("GET", "stats")
        return doc

    def reset_stats(self) -> None:
        self.control("POST", "stats/reset")

    def fault(self, spec: str) -> None:
        """Add a fault rule (the compact form ``mock-hub --fault`` takes)."""
        self.control("POST", "faults", spec.encode())

    def clear_faults(self) -> None:
        self.control("DELETE", "faults")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    repo = root / "demo" / "tiny"
    repo.mkdir(parents=True)
    w = np.random.default_rng(3).standard_normal(SIZE // 4).astype(np.float32)
    stnp.save_file({"w": w}, str(repo / "model.safetensors"))
    (repo / "config.json").write_text('{"model_type": "tiny"}\n')
    return root


@pytest.fixture(scope="module")
def hub(repos: Path) -> Iterator[Hub]:
    h = Hub(repos)
    yield h
    h.stop()


def test_fetch_downloads_into_the_cache_then_finds_it_there(
    hub: Hub, repos: Path, tmp_path: Path
) -> None:
    events: list = []
    s = wi.fetch(
        "demo/tiny",
        include=["*.safetensors", "*.json"],
        endpoint=hub.url,
        cache_dir=tmp_path / "cache",
        token=None,
        progress=events.append,
    )
    assert s["repo"] == "demo/tiny" and len(s["commit"]) == 40
    by_path = {f["path"]: f for f in s["files"]}
    assert set(by_path) == {"model.safetensors", "config.json"}
    for path, f in by_path.items():
        data = (repos / "demo" / "tiny" / path).read_bytes()
        assert Path(f["local_path"]).read_bytes() == data
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
        assert f["cached"] is False
    assert by_path["model.safetensors"]["verification"]["valid"] is True
    assert all(isinstance(e, wi.ProgressEvent) for e in events)
    kinds = [e.kind for e in events]
    assert kinds[0] == "plan" and "done" in kinds
    plan = events[0]
    assert plan.files == 2 and isinstance(plan.files, int) and plan.path is None and plan.id is None
    assert plan.bytes == sum(f["size"] for f in s["files"])
    st = [e for e in events if e.path == "model.safetensors"]
    assert len({e.id for e in st}) == 1 and isinstance(st[0].id, int)
    got = sum(e.bytes for e in st if e.kind == "progress")
    assert got == by_path["model.safetensors"]["size"]
    done = [e for e in st if e.kind == "done"]
    assert len(done) == 1 and done[0].cached is False and "done" in repr(done[0])

    again = wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, cache_dir=tmp_path / "cache")
    assert [f["cached"] for f in again["files"]] == [True]
    offline = wi.fetch("demo/tiny", files=["config.json"], cache_dir=tmp_path / "cache", offline=True)
    assert offline["files"][0]["local_path"] == by_path["config.json"]["local_path"]


def test_verified_downloads_fill_a_remote_cache(
    hub: Hub, repos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``remote_cache=`` (a ``file://`` store here): each downloaded file is uploaded by its
    SHA-256 with an index entry; a second machine finds it there; ``upload=False`` writes
    nothing; the drop-ins take it too, and ``WI_REMOTE_CACHE`` is the default."""
    bucket = tmp_path / "bucket"
    url = f"file://{bucket}"
    s = wi.fetch("demo/tiny", files=["model.safetensors"], endpoint=hub.url,
                 cache_dir=tmp_path / "a", remote_cache=url)
    f = s["files"][0]
    assert f["upload"] == {
        "to": url,
        "outcome": "sent",
        "bytes": f["size"],
        "indexed": True,
    }, f
    data = (repos / "demo" / "tiny" / "model.safetensors").read_bytes()
    assert (bucket / "blobs" / "sha256" / f["sha256"]).read_bytes() == data
    entry = json.loads((bucket / "index" / "models" / "demo" / "tiny" / s["commit"]
                        / "model.safetensors.json").read_text())
    assert entry["sha256"] == f["sha256"] and entry["size"] == len(data)

    s = wi.fetch("demo/tiny", files=["model.safetensors"], endpoint=hub.url,
                 cache_dir=tmp_path / "b", remote_cache=url)
    assert s["files"][0]["upload"]["outcome"] == "already_there"
    # ... read from the bucket: every byte, checked.
    read = s["files"][0]["remote_read"]
    assert read["bytes"] == len(data) and "damaged" not in read, read
    assert read["from"] == f"{url}/blobs/sha256/{f['sha256']}"
    # Offline, the bucket stands in for the Hub.
    s = wi.fetch("demo/tiny", files=["model.safetensors"], cache_dir=tmp_path / "b2",
                 remote_cache=url, offline=True)
    assert Path(s["files"][0]["local_path"]).read_bytes() == data
    s = wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url,
                 cache_dir=tmp_path / "c", remote_cache=url, upload=False)
    assert "upload" not in s["files"][0]
    assert not (bucket / "index" / "models" / "demo" / "tiny" / s["commit"] / "config.json.json").exists()

    monkeypatch.setenv("WI_REMOTE_CACHE", url)
    wi.hf_hub_download("demo/tiny", "config.json", endpoint=hub.url, cache_dir=tmp_path / "d")
    assert (bucket / "index" / "models" / "demo" / "tiny" / s["commit"] / "config.json.json").exists()
    with pytest.raises(wi.LocalError, match="unsupported scheme 'ftp'"):
        wi.snapshot_download("demo/tiny", endpoint=hub.url, cache_dir=tmp_path / "e",
                             remote_cache="ftp://x/y")
    # A node may not ask for leases that hold its chunks for ages if it stops (the others
    # would wait on them): the request the native module takes refuses it.
    from weight_inspect import _native

    with pytest.raises(wi.LocalError, match="fill_lease must be at most 120 seconds"):
        _native.fetch({"repo": "demo/tiny", "files": ["config.json"], "endpoint": hub.url,
                       "cache_dir": os.fspath(tmp_path / "f"), "remote_cache": url,
                       "fill_lease": 1e18})


def test_fetch_into_a_local_dir(hub: Hub, tmp_path: Path) -> None:
    s = wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, local_dir=tmp_path / "here")
    assert Path(s["files"][0]["local_path"]) == tmp_path / "here" / "config.json"


def test_fetch_failures_raise_by_class(hub: Hub, tmp_path: Path) -> None:
    with pytest.raises(wi.NotFoundError) as e:
        wi.fetch("demo/nope", endpoint=hub.url, cache_dir=tmp_path)
    assert e.value.exit_code == 4 and "demo/nope" in str(e.value)
    with pytest.raises(wi.NotFoundError):
        wi.fetch("demo/tiny", files=["absent.bin"], endpoint=hub.url, cache_dir=tmp_path)
    with pytest.raises(wi.NotFoundError):
        wi.fetch("demo/tiny", files=["config.json"], cache_dir=tmp_path / "empty", offline=True)
    with pytest.raises(wi.LocalError):
        wi.fetch("not a repo!", endpoint=hub.url, cache_dir=tmp_path)
    with pytest.raises(wi.LocalError):
        wi.fetch("demo/tiny", endpoint=hub.url, cache_dir=tmp_path, connections=0)


def test_a_token_that_cannot_be_a_header_is_refused(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token with a line break (or another byte a header cannot carry) raises, naming where
    it came from and never showing it, before any request: it was dropped without a word and
    the download went on anonymous."""
    canary = "hf_canary_token_4b1d"
    hub.reset_stats()
    calls: list[Callable[[str], Any]] = [
        lambda t: wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url,
                           cache_dir=tmp_path, token=t),
        lambda t: wi.hf_hub_download("demo/tiny", "config.json", endpoint=hub.url,
                                     cache_dir=tmp_path, token=t),
        lambda t: wi.snapshot_download("demo/tiny", endpoint=hub.url, cache_dir=tmp_path, token=t),
        lambda t: wi.inspect("hf://demo/tiny/model.safetensors", endpoint=hub.url, token=t),
    ]
    for call in calls:
        for bad, what in [(f"{canary}\nX", "a line break"), (f"{canary}\rX", "a line break"),
                          (f"{canary}\x00X", "a control character"), (f"{canary} X", "a space")]:
            with pytest.raises(ValueError, match=f"^the token given as token= contains {what}") as e:
                call(bad)
            assert canary not in str(e.value)
    # From the environment: the variable named, a LocalError (exit code 1) as for a bad header.
    monkeypatch.setenv("HF_TOKEN", f"{canary}\nX")
    with pytest.raises(wi.LocalError, match="^the token in HF_TOKEN contains a line break") as le:
        wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, cache_dir=tmp_path)
    assert canary not in str(le.value) and le.value.exit_code == 1
    assert hub.stats()["total_requests"] == 0
    assert not list(tmp_path.glob("models--demo--tiny/blobs/*"))
    # A good token given wins over the environment's, which is never sent.
    s = wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, cache_dir=tmp_path,
                 token="hf_fine")
    assert s["files"][0]["path"] == "config.json"


def test_an_exception_in_the_progress_callback_stops_the_fetch(hub: Hub, tmp_path: Path) -> None:
    def boom(event: wi.ProgressEvent) -> None:
        raise RuntimeError(f"stop at {event.kind}")

    # Raised on the plan, delivered before any download: nothing is fetched, however short.
    hub.reset_stats()
    with pytest.raises(RuntimeError, match="stop at plan"):
        wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, cache_dir=tmp_path, progress=boom)
    assert not list(tmp_path.glob("models--demo--tiny/blobs/*"))
    gets = [r["path"] for r in hub.stats()["requests"] if r["method"] == "GET" and "config.json" in r["path"]]
    assert gets == [], gets


SCRIPT = textwrap.dedent(
    """
    import signal, sys, weight_inspect as wi
    # Python's own Ctrl-C handler, even when started from a background job (which inherits
    # SIGINT ignored, and Python then keeps ignoring it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    def progress(event):
        if event.kind == "progress":
            print("progress", flush=True)
    wi.fetch("demo/tiny", files=["model.safetensors"], endpoint=sys.argv[1],
             cache_dir=sys.argv[2], connections=2, progress=progress)
    print("finished", flush=True)
    """
)


def wait_for(ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait until ``ready()``; a wait that times out fails, naming ``what``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _checkpointed(blobs: Path) -> bool:
    """Whether a resume state in ``blobs`` records at least one chunk."""
    for state in blobs.glob("*.wi-partial.state"):
        try:
            if json.loads(state.read_text()).get("chunks"):
                return True
        except (OSError, ValueError):
            pass  # being replaced: read it again
    return False


def test_ctrl_c_stops_the_fetch_cleanly_and_the_next_call_resumes(repos: Path, tmp_path: Path) -> None:
    slow = Hub(repos, "--bandwidth", str(1 << 20))  # 1 MiB/s per connection
    try:
        cache = tmp_path / "cache"
        child = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, slow.url, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "progress"
        # Stopped once a checkpoint records a chunk on disk (the resume state beside the
        # partial download), so that the next call has something to resume.
        wait_for(lambda: _checkpointed(cache / "models--demo--tiny" / "blobs"), "a checkpoint")
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        stopped_in = time.monotonic() - sent
        assert child.returncode != 0 and "finished" not in out
        assert "KeyboardInterrupt" in err, err
        assert stopped_in < 5, f"took {stopped_in:.1f} s to stop"
        # What arrived is kept: the next call resumes from it.
        s = wi.fetch("demo/tiny", files=["model.safetensors"], endpoint=slow.url, cache_dir=cache)
        f = s["files"][0]
        assert f["resumed"] > 0 and f["transferred"] < f["size"]
        data = (repos / "demo" / "tiny" / "model.safetensors").read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
    finally:
        slow.stop()


def _key_pair(d: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP256R1())
    private, public = d / f"{name}.pem", d / f"{name}.pub.pem"
    private.write_bytes(
        k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public.write_bytes(
        k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def test_a_signed_model_is_checked_against_its_signature(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    repo = root / "acme" / "signed"
    repo.mkdir(parents=True)
    (repo / "weights.bin").write_bytes(np.random.default_rng(5).bytes(300_000))
    (repo / "config.json").write_text('{"model_type": "tiny"}\n')
    private, public = _key_pair(tmp_path, "signer")
    subprocess.run(
        [str(cli()), "signature", "sign", str(repo), "--private-key", str(private)], check=True, capture_output=True
    )
    h = Hub(root)
    try:
        s = wi.fetch(
            "acme/signed",
            files=["weights.bin", "config.json"],
            endpoint=h.url,
            cache_dir=tmp_path / "cache",
            public_key=public,
            require_signature=True,
        )
        assert s["signature"]["path"] == "model.sig"
        assert s["signature"]["signer"]["method"] == "key"
        pem = public.read_bytes()
        assert s["signature"]["signer"]["fingerprint"] == hashlib.sha256(pem).hexdigest()
        assert {f["path"] for f in s["files"]} == {"weights.bin", "config.json"}
        # huggingface_hub's drop-in takes the same policy; the signature is part of the snapshot.
        folder = Path(
            str(
                wi.snapshot_download(
                    "acme/signed",
                    endpoint=h.url,
                    cache_dir=tmp_path / "cache3",
                    public_key=public,
                    require_signature=True,
                )
            )
        )
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.sig", "weights.bin"]

        _, other = _key_pair(tmp_path, "other")
        with pytest.raises(wi.IntegrityError) as e:
            wi.fetch(
                "acme/signed",
                files=["weights.bin"],
                endpoint=h.url,
                cache_dir=tmp_path / "cache2",
                public_key=other,
            )
        assert "key mismatch" in str(e.value) and e.value.exit_code == 2
        assert not list((tmp_path / "cache2").rglob("weights.bin"))
    finally:
        h.stop()


def test_a_file_stored_in_xet_comes_through_the_cas(
    repos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fetch``, ``hf_hub_download`` and ``snapshot_download`` fetch a file the Hub stores in Xet
    through its CAS (the resolve URL serves none of it), its Xet hash checked with its SHA-256;
    ``HF_HUB_DISABLE_XET`` is read as huggingface_hub reads it."""
    # conftest.py turns Xet off for the comparisons with huggingface_hub: on here, as by default.
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    h = Hub(repos, "--xet", "--lfs-threshold", "1048576")
    try:
        want = (repos / "demo" / "tiny" / "model.safetensors").read_bytes()
        s = wi.fetch("demo/tiny", files=["model.safetensors"], endpoint=h.url, cache_dir=tmp_path / "a")
        f = s["files"][0]
        assert Path(f["local_path"]).read_bytes() == want
        assert f["xet"]["bytes"] == len(want), f
        assert f["xet"]["checked"] is True, f
        stats = h.stats()
        assert stats["cas"]["xorb_bytes_sent"] > 0
        assert stats["files"].get("demo/tiny/model.safetensors", {}).get("bytes_sent", 0) == 0
        getters = [
            lambda d: wi.hf_hub_download("demo/tiny", "model.safetensors", endpoint=h.url, cache_dir=d),
            lambda d: str(Path(wi.snapshot_download("demo/tiny", endpoint=h.url, cache_dir=d)) / "model.safetensors"),
        ]
        for i, get in enumerate(getters):
            h.reset_stats()
            path = get(tmp_path / f"b{i}")
            assert Path(path).read_bytes() == want
            assert h.stats()["cas"]["xorb_bytes_sent"] > 0
        # With Xet off, the bridge (the resolve URL) serves the file.
        h.reset_stats()
        env = dict(os.environ, HF_HUB_DISABLE_XET="1")
        code = (
            "import weight_inspect as wi, sys; "
            f"s = wi.fetch('demo/tiny', files=['model.safetensors'], endpoint={h.url!r}, "
            f"cache_dir={str(tmp_path / 'c')!r}); print('xet' in s['files'][0])"
        )
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "False", out
        assert h.stats()["cas"]["xorb_bytes_sent"] == 0
    finally:
        h.stop()


def test_one_cache_with_huggingface_hubs_shared_blob_store(
    repos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop-ins and huggingface_hub (Xet on, its shared blob store) on one cache, in both
    orders: whichever comes second fetches nothing from the CAS, the blob is a link into
    ``{cache}/blobs/``, and the drop-in answers from the cache offline too."""
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    h = Hub(repos, "--xet", "--lfs-threshold", "1048576")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_XET", "HF_HUB_OFFLINE")}

    def theirs(cache: Path) -> str:
        code = (
            "from huggingface_hub import hf_hub_download; "
            f"print(hf_hub_download('demo/tiny', 'model.safetensors', cache_dir={str(cache)!r}))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(env, HF_ENDPOINT=h.url),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[-1]

    try:
        want = (repos / "demo" / "tiny" / "model.safetensors").read_bytes()
        # huggingface_hub first, the drop-in second.
        cache = tmp_path / "a"
        path = theirs(cache)
        h.reset_stats()
        ours = wi.hf_hub_download("demo/tiny", "model.safetensors", endpoint=h.url, cache_dir=cache)
        assert ours == path
        assert Path(ours).read_bytes() == want
        assert h.stats()["cas"]["xorb_bytes_sent"] == 0
        blob = Path(os.path.realpath(ours))
        assert blob.parent.parent == cache / "blobs", blob
        offline = wi.hf_hub_download(
            "demo/tiny", "model.safetensors", endpoint=h.url, cache_dir=cache, local_files_only=True
        )
        assert Path(offline).read_bytes() == want
        # The drop-in first (it publishes), huggingface_hub second.
        cache = tmp_path / "b"
        ours = wi.hf_hub_download("demo/tiny", "model.safetensors", endpoint=h.url, cache_dir=cache)
        assert Path(os.path.realpath(ours)).parent.parent == cache / "blobs"
        h.reset_stats()
        assert Path(theirs(cache)).read_bytes() == want
        assert h.stats()["cas"]["xorb_bytes_sent"] == 0
    finally:
        h.stop()


def test_an_unreachable_hub_is_answered_from_the_cache_with_one_warning(
    hub: Hub, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``wi-fetch`` and huggingface_hub: the cache answers for a Hub that cannot be reached
    (the summary's ``unreachable`` says why, one warning is logged); ``cache_fallback=False``
    refuses, as ``--no-cache-fallback`` does."""
    cache = tmp_path / "cache"
    first = wi.fetch("demo/tiny", files=["config.json"], endpoint=hub.url, cache_dir=cache)
    dead = "http://127.0.0.1:9"  # nothing listens there
    with caplog.at_level("WARNING", logger="weight_inspect"):
        again = wi.fetch("demo/tiny", files=["config.json"], endpoint=dead, cache_dir=cache)
    assert again["files"][0]["local_path"] == first["files"][0]["local_path"]
    assert "127.0.0.1:9" in again["unreachable"]
    warned = [r.getMessage() for r in caplog.records if "could not be reached" in r.getMessage()]
    assert len(warned) == 1 and "answered from the cache" in warned[0], warned
    assert "unreachable" not in first

    # The refusals below retry as usual: with short delays, so that the test is quick.
    native = wi._native.fetch

    def quick(request: Dict[str, Any], **kw: Any) -> Any:
        return native({**request, "retry_delay": 0.01, "retry_max_delay": 0.02}, **kw)

    monkeypatch.setattr(wi._native, "fetch", quick)
    caplog.clear()
    with pytest.raises(wi.NetworkError):
        wi.fetch("demo/tiny", files=["config.json"], endpoint=dead, cache_dir=cache, cache_fallback=False)
    # A file the cache lacks is never answered with part of the selection.
    with pytest.raises(wi.NetworkError, match="the cache cannot stand in"):
        wi.fetch("demo/tiny", files=["config.json", "model.safetensors"], endpoint=dead, cache_dir=cache)
    assert not [r for r in caplog.records if "answered from the cache" in r.getMessage()]
