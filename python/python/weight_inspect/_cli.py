"""The ``wi-fetch`` and ``weight-inspect`` commands that ``pip install weight-inspect`` brings.

Each runs the Rust tool itself (the same code as the binaries ``cargo install`` builds), from
the package's extension module, with the process's arguments; its exit code is the command's.
"""

from __future__ import annotations

import signal
import sys

from . import _native


def _run(program: str) -> None:
    # The tool handles Ctrl-C itself (a fetch stops cleanly and keeps what it has, exit 130);
    # Python's own handler would raise KeyboardInterrupt after the tool has returned.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli_main(program, sys.argv))


def wi_fetch() -> None:
    """``wi-fetch``: fetch files from the Hugging Face Hub into its cache."""
    _run("wi-fetch")


def weight_inspect() -> None:
    """``weight-inspect``: parse, verify, check manifests and serve GGUF and safetensors files."""
    _run("weight-inspect")
