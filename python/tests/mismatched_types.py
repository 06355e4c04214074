"""TypedDicts that each get something wrong against ``schema/types.schema.json``: what
``test_types_schema.py`` proves its check finds."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class RetryCauses(TypedDict):
    cut: int
    timeout: int
    network: int
    server: int
    throttled: int
    bad_answer: int
    cdn_refused: int
    mirror: float


class ConnectionPath(TypedDict):
    start: int
    peak: int
    now: int
    settled: Literal["fixed", "ceiling"] | None
    steps: list[tuple[float, int, int]]


class Verification(TypedDict):
    valid: bool
    format: str
    errors: list[str]
    warnings: list[int]
    covered_by: str
    extra: NotRequired[str]


class PlannedFile(TypedDict, total=False):
    path: str
    size: int
    etag: str
    local_path: str
    cached: bool
    partial_bytes: int
    sidecar: str


class Plan(TypedDict):
    repo: str
    revision: str
    commit: str
    folder: str
    files: list[PlannedFile]
    notice: str | None
    refused: list[dict[str, str]]
    offline: bool
    missing: NotRequired[list[str]]
    unreachable: NotRequired[str]
    witness: NotRequired[dict[str, str]]
