"""The package's OpenTelemetry exporter: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set when it is
imported, the library's spans reach a collector (a receiver on loopback here, decoding OTLP with
the official protobuf definitions) by the time the interpreter exits; without a collector the
same program runs as before."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp

from conftest import in_ci

try:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service
except ImportError:  # the decoder is a test dependency (.ci/run installs it)
    if in_ci():
        raise
    pytest.skip("opentelemetry-proto is not installed", allow_module_level=True)

PROGRAM = """
import sys
import weight_inspect as wi
with wi.open(sys.argv[1]) as m:
    print(float(m.tensor("w").sum()))
wi.inspect(sys.argv[1], verify=True)
"""


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if self.path == "/v1/traces":
            _Receiver.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    stnp.save_file({"w": np.arange(1024, dtype=np.float32)}, str(path))
    return path


def _run(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(path)], capture_output=True, text=True, env=full, timeout=60, check=False
    )


def test_spans_reach_the_collector(tmp_path: Path, receiver: str) -> None:
    path = _model(tmp_path)
    r = _run(path, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(float(np.arange(1024, dtype=np.float32).sum()))
    # The exporter flushed at exit: every batch was posted before the interpreter ended.
    assert _Receiver.bodies, "no spans were sent"
    spans = []
    services = set()
    for body in _Receiver.bodies:
        req = trace_service.ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for a in rs.resource.attributes:
                if a.key == "service.name":
                    services.add(a.value.string_value)
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
    assert services == {"weight_inspect"}
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    for name in ("open", "open_file", "parse_header", "verify", "verify_tensor"):
        assert name in by_name, (name, sorted(by_name))
    ids = {s.span_id: s for s in spans}
    # open_file is a child of open, parse_header of open_file: one trace.
    opened = by_name["open_file"][0]
    assert ids[opened.parent_span_id].name == "open"
    parsed = [s for s in by_name["parse_header"] if s.parent_span_id == opened.span_id]
    assert parsed and parsed[0].trace_id == opened.trace_id
    attrs = {a.key: a.value.string_value for a in by_name["verify_tensor"][0].attributes}
    assert attrs.get("name") == "w"


def test_without_a_collector_nothing_changes(tmp_path: Path) -> None:
    path = _model(tmp_path)
    # A port nothing listens on: the batch is dropped, the program ends normally.
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = _run(path, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(float(np.arange(1024, dtype=np.float32).sum()))
    assert "Traceback" not in r.stderr
