"""`provision verify`'s reads (orchestrator/verify/backend.py): a command one host's checks ask
starts at once on the process's other hosts, so hosts' commands overlap; each command still
runs once per host; what a host was asked the last time runs as soon as its session opens.
Sessions here are stand-ins that record what they ran (no host)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.inventory import InventoryHost
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


def _opening(
    monkeypatch: pytest.MonkeyPatch,
    sessions: dict[str, _Recording],
    refused: Collection[str] = (),
) -> backend._Registry:
    """A registry whose sessions open as the recording stand-ins (or fail, for `refused`)."""

    def open_session(host: InventoryHost) -> _Recording:
        if host.name in refused:
            raise HostError("unreachable: connection refused", host=host.name)
        return sessions[host.name]

    monkeypatch.setattr(backend, "open_session", open_session)
    registry = backend._Registry()
    for n in sessions:
        host = InventoryHost(n, n, 22, "root", None, "ssh", (), (), become=False)
        registry.specs[n] = backend.HostSpec(host)
    return registry


def test_early_commands_run_in_order_when_the_session_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a host was asked the last time runs as soon as its session opens, before any
    check asks (the runner still detects); a check then gets that answer, not a second run."""
    sessions = {"a": _Recording("a")}
    registry = _opening(monkeypatch, sessions)
    try:
        registry.start({"a": ["uname -r", "dkms status", "nvidia-smi -L"]})
        assert sessions["a"].started.wait(5)  # before anything was read
        sessions["a"].release.set()
        registry.open_all(["a"])
        assert registry.read("a", "dkms status").stdout == b"a:dkms status"
        assert registry.read("a", "cat /proc/cmdline").stdout == b"a:cat /proc/cmdline"
    finally:
        sessions["a"].release.set()
        registry.close_all()
    assert sessions["a"].ran[:3] == ["uname -r", "dkms status", "nvidia-smi -L"]
    assert sorted(sessions["a"].ran) == sorted(set(sessions["a"].ran))  # each once
    assert list(registry.asked["a"]) == ["dkms status", "cat /proc/cmdline"]


def test_a_dropped_host_runs_no_more_early_commands_and_is_not_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = {"a": _Recording("a"), "b": _Recording("b"), "c": _Recording("c")}
    registry = _opening(monkeypatch, sessions, refused={"c"})
    early = ["uname -r", "dkms status"]
    registry.start({"a": early, "b": early, "c": early})
    try:
        assert sessions["b"].started.wait(5)  # b's first early command is under way
        registry.drop(["b", "c"])  # detection: b blocked by its plan, c unreachable
        sessions["b"].release.set()
        sessions["a"].release.set()
        registry.open_all(["a"])
        assert registry.read("a", "dkms status").stdout == b"a:dkms status"
        assert set(registry.sessions) == {"a"} and registry.failed == {}
        assert set(registry.specs) == {"a"}
    finally:
        for s in sessions.values():
            s.release.set()
        registry.close_all()
    assert sessions["b"].ran == ["uname -r"]  # the one under way ended; the rest cancelled
    assert sessions["a"].ran == early


def test_a_host_that_cannot_be_reached_fails_its_early_commands_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = _opening(monkeypatch, {"c": _Recording("c")}, refused={"c"})
    registry.start({"c": ["uname -r"]})
    registry.open_all(["c"])
    assert "connection refused" in registry.failed["c"].message
    with pytest.raises(HostError, match="connection refused"):
        registry.read("c", "uname -r")
    registry.close_all()


def test_what_each_host_was_asked_is_kept_for_the_next_run(tmp_path: Path) -> None:
    folder = tmp_path / "verify-reads"
    backend.write_early(folder, {"node/1": {"uname -r": None, "dkms status": None}, "b": {}})
    assert backend.read_early(folder, ["node/1", "b", "never"]) == {
        "node/1": ["uname -r", "dkms status"],
        "b": [],
    }
    assert sorted(p.name for p in folder.iterdir()) == ["b.json", "node%2F1.json"]
    assert folder.stat().st_mode & 0o777 == 0o700
    (folder / "b.json").write_text("{not json")
    assert backend.read_early(folder, ["b"]) == {}  # unreadable: read live, as the first time
