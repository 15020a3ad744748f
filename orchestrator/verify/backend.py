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

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from testinfra.backend import BACKENDS, base

from ..errors import HostError
from ..inventory import InventoryHost
from ..session import Output, Session, open_session
from ..verify.runner import SCHEME

NAME = SCHEME
PREFETCH_THREADS = 32  # commands of other hosts run ahead, at most this many at once


@dataclass(frozen=True)
class HostSpec:
    """What the suite knows of one host under `provision verify`."""

    host: InventoryHost
    variables: Mapping[str, Any] = field(default_factory=dict)


class _Registry:
    """The hosts of this pytest process and their sessions (opened once: `start`, or on
    first use)."""

    def __init__(self) -> None:
        self.specs: dict[str, HostSpec] = {}
        self.sessions: dict[str, Session] = {}
        self.failed: dict[str, HostError] = {}
        self.outputs: dict[tuple[str, str], Future[Output]] = {}
        self.asked: dict[str, dict[str, None]] = {}  # host -> the commands its checks asked
        self.trace: list[tuple[str, float, str]] | None = None  # (host, seconds, command)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._openers: dict[str, threading.Thread] = {}
        self._opened: dict[str, threading.Event] = {}
        self._spare: list[Session] = []  # sessions of hosts dropped: closed at the end

    def session(self, name: str) -> Session:
        with self._lock:
            if name in self.failed:
                raise self.failed[name]
            if name not in self.sessions:
                try:
                    self.sessions[name] = open_session(self.specs[name].host)
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
        another host's checks never ask costs that host's time only: the suite only reads."""
        with self._lock:
            self.asked.setdefault(name, {})[command] = None
            wanted = self._submit(name, command)
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

    def _run(self, name: str, command: str, session: Session | None = None) -> Output:
        started = time.monotonic()
        out = (session or self.session(name)).run(command)
        if self.trace is not None:
            self.trace.append((name, time.monotonic() - started, command))
        return out

    def start(self, early: Mapping[str, Sequence[str]]) -> None:
        """Open the session of every host of `specs` now, side by side (connection and sudo
        are the slow part), each in a thread of its own that then runs `early[host]` there,
        in order: the commands the host's checks asked the last time (`read_early`), read
        while the caller still detects and plans. A check finds its answer ready or under
        way; an early command no check asks this time only costs the host's time (the suite
        only reads); a host not to verify is dropped (`drop`)."""
        for name, spec in self.specs.items():
            if name in self._openers:
                continue
            futures: list[tuple[str, Future[Output]]] = []
            with self._lock:
                for command in early.get(name, ()):
                    if (name, command) not in self.outputs:
                        future: Future[Output] = Future()
                        self.outputs[name, command] = future
                        futures.append((command, future))
            self._opened[name] = threading.Event()
            thread = threading.Thread(
                target=self._open_and_read, args=(name, spec.host, futures), daemon=True
            )
            self._openers[name] = thread
            thread.start()

    def _open_and_read(
        self, name: str, host: InventoryHost, futures: list[tuple[str, Future[Output]]]
    ) -> None:
        session: Session | None = None
        error: HostError | None = None
        try:
            session = open_session(host)
        except HostError as exc:
            error = exc
        with self._lock:
            if name not in self.specs:  # dropped while it opened
                self._spare += [session] if session is not None else []
            elif session is not None:
                self.sessions[name] = session
            elif error is not None:
                self.failed[name] = error
        self._opened[name].set()
        for command, future in futures:
            if not future.set_running_or_notify_cancel():
                continue  # dropped, or the run ends
            try:
                if session is None:
                    raise error or HostError("no session", host=name)
                future.set_result(self._run(name, command, session))
            except BaseException as exc:  # the session's own error, for the check that asks
                future.set_exception(exc)

    def open_all(self, names: Iterable[str]) -> None:
        """Wait until the sessions of `names` are open (started by `start`, else now); a
        host that fails is remembered with its error."""
        self.start({})
        for name in names:
            self._opened[name].wait()

    def drop(self, names: Iterable[str]) -> None:
        """Hosts not to verify: forgotten (no session, no error, no test), what they have not
        started of their early commands cancelled, their sessions closed at the end."""
        gone = set(names)
        with self._lock:
            for name in gone:
                self.specs.pop(name, None)
                self.failed.pop(name, None)
                if name in self.sessions:
                    self._spare.append(self.sessions.pop(name))
            for (host, _), future in self.outputs.items():
                if host in gone:
                    future.cancel()

    def close_all(self) -> None:
        with self._lock:  # early commands not started by now: no check asked them
            for future in self.outputs.values():
                future.cancel()
        for thread in self._openers.values():
            thread.join()  # the command under way ends first
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:  # what no test asked for is not started; what runs, ends first
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            sessions = [*self.sessions.values(), *self._spare]
            self.sessions, self._spare = {}, []
        for s in sessions:
            s.close()


REGISTRY = _Registry()


def _early_file(folder: Path, host: str) -> Path:
    return folder / f"{quote(host, safe='')}.json"


def read_early(folder: Path, hosts: Iterable[str]) -> dict[str, list[str]]:
    """The commands each of `hosts` was asked by its checks the last time (`write_early`);
    a host never verified, or an unreadable file, has none."""
    early: dict[str, list[str]] = {}
    for host in hosts:
        try:
            data = json.loads(_early_file(folder, host).read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("commands"), list):
            early[host] = [c for c in data["commands"] if isinstance(c, str)]
    return early


def write_early(folder: Path, asked: Mapping[str, Iterable[str]]) -> None:
    """Keep what each host's checks asked this time, in order, for the next run to read
    early: one file per host (each host is in one pytest process), commands only."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for host, commands in asked.items():
        path = _early_file(folder, host)
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps({"commands": list(commands)}), "utf-8")
        partial.replace(path)


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
