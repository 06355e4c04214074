"""A pytest plugin for `test_safetensors_suite.py`: loaded (``-p safetensors_suite_plugin``) into
the pytest that runs safetensors' own tests, unpacked from its sdist.

- With ``WI_SAFETENSORS_DROPIN=1`` it puts ``weight_inspect.safe_open`` (and its
  ``_safe_open_handle``) in the place of safetensors' before any test module is imported:
  ``safetensors.safe_open``, ``safetensors._safe_open_handle`` and the name
  ``safetensors.numpy`` uses (``load_file``). Everything else is safetensors' own (``save``,
  ``serialize``, ``SafetensorError``: the tests catch safetensors' class, as its users do).
- The NumPy tests only are in scope: PyTorch, TensorFlow, JAX/Flax, Paddle and MLX are stood in
  for by inert stubs, so that a file mixing NumPy and PyTorch tests can be imported without
  them, and every test that needs one of them is deselected: its own body names one of them
  (``torch``, ``save_file_pt``, …, as its module imports them), or it opens with
  ``framework="pt"`` (…) the files its class's ``setUp`` made with one. A ``setUp`` that calls
  them does nothing (``PreadBackendTests.test_numpy_framework`` writes and reads its own file).
- ``WI_SAFETENSORS_REPORT`` names a JSON file it writes at the end: which tests ran, with their
  outcome, which were deselected, and whether the drop-in was in place.

With ``WI_SAFETENSORS_FRAMEWORK=pt`` (for ``test_safetensors_pt_suite.py``) it serves the
PyTorch tests instead (``test_pt_comparison.py``, ``test_pt_model.py``), with the real PyTorch
and no stub:

- With ``WI_SAFETENSORS_DROPIN=1`` the loading side is ours, as ``weight_inspect.torch.install()``
  makes it (without calling it): ``safetensors.torch.load_file``, ``load`` and ``safe_open``
  are ``weight_inspect.torch``'s, ``safetensors.safe_open`` is ``weight_inspect.safe_open``.
  Saving (``save``, ``save_file``, ``save_model``) stays safetensors'; ``load_model`` is
  safetensors' own, and reads through the ``load_file`` its module holds, ours.
- The tests that need a device other than the CPU are deselected, each with its reason
  (``PT_DESELECTED``).
- Each of those loading entry points is wrapped to record which tests called it (``reads`` in
  the report): the tests that read through the drop-in, named in both runs.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import sys
import textwrap
from collections.abc import Callable
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

# The frameworks other than NumPy, as the tests import them (and safetensors' modules for them).
FRAMEWORKS = ("torch", "tensorflow", "jax", "flax", "paddle", "mlx")

DROPIN = os.environ.get("WI_SAFETENSORS_DROPIN") == "1"
# "np" (the NumPy tests, the other frameworks stubbed) or "pt" (the PyTorch tests, with PyTorch).
FRAMEWORK = os.environ.get("WI_SAFETENSORS_FRAMEWORK", "np")
if FRAMEWORK not in ("np", "pt"):
    raise ValueError(f"WI_SAFETENSORS_FRAMEWORK={FRAMEWORK!r}: 'np' or 'pt'")

# The PyTorch tests (by test name, in test_pt_comparison.py) that need a device other than the
# CPU: none here (the CUDA build of PyTorch runs on the CPU). safetensors skips most of them
# itself when the device is missing; they are deselected so that what runs, and why the rest
# does not, is the same on every machine.
_CUDA = "a CUDA device (none here: CPU only)"
PT_DESELECTED = {
    "test_gpu": _CUDA,
    "test_gpu_default_device": _CUDA,
    "test_anonymous_accelerator": f"{_CUDA}: device=0 is cuda:0",
    "test_deserialization_device": f"{_CUDA}: torch.set_default_device('cuda:0')",
    "test_deserialization_safe_gpu": _CUDA,
    "test_deserialization_safe_gpu_slice": _CUDA,
    "test_deserialization_safe_device_1": "two CUDA devices (none here: CPU only)",
    "test_mps": "an Apple MPS device (none here: CPU only)",
    "test_mps_with_device_index": "an Apple MPS device (none here: CPU only)",
    "test_mps_fp4": "an Apple MPS device (none here: CPU only)",
    "test_mps_slice": "an Apple MPS device (none here: CPU only)",
    "test_npu": "an Ascend NPU (torch_npu; none here: CPU only)",
    "test_hpu": "an Intel Gaudi HPU (habana_frameworks; none here: CPU only)",
}


def _stub(name: str) -> None:
    stub = mock.MagicMock(name=name)
    stub.__name__ = name
    stub.__path__ = []
    stub.__spec__ = None
    sys.modules[name] = stub


if FRAMEWORK == "np":
    for _fw in FRAMEWORKS:
        _stub(_fw)
        _stub(f"safetensors.{_fw}")

import safetensors
import safetensors.numpy

if DROPIN:
    import weight_inspect

    setattr(safetensors, "safe_open", weight_inspect.safe_open)  # noqa: B010
    setattr(safetensors, "_safe_open_handle", weight_inspect._safe_open_handle)  # noqa: B010
    setattr(safetensors.numpy, "safe_open", weight_inspect.safe_open)  # noqa: B010

# The test that runs (its node id), and for each test the loading entry points it called.
_current: list[str] = []
_reads: dict[str, set[str]] = {}
# Each wrapped entry point ("safetensors.torch.load_file") and what it is ("module.qualname").
_entry_points: dict[str, str] = {}


def _recorded(where: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, recording each call under `where` for the test that runs."""

    @functools.wraps(function, updated=())  # a class's __dict__ is not the wrapper's
    def call(*args: Any, **kwargs: Any) -> Any:
        if _current:
            _reads.setdefault(_current[-1], set()).add(where)
        return function(*args, **kwargs)

    module = getattr(function, "__module__", None) or "?"
    _entry_points[where] = f"{module}.{getattr(function, '__qualname__', function)}"
    return call


if FRAMEWORK == "pt":
    import safetensors.torch

    if DROPIN:
        import weight_inspect.torch

        # What weight_inspect.torch.install() rebinds, rebound here without it.
        _pt_loading = {
            (safetensors, "safe_open"): weight_inspect.safe_open,
            (safetensors.torch, "safe_open"): weight_inspect.torch.safe_open,
            (safetensors.torch, "load_file"): weight_inspect.torch.load_file,
            (safetensors.torch, "load"): weight_inspect.torch.load,
        }
    else:
        _pt_loading = {
            (module, name): getattr(module, name)
            for module, name in [
                (safetensors, "safe_open"),
                (safetensors.torch, "safe_open"),
                (safetensors.torch, "load_file"),
                (safetensors.torch, "load"),
            ]
        }
    for (_module, _name), _function in _pt_loading.items():
        setattr(_module, _name, _recorded(f"{_module.__name__}.{_name}", _function))


def _is_framework_module(module: str) -> bool:
    root = module.split(".")[0]
    if root in FRAMEWORKS:
        return True
    return module.startswith("safetensors.") and module.split(".")[1] in FRAMEWORKS


def _framework_names(module: ModuleType) -> set[str]:
    """The names a test module binds to the other frameworks: ``torch``, ``load_file_pt``, …"""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_framework_module(alias.name):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and _is_framework_module(node.module):
            for alias in node.names:
                names.add(alias.asname or alias.name)
    return names


def _names_used(function: Any) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _frameworks_asked(function: Any) -> set[str]:
    """The frameworks other than NumPy a test asks safetensors for: ``framework="pt"``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    asked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "framework":
            value = node.value
            if isinstance(value, ast.Constant) and value.value not in ("np", "numpy"):
                asked.add(f"framework={value.value!r}")
    return asked


def _out_of_scope(item: pytest.Item, framework_names: set[str]) -> list[str]:
    """Why a test needs another framework than NumPy (empty: it does not): its body names one
    (``torch``, ``save_file_pt``, …), or it asks safe_open for one (``framework="pt"``) in a
    class whose ``setUp`` makes its files with one. (``framework="pt"`` alone, on a file that
    does not exist, needs no PyTorch: safetensors raises ``FileNotFoundError`` first.)"""
    why = sorted(_names_used(item.obj) & framework_names)  # type: ignore[attr-defined]
    setup = getattr(getattr(item, "cls", None), "setUp", None)
    framework_setup = inspect.isfunction(setup) and bool(_names_used(setup) & framework_names)
    if not why and framework_setup:
        why = sorted(_frameworks_asked(item.obj))  # type: ignore[attr-defined]
    return why


_deselected: dict[str, list[str]] = {}
_outcomes: dict[str, str] = {}


def _pt_out_of_scope(item: pytest.Item) -> list[str]:
    why = PT_DESELECTED.get(item.name)
    return [why] if why else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    by_module: dict[str, set[str]] = {}
    for item in items:
        if FRAMEWORK == "pt":
            used = _pt_out_of_scope(item)
        else:
            module = item.module  # type: ignore[attr-defined]
            fw = by_module.setdefault(module.__name__, _framework_names(module))
            used = _out_of_scope(item, fw)
        if used:
            _deselected[item.nodeid] = used
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    _current.append(item.nodeid)
    try:
        return (yield)
    finally:
        _current.pop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The first failure (setup, call or teardown) decides; a pass needs the call's.
    decides = report.when == "call" or report.outcome != "passed"
    if decides and _outcomes.get(report.nodeid) in (None, "passed"):
        _outcomes[report.nodeid] = report.outcome


def _in_place() -> bool:
    wi = sys.modules.get("weight_inspect")
    if wi is None:
        return False
    if FRAMEWORK == "pt":
        # Every loading entry point is a recording wrapper of weight_inspect's.
        wrapped = [
            getattr(getattr(module, name), "__wrapped__", None)
            for module, name in [
                (safetensors, "safe_open"),
                (safetensors.torch, "safe_open"),
                (safetensors.torch, "load_file"),
                (safetensors.torch, "load"),
            ]
        ]
        wit = sys.modules.get("weight_inspect.torch")
        return wit is not None and wrapped == [
            wi.safe_open, wit.safe_open, wit.load_file, wit.load
        ]
    return safetensors.safe_open is getattr(wi, "safe_open", None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("WI_SAFETENSORS_REPORT")
    if not out:
        return
    with open(out, "w") as f:
        json.dump(
            {
                "safetensors": safetensors.__version__,
                "safe_open": "weight_inspect" if _in_place() else "safetensors",
                "framework": FRAMEWORK,
                "outcomes": _outcomes,
                "deselected": _deselected,
                "pt_deselected": PT_DESELECTED if FRAMEWORK == "pt" else {},
                "reads": {k: sorted(v) for k, v in sorted(_reads.items())},
                "entry_points": _entry_points,
            },
            f,
            indent=1,
        )
