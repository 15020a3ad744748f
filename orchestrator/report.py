"""The run report: a closing per-host table and a versioned JSON document.

The JSON schema is documented in docs/report-schema.md; bump SCHEMA_VERSION on any change
that is not a pure addition. `provision plan --json` prints the plan document (each host's
ordered roles under `roles`); a full run writes the report document.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from . import __version__, timing
from .atomic import write_atomic
from .errors import EXIT_BAD_INPUT, EXIT_HOST_FAILED, EXIT_OK
from .facts import HostFacts
from .result import CheckResult

if TYPE_CHECKING:  # annotations only: `provision detect` does not import the planner
    from .apply import HostApplyStats
    from .plan import HostPlan

SCHEMA_VERSION = 1
GPUPROV_VERSION = __version__  # one source (orchestrator/__init__.py); no metadata scan
PLAN_SCHEMA = "gpuprov.plan"
REPORT_SCHEMA = "gpuprov.report"

HostStatus = Literal["ok", "failed", "unreachable", "blocked", "not_touched"]
StageState = Literal["done", "not_run", "not_available", "error"]


@dataclass(frozen=True)
class StageResult:
    """Validation or verification of one host: the checks, or why there are none."""

    state: StageState
    checks: tuple[CheckResult, ...] = ()
    note: str = ""  # why not run / not available / the error

    @property
    def failed(self) -> bool:
        return self.state == "error" or any(c.status == "fail" for c in self.checks)

    def summary(self) -> str:
        if self.state != "done":
            return self.state.replace("_", " ")
        counts = {
            s: sum(1 for c in self.checks if c.status == s)
            for s in ("pass", "fail", "warn", "skip")
        }
        return " ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checks"

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "note": self.note,
            "checks": [c.to_dict() for c in self.checks],
        }


NOT_RUN = StageResult("not_run")


@dataclass(frozen=True)
class HostReport:
    host: str
    facts: HostFacts | None = None
    detect_error: str | None = None
    plan: HostPlan | None = None
    apply: HostApplyStats | None = None
    validation: StageResult = NOT_RUN
    verification: StageResult = NOT_RUN

    @property
    def status(self) -> HostStatus:
        if self.detect_error is not None or (self.apply and self.apply.unreachable):
            return "unreachable"
        if self.plan is not None and self.plan.blocked:
            return "blocked"
        if self.apply is not None and not self.apply.touched:
            return "not_touched"  # the rollout stopped before this host's batch
        if self.apply is not None and not self.apply.succeeded:
            return "failed"
        if self.validation.failed or self.verification.failed:
            return "failed"
        return "ok"


@dataclass(frozen=True)
class RunReport:
    command: str  # the stage: all, plan, apply...
    hosts: tuple[HostReport, ...]
    check_mode: bool = False
    artifact_dir: str | None = None
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    finished: dt.datetime | None = None

    @property
    def exit_code(self) -> int:
        """1 when any host failed, was unreachable or was not reached by a stopped rollout;
        else 2 when any was blocked; else 0."""
        statuses = {h.status for h in self.hosts}
        if statuses & {"failed", "unreachable", "not_touched"}:
            return EXIT_HOST_FAILED
        if "blocked" in statuses:
            return EXIT_BAD_INPUT
        return EXIT_OK


# --- JSON -------------------------------------------------------------------------------


def _facts_dict(facts: HostFacts) -> dict[str, object]:
    return {
        "os": facts.os.pretty_name if facts.os else None,
        "kernel": facts.kernel,
        "arch": facts.arch or None,
        "secure_boot": facts.secure_boot,
        "driver": (
            {"version": facts.loaded_driver.version, "flavour": facts.loaded_driver.flavour}
            if facts.loaded_driver
            else None
        ),
        "gpu_count": len(facts.gpus),
        "docker": facts.runtime.docker_version,
        "toolkit": facts.runtime.toolkit_version,
        "errors": list(facts.errors),
        # what a stopped run left (issue 48): its causes, and the drain an unfinished upgrade
        # left (null: in service)
        "needs_recovery": list(facts.recovery),
        "drained": (facts.upgrade.drained_cause or None) if facts.upgrade else None,
    }


def plan_dict(plan: HostPlan) -> dict[str, object]:
    return {
        "simulated": plan.simulated,
        "arch": plan.arch or None,
        "repository": plan.repository or None,
        "gpus": [
            {"model": g.model, "sku": g.sku, "device_id": f"0x{g.device_id:04x}", "count": g.count}
            for g in plan.gpus
        ],
        "nvswitches": plan.nvswitches,
        "blocked": plan.blocked,
        "roles": [
            {"name": r.name, "vars": dict(r.vars), "reason": r.reason, "change": r.change}
            | ({"packages": dict(r.packages)} if r.packages else {})
            for r in plan.roles
        ],
        "warnings": list(plan.warnings),
        "blockers": list(plan.blockers),
    }


def _apply_dict(stats: HostApplyStats) -> dict[str, object]:
    return {
        "ok": stats.ok,
        "changed": stats.changed,
        "failed": stats.failed,
        "unreachable": stats.unreachable,
        "skipped": stats.skipped,
        "rescued": stats.rescued,
        "touched": stats.touched,
        "changed_tasks": list(stats.changed_tasks),
        "converged": list(stats.converged),
        "failed_tasks": list(stats.failed_tasks),
    }


def plan_document(plans: Mapping[str, HostPlan]) -> dict[str, object]:
    """`provision plan --json`: each host's plan, its ordered roles under `roles`."""
    return {
        "schema": PLAN_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "gpuprov_version": GPUPROV_VERSION,
        "hosts": {h: plan_dict(p) for h, p in sorted(plans.items())},
    }


def report_document(report: RunReport) -> dict[str, object]:
    hosts: dict[str, object] = {}
    for h in report.hosts:
        hosts[h.host] = {
            "status": h.status,
            "simulated": bool(h.facts and h.facts.simulated),
            "detect_error": h.detect_error,
            "facts": _facts_dict(h.facts) if h.facts else None,
            "plan": plan_dict(h.plan) if h.plan else None,
            "apply": _apply_dict(h.apply) if h.apply else None,
            "validation": h.validation.to_dict(),
            "verification": h.verification.to_dict(),
            "timings": timing.TIMINGS.host_dict(h.host),
        }
    statuses = [h.status for h in report.hosts]
    return {
        "schema": REPORT_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "gpuprov_version": GPUPROV_VERSION,
        "command": report.command,
        "check_mode": report.check_mode,
        "started": report.started.isoformat(timespec="seconds"),
        "finished": report.finished.isoformat(timespec="seconds") if report.finished else None,
        "artifact_dir": report.artifact_dir,
        "exit_code": report.exit_code,
        "summary": {
            s: statuses.count(s) for s in ("ok", "failed", "unreachable", "blocked", "not_touched")
        },
        "hosts": hosts,
    }


def write_document(path: str | os.PathLike[str], doc: Mapping[str, object]) -> Path:
    return write_atomic(path, json.dumps(doc, indent=2) + "\n")


# --- tables -----------------------------------------------------------------------------

LARGE_FLEET = 50  # more hosts than this: ok hosts with the same outcome share one row


def _plain(cell: str) -> str:
    return Text.from_markup(cell).plain


def emit_table(
    console: Console,
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    show_lines: bool = False,
) -> None:
    """On a terminal, a table as wide as the console allows, never breaking a word: each
    column is at least as wide as its longest word. Off a terminal (a pipe, a file, a CI log)
    always, and on a terminal too narrow for those widths, a compact layout: one block per row,
    `header: value` lines that are never wrapped by us (the cells are rich markup, escaped by
    the caller), so what a script or a log reads does not depend on a width."""
    plains = [[_plain(c) for c in row] for row in rows]
    widths = [
        max([len(h), *(max((len(w) for w in p[i].split()), default=0) for p in plains)])
        for i, h in enumerate(headers)
    ]
    if console.is_terminal and sum(widths) + 3 * len(headers) + 1 <= console.width:
        table = Table(title=title, title_justify="left", show_lines=show_lines)
        for h, w in zip(headers, widths, strict=True):
            table.add_column(h, min_width=w, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    console.print(title, highlight=False, soft_wrap=True)
    for row in rows:
        console.print(row[0], highlight=False, soft_wrap=True)
        for h, cell in zip(headers[1:], row[1:], strict=True):
            if _plain(cell):
                emit_line(console, f"{escape(h)}: {cell}", indent=2)


def emit_line(console: Console, markup: str, *, indent: int) -> None:
    """One indented line of a block: off a terminal as it is (never wrapped by us); on a
    terminal wrapped at its width with every continuation under the first word, so a long
    reason stays readable on a narrow console (COLUMNS=40)."""
    if not console.is_terminal:
        console.print(" " * indent + markup, highlight=False, soft_wrap=True)
        return
    console.print(Padding(Text.from_markup(markup), (0, 0, 0, indent)), highlight=False)


def _names(hosts: Sequence[str]) -> str:
    shown = ", ".join(hosts[:3])
    return shown + (f", ... ({len(hosts) - 3} more)" if len(hosts) > 3 else "")


def render_plans(console: Console, plans: Mapping[str, HostPlan], *, full: bool = False) -> None:
    """`provision plan`: one table per host (roles, reasons), then warnings and blockers; for
    more than LARGE_FLEET hosts (unless `full`), hosts with the same plan share a table. A
    summary line closes it."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for host, plan in sorted(plans.items()):
        key: tuple[object, ...] = (host,)
        if len(plans) > LARGE_FLEET and not full:
            roles = tuple(
                (r.name, r.change, r.reason, json.dumps(dict(r.vars), sort_keys=True, default=str))
                for r in plan.roles
            )
            key = (plan.gpu_summary, plan.nvswitches, plan.arch, plan.repository, roles)
            key += (plan.warnings, plan.blockers)
        groups.setdefault(key, []).append(host)
    for hosts in groups.values():
        plan = plans[hosts[0]]
        title = f"{hosts[0]}: " if len(hosts) == 1 else f"{len(hosts)} hosts ({_names(hosts)}): "
        title += plan.gpu_summary
        if plan.nvswitches:
            title += f", {plan.nvswitches} NVSwitch"
        if plan.arch:
            title += f", {plan.arch}"
        if plan.repository:
            title += f", driver from CUDA repository {plan.repository}"
        rows = [
            (
                role.name,
                "yes" if role.change else "no",
                escape(
                    role.reason
                    + (f"\npackages: {role.packages_line}" if role.packages_line else "")
                ),
            )
            for role in plan.roles
        ]
        emit_table(console, escape(title), ("role", "change", "reason"), rows)
        for w in plan.warnings:  # a pipe or a log: one line each; a terminal: wrapped
            emit_line(console, f"[yellow]warning[/]: {escape(w)}", indent=2)
        for b in plan.blockers:
            emit_line(console, f"[red]blocked[/]: {escape(b)}", indent=2)
    blocked = sum(1 for p in plans.values() if p.blocked)
    changing = sum(1 for p in plans.values() if not p.blocked and any(r.change for r in p.roles))
    console.print(
        f"{len(plans)} hosts: {len(plans) - blocked} planned, {blocked} blocked; "
        f"{changing} to change",
        highlight=False,
    )


def render_detect(
    console: Console,
    facts: Mapping[str, HostFacts],
    errors: Mapping[str, str],
    gpu_names: Mapping[int, str],
) -> None:
    """`provision detect`: what each host has (`gpu_names`: PCI device id -> model)."""
    headers = ("host", "OS", "kernel", "arch", "GPUs", "driver", "Docker", "toolkit")
    rows: list[tuple[str, ...]] = []
    for host in sorted({*facts, *errors}):
        if host in errors:
            rows.append(
                (escape(host), "[red]unreachable[/]", escape(errors[host]), "", "", "", "", "")
            )
            continue
        f = facts[host]
        counts: dict[str, int] = {}
        for gpu in f.gpus:
            name = gpu_names.get(gpu.device_id, f"unknown 10de:{gpu.device_id:04x}")
            counts[name] = counts.get(name, 0) + 1
        gpus = ", ".join(f"{n}x {m}" for m, n in counts.items()) or "none"
        if f.simulated:
            gpus += " (simulated)"
        driver = f.loaded_driver
        rows.append(
            (
                escape(host),
                escape(f.os.pretty_name if f.os else "?"),
                escape(f.kernel),
                escape(f.arch or "?"),
                escape(gpus),
                escape(f"{driver.version} {driver.flavour}" if driver else "none loaded"),
                escape(f.runtime.docker_version or "none"),
                escape(f.runtime.toolkit_version or "none"),
            )
        )
    emit_table(console, "provision detect", headers, rows)
    console.print(
        f"{len(rows)} hosts: {len(rows) - len(errors)} detected, {len(errors)} unreachable",
        highlight=False,
    )


def _plan_cell(plan: HostPlan | None) -> str:
    if plan is None:
        return "-"
    if plan.blocked:
        return "blocked: " + "; ".join(plan.blockers)
    from .planners.driver import summary

    parts = [summary(r) if r.name == "nvidia_driver" else r.name for r in plan.roles]
    return ", ".join(parts)


def _changed_cell(stats: HostApplyStats | None) -> str:
    if stats is None:
        return "-"
    if stats.unreachable:
        return "unreachable"
    if not stats.touched:
        return "not touched: the rollout stopped before its batch"
    text = f"{stats.changed} changed"
    if stats.changed_tasks:
        shown = stats.changed_tasks[:3]
        text += ": " + "; ".join(shown) + ("; ..." if len(stats.changed_tasks) > 3 else "")
    if stats.failed_tasks:
        text += f", {len(stats.failed_tasks)} failed (below)"
    if stats.converged:
        text += "; " + "; ".join(stats.converged)
    return text


def _gpus_cell(h: HostReport) -> str:
    if h.plan is not None:
        return h.plan.gpu_summary + (f", {h.plan.arch}" if h.plan.arch else "")
    if h.facts is not None:
        text = f"{len(h.facts.gpus)} GPU"
        return text + " (simulated)" if h.facts.simulated else text
    return h.detect_error or "-"


def _stage_cell(stage: StageResult) -> str:
    text = stage.summary()
    failed = [c.label for c in stage.checks if c.status == "fail"]
    if failed:
        text += ": " + ", ".join(failed[:5])
    if stage.state != "done" and stage.note:
        text += f" ({stage.note})"
    return text


def _problems(report: RunReport) -> list[str]:
    """What went wrong, in full, one line each (the table keeps to summaries)."""
    lines: list[str] = []
    for h in report.hosts:
        if h.detect_error:
            why = h.detect_error.removeprefix(f"{h.host}: ")  # "unreachable: ..." once
            lines.append(
                f"{h.host}: {why}"
                if why.startswith("unreachable")
                else f"{h.host}: unreachable: {why}"
            )
        if h.plan is not None:
            lines.extend(f"{h.host}: blocked: {b}" for b in h.plan.blockers)
        if h.apply is not None:
            lines.extend(f"{h.host}: failed task: {t}" for t in h.apply.failed_tasks)
        for stage, result in (("validation", h.validation), ("verification", h.verification)):
            if result.state == "error":
                lines.append(f"{h.host}: {stage} could not run: {result.note}")
            lines.extend(
                f"{h.host}: {stage} {c.label} failed: {c.diagnosis}"
                for c in result.checks
                if c.status == "fail"
            )
    return lines


_COLOURS = {
    "ok": "green",
    "failed": "red",
    "unreachable": "red",
    "blocked": "yellow",
    "not_touched": "yellow",
}


def _report_row(h: HostReport) -> tuple[str, ...]:
    return (
        escape(h.host),
        f"[{_COLOURS[h.status]}]{h.status}[/]",
        escape(_gpus_cell(h)),
        escape(_plan_cell(h.plan)),
        escape(_changed_cell(h.apply)),
        escape(_stage_cell(h.validation)),
        escape(_stage_cell(h.verification)),
    )


def _fleet_rows(hosts: Sequence[HostReport]) -> list[tuple[str, ...]]:
    """A large fleet: every host that is not ok has its row; ok hosts with the same outcome
    (GPUs, plan, changes, checks) share one row that counts them."""
    rows: list[tuple[str, ...]] = []
    groups: dict[tuple[str, ...], list[str]] = {}
    for h in hosts:
        row = _report_row(h)
        if h.status == "ok":
            groups.setdefault(row[1:], []).append(h.host)
        else:
            rows.append(row)
    for cells, names in groups.items():
        rows.append((escape(f"{len(names)} hosts: {_names(names)}"), *cells))
    return rows


def fleet_summary(report: RunReport) -> str:
    """One line under the tables: how the fleet fared."""
    statuses = [h.status for h in report.hosts]
    changed = sum(1 for h in report.hosts if h.apply is not None and h.apply.changed)
    parts = [f"{statuses.count('ok')} ok", f"{statuses.count('failed')} failed"]
    for status in ("unreachable", "blocked", "not_touched"):
        if statuses.count(status):
            parts.append(f"{statuses.count(status)} {status.replace('_', ' ')}")
    return f"{len(statuses)} hosts: {', '.join(parts)}; {changed} changed"


def render_report(console: Console, report: RunReport, *, full: bool = False) -> None:
    """The closing table: one row per host (for more than LARGE_FLEET hosts, unless `full`:
    ok hosts with the same outcome share a row), the problems in full, a summary line."""
    title = f"provision {report.command}" + (" (check mode)" if report.check_mode else "")
    headers = ("host", "status", "GPUs", "plan", "changed", "validation", "verification")
    large = len(report.hosts) > LARGE_FLEET and not full
    rows = _fleet_rows(report.hosts) if large else [_report_row(h) for h in report.hosts]
    emit_table(console, title, headers, rows, show_lines=not large)
    for line in _problems(report):
        console.print(escape(line), highlight=False, soft_wrap=True)
    if report.artifact_dir:
        console.print(f"artifacts: {escape(report.artifact_dir)}", highlight=False)
    console.print(escape(fleet_summary(report)), highlight=False)


def host_reports(
    hosts: Sequence[str],
    *,
    facts: Mapping[str, HostFacts] | None = None,
    detect_errors: Mapping[str, str] | None = None,
    plans: Mapping[str, HostPlan] | None = None,
    applied: Mapping[str, HostApplyStats] | None = None,
    validation: Mapping[str, StageResult] | None = None,
    verification: Mapping[str, StageResult] | None = None,
) -> tuple[HostReport, ...]:
    """Assemble per-host reports from what each stage produced (absent stage: not run)."""
    return tuple(
        HostReport(
            host=h,
            facts=(facts or {}).get(h),
            detect_error=(detect_errors or {}).get(h),
            plan=(plans or {}).get(h),
            apply=(applied or {}).get(h),
            validation=(validation or {}).get(h, NOT_RUN),
            verification=(verification or {}).get(h, NOT_RUN),
        )
        for h in hosts
    )
