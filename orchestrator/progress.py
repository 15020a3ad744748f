"""Live per-host progress of a playbook run, from ansible-runner's job events.

On a terminal: a rich table redrawn in place (host, current task, elapsed time, ok / changed /
failed counts). Elsewhere (CI logs, pipes): one line per changed, failed or unreachable task,
so a log shows what happened without the noise of every ok task.

A heartbeat: a task that runs longer than HEARTBEAT_S (a DKMS build: 10 minutes) shows the
host, the task and its elapsed time, in the table and, off a terminal, as a line every
HEARTBEAT_S, with the package being set up where the task's arguments name it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from . import timing

HEARTBEAT_S = 15.0
_PACKAGE_ACTIONS = ("apt", "dnf", "yum", "package", "pip")


def elapsed_text(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class _HostLine:
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    state: str = "waiting"
    busy: bool = False  # a task started and has not finished
    since: float = 0.0  # when the running task started (monotonic)
    package: str = ""  # the package(s) the running task installs, when its arguments say
    last_beat: float = 0.0


def _packages(data: Mapping[str, Any]) -> str:
    """The package a package-manager task sets up, from the event's task arguments (present
    only when Ansible is told to show them); "" when the event does not carry it."""
    action = str(data.get("task_action") or data.get("resolved_action") or "")
    if action.rsplit(".", 1)[-1] not in _PACKAGE_ACTIONS:
        return ""
    args = data.get("task_args")
    if not isinstance(args, Mapping):
        return ""
    name = args.get("name") or args.get("pkg") or args.get("deb")
    if isinstance(name, list | tuple):
        return ", ".join(str(n) for n in name[:4]) + (", ..." if len(name) > 4 else "")
    return str(name) if name else ""


_LAST: list[ApplyProgress] = []


def last_run() -> ApplyProgress | None:
    """The progress of this process's latest playbook run (what Ctrl-C reports on)."""
    return _LAST[-1] if _LAST else None


@dataclass
class ApplyProgress:
    """An ansible-runner event sink; use as a context manager around the run."""

    console: Console
    hosts: tuple[str, ...]
    lines: dict[str, _HostLine] = field(default_factory=dict)
    heartbeat_s: float = HEARTBEAT_S
    clock: Callable[[], float] = time.monotonic
    _live: Live | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _beat: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.lines = {h: _HostLine() for h in self.hosts}

    def __enter__(self) -> ApplyProgress:
        _LAST.append(self)
        del _LAST[:-1]
        if self.console.is_terminal:
            self._live = Live(
                console=self.console, refresh_per_second=2, get_renderable=self._table
            )
            self._live.__enter__()
        else:
            self._beat = threading.Thread(target=self._heartbeats, daemon=True)
            self._beat.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=1)
            self._beat = None
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def in_flight(self) -> dict[str, str]:
        """Hosts a task was running on (host -> task), and hosts already changed."""
        with self._lock:
            return {
                h: (f"running: {line.task}" if line.busy else f"{line.changed} changed")
                for h, line in self.lines.items()
                if line.busy or line.changed
            }

    def __call__(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        host = data.get("host")
        if not isinstance(host, str) or host not in self.lines:
            return
        with self._lock:
            self._event(kind, host, data)
        at = timing.event_time(event)
        timing.TIMINGS.record(host, "apply", at, at)
        role = data.get("role")
        if isinstance(role, str) and role:
            timing.TIMINGS.record_role(host, role, at, at)

    def _event(self, kind: str, host: str, data: Mapping[str, Any]) -> None:
        line = self.lines[host]
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        changed = isinstance(res, Mapping) and bool(res.get("changed"))
        if kind == "runner_on_start":
            line.task, line.state, line.busy = task, "running", True
            line.since = line.last_beat = self.clock()
            line.package = _packages(data)
            return
        if kind in (
            "runner_on_ok",
            "runner_on_failed",
            "runner_on_skipped",
            "runner_on_unreachable",
        ):
            line.busy = False
        if kind == "runner_on_ok":
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

    def beat(self) -> list[str]:
        """Lines for the tasks running longer than the heartbeat since their last line."""
        now = self.clock()
        out: list[str] = []
        with self._lock:
            for host, line in self.lines.items():
                if not line.busy or now - line.last_beat < self.heartbeat_s:
                    continue
                line.last_beat = now
                text = f"still running {host}: {line.task} ({elapsed_text(now - line.since)})"
                if line.package:
                    text += f", setting up {line.package}"
                out.append(text)
        return out

    def _heartbeats(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat_s)):
            for text in self.beat():
                self.console.print(escape(text), highlight=False)

    def _log(self, text: str) -> None:
        if self._live is None:
            self.console.print(text, highlight=False)

    def _table(self) -> Table:
        now = self.clock()
        table = Table(title="apply", expand=False)
        table.add_column("host", overflow="fold")
        table.add_column("task", overflow="ellipsis", no_wrap=True, ratio=1)
        table.add_column("time", justify="right", no_wrap=True)
        for col in ("ok", "changed", "failed"):
            table.add_column(col, justify="right", no_wrap=True)
        with self._lock:
            for host, line in self.lines.items():
                running = line.state == "running"
                task = line.task if running else f"{line.state}: {line.task}"
                if line.busy and line.package:
                    task += f" ({line.package})"
                took = now - line.since
                table.add_row(
                    escape(host),
                    escape(task),
                    elapsed_text(took) if line.busy and took >= self.heartbeat_s else "",
                    str(line.ok),
                    str(line.changed),
                    str(line.failed),
                )
        return table


# --- a stage over many hosts: one line and a count --------------------------------------------

PER_HOST_LINES = 16  # up to this many hosts, stages print a line per host as they always did


@dataclass
class StageProgress:
    """One line for a stage over many hosts (detect, validate, verify), not one per host: on
    a terminal redrawn in place ("validate: 137/500 hosts, 1 failed, 4s"), elsewhere printed
    every HEARTBEAT_S while the stage runs and once when it ends. Silent for PER_HOST_LINES
    hosts or fewer (`quiet`), where the stages print per host; thread-safe."""

    console: Console
    stage: str
    total: int
    failed_word: str = "failed"
    heartbeat_s: float = HEARTBEAT_S
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    failed: int = 0
    started: float = 0.0
    _live: Live | None = None
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def quiet(self) -> bool:
        return self.total <= PER_HOST_LINES

    def line(self) -> str:
        text = f"{self.stage}: {self.done}/{self.total} hosts"
        if self.failed:
            text += f", {self.failed} {self.failed_word}"
        return f"{text}, {elapsed_text(self.clock() - self.started)}"

    def __enter__(self) -> StageProgress:
        self.started = self._last = self.clock()
        if not self.quiet and self.console.is_terminal:
            self._live = Live(
                console=self.console, refresh_per_second=2, get_renderable=self._render
            )
            self._live.__enter__()
        return self

    def _render(self) -> str:
        return escape(self.line())

    def advance(self, failed: bool = False) -> None:
        """One host finished (`failed`: it failed this stage)."""
        with self._lock:
            self.done += 1
            self.failed += int(failed)
            now = self.clock()
            due = now - self._last >= self.heartbeat_s and self.done < self.total
            if due:
                self._last = now
        if due and self._live is None and not self.quiet:
            self.console.print(escape(self.line()), highlight=False)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None
        if not self.quiet and exc_type is None:
            self.console.print(escape(self.line()), highlight=False)
