"""`nvidia-smi topo -m` -> the GPU/NIC connection matrix and CPU/NUMA affinity."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ._text import ParseError, split_exit, value

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU|NIC|NVS|CPU)\d+$")


@dataclass(frozen=True)
class Topology:
    devices: tuple[str, ...]  # "GPU0", "GPU1", "NIC0", ...
    links: Mapping[tuple[str, str], str]  # ("GPU0", "GPU1") -> "NV18" | "SYS" | "PIX" ...
    cpu_affinity: Mapping[str, str | None]
    numa_affinity: Mapping[str, str | None]

    def nvlinks(self, a: str, b: str) -> int:
        """Number of bonded NVLinks between two devices (0 when they talk over PCIe)."""
        m = re.fullmatch(r"NV(\d+)", self.links.get((a, b), ""))
        return int(m.group(1)) if m else 0

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))


def parse_topo(text: str) -> Topology:
    """An empty topology when nvidia-smi failed (no driver loaded: exit 9)."""
    out = split_exit(text)
    if not out.ok:
        empty: dict[str, str | None] = {}
        return Topology((), MappingProxyType({}), MappingProxyType(empty), MappingProxyType(empty))
    lines = [_ANSI.sub("", line) for line in out.body.splitlines()]
    try:
        header_at = next(i for i, line in enumerate(lines) if line.startswith("\t"))
    except StopIteration as exc:
        raise ParseError(
            "nvidia-smi-topo-m.txt", "no header row (a line starting with a tab)"
        ) from exc
    columns = [c.strip() for c in lines[header_at].split("\t")[1:]]
    devices = tuple(c for c in columns if _DEVICE.match(c))
    links: dict[tuple[str, str], str] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, str | None] = {}
    for line in lines[header_at + 1 :]:
        cells = line.split("\t")
        name = cells[0].strip()
        if not _DEVICE.match(name):
            if not line.strip():
                break
            continue
        row = [c.strip() for c in cells[1:]]
        for dev, cell in zip(devices, row, strict=False):
            links[(name, dev)] = cell
        rest = row[len(devices) :]
        cpu[name] = value(rest[0]) if rest else None
        numa[name] = value(rest[1]) if len(rest) > 1 else None
    return Topology(devices, MappingProxyType(links), MappingProxyType(cpu), MappingProxyType(numa))


def topology_or_none(text: str | None) -> Topology | None:
    """The topology, or None where there is no text or it does not parse (validation then
    judges without it: no NVLink pairs, no NUMA pinning)."""
    if not text:
        return None
    try:
        return parse_topo(text)
    except ParseError:
        return None
