"""Loading profile + state for a command, and saving it back (under the state lock)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from gpusim import state as state_mod
from gpusim.model import Profile, load_profile
from gpusim.paths import Paths
from gpusim.state import State


@dataclass
class Host:
    paths: Paths
    profile: Profile
    state: State


def uptime(paths: Paths) -> float | None:
    """The kernel's uptime on a lab host (dmesg's clock); None under a test root."""
    if paths.simulated_root:
        return None
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def hostname(paths: Paths) -> str:
    try:
        return paths.at("/etc/hostname").read_text().strip() or os.uname().nodename
    except FileNotFoundError:
        return os.uname().nodename


def load_host(paths: Paths) -> Host:
    profile = load_profile(paths.profile)
    current = state_mod.load(paths.state_file)
    if current is None or len(current.gpus) != len(profile.gpu_bus_ids):
        current = state_mod.new_state(profile, hostname(paths))
    return Host(paths, profile, current)


@contextmanager
def host_session(paths: Paths | None = None) -> Iterator[Host]:
    """Load, yield for changes, then save; serialised against other gpusim processes."""
    paths = paths or Paths.from_env()
    with state_mod.locked(paths.state_file):
        host = load_host(paths)
        before = asdict(host.state)
        yield host
        if (
            asdict(host.state) != before
            or not paths.state_file.exists()
            or not state_mod.kernel_log_file(paths.state_file).exists()
        ):
            state_mod.save(paths.state_file, host.state)
