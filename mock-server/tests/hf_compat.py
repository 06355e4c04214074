"""Checks that the real huggingface_hub client downloads from mock-hub.

Run by tests/hf_compat.rs with HF_ENDPOINT pointing at an in-process mock-hub and
HF_HUB_CACHE in a temporary folder. argv[1] is a JSON spec:

    {"repo": "org/name", "small": "config.json", "large": "model.bin",
     "files": {"path": "sha256", ...},           # every file of `repo`
     "dataset": "org/data", "dataset_file": "data.csv", "dataset_sha256": "...",
     "gated": "org/gated", "gated_file": "weights.bin", "gated_sha256": "...",
     "private": "org/private", "token": "hf_...",
     "dev_commit": "40 hex", "workdir": "/tmp/...",
     "cut_repo": "org/cut", "cut_file": "big.bin", "cut_sha256": "..."}

Prints one line per check and exits non-zero on the first failure.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name} {detail}", flush=True)
        sys.exit(1)
    print(f"ok   {name}", flush=True)


def expect_error(name, cls, fn):
    try:
        fn()
    except cls as e:
        print(f"ok   {name} -> {type(e).__name__}", flush=True)
        return
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {name}: expected {cls.__name__}, got {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"FAIL {name}: expected {cls.__name__}, got no error", flush=True)
    sys.exit(1)


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    work = Path(spec["workdir"])
    repo, files = spec["repo"], spec["files"]
    print(f"huggingface_hub {huggingface_hub.__version__}, endpoint {os.environ['HF_ENDPOINT']}", flush=True)

    # 1. One small file, one large (LFS, redirected to the CDN) file.
    for key in ("small", "large"):
        name = spec[key]
        p = hf_hub_download(repo, name)
        check(f"hf_hub_download {key} {name}", sha256(p) == files[name], p)
    # The cache names LFS blobs by SHA-256, read from X-Linked-Etag (not the redirect's ETag).
    cache = Path(os.environ["HF_HUB_CACHE"])
    blobs = cache / f"models--{repo.replace('/', '--')}" / "blobs"
    check("LFS blob named by sha256", (blobs / files[spec["large"]]).is_file(), sorted(os.listdir(blobs)))

    # 2. A whole snapshot (repo info, then every file).
    snap = Path(snapshot_download(repo))
    for name, digest in files.items():
        check(f"snapshot_download {name}", sha256(snap / name) == digest)
    got = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file())
    check("snapshot has exactly the repo's files", got == sorted(files), got)

    # 3. Revisions: the `dev` branch and a full commit id.
    p = hf_hub_download(repo, spec["small"], revision="dev")
    check("hf_hub_download revision=dev", sha256(p) == files[spec["small"]])
    p = hf_hub_download(repo, spec["small"], revision=spec["dev_commit"])
    check("hf_hub_download revision=<commit>", sha256(p) == files[spec["small"]])

    # 4. The paginated tree listing.
    api = HfApi()
    listed = sorted(e.path for e in api.list_repo_tree(repo, recursive=True) if e.__class__.__name__ == "RepoFile")
    check("list_repo_tree (paginated)", listed == sorted(files), listed)
    info = api.model_info(repo, files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    check("model_info(files_metadata=True)", set(sizes) == set(files) and all(v is not None for v in sizes.values()), sizes)

    # 5. Datasets.
    p = hf_hub_download(spec["dataset"], spec["dataset_file"], repo_type="dataset")
    check("hf_hub_download dataset", sha256(p) == spec["dataset_sha256"])

    # 6. Errors map to the right exception classes.
    expect_error("missing file", EntryNotFoundError, lambda: hf_hub_download(repo, "no/such/file.bin"))
    expect_error("missing revision", RevisionNotFoundError, lambda: hf_hub_download(repo, spec["small"], revision="nope"))
    expect_error("missing repo", RepositoryNotFoundError, lambda: hf_hub_download("nobody/nothing", "x.bin"))
    expect_error(
        "gated repo without token",
        GatedRepoError,
        lambda: hf_hub_download(spec["gated"], spec["gated_file"], token=False),
    )
    p = hf_hub_download(spec["gated"], spec["gated_file"], token=spec["token"])
    check("gated repo with token", sha256(p) == spec["gated_sha256"])
    expect_error(
        "private repo without token",
        RepositoryNotFoundError,
        lambda: hf_hub_download(spec["private"], spec["small"], token=False),
    )

    # 7. A download cut by the server (connection aborted mid-body) is resumed by the client.
    p = hf_hub_download(spec["cut_repo"], spec["cut_file"])
    check("hf_hub_download resumes a cut download", sha256(p) == spec["cut_sha256"])

    # 8. The `hf download` command line, into a local folder.
    hf = Path(sys.executable).parent / "hf"
    if hf.exists():
        out = work / "local"
        r = subprocess.run(
            [str(hf), "download", repo, "--local-dir", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        check("hf download exit status", r.returncode == 0, r.stdout + r.stderr)
        for name, digest in files.items():
            check(f"hf download {name}", sha256(out / name) == digest)
    else:
        print("skip hf download: no `hf` next to the interpreter", flush=True)

    print("ALL OK", flush=True)


if __name__ == "__main__":
    main()
