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
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import textwrap
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

# The frameworks other than NumPy, as the tests import them (and safetensors' modules for them).
FRAMEWORKS = ("torch", "tensorflow", "jax", "flax", "paddle", "mlx")

DROPIN = os.environ.get("WI_SAFETENSORS_DROPIN") == "1"


def _stub(name: str) -> None:
    stub = mock.MagicMock(name=name)
    stub.__name__ = name
    stub.__path__ = []
    stub.__spec__ = None
    sys.modules[name] = stub


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    by_module: dict[str, set[str]] = {}
    for item in items:
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


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The first failure (setup, call or teardown) decides; a pass needs the call's.
    decides = report.when == "call" or report.outcome != "passed"
    if decides and _outcomes.get(report.nodeid) in (None, "passed"):
        _outcomes[report.nodeid] = report.outcome


def _in_place() -> bool:
    wi = sys.modules.get("weight_inspect")
    return wi is not None and safetensors.safe_open is getattr(wi, "safe_open", None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("WI_SAFETENSORS_REPORT")
    if not out:
        return
    with open(out, "w") as f:
        json.dump(
            {
                "safetensors": safetensors.__version__,
                "safe_open": "weight_inspect" if _in_place() else "safetensors",
                "outcomes": _outcomes,
                "deselected": _deselected,
            },
            f,
            indent=1,
        )
