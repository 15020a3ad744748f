"""testinfra's backend for `provision verify`: every command of a host on its one session.

`provision verify` (orchestrator/verify/runner.py) hands the suite, per host, how to reach it
(the inventory host as orchestrator/inventory.py read it: address, port, user, key, known-hosts
files, jump hosts, become and its password) and its variables. The suite then names its hosts
`gpuprov://NAME`; this backend runs each command of host NAME on that host's session
(orchestrator/session.py: one `ssh`, one sudo, for the whole suite), opened the first time a
test asks and closed when pytest ends. The tests see testinfra's usual `host` (`run`, `file`,
`service`, `exists`, ...), and the JUnit names them as before: `test_x[ansible://NAME]`.

Used directly (`pytest orchestrator/verify/suite --hosts=ansible://...`), the suite keeps
testinfra's own backends; this one is only what `provision verify` selects.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from testinfra.backend import BACKENDS, base

from ..errors import HostError
from ..inventory import InventoryHost
from ..session import Output, Session, open_session
from ..verify.runner import SCHEME

NAME = SCHEME
PREFETCH_THREADS = 32  # commands of other hosts run ahead, at most this many at once
# sessions being opened at once by one pytest process (connection, authentication, sudo):
# all of a process's hosts at once (250 each of 2 processes) did not all start against 500
# test-double hosts on 2026-12-06 (436 timed out: docs/benchmarks.md); detection opens 64
OPEN_AT_ONCE = 32


@dataclass(frozen=True)
class HostSpec:
    """What the suite knows of one host under `provision verify`."""

    host: InventoryHost
    variables: Mapping[str, Any] = field(default_factory=dict)


class _Registry:
    """The hosts of this pytest process and their sessions (opened once, on first use)."""

    def __init__(self) -> None:
        self.specs: dict[str, HostSpec] = {}
        self.sessions: dict[str, Session] = {}
        self.failed: dict[str, HostError] = {}
        self.outputs: dict[tuple[str, str], Future[Output]] = {}
        self.trace: list[tuple[str, float, str]] | None = None  # (host, seconds, command)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._opening: dict[str, threading.Thread] = {}
        self._open_slots = threading.BoundedSemaphore(OPEN_AT_ONCE)
        self._closed = False
        self._opened = 0  # sessions ever added: a command is spread again when it grew
        self._spread: dict[str, int] = {}  # command -> self._opened when it was last spread

    def session(self, name: str) -> Session:
        with self._lock:
            if name in self.failed:
                raise self.failed[name]
            if name not in self.sessions:
                try:
                    self.sessions[name] = open_session(self.specs[name].host)
                    self._opened += 1
                except HostError as exc:
                    self.failed[name] = exc
                    raise
            return self.sessions[name]

    def read(self, name: str, command: str) -> Output:
        """`command`'s output on host `name`, run once per suite run: the suite only reads,
        and checks one moment of the host; several checks ask the same (the loaded driver,
        `nvidia-smi -L`, the packages), and asking again only costs the host's time.

        The same command starts at once on this process's other open hosts too: every host
        is asked the same questions, one host after the other (pytest runs a module's tests
        for one host, then for the next), so each host's answers are ready or under way when
        its turn comes, and the hosts' commands overlap instead of adding up. A command
        another host's checks never ask costs that host's time only: the suite only reads.
        It is spread once, and again only to sessions opened since: walking every host on
        every read made a process's reads grow with the square of its hosts."""
        with self._lock:
            wanted = self._submit(name, command)
            if self._spread.get(command) != self._opened:
                self._spread[command] = self._opened
                for other in self.sessions:
                    if other != name:
                        self._submit(other, command)
        return wanted.result()

    def _submit(self, name: str, command: str) -> Future[Output]:
        """(Under the lock.) The future of `command` on `name`, started if it is new."""
        key = (name, command)
        if key not in self.outputs:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(1, min(len(self.specs), PREFETCH_THREADS)),
                    thread_name_prefix="verify-read",
                )
            self.outputs[key] = self._pool.submit(self._run, name, command)
        return self.outputs[key]

    def _run(self, name: str, command: str) -> Output:
        started = time.monotonic()
        out = self.session(name).run(command)
        if self.trace is not None:
            self.trace.append((name, time.monotonic() - started, command))
        return out

    def start_opening(self, names: list[str]) -> None:
        """Start opening the sessions of `names` side by side (connection and sudo are the
        slow part), each in a thread of its own; `open_all` waits for them."""
        for name in names:
            if name not in self._opening and name not in self.sessions:
                t = threading.Thread(
                    target=self._try, args=(name, self.specs[name].host), daemon=True
                )
                self._opening[name] = t
                t.start()

    def open_all(self, names: list[str]) -> None:
        """Open the sessions of `names` (those `start_opening` began are waited for); a host
        that fails is remembered with its error."""
        self.start_opening(names)
        for name in names:
            self._opening[name].join()

    def keep(self, names: set[str]) -> None:
        """Forget every host but `names`: their sessions are closed (one still opening is
        closed once open), their errors dropped: they get no result."""
        with self._lock:
            gone = [n for n in self.specs if n not in names]
            for name in gone:
                del self.specs[name]
                self.failed.pop(name, None)
            dropped = [self.sessions.pop(n) for n in gone if n in self.sessions]
        for session in dropped:
            session.close()

    def _try(self, name: str, host: InventoryHost) -> None:
        try:
            with self._open_slots:  # its 30 s timeout counts from its own start
                session = open_session(host)
        except HostError as exc:
            with self._lock:
                if name in self.specs:
                    self.failed[name] = exc
            return
        with self._lock:
            if name in self.specs and not self._closed:
                self.sessions[name] = session
                self._opened += 1
                return
        session.close()  # a host left out, or the suite has ended, meanwhile

    def close_all(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:  # what no test asked for is not started; what runs, ends first
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            sessions, self.sessions, self._closed = list(self.sessions.values()), {}, True
        for s in sessions:
            s.close()


REGISTRY = _Registry()


class SessionBackend(base.BaseBackend):  # type: ignore[misc]  # testinfra is untyped
    """testinfra backend `gpuprov://NAME`: commands on NAME's session (REGISTRY)."""

    NAME = NAME

    def __init__(self, hostname: str, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("sudo", None)  # the session is already the become user's shell
        kwargs.pop("sudo_user", None)
        super().__init__(hostname, *args, **kwargs)

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        text = self.get_command(command, *args)
        out = REGISTRY.read(self.hostname, text)
        return self.result(out.rc, self.encode(text), out.stdout, out.stderr)

    def get_pytest_id(self) -> str:
        return f"ansible://{self.hostname}"  # the ids (and JUnit names) the suite always had

    def variables(self) -> dict[str, Any]:
        """The host's inventory variables, with inventory_hostname as Ansible gives it."""
        spec = REGISTRY.specs[self.hostname]
        return {**spec.variables, "inventory_hostname": self.hostname}


def register() -> None:
    """Make `gpuprov://` a testinfra connection type (testinfra imports backends by path)."""
    BACKENDS[NAME] = f"{__name__}.SessionBackend"


__all__ = ["NAME", "REGISTRY", "HostSpec", "SessionBackend", "register"]
