"""The parent of one run's ansible-playbook: when the run stops, Ansible's whole tree stops.

ansible-runner starts this module (as its `binary`, through a two-line script in the run's
directory) in a terminal session of its own; it starts ansible-playbook as its only child and

- is the tree's subreaper (PR_SET_CHILD_SUBREAPER): each of Ansible's fork workers starts a
  session of its own (setsid), so no process group holds them all; a worker whose parent died
  comes back to this process, which can still stop it;
- dies with `provision` (PR_SET_PDEATHSIG): a killed provision (SIGKILL) sends this process
  SIGTERM, and it stops the tree, so Ansible does not go on changing hosts unattended;
- on SIGTERM, SIGINT or SIGHUP (provision's Ctrl-C, or its death): SIGTERM to ansible-playbook
  (Ansible forwards it to every worker, each of which stops its own process group), up to
  GRACE_S for the tree to end, then SIGKILL to every process left in it; a second signal
  skips the wait;
- before Ansible starts, rewrites the run's `command` file (ansible-runner records the whole
  environment and command line there) without secrets (orchestrator/secrets.py).

Linux only (prctl); elsewhere it runs ansible-playbook without the two guards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

GRACE_S = 10.0  # from SIGTERM to SIGKILL
POLL_S = 0.1
PARENT_ENV = "GPUPROV_WATCHDOG_PARENT"  # provision's pid: gone already -> start nothing
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every live process below `root` (from /proc's parent links), parents first."""
    parent: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state ppid ...
        if len(fields) > 1 and fields[0] != "Z":
            parent[int(entry.name)] = int(fields[1])
    out: list[int] = []
    frontier = [root]
    while frontier:
        below = [p for p, pp in parent.items() if pp in frontier and p not in out]
        out += below
        frontier = below
    return out


class _Tree:
    def __init__(self) -> None:
        self.child = 0
        self.stop_at: float | None = None  # when the stop began
        self.force = False

    def signalled(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop_at is not None:
            self.force = True  # a second signal: no more waiting
            return
        self.stop_at = time.monotonic()
        if self.child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGTERM)

    def kill_all(self) -> None:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def reap(self) -> int | None:
        """Reap every ended child; the status of ansible-playbook when it ended."""
        status = None
        while True:
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return status
            if pid == 0:
                return status
            if pid == self.child:
                status = os.waitstatus_to_exitcode(code)


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    """`watchdog COMMAND_FILE -- ansible-playbook ARGS...`"""
    if len(argv) < 3 or argv[1] != "--":
        print(
            "usage: python -m orchestrator.watchdog COMMAND_FILE -- PROGRAM ARGS", file=sys.stderr
        )
        return 2
    command_file, program = Path(argv[0]), argv[2:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    expected = os.environ.pop(PARENT_ENV, "")
    if expected and str(os.getppid()) != expected:
        print("provision ended before Ansible started: nothing run", file=sys.stderr)
        return 130
    from .secrets import scrub_command_file

    scrub_command_file(command_file)
    tree = _Tree()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, tree.signalled)
    tree.child = os.posix_spawnp(program[0], program, os.environ)
    if tree.stop_at is not None:  # a signal came while it started
        os.kill(tree.child, signal.SIGTERM)
    status: int | None = None
    while True:
        ended = tree.reap()
        if ended is not None:
            status = ended
        if status is not None and tree.stop_at is None:
            return _exit_code(status)  # a run that ended by itself: nothing else to stop
        if tree.stop_at is not None:
            left = descendants(os.getpid())
            if status is not None and not left:
                return 130
            # ansible-playbook ended its own orderly stop: what is left (an orphaned worker,
            # ssh's connection masters) goes now; else after the grace time
            if status is not None or tree.force or time.monotonic() - tree.stop_at > GRACE_S:
                tree.kill_all()
                tree.force = False
                tree.stop_at = time.monotonic()  # reap them; kill again if anything is left
        time.sleep(POLL_S)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
