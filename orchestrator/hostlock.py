"""One `provision apply` at a time per host: a run lock kept on the host itself.

The site playbook's first task after the plan takes each host's lock (`/var/lib/gpuprov/
run.lock`, a directory: `mkdir` is atomic; playbooks/tasks/run-lock.yml) and its last task
gives it back, in the run itself: no extra SSH round trip, the same inventory, connection,
become and vault as the run, and two control machines exclude each other as well as two runs
on one. `provision apply` passes the owner (`lock_vars`: run = control host / run directory /
pid, the user, since when); a host whose lock another run holds fails, with "run lock held by
<run> (user U) since T", and the others go on. A host that did not reach the end of the
playbook (it failed, Ctrl-C) still holds this run's lock: `release` gives those back after the
run (playbooks/lock.yml), however it ended. After a SIGKILL the lock stays, and the next run
from the same control machine takes it over once the owner's pid is gone; a lock left by a
dead run of another control machine is refused, and the message says how to remove it. Check
mode takes no lock (it changes nothing); plain ansible-playbook and AWX runs take none.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .errors import HostError

if TYPE_CHECKING:
    from .apply import AnsibleOptions

LOCK_PLAYBOOK = paths.SITE_PLAYBOOK.parent / "lock.yml"
LOCK_DIR = "/var/lib/gpuprov/run.lock"
_LOCK_TASKS = (
    "Take or give back the run lock",
    "Take over the lock of a run that ended on this control machine",
)


@dataclass(frozen=True)
class Owner:
    run: str  # "control-host/run-dir-name/pid"
    user: str
    since: str

    def document(self) -> dict[str, str]:
        return {"run": self.run, "user": self.user, "since": self.since}


def owner_of(run_dir: Path) -> Owner:
    return Owner(
        run=f"{socket.gethostname()}/{run_dir.name}/{os.getpid()}",
        user=getpass.getuser(),
        since=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


def lock_vars(owner: Owner) -> dict[str, object]:
    """The extra variable the lock tasks read (gpuprov_lock)."""
    return {
        "gpuprov_lock": {
            "run": owner.run,
            "owner": owner.document(),
            "control": socket.gethostname(),
            "dir": LOCK_DIR,
        }
    }


def unreleased(run_dir: Path) -> list[str]:
    """Hosts whose lock this run took and did not give back, from the run's job events."""
    events = []
    for path in (run_dir / "ansible" / "job_events").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            events.append(json.loads(path.read_text(encoding="utf-8")))
    events.sort(key=lambda e: int(e.get("counter", 0)) if isinstance(e, Mapping) else 0)
    held: list[str] = []
    for event in events:
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        if event.get("event") != "runner_on_ok" or data.get("task") not in _LOCK_TASKS:
            continue
        said = str(res.get("stdout", "")).split("\n", 1)[0] if isinstance(res, Mapping) else ""
        host = str(data.get("host"))
        if said == "acquired" and host not in held:
            held.append(host)
        elif said == "released" and host in held:
            held.remove(host)
    return held


def release(
    owner: Owner,
    hosts: Sequence[str],
    run_dir: Path,
    options: AnsibleOptions | None,
    **reach: Any,
) -> None:
    """Give back the lock of `hosts` (`reach`: run_playbook's inventories, routes)."""
    from dataclasses import replace

    from .apply import AnsibleOptions, run_playbook

    if not hosts:
        return
    opts = replace(options or AnsibleOptions(), tags=(), skip_tags=(), diff=False)
    where = run_dir / "unlock"
    where.mkdir(mode=0o700, exist_ok=True)
    with contextlib.suppress(HostError):  # no host answered: its lock stays, said on the next
        run_playbook(
            hosts=hosts,
            host_vars={},
            run_dir=where,
            playbook=LOCK_PLAYBOOK,
            echo=False,
            options=opts,
            extra=lock_vars(owner),
            **reach,
        )
