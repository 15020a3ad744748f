"""`dcgmi diag -r N -j` output (DCGM 4) -> its tests, per GPU, with DCGM's own error ids.

The document's shape is DCGM's (NVIDIA/DCGM dcgmi/Diag.cpp, HelperJsonBuildOutput; recorded in
tests/recorded/reference/dcgm.yaml `diag_json`): ``"DCGM Diagnostic".test_categories[]`` holds
each category's tests, each test its per-entity ``results`` (``status``, ``warnings`` with
``error_id``/``error_severity``) and a ``test_summary``; ``entity_groups`` and ``metadata`` sit
beside it. A run that could not start prints only ``{"DCGM Diagnostic": {version,
runtime_error}}``. Status words are DCGM's: Pass, Fail, Warn, Skip, Not Run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._text import ParseError

SOURCE = "dcgmi diag -j"
ROOT = "DCGM Diagnostic"
DiagStatus = Literal["pass", "fail", "warn", "skip", "not_run"]
# DCGM's words (HelperDisplayDiagResult) -> ours
_STATUS: Mapping[str, DiagStatus] = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "skip": "skip",
    "not run": "not_run",
}
GPU_GROUP_ID = 1  # entity_group_id of "GPU" (DCGM_FE_GPU)


@dataclass(frozen=True)
class DiagWarning:
    text: str
    error_id: int | None
    category: int | None  # dcgmErrorCategory_t
    severity: int | None  # dcgmErrorSeverity_t: 2 = isolate the GPU


@dataclass(frozen=True)
class DiagResult:
    """One test's result for one entity (`gpu` is None for a CPU or a test-wide summary)."""

    status: DiagStatus
    gpu: int | None
    entity_group: str | None
    warnings: tuple[DiagWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagTest:
    name: str  # DCGM's plugin name: software, memory, pcie, ...
    category: str  # Deployment, Hardware, Integration, Stress
    results: tuple[DiagResult, ...]
    summary: DiagResult | None  # test_summary; None when the test did not run


@dataclass(frozen=True)
class DiagEntity:
    gpu: int
    device_id: str | None
    serial: str | None


@dataclass(frozen=True)
class DiagReport:
    version: str | None
    driver: str | None
    tests: tuple[DiagTest, ...]
    gpus: tuple[DiagEntity, ...]
    runtime_error: str | None  # the run did not complete: DCGM's message

    @property
    def statuses(self) -> set[DiagStatus]:
        return {r.status for t in self.tests for r in (*t.results, *_opt(t.summary))}


def _opt(result: DiagResult | None) -> tuple[DiagResult, ...]:
    return (result,) if result is not None else ()


def parse_dcgm_diag(text: str, *, host: str | None = None) -> DiagReport:
    """Parse dcgmi's JSON; ParseError when it is not JSON of that shape."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        head = text.strip()[:80]
        raise ParseError(SOURCE, f"not JSON ({exc.msg}): {head!r}", host=host) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get(ROOT), dict):
        raise ParseError(SOURCE, f'no "{ROOT}" object at the top', host=host)
    diag = doc[ROOT]
    found = doc.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    version = _str(meta.get("version")) or _str(diag.get("version"))
    tests = tuple(
        _test(t, _str(cat.get("category")) or "", host)
        for cat in _list(diag.get("test_categories"), "test_categories", host)
        for t in _list(cat.get("tests"), "tests", host)
    )
    runtime_error = _str(diag.get("runtime_error"))
    if not tests and runtime_error is None:
        raise ParseError(SOURCE, "neither test_categories nor runtime_error", host=host)
    return DiagReport(
        version=version,
        driver=_str(meta.get("Driver Version Detected")),
        tests=tests,
        gpus=_entities(doc.get("entity_groups"), host),
        runtime_error=runtime_error,
    )


def _test(body: Any, category: str, host: str | None) -> DiagTest:
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise ParseError(SOURCE, f"a test without a name: {str(body)[:80]}", host=host)
    results = tuple(_result(r, host) for r in _list(body.get("results"), "results", host))
    summary = body.get("test_summary")
    return DiagTest(
        name=body["name"],
        category=category,
        results=results,
        summary=_result(summary, host) if isinstance(summary, dict) else None,
    )


def _result(body: Any, host: str | None) -> DiagResult:
    if not isinstance(body, dict):
        raise ParseError(SOURCE, f"a result that is not an object: {str(body)[:80]}", host=host)
    word = str(body.get("status", "")).strip().lower()
    if word not in _STATUS:
        raise ParseError(SOURCE, f"unknown status {body.get('status')!r}", host=host)
    group_id = body.get("entity_group_id")
    entity = body.get("entity_id")
    gpu = entity if group_id == GPU_GROUP_ID and _is_int(entity) else None
    return DiagResult(
        status=_STATUS[word],
        gpu=gpu,
        entity_group=_str(body.get("entity_group")),
        warnings=tuple(_warning(w, host) for w in _list(body.get("warnings"), "warnings", host)),
        info=tuple(str(i) for i in _list(body.get("info"), "info", host)),
    )


def _warning(body: Any, host: str | None) -> DiagWarning:
    if not isinstance(body, dict):
        raise ParseError(SOURCE, f"a warning that is not an object: {str(body)[:80]}", host=host)
    return DiagWarning(
        text=str(body.get("warning", "")).strip(),
        error_id=_int(body.get("error_id")),
        category=_int(body.get("error_category")),
        severity=_int(body.get("error_severity")),
    )


def _entities(groups: Any, host: str | None) -> tuple[DiagEntity, ...]:
    out = []
    for group in _list(groups, "entity_groups", host):
        if not isinstance(group, dict) or group.get("entity_group_id") != GPU_GROUP_ID:
            continue
        for entity in _list(group.get("entities"), "entities", host):
            if isinstance(entity, dict) and _is_int(entity.get("entity_id")):
                out.append(
                    DiagEntity(
                        entity["entity_id"],
                        _str(entity.get("device_id")),
                        _str(entity.get("serial_num")),
                    )
                )
    return tuple(out)


def _list(value: Any, key: str, host: str | None) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(SOURCE, f"{key} is not a list", host=host)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    return value if _is_int(value) else None


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
