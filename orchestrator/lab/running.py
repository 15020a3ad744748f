"""A handle on a running lab for tests and benchmarks: its hosts, and SSH to them with
the lab's key and pinned host keys."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import hosts
from .hosts import LabPaths


@dataclass(frozen=True)
class RunningLab:
    name: str
    inventory: Path
    profile: str
    host_os: Mapping[str, str]  # host name -> debian12 | debian13
    ports: Mapping[str, int]

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted(self.host_os))

    @property
    def paths(self) -> LabPaths:
        return hosts.lab_paths(self.name)

    def host_for(self, os_name: str) -> str:
        """The first host running `os_name`."""
        return next(h for h, o in sorted(self.host_os.items()) if o == os_name)

    def ssh(
        self, host: str, command: str, *, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            hosts.ssh_command(self.paths, self.ports[host], command),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def attach(name: str, profile: str) -> RunningLab:
    """The running hosts of lab `name` (its inventory must have been written by `up`)."""
    found = [h for h in hosts.status(name) if h.state == "running"]
    return RunningLab(
        name=name,
        inventory=hosts.lab_paths(name).inventory,
        profile=profile,
        host_os={h.name: h.os for h in found},
        ports={h.name: h.port for h in found},
    )
