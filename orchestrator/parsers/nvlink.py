"""`nvidia-smi nvlink -s` (link state and speed) and `nvlink -e` (error counters)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._text import split_exit

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
_ERROR = re.compile(r"^\s+Link (?P<link>\d+): (?P<counter>[^:]+?): (?P<count>\d+)\s*$")


@dataclass(frozen=True)
class NvLink:
    link: int
    speed_gbps: float | None  # per direction, as nvidia-smi prints it; None when inactive
    active: bool


@dataclass(frozen=True)
class NvLinkGpu:
    index: int
    name: str
    uuid: str
    links: tuple[NvLink, ...]

    @property
    def inactive(self) -> tuple[int, ...]:
        return tuple(link.link for link in self.links if not link.active)


@dataclass(frozen=True)
class NvLinkErrors:
    gpu: int
    link: int
    counters: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def total(self) -> int:
        return sum(self.counters.values())


_STATUS_SCAN = re.compile(
    r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)"
    r"|^\s+Link (?P<link>\d+): (?:(?P<speed>\d+(?:\.\d*)?) GB/s|(?P<state>.+?))[ \t]*$",
    re.MULTILINE,
)


def parse_nvlink_status(text: str) -> tuple[NvLinkGpu, ...]:
    """GPUs without NVLink have no Link lines (nvidia-smi prints a note instead)."""
    gpus: list[tuple[int, str, str, list[NvLink]]] = []
    for m in _STATUS_SCAN.finditer(split_exit(text).body):
        if m["index"] is not None:
            gpus.append((int(m["index"]), m["name"], m["uuid"], []))
        elif gpus:
            speed = m["speed"]
            gpus[-1][3].append(
                NvLink(int(m["link"]), float(speed) if speed else None, speed is not None)
            )
    return tuple(NvLinkGpu(i, n, u, tuple(links)) for i, n, u, links in gpus)


def parse_nvlink_errors(text: str) -> tuple[NvLinkErrors, ...]:
    counters: dict[tuple[int, int], dict[str, int]] = {}
    gpu: int | None = None
    for line in split_exit(text).body.splitlines():
        if m := _GPU.match(line):
            gpu = int(m["index"])
        elif (m := _ERROR.match(line)) and gpu is not None:
            counters.setdefault((gpu, int(m["link"])), {})[m["counter"]] = int(m["count"])
    return tuple(
        NvLinkErrors(g, link, MappingProxyType(c)) for (g, link), c in sorted(counters.items())
    )
