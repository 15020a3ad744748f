"""Installed NVIDIA / CUDA / Docker packages with their versions and hold state.

Debian family (dpkg-query.txt): `PACKAGE<TAB>VERSION<TAB>WANT<TAB>STATUS` per line, from
`dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Want}\\t${db:Status-Status}\\n'`.
Red Hat family (rpm-qa.txt): `NAME<TAB>VERSION-RELEASE`, then `#versionlock ENTRY` lines from
dnf's versionlock list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._text import split_exit


@dataclass(frozen=True)
class Packages:
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    held: frozenset[str] = frozenset()


def parse_dpkg_query(text: str) -> Packages:
    versions: dict[str, str] = {}
    held: set[str] = set()
    for line in split_exit(text).body.splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue  # "dpkg-query: no packages found matching ..."
        name, version, want, status = (p.strip() for p in parts)
        if status not in ("installed", "half-configured", "unpacked") or not version:
            continue
        name = name.split(":")[0]  # "libnvidia-compute-580:amd64"
        versions[name] = version
        if want == "hold":
            held.add(name)
    return Packages(MappingProxyType(versions), frozenset(held))


def parse_rpm_query(text: str) -> Packages:
    versions: dict[str, str] = {}
    locks: list[str] = []
    for line in split_exit(text).body.splitlines():
        if line.startswith("#versionlock "):
            locks.append(line.split(None, 1)[1].strip())
        elif "\t" in line:
            name, _sep, version = line.partition("\t")
            versions[name.strip()] = version.strip()
    held = {
        name
        for name in versions
        for lock in locks
        # entries look like "nvidia-driver-3:580.65.06-1.el9.*" or "0:nvidia-driver-580..."
        if lock.split(":", 1)[-1].startswith(f"{name}-") or lock.startswith(f"{name}-")
    }
    return Packages(MappingProxyType(versions), frozenset(held))
