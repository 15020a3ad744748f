"""The live progress of a playbook run: a heartbeat for long tasks."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.progress import PER_HOST_LINES, ApplyProgress, StageProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _start(p: ApplyProgress, host: str, task: str, **extra: object) -> None:
    p({"event": "runner_on_start", "event_data": {"host": host, "task": task, **extra}})


def test_a_task_longer_than_15_s_shows_host_task_and_elapsed_time() -> None:
    clock = Clock()
    p = ApplyProgress(Console(file=io.StringIO()), ("a", "b"), clock=clock)
    _start(p, "a", "nvidia_driver : Install the driver packages")
    _start(p, "b", "docker : Install Docker")
    clock.now += 10
    assert p.beat() == []  # not yet: short tasks stay quiet
    p({"event": "runner_on_ok", "event_data": {"host": "b", "task": "docker : Install Docker"}})
    clock.now += 65
    assert p.beat() == ["still running a: nvidia_driver : Install the driver packages (1m 15s)"]
    assert p.beat() == []  # one line per heartbeat period, not per call
    clock.now += 15
    assert p.beat()[0].endswith("(1m 30s)")


def test_the_package_being_set_up_is_shown_when_the_event_carries_it() -> None:
    clock = Clock()
    p = ApplyProgress(Console(file=io.StringIO()), ("a",), clock=clock)
    _start(
        p,
        "a",
        "Install",
        task_action="ansible.builtin.apt",
        task_args={"name": ["nvidia-dkms-580-open", "nvidia-utils-580"]},
    )
    clock.now += 20
    assert p.beat() == [
        "still running a: Install (20s), setting up nvidia-dkms-580-open, nvidia-utils-580"
    ]


def test_the_table_shows_the_elapsed_time_of_a_long_task() -> None:
    clock = Clock()
    out = io.StringIO()
    p = ApplyProgress(Console(file=out, width=100), ("node-1",), clock=clock)
    _start(p, "node-1", "nvidia_driver : Build the kernel modules")
    clock.now += 754
    Console(file=out, width=100).print(p._table())
    assert "12m 34s" in out.getvalue() and "Build the kernel modules" in out.getvalue()


def test_off_a_terminal_the_heartbeat_prints_lines() -> None:
    out = io.StringIO()
    p = ApplyProgress(Console(file=out, width=200), ("a",), heartbeat_s=0.05)
    with p:
        _start(p, "a", "Build DKMS")
        time.sleep(0.5)
    assert "still running a: Build DKMS" in out.getvalue()


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_a_stage_over_500_hosts_is_one_line_and_a_count() -> None:
    console, out = _plain_console()
    now = [0.0]
    with StageProgress(console, "validate", 500, clock=lambda: now[0]) as stage:
        for i in range(500):
            now[0] = i * 0.01  # 5 s in all: no heartbeat line (15 s) before the end
            stage.advance(failed=i in (7, 99))
    assert out.getvalue().splitlines() == ["validate: 500/500 hosts, 2 failed, 4s"]


def test_a_long_stage_says_where_it_is_every_heartbeat() -> None:
    console, out = _plain_console()
    now = [0.0]
    with StageProgress(console, "detect", 100, "unreachable", clock=lambda: now[0]) as stage:
        for i in range(100):
            now[0] = i * 0.4  # 40 s in all
            stage.advance(failed=i == 3)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "detect: 100/100 hosts, 1 unreachable, 39s"
    assert 2 <= len(lines) <= 3 and lines[0].startswith("detect: ") and "/100 hosts" in lines[0]


def test_a_small_stage_prints_no_stage_line() -> None:
    console, out = _plain_console()
    with StageProgress(console, "verify", PER_HOST_LINES) as stage:
        assert stage.quiet
        for _ in range(PER_HOST_LINES):
            stage.advance()
    assert out.getvalue() == ""
