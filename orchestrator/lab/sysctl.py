"""This machine's kernel limits that systemd test hosts need (scripts/engine.sh sets them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import LabError

# systemd in every test host takes inotify instances; at the kernel's default limit (128
# per user) a dozen hosts exhaust it and the next host's systemd hangs at boot.
INOTIFY_MIN = {"max_user_instances": 8192, "max_user_watches": 1048576}


def check_inotify(limits: Mapping[str, int]) -> None:
    """LabError, with the fix, when this machine's inotify limits are below what hosts need."""
    low = {k: v for k, v in limits.items() if v < INOTIFY_MIN[k]}
    if low:
        now = ", ".join(f"fs.inotify.{k}={v}" for k, v in sorted(low.items()))
        want = " ".join(f"fs.inotify.{k}={INOTIFY_MIN[k]}" for k in sorted(low))
        raise LabError(
            f"this machine's inotify limits are too low for systemd test hosts ({now})",
            fix=f"run ./scripts/engine.sh, or `sysctl -w {want}`",
        )


def inotify_limits(proc: Path = Path("/proc/sys/fs/inotify")) -> dict[str, int]:
    return {k: int((proc / k).read_text()) for k in INOTIFY_MIN}
