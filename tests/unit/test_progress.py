"""The live progress of a playbook run: a heartbeat for long tasks."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.progress import ApplyProgress


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
