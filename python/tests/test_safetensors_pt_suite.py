"""safetensors' own PyTorch tests, with `weight_inspect.torch` on their loading side.

As `test_safetensors_suite.py` does for the NumPy tests (the same sdist of the release the
drop-in claims, `weight_inspect.SAFETENSORS_VERSION`, downloaded with pip into pytest's cache;
the same plugin, `safetensors_suite_plugin`, here with ``WI_SAFETENSORS_FRAMEWORK=pt``), this
runs `bindings/python/tests/test_pt_comparison.py` and `test_pt_model.py` in a pytest of their
own, with the real PyTorch, twice: with safetensors alone (the baseline), then with the loading
side ours: `safetensors.torch.load_file`, `load` and `safe_open` are `weight_inspect.torch`'s
and `safetensors.safe_open` is `weight_inspect.safe_open`, the names
`weight_inspect.torch.install()` rebinds (rebound by the plugin, without calling it). Saving
(`save`, `save_file`, `save_model`) stays safetensors'; its `load_model` is its own and reads
through the `load_file` its module holds: ours. Both runs must pass the same tests, and the
same tests must read through those entry points (the plugin records who calls them): 33 run
(20 of `test_pt_comparison.py`, 13 of `test_pt_model.py`), 19 of them read a file or bytes
(the other 14 test saving or safetensors' helpers for shared tensors, and pass with either).

Deselected (the plugin's ``PT_DESELECTED``), each because it needs a device other than the CPU
(the CUDA build of PyTorch that `.ci/run` installs runs here on the CPU; safetensors itself
skips most of them without the device):

- `test_pt_comparison.py::TorchTestCase`: `test_gpu`, `test_gpu_default_device`,
  `test_anonymous_accelerator` (``device=0``): a CUDA device; `test_mps`,
  `test_mps_with_device_index`, `test_mps_fp4`, `test_mps_slice`: an Apple MPS device;
  `test_npu`: an Ascend NPU (``torch_npu``); `test_hpu`: an Intel Gaudi HPU
  (``habana_frameworks``).
- `test_pt_comparison.py::LoadTestCase`: `test_deserialization_device`,
  `test_deserialization_safe_gpu`, `test_deserialization_safe_gpu_slice`: a CUDA device;
  `test_deserialization_safe_device_1`: two.

Nothing else is left out: the tests that save shared, sparse, non-contiguous or meta tensors
run (saving is safetensors', in both runs).

Without PyTorch the test is skipped with the reason (as without the sdist or that safetensors
release, see `test_safetensors_suite.py`), and fails in CI, which installs it (`.ci/run`). The
drop-in run fails, never skips, when `weight_inspect.torch` is not in the installed package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from test_safetensors_suite import VERSION, _passed, _run, _unavailable, suite

__all__ = ["suite"]  # the fixture, shared with the NumPy tests' module

# What the baseline must show at least (safetensors 0.8.0: 33 run, 19 of them read).
MIN_PASSED = 33
MIN_READING = 19


@pytest.fixture(scope="module")
def pt_baseline(suite: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Not imported here: PyTorch is the subprocess's (this process stays without it).
    if importlib.util.find_spec("torch") is None:
        _unavailable(
            "PyTorch is not installed (pip install 'torch==2.15.*'): safetensors' PyTorch "
            "tests need it"
        )
    return _run(suite, False, tmp_path_factory.mktemp("pt-baseline"), framework="pt")


def _failed(result: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in result["outcomes"].items() if v not in ("passed", "skipped")}


def test_pytorch_tests_pass_with_safetensors_itself(pt_baseline: dict[str, Any]) -> None:
    # The scope is sound: what is selected passes with the real library (and is not nothing).
    result = pt_baseline
    assert result["framework"] == "pt" and result["safe_open"] == "safetensors"
    assert not _failed(result) and result["returncode"] == 0, result["output"]
    assert len(_passed(result)) >= MIN_PASSED, result["outcomes"]
    assert all(v == "passed" for v in result["outcomes"].values()), result["output"]
    # Exactly the plugin's list is deselected: every name on it is still one of the tests.
    deselected = {nodeid.rsplit("::", 1)[-1] for nodeid in result["deselected"]}
    assert deselected == set(result["pt_deselected"]), result["deselected"]
    # The loading entry points are safetensors' own, and the tests call them.
    assert all(not v.startswith("weight_inspect") for v in result["entry_points"].values())
    assert len(result["reads"]) >= MIN_READING, result["reads"]


def test_pytorch_tests_pass_with_the_drop_in(
    suite: Path, pt_baseline: dict[str, Any], tmp_path: Path
) -> None:
    try:
        found = importlib.util.find_spec("weight_inspect.torch") is not None
    except ImportError as e:
        found, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "no such module"
    if not found:
        pytest.fail(f"weight_inspect.torch is not in the installed package ({why})")
    result = _run(suite, True, tmp_path, framework="pt")
    assert result["safe_open"] == "weight_inspect", (result["entry_points"], result["output"])
    assert all(v.startswith("weight_inspect") for v in result["entry_points"].values()), result[
        "entry_points"
    ]
    failed = _failed(result)
    assert not failed and result["returncode"] == 0, f"{failed}\n{result['output']}"
    # The same tests, with the same outcomes, as with safetensors alone; the same tests read
    # through the loading entry points, ours this time.
    assert result["outcomes"] == pt_baseline["outcomes"], result["output"]
    assert result["deselected"] == pt_baseline["deselected"]
    assert sorted(result["reads"]) == sorted(pt_baseline["reads"]), (
        result["reads"],
        pt_baseline["reads"],
    )
    print(
        f"\nsafetensors {VERSION}'s PyTorch tests ({', '.join(result['files'])}): "
        f"{len(_passed(result))} passed with weight_inspect.torch loading, "
        f"{len(_passed(pt_baseline))} with safetensors; {len(result['reads'])} of them read "
        f"through the drop-in; {len(result['deselected'])} deselected (devices other than the CPU)"
    )
