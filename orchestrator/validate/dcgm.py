"""`provision validate --dcgm-level N`: NVIDIA DCGM's `dcgmi diag` on a host, as our checks.

Pure parts: :func:`diag_command` (the nested deadlines), :func:`mig_refusal` (what DCGM would
refuse, from the host's facts, before anything runs) and :func:`judge` (dcgmi's exit status and
JSON -> one CheckResult per DCGM test and GPU, named ``dcgm_<test>``, plus ``dcgm_diag`` for
the run). :func:`run_dcgm` runs it through the validation's Executor. Levels, deadlines, exit
codes and DCGM's words: ``dcgm.yaml`` beside this module (from tests/recorded/reference/).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ..catalog import SAFE_LOADER
from ..errors import CatalogError
from ..parsers._text import ParseError
from ..parsers.dcgm_diag import DiagReport, DiagResult, DiagTest, parse_dcgm_diag
from ..result import CheckResult, Status

if TYPE_CHECKING:
    from ..facts import HostFacts
    from .runner import Executor

DATA = Path(__file__).with_name("dcgm.yaml")
LEVELS = (1, 2, 3, 4)
RUN_CHECK = "dcgm_diag"
SIMULATED_NOTE = " (simulated: the lab's dcgmi test double ran, not DCGM)"
_NOT_INSTALLED = 127
_TIMED_OUT = 124


@dataclass(frozen=True)
class Level:
    runs: str
    duration: str
    deadline_s: int


@dataclass(frozen=True)
class DcgmData:
    levels: Mapping[int, Level]
    deadline_margin_s: int
    exit_codes: Mapping[int, str]
    priorities: Mapping[int, str]
    error_names: Mapping[int, str]
    mig_markers: tuple[str, ...]


@functools.cache
def load_data(path: Path = DATA) -> DcgmData:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        return DcgmData(
            levels={
                int(k): Level(str(v["runs"]), str(v["duration"]), int(v["deadline_s"]))
                for k, v in doc["levels"].items()
            },
            deadline_margin_s=int(doc["deadline_margin_s"]),
            exit_codes={int(k): str(v) for k, v in doc["exit_codes"].items()},
            priorities={int(k): str(v) for k, v in doc["priorities"].items()},
            error_names={int(k): str(v) for k, v in doc["error_names"].items()},
            mig_markers=tuple(str(m) for m in doc["mig_refusal_markers"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogError(
            f"DCGM data {path}: cannot load ({exc})",
            fix="restore orchestrator/validate/dcgm.yaml from the gpuprov release",
        ) from exc


def diag_command(level: int, data: DcgmData | None = None) -> tuple[str, float]:
    """The shell line and the executor's own limit: dcgmi's --timeout inside timeout(1)'s
    kill inside the connection's deadline, each a margin apart."""
    data = data or load_data()
    outer = data.levels[level].deadline_s
    inner = max(30, outer - data.deadline_margin_s)
    line = f"timeout --kill-after=10 {outer} dcgmi diag -r {level} -j --timeout {inner}\n"
    return line, outer + 60


def mig_refusal(facts: HostFacts) -> str | None:
    """DCGM's MIG rules (dcgm.diag.mig), from the facts: None when the diag may run."""
    modes = [g.mig_mode_current for g in facts.smi_gpus]
    enabled = [g.index for g in facts.smi_gpus if g.mig_mode_current == "Enabled"]
    if not enabled:
        return None
    if len(modes) > 1 and len(enabled) < len(modes):
        return (
            f"MIG is enabled on GPU {', '.join(map(str, enabled))} and disabled on the others: "
            "DCGM refuses a mix of MIG-enabled and MIG-disabled GPUs"
        )
    if len(modes) > 1:
        return (
            f"MIG is enabled on GPU {', '.join(map(str, enabled))}: DCGM refuses a diagnostic "
            "of more than one GPU when any has MIG enabled"
        )
    return None  # one GPU with MIG: DCGM runs it when compute instances exist (it says if not)


def refused(reason: str, level: int, *, host: str) -> list[CheckResult]:
    return [
        CheckResult(
            RUN_CHECK,
            "skip",
            f"level {level} refused",
            f"level {level}",
            "",
            f"{host}: dcgmi diag -r {level} not run: {reason}; fix: disable MIG for the DCGM "
            "run (mig_layout: disabled), or run dcgmi diag -i <gpu> on one MIG GPU with "
            "compute instances",
        )
    ]


def judge(
    rc: int,
    stdout: str,
    stderr: str,
    level: int,
    *,
    host: str,
    simulated: bool = False,
    data: DcgmData | None = None,
) -> list[CheckResult]:
    """dcgmi's exit status and JSON -> our checks."""
    data = data or load_data()
    note = SIMULATED_NOTE if simulated else ""
    deadline = data.levels[level].deadline_s
    if rc == _NOT_INSTALLED or "dcgmi: not found" in stderr or "dcgmi: command not found" in stderr:
        return [
            _run(
                "fail",
                "dcgmi absent",
                level,
                f"{host}: dcgmi is not installed; fix: add dcgm to gpuprov_roles and apply, "
                "or validate without --dcgm-level",
            )
        ]
    if rc == _TIMED_OUT or rc == 137:
        return [
            _run(
                "fail",
                f"exit {rc}",
                level,
                f"{host}: dcgmi diag -r {level} did not finish within {deadline} s (killed); a "
                "hung GPU or host engine: check `systemctl status nvidia-dcgm` and the kernel "
                f"log{note}",
            )
        ]
    try:
        report = parse_dcgm_diag(stdout, host=host)
    except ParseError as exc:
        last = next((ln for ln in reversed(stderr.strip().splitlines()) if ln.strip()), "")
        return [
            _run(
                "fail",
                f"exit {rc}",
                level,
                f"{host}: dcgmi diag -r {level} -j printed no diagnostic JSON (exit {rc}): "
                f"{exc.message}; {last[:200]}{note}",
            )
        ]
    if report.runtime_error is not None:
        text = " ".join(report.runtime_error.split())
        if any(m in text for m in data.mig_markers):
            return refused(f"DCGM refused: {text}{note}", level, host=host)
        return [
            _run(
                "fail",
                f"exit {rc}",
                level,
                f"{host}: dcgmi diag -r {level} could not run: {text}{note}",
            )
        ]
    results = [
        _check(test, result, host=host, data=data, note=note)
        for test in report.tests
        for result in _per_gpu(test)
    ]
    return [*results, _overall(rc, report, results, level, host=host, data=data, note=note)]


def _per_gpu(test: DiagTest) -> Sequence[DiagResult]:
    """The test's results per GPU; its summary where it has none (a host-wide test)."""
    gpus = [r for r in test.results if r.gpu is not None]
    if gpus:
        return gpus
    return [test.summary] if test.summary and test.summary.status != "not_run" else []


def _check(
    test: DiagTest, result: DiagResult, *, host: str, data: DcgmData, note: str
) -> CheckResult:
    status: Status = "skip" if result.status == "not_run" else result.status
    where = f"GPU {result.gpu}" if result.gpu is not None else "the host"
    diagnosis = ""
    if result.warnings:
        parts = []
        for w in result.warnings:
            name = data.error_names.get(w.error_id or -1, "")
            ident = f"error {w.error_id}" + (f" {name}" if name else "")
            priority = data.priorities.get(w.severity if w.severity is not None else -1, "")
            parts.append(f"{ident}: {w.text}" + (f" [{priority}]" if priority else ""))
        diagnosis = f"{host}: DCGM {test.name} on {where}: " + "; ".join(parts) + note
    elif status in ("fail", "warn"):
        diagnosis = f"{host}: DCGM {test.name} on {where}: {status} (no error text){note}"
    elif status == "skip":
        diagnosis = f"{host}: DCGM skipped {test.name} on {where}{note}"
    value = result.status.replace("_", " ") + (" (simulated)" if note else "")
    return CheckResult(f"dcgm_{test.name}", status, value, "pass", "", diagnosis, result.gpu)


def _run(status: Status, value: str, level: int, diagnosis: str) -> CheckResult:
    return CheckResult(RUN_CHECK, status, value, "exit 0", "", diagnosis)


def _overall(
    rc: int,
    report: DiagReport,
    results: Sequence[CheckResult],
    level: int,
    *,
    host: str,
    data: DcgmData,
    note: str,
) -> CheckResult:
    """The run itself: dcgmi's exit status, held against its own results."""
    failed = [r.label for r in results if r.status == "fail"]
    meaning = data.exit_codes.get(rc, f"DCGM status {rc - 256}" if rc > 128 else "unknown")
    version = f"DCGM {report.version}" if report.version else "DCGM"
    if rc == 0 and not failed:
        return CheckResult(RUN_CHECK, "pass", "exit 0", "exit 0", "", "")
    if rc == 0:
        text = f"dcgmi exited 0 but its JSON has failed tests ({', '.join(failed[:6])})"
    elif failed:
        text = f"exit {rc} ({meaning}): {', '.join(failed[:6])}"
    else:
        text = f"exit {rc} ({meaning}) with no failed test in its JSON"
    return _run(
        "fail",
        f"exit {rc}",
        level,
        f"{host}: {version} diag level {level}: {text}{note}",
    )


def run_dcgm(
    execute: Executor, facts: HostFacts, level: int, *, simulated: bool
) -> list[CheckResult]:
    """Refuse what DCGM refuses (MIG), else run dcgmi diag and judge its output."""
    reason = mig_refusal(facts)
    if reason is not None:
        return refused(reason, level, host=facts.host)
    line, limit = diag_command(level)
    out = execute(line, timeout=limit)
    return judge(out.rc, out.stdout, out.stderr, level, host=facts.host, simulated=simulated)
