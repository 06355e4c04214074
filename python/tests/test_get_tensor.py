"""`weight_inspect.get_tensor(url, name)`: a tensor of a model served by `weight-inspect serve`,
checked against its `X-Weight-SHA256`, as the NumPy array `Model.tensor` would give."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import gguf
import safetensors.numpy as stnp

import weight_inspect as wi
from test_mirror import _serve
from test_reading import _quant_tensors, _write_gguf


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(5)
    stnp.save_file(
        {
            "w": rng.standard_normal((64, 48)).astype(np.float32),
            "b": np.arange(48, dtype=np.int16),
            "scalar": np.array(3.5, dtype=np.float64),
        },
        str(folder / "m.safetensors"),
    )
    proc, url = _serve(str(folder / "m.safetensors"))
    try:
        yield f"{url}/models/m.safetensors", folder / "m.safetensors"
    finally:
        proc.kill()
        proc.wait()


def test_each_tensor_is_the_local_one(served: tuple[str, Path]) -> None:
    url, path = served
    with wi.open(path) as m:
        for name in m.keys():
            got = wi.get_tensor(url, name)
            want = m.tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(got, want), name
            assert not got.flags.writeable


def test_what_is_not_served_raises(served: tuple[str, Path]) -> None:
    url, _ = served
    with pytest.raises(wi.MissingTensorError):
        wi.get_tensor(url, "nope")
    with pytest.raises(KeyError):
        wi.get_tensor(url, "nope")
    with pytest.raises(wi.NotFoundError):
        wi.get_tensor(url.replace("m.safetensors", "other.safetensors"), "w")
    with pytest.raises(wi.NetworkError):
        wi.get_tensor("http://127.0.0.1:9/models/m.safetensors", "w")


def test_every_ggml_type_and_big_endian_gguf(tmp_path: Path) -> None:
    """GGUF files written by gguf-py, every ggml type and a big-endian one: each tensor
    through the server is the local one (dimensions reversed into NumPy's order, quantised
    types as raw rows, big-endian elements in their byte order)."""
    little, big = tmp_path / "q.gguf", tmp_path / "be.gguf"
    _write_gguf(little, _quant_tensors())
    _write_gguf(
        big,
        {"w": (np.arange(12, dtype=np.float32).reshape(3, 4), None)},
        endianess=gguf.GGUFEndian.BIG,
    )
    for path in (little, big):
        proc, url = _serve(str(path))
        try:
            with wi.open(path) as m:
                names = m.keys()
                assert names, f"{path} has tensors"
                for name in names:
                    got = wi.get_tensor(f"{url}/models/{path.name}", name)
                    want = m.tensor(name)
                    assert got.dtype == want.dtype and got.shape == want.shape, name
                    assert np.array_equal(got, want), name
        finally:
            proc.kill()
            proc.wait()
