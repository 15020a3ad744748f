"""Ctrl-C during a run: name the hosts that were mid-change, and leave the run's report.

The report of an interrupted run (docs/report-schema.md, `interrupted: true`) records each
host as the live progress last saw it; it goes to `--report PATH` when given, and into the
run's artifact directory (`artifacts/<run>/report.json`) beside Ansible's own events.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
from pathlib import Path

from .progress import last_run

ARTIFACTS = Path("artifacts")


def _run_dir(started: dt.datetime | None) -> Path | None:
    """The artifact directory this run made (the newest one, not older than the run)."""
    if not ARTIFACTS.is_dir():
        return None
    dirs = [d for d in ARTIFACTS.iterdir() if d.is_dir()]
    if started is not None:
        since = started.timestamp() - 1
        dirs = [d for d in dirs if d.stat().st_mtime >= since]
    return max(dirs, key=lambda d: d.stat().st_mtime).resolve() if dirs else None


def interrupted_document(
    command: str,
    started: dt.datetime | None,
    hosts: dict[str, str],
    targets: tuple[str, ...],
    artifact_dir: Path | None,
) -> dict[str, object]:
    from .report import GPUPROV_VERSION, REPORT_SCHEMA, SCHEMA_VERSION

    finished = dt.datetime.now(dt.UTC)
    return {
        "schema": REPORT_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "gpuprov_version": GPUPROV_VERSION,
        "command": command,
        "interrupted": True,
        "started": started.isoformat(timespec="seconds") if started else None,
        "finished": finished.isoformat(timespec="seconds"),
        "artifact_dir": str(artifact_dir) if artifact_dir else None,
        "exit_code": 130,
        "hosts": {
            h: {"status": "interrupted" if h in hosts else "not_touched", "at": hosts.get(h)}
            for h in targets
        },
    }


def interrupted_report(args: argparse.Namespace) -> list[str]:
    """What to tell the user; writes the report where it can."""
    from .report import write_document

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
    run_dir = _run_dir(started) if progress is not None else None
    doc = interrupted_document(args.stage or "all", started, hosts, targets, run_dir)
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
