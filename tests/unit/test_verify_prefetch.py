"""`provision verify`'s reads (orchestrator/verify/backend.py): a command one host's checks ask
starts at once on the process's other hosts, so hosts' commands overlap; each command still
runs once per host. Sessions here are stand-ins that record what they ran (no host)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from orchestrator.session import Output
from orchestrator.verify import backend


@dataclass
class _Recording:
    name: str
    ran: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)  # a command began
    release: threading.Event = field(default_factory=threading.Event)

    def run(self, command: str) -> Output:
        self.ran.append(command)
        self.started.set()
        assert self.release.wait(10), "never released"
        return Output(0, f"{self.name}:{command}".encode(), b"")

    def close(self) -> None:
        pass


def _registry(names: list[str]) -> tuple[backend._Registry, dict[str, _Recording]]:
    registry = backend._Registry()
    sessions = {n: _Recording(n) for n in names}
    for n in names:
        registry.specs[n] = None  # type: ignore[assignment]  # only counted here
        registry.sessions[n] = sessions[n]  # type: ignore[assignment]
    return registry, sessions


def test_a_command_asked_of_one_host_starts_on_the_others_before_they_ask() -> None:
    registry, sessions = _registry(["a", "b", "c"])
    sessions["a"].release.set()
    try:
        assert registry.read("a", "dkms status").stdout == b"a:dkms status"
        # b and c run it now, while nothing has asked them yet
        for name in ("b", "c"):
            assert sessions[name].started.wait(5)
        sessions["b"].release.set()
        sessions["c"].release.set()
        assert registry.read("b", "dkms status").stdout == b"b:dkms status"
        assert registry.read("c", "dkms status").stdout == b"c:dkms status"
        registry.read("a", "dkms status")  # asked again: the answer it has
        assert [s.ran for s in sessions.values()] == [["dkms status"]] * 3
    finally:
        for s in sessions.values():
            s.release.set()
        registry.close_all()


def test_what_no_check_asked_is_not_started_after_the_suite() -> None:
    registry, sessions = _registry(["a", "b"])
    sessions["a"].release.set()
    sessions["b"].release.set()
    registry.read("a", "uname -r")
    registry.close_all()
    assert sessions["b"].ran in ([], ["uname -r"])  # started before the end, or cancelled
    assert registry.sessions == {}


def test_sessions_opened_early_are_kept_for_the_hosts_kept_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`start_opening` (provision verify: while it detects), then `keep`: a left-out host's
    session is closed, also one that finishes opening after `keep`; its error is dropped."""
    from orchestrator.errors import HostError

    closed: list[str] = []
    slow = threading.Event()

    class _Opened(_Recording):
        def close(self) -> None:
            closed.append(self.name)

    def open_session(host: str) -> _Opened:
        if host == "late":
            assert slow.wait(10)
        if host == "down":
            raise HostError("unreachable", host=host)
        return _Opened(host)

    monkeypatch.setattr(backend, "open_session", open_session)
    registry = backend._Registry()
    for n in ("kept", "left", "late", "down"):
        registry.specs[n] = backend.HostSpec(n)  # type: ignore[arg-type]  # a name suffices
    registry.start_opening(sorted(registry.specs))
    registry.open_all(["down", "kept", "left"])
    assert set(registry.sessions) == {"kept", "left"} and set(registry.failed) == {"down"}
    registry.keep({"kept"})
    assert closed == ["left"] and registry.failed == {} and set(registry.specs) == {"kept"}
    slow.set()
    registry._opening["late"].join(5)
    assert sorted(closed) == ["late", "left"] and set(registry.sessions) == {"kept"}
    registry.close_all()
    assert sorted(closed) == ["kept", "late", "left"]


def test_reads_grow_with_the_hosts_not_with_their_square(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each host reads each command once: a command is spread to the other hosts once (and to
    sessions opened since), not again on every read. 300 hosts x 4 commands: the old walk of
    every host on every read made 360,000 submissions; now 2 per read at most."""
    names = [f"h{i:03d}" for i in range(300)]
    registry, sessions = _registry(names)
    for s in sessions.values():
        s.release.set()
    submitted = 0
    submit = registry._submit

    def counted(name: str, command: str) -> object:
        nonlocal submitted
        submitted += 1
        return submit(name, command)

    monkeypatch.setattr(registry, "_submit", counted)
    commands = ["uname -r", "dkms status", "nvidia-smi -L", "cat /proc/modules"]
    try:
        for name in names:
            for command in commands:
                assert registry.read(name, command).stdout == f"{name}:{command}".encode()
        assert submitted <= 2 * len(names) * len(commands)
        assert all(sorted(s.ran) == sorted(commands) for s in sessions.values())
    finally:
        registry.close_all()


def test_a_session_opened_later_gets_a_command_spread_before_it_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: dict[str, _Recording] = {}

    def open_session(host: str) -> _Recording:
        opened[host] = _Recording(host)
        return opened[host]

    monkeypatch.setattr(backend, "open_session", open_session)
    registry, sessions = _registry(["a"])
    registry.specs["late"] = backend.HostSpec("late")  # type: ignore[arg-type]
    sessions["a"].release.set()
    try:
        registry.read("a", "uname -r")  # spread to the open sessions: "late" is not open yet
        registry.session("late")  # opened now (as a test of "late" would open it)
        opened["late"].release.set()
        registry.read("a", "uname -r")  # asked again: the new session gets it too
        assert opened["late"].started.wait(5) and opened["late"].ran == ["uname -r"]
        assert sessions["a"].ran == ["uname -r"]
    finally:
        registry.close_all()


def test_sessions_open_at_most_open_at_once_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's hosts all opened at once: at 500 test-double hosts (2 processes, 250 each)
    436 sessions timed out before their shell answered (docs/benchmarks.md, 2026-12-06). At
    most OPEN_AT_ONCE start together; every host is still opened."""
    lock = threading.Lock()
    now, most = [0], [0]

    def open_session(host: str) -> _Recording:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.01)
        with lock:
            now[0] -= 1
        return _Recording(host)

    monkeypatch.setattr(backend, "open_session", open_session)
    registry = backend._Registry()
    names = [f"h{i}" for i in range(4 * backend.OPEN_AT_ONCE)]
    for n in names:
        registry.specs[n] = backend.HostSpec(n)  # type: ignore[arg-type]  # a name suffices
    registry.open_all(names)
    assert set(registry.sessions) == set(names)
    assert 1 < most[0] <= backend.OPEN_AT_ONCE, most[0]
    registry.close_all()
