"""Ctrl-C or SIGTERM during a run: name the hosts that were mid-change, and leave the report.

The report of an interrupted run (docs/report-schema.md, `interrupted: true`) records each
host as the live progress last saw it, and, for a host inside a driver upgrade, the upgrade's
step and whether the run left it drained (from the run's job events: the step files of
roles/driver_upgrade the host's tasks came from); it goes to `--report PATH` when given, and
into the run's artifact directory (`artifacts/<run>/report.json`) beside Ansible's own events.
By then Ansible's process tree has ended (orchestrator/watchdog.py).

A run stopped in validate or verify (issue 48: it left `"hosts": {}` and no JUnit, and after
an apply said "mid-change") writes the full report of what it knows instead: the pipeline
records each stage as it starts (`stage_started`) with the hosts' facts and plans
(`PartialRun`); hosts that finished keep their results, the others get an `error` result
"interrupted", and the JUnit file (`--junit`) is written from the same report.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .progress import last_run

if TYPE_CHECKING:
    from .report import RunReport, StageResult

_STEP_FILE = re.compile(r"/driver_upgrade/tasks/step-([a-z-]+)\.yml:")
# the upgrade's steps after the drain and before the undrain (roles/driver_upgrade/vars)
_DRAINED_STEPS = (
    "wait-jobs", "stop-clients", "install", "start-clients", "refresh-runtime", "validate",
)  # fmt: skip


# host -> "drained by an unfinished upgrade to X since T": what detection found before the
# run (orchestrator/pipeline.py sets it): a resumed upgrade's drain happened in an earlier run
DRAINED_AT_START: dict[str, str] = {}


def _run_dir(started: dt.datetime | None, artifacts: str | None) -> Path | None:
    """The artifact directory this run made (orchestrator/apply.py remembers it), else the
    newest one not older than the run."""
    from .apply import LAST_RUN_DIR, artifacts_root

    if LAST_RUN_DIR:
        return LAST_RUN_DIR[-1]
    root = artifacts_root(artifacts)
    if not root.is_dir():
        return None
    dirs = [d for d in root.iterdir() if d.is_dir()]
    if started is not None:
        since = started.timestamp() - 1
        dirs = [d for d in dirs if d.stat().st_mtime >= since]
    return max(dirs, key=lambda d: d.stat().st_mtime).resolve() if dirs else None


@dataclass
class PartialRun:
    """What a run knows once its hosts are detected and planned (pipeline.py records it), and
    the validate or verify stage under way, if any, with the results of its finished hosts."""

    hosts: tuple[str, ...]
    facts: Mapping[str, Any]
    detect_errors: Mapping[str, str]
    plans: Mapping[str, Any]
    applied: Mapping[str, Any] = field(default_factory=dict)
    artifact_dir: str | None = None
    stage: str = ""  # "validate" / "verify" while one runs
    running: tuple[str, ...] = ()  # the stage's hosts
    validation: dict[str, StageResult] = field(default_factory=dict)
    verification: dict[str, StageResult] = field(default_factory=dict)

    def report(self, command: str, signal_name: str) -> RunReport:
        from .report import RunReport, StageResult, host_reports

        stopped = StageResult("error", note=f"interrupted ({signal_name}) before it finished")
        results = self.validation if self.stage == "validate" else self.verification
        done = {**results, **{h: stopped for h in self.running if h not in results}}
        reports = host_reports(
            self.hosts,
            facts=self.facts,
            detect_errors=self.detect_errors,
            plans=self.plans,
            applied=self.applied,
            validation=done if self.stage == "validate" else self.validation,
            verification=done if self.stage == "verify" else self.verification,
        )
        return RunReport(command, reports, artifact_dir=self.artifact_dir)


PARTIAL: list[PartialRun] = []  # this process's run, once planned (pipeline.py)


def run_planned(run: PartialRun) -> PartialRun:
    PARTIAL[:] = [run]
    return run


def stage_started(stage: str, hosts: tuple[str, ...]) -> dict[str, StageResult]:
    """Record that `stage` runs on `hosts`; returns the dict its results go into as each
    host finishes (a throwaway one when no run was recorded)."""
    if not PARTIAL:
        return {}
    run = PARTIAL[-1]
    run.stage, run.running = stage, hosts
    return run.validation if stage == "validate" else run.verification


def stage_ended() -> None:
    if PARTIAL:
        PARTIAL[-1].stage, PARTIAL[-1].running = "", ()


@dataclass(frozen=True)
class UpgradeSeen:
    """What a run's events say of one host's driver upgrade."""

    step: str  # the last upgrade step a task of this host came from ("" outside the role)
    drained: bool  # the drain step completed and the undrain did not


def upgrade_steps(run_dir: Path) -> dict[str, UpgradeSeen]:
    """host -> the driver upgrade step its tasks reached, from ansible-runner's job events."""
    events = []
    for path in (run_dir / "ansible" / "job_events").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            events.append(json.loads(path.read_text(encoding="utf-8")))
    events.sort(key=lambda e: int(e.get("counter", 0)) if isinstance(e, Mapping) else 0)
    step: dict[str, str] = {}
    drained: dict[str, bool] = {}
    for event in events:
        data = event.get("event_data") or {}
        host, where = data.get("host"), str(data.get("task_path") or "")
        found = _STEP_FILE.search(where)
        if not isinstance(host, str) or found is None:
            continue
        name, kind = found.group(1), str(event.get("event", ""))
        step[host] = name
        if name in _DRAINED_STEPS or (name == "drain" and kind == "runner_on_ok"):
            drained[host] = True
        if name == "undrain" and kind == "runner_on_ok":
            drained[host] = False
    return {h: UpgradeSeen(s, drained.get(h, False)) for h, s in step.items()}


def interrupted_document(
    command: str,
    started: dt.datetime | None,
    hosts: dict[str, str],
    targets: tuple[str, ...],
    artifact_dir: Path | None,
    upgrades: Mapping[str, UpgradeSeen] | None = None,
    signal_name: str = "SIGINT",
) -> dict[str, object]:
    from .report import GPUPROV_VERSION, REPORT_SCHEMA, SCHEMA_VERSION

    finished = dt.datetime.now(dt.UTC)
    return {
        "schema": REPORT_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "gpuprov_version": GPUPROV_VERSION,
        "command": command,
        "interrupted": True,
        "signal": signal_name,
        "started": started.isoformat(timespec="seconds") if started else None,
        "finished": finished.isoformat(timespec="seconds"),
        "artifact_dir": str(artifact_dir) if artifact_dir else None,
        "exit_code": 130,
        "hosts": {h: _host(h, hosts, upgrades or {}) for h in targets},
    }


def _host(h: str, hosts: Mapping[str, str], upgrades: Mapping[str, UpgradeSeen]) -> object:
    out: dict[str, object] = {
        "status": "interrupted" if h in hosts else "not_touched",
        "at": hosts.get(h),
    }
    seen = upgrades.get(h)
    if seen is not None:
        out["upgrade_step"] = seen.step
        out["drained"] = seen.drained
    return out


def _stage_report(args: argparse.Namespace, run: PartialRun, signal_name: str) -> list[str]:
    """A run stopped in validate or verify: its report and JUnit from what it knows."""
    from .report import report_document, write_document

    command = args.stage or "all"
    report = run.report(command, signal_name)
    finished = [
        h
        for h in run.running
        if h in (run.validation if run.stage == "validate" else run.verification)
    ]
    lines = [
        f"interrupted during {run.stage}: {len(finished)} of {len(run.running)} host(s) "
        f"finished it; the others are reported as interrupted"
        + ("; the apply had finished, no host was mid-change" if run.applied else "")
    ]
    doc = report_document(report) | {"interrupted": True, "signal": signal_name, "exit_code": 130}
    written = []
    folder = Path(run.artifact_dir) if run.artifact_dir else None
    for path in (getattr(args, "report", None), folder / "report.json" if folder else None):
        if path:
            try:
                written.append(str(write_document(path, doc)))
            except OSError as exc:
                lines.append(f"the report could not be written to {path}: {exc.strerror or exc}")
    junit = getattr(args, "junit", None)
    if junit:
        from .validate.junit import write_junit

        try:
            write_junit(junit, report)
            written.append(str(junit))
        except OSError as exc:
            lines.append(f"the JUnit file could not be written to {junit}: {exc.strerror or exc}")
    if written:
        lines.append(f"the run's report: {', '.join(written)}")
    return lines


def interrupted_report(args: argparse.Namespace, signal_name: str = "SIGINT") -> list[str]:
    """What to tell the user; writes the report where it can."""
    from .report import write_document

    if PARTIAL and PARTIAL[-1].stage:
        return _stage_report(args, PARTIAL[-1], signal_name)
    progress = last_run()
    started = getattr(args, "started", None)
    lines = []
    if progress is None:
        lines.append("interrupted before any host was changed")
        hosts: dict[str, str] = {}
        targets: tuple[str, ...] = ()
    else:
        hosts, targets = progress.in_flight(), progress.hosts
        if hosts:
            lines.append(
                "interrupted; hosts mid-change (may be half-applied): "
                + "; ".join(f"{h} ({what})" for h, what in sorted(hosts.items()))
            )
        else:
            lines.append("interrupted; no host had changed yet")
    artifacts = getattr(args, "artifacts_dir", None)
    run_dir = _run_dir(started, artifacts) if progress is not None else None
    upgrades = upgrade_steps(run_dir) if run_dir is not None else {}
    for h in targets:
        if h in DRAINED_AT_START and not (h in upgrades and upgrades[h].step == "undrain"):
            upgrades[h] = UpgradeSeen(upgrades[h].step if h in upgrades else "", True)
    for h, seen in sorted(upgrades.items()):
        if seen.drained:
            lines.append(
                f"{h} is drained mid-upgrade (step {seen.step or 'not started'}): run "
                "`provision apply` again to finish the upgrade and undrain it"
            )
    doc = interrupted_document(
        args.stage or "all", started, hosts, targets, run_dir, upgrades, signal_name
    )
    written = []
    for path in (getattr(args, "report", None), run_dir / "report.json" if run_dir else None):
        if path:
            with contextlib.suppress(OSError):
                written.append(str(write_document(path, doc)))
    if written:
        lines.append(f"the run's report: {', '.join(written)}")
    if run_dir is not None:
        lines.append(f"artifacts: {run_dir}; run `provision apply` again to converge them")
    return lines
