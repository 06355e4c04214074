"""safetensors' own tests, with `weight_inspect.safe_open` in the place of its `safe_open`.

The release the drop-in claims (`weight_inspect.SAFETENSORS_VERSION`) carries its Python tests in
its sdist on PyPI (`bindings/python/tests`): the sdist is downloaded with pip at test time (kept
in pytest's cache, `.pytest_cache/d/safetensors-sdist`, for the next run), never copied into this
repository, and its tests run in a pytest of their own, in a scratch copy, with
`safetensors_suite_plugin` loaded: the NumPy tests only (the files named for PyTorch,
TensorFlow, Flax, MLX or Paddle are left out, and in the other files the plugin deselects each
test whose body uses one of them). They run twice: with safetensors alone (the baseline: what
is in scope passes with the real library) and with the drop-in in place; both must pass every
test in scope, the same tests.

Without the sdist (no network, no pip) or without that safetensors release installed (the tests
use its `save_file`, `serialize`, `SafetensorError`), the test is skipped with the reason, and
fails in CI, which provides both (`.ci/run` installs the release the drop-in claims).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import weight_inspect as wi
from conftest import in_ci

VERSION = wi.SAFETENSORS_VERSION
HERE = Path(__file__).resolve().parent
# Test files for another framework than NumPy, by name (test_pt_model.py, test_tf_comparison.py…).
OTHER_FRAMEWORK_FILE = re.compile(r"^test_(pt|tf|flax|jax|mlx|paddle)_")
# PyTorch's (test_safetensors_pt_suite.py runs them).
PT_FILE = re.compile(r"^test_pt_")


def _unavailable(why: str) -> None:
    if in_ci():
        pytest.fail(f"CI must provide it: {why}")
    pytest.skip(why)


def _sdist(cache: Path) -> Path:
    """safetensors' sdist of `VERSION`, from the cache or downloaded with pip."""
    name = f"safetensors-{VERSION}.tar.gz"
    path = cache / name
    if path.is_file():
        return path
    partial = cache / "download"
    partial.mkdir(parents=True, exist_ok=True)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
             "--no-binary", "safetensors", "--dest", str(partial), f"safetensors=={VERSION}"],
            check=False, capture_output=True, text=True, timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        _unavailable(f"pip download safetensors=={VERSION} failed: {e}")
    got = partial / name
    if run.returncode != 0 or not got.is_file():
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-5:])
        _unavailable(f"pip could not download the sdist of safetensors=={VERSION}:\n{tail}")
    got.replace(path)
    return path


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """safetensors' `bindings/python` (its tests and its pytest configuration), unpacked."""
    try:
        import safetensors
    except ImportError:
        _unavailable(f"safetensors {VERSION} is not installed")
    if safetensors.__version__ != VERSION:
        _unavailable(
            f"safetensors {safetensors.__version__} is installed; the drop-in claims {VERSION}, "
            f"whose tests use its own library (pip install safetensors=={VERSION})"
        )
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    where = cache.mkdir("safetensors-sdist") if cache else tmp_path_factory.mktemp("sdist")
    sdist = _sdist(Path(where))
    prefix = f"safetensors-{VERSION}/bindings/python/"
    wanted = (prefix + "tests/", prefix + "setup.cfg")
    out = tmp_path_factory.mktemp("safetensors-sdist")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        tar.extractall(out, members=members, filter="data")
    root = out / prefix
    assert (root / "tests").is_dir(), f"{sdist} has no {prefix}tests"
    return root


def _run(root: Path, dropin: bool, tmp_path: Path, framework: str = "np") -> dict[str, Any]:
    """safetensors' NumPy tests (`framework` "pt": its PyTorch tests) in a pytest of their own
    (in a fresh copy of `root`, where they write their files); the plugin's report."""
    work = tmp_path / "python"
    subprocess.run(["cp", "-r", str(root), str(work)], check=True)
    files = sorted(
        p.name
        for p in (work / "tests").glob("test_*.py")
        if (PT_FILE.match(p.name) if framework == "pt" else not OTHER_FRAMEWORK_FILE.match(p.name))
    )
    assert files, f"no test file in {work / 'tests'}"
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["WI_SAFETENSORS_DROPIN"] = "1" if dropin else "0"
    env["WI_SAFETENSORS_FRAMEWORK"] = framework
    env["WI_SAFETENSORS_REPORT"] = str(report)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "safetensors_suite_plugin", "-p", "no:cacheprovider",
         "-q", "-rfEs", *(f"tests/{f}" for f in files)],
        check=False, cwd=work, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert report.is_file(), f"no report from safetensors' tests:\n{run.stdout}\n{run.stderr}"
    result: dict[str, Any] = json.loads(report.read_text())
    result["files"] = files
    result["returncode"] = run.returncode
    result["output"] = run.stdout[-6000:] + run.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def baseline(suite: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(suite, False, tmp_path_factory.mktemp("baseline"))


def _passed(result: dict[str, Any]) -> list[str]:
    return sorted(k for k, v in result["outcomes"].items() if v == "passed")


def test_numpy_tests_pass_with_safetensors_itself(baseline: dict[str, Any]) -> None:
    # The scope is sound: what is selected passes with the real library (and is not nothing).
    assert baseline["safe_open"] == "safetensors"
    failed = {k: v for k, v in baseline["outcomes"].items() if v not in ("passed", "skipped")}
    assert not failed and baseline["returncode"] == 0, baseline["output"]
    assert len(_passed(baseline)) >= 18, baseline["outcomes"]
    # PyTorch's tests are out of scope, and recognised as such.
    assert any("torch" in names for names in baseline["deselected"].values()), baseline["deselected"]


def test_numpy_tests_pass_with_the_drop_in(
    suite: Path, baseline: dict[str, Any], tmp_path: Path
) -> None:
    result = _run(suite, True, tmp_path)
    assert result["safe_open"] == "weight_inspect"
    failed = {k: v for k, v in result["outcomes"].items() if v not in ("passed", "skipped")}
    assert not failed and result["returncode"] == 0, f"{failed}\n{result['output']}"
    # The same tests, with the same outcomes, as with safetensors alone.
    assert result["outcomes"] == baseline["outcomes"], result["output"]
    assert result["deselected"] == baseline["deselected"]
    print(
        f"\nsafetensors {VERSION}'s NumPy tests ({', '.join(result['files'])}): "
        f"{len(_passed(result))} passed with weight_inspect.safe_open, "
        f"{len(_passed(baseline))} with safetensors; "
        f"{len(result['outcomes']) - len(_passed(result))} skipped by safetensors itself, "
        f"{len(result['deselected'])} deselected (other frameworks)"
    )
