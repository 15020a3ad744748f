"""`nvidia-smi mig -lcip` -> compute instance profiles per GPU instance.

(The other MIG listings are parsed in `orchestrator.parsers.mig`.) A profile row is followed
by a line holding its copy engines and JPEG decoders; "No MIG-enabled devices found." or an
empty listing yields no rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import split_exit

_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)(?P<default>\*?)\s+"
    r"(?P<free>\d+)/(?P<total>\d+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s+(?P<ofa>\d+)\s*\|$"
)
_MORE = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s*\|$")


@dataclass(frozen=True)
class ComputeInstanceProfile:
    gpu: int
    gpu_instance_id: int
    name: str  # "1g.18gb", "1c.3g.71gb"
    profile_id: int
    default: bool  # marked "*" by nvidia-smi: what `-cgi ... -C` creates
    free: int
    total: int
    sm: int
    decoders: int
    encoders: int
    ofa: int
    copy_engines: int | None
    jpeg: int | None


def _profile(m: re.Match[str], more: re.Match[str] | None) -> ComputeInstanceProfile:
    return ComputeInstanceProfile(
        gpu=int(m["gpu"]),
        gpu_instance_id=int(m["gi"]),
        name=m["name"],
        profile_id=int(m["id"]),
        default=m["default"] == "*",
        free=int(m["free"]),
        total=int(m["total"]),
        sm=int(m["sm"]),
        decoders=int(m["dec"]),
        encoders=int(m["enc"]),
        ofa=int(m["ofa"]),
        copy_engines=int(more["ce"]) if more else None,
        jpeg=int(more["jpeg"]) if more else None,
    )


def parse_lcip(text: str) -> tuple[ComputeInstanceProfile, ...]:
    profiles: list[ComputeInstanceProfile] = []
    pending: re.Match[str] | None = None
    for line in split_exit(text).body.splitlines():
        line = line.rstrip()
        if m := _ROW.match(line):
            if pending is not None:
                profiles.append(_profile(pending, None))
            pending = m
        elif (more := _MORE.match(line)) and pending is not None:
            profiles.append(_profile(pending, more))
            pending = None
    if pending is not None:
        profiles.append(_profile(pending, None))
    return tuple(profiles)
