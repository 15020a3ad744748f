"""Live per-host progress of a playbook run, from ansible-runner's job events.

On a terminal: a rich table redrawn in place (host, current task, ok / changed / failed
counts). Elsewhere (CI logs, pipes): one line per changed, failed or unreachable task, so a
log shows what happened without the noise of every ok task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table


@dataclass
class _HostLine:
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    state: str = "waiting"


@dataclass
class ApplyProgress:
    """An ansible-runner event sink; use as a context manager around the run."""

    console: Console
    hosts: tuple[str, ...]
    lines: dict[str, _HostLine] = field(default_factory=dict)
    _live: Live | None = None

    def __post_init__(self) -> None:
        self.lines = {h: _HostLine() for h in self.hosts}

    def __enter__(self) -> ApplyProgress:
        if self.console.is_terminal:
            self._live = Live(self._table(), console=self.console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def __call__(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        host = data.get("host")
        if not isinstance(host, str) or host not in self.lines:
            return
        line = self.lines[host]
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        changed = isinstance(res, Mapping) and bool(res.get("changed"))
        if kind == "runner_on_start":
            line.task, line.state = task, "running"
        elif kind == "runner_on_ok":
            line.ok += 1
            line.changed += int(changed)
            if changed:
                self._log(f"[yellow]changed[/] {escape(host)}: {escape(task)}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            line.failed += 1
            line.state = "failed"
            msg = str(res.get("msg", "")) if isinstance(res, Mapping) else ""
            self._log(f"[red]failed[/]  {escape(host)}: {escape(task)}: {escape(msg)}")
        elif kind == "runner_on_unreachable":
            line.state = "unreachable"
            self._log(f"[red]unreachable[/] {escape(host)}: {escape(task)}")
        else:
            return
        if self._live is not None:
            self._live.update(self._table())

    def _log(self, text: str) -> None:
        if self._live is None:
            self.console.print(text, highlight=False)

    def _table(self) -> Table:
        table = Table(title="apply", expand=False)
        for col in ("host", "task", "ok", "changed", "failed"):
            table.add_column(col)
        for host, line in self.lines.items():
            table.add_row(
                escape(host),
                escape(line.task if line.state == "running" else f"{line.state}: {line.task}"),
                str(line.ok),
                str(line.changed),
                str(line.failed),
            )
        return table
