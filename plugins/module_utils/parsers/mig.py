"""`nvidia-smi mig` listings: GPU instance profiles (-lgip), their placements (-lgipp), and the
GPU and compute instances that exist (-lgi, -lci).

Formats as in ../shared/fixtures/real/h200x2-ubuntu2404-580/ (-lgip, -lgipp; -lgi and -lci
there read "No MIG-enabled devices found."). Only rows are read; banners, rules and the
"No ... found" lines yield no rows. Standard library only: the mig role copies this module
to hosts, where the boot unit re-applies layouts without gpuprov installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import ParseError, split_exit


@dataclass(frozen=True)
class GiProfileRow:
    """One row of `-lgip`."""

    gpu: int
    name: str  # "1g.18gb" (without nvidia-smi's "MIG " prefix)
    profile_id: int
    free: int
    total: int
    memory_gib: float


@dataclass(frozen=True)
class GiPlacementRow:
    """One line of `-lgipp`: where instances of a profile may start, and their size."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]  # memory slices an instance may start at
    size: int  # memory slices one instance occupies


@dataclass(frozen=True)
class GpuInstanceRow:
    """One row of `-lgi`."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstanceRow:
    """One row of `-lci`."""

    gpu: int
    gpu_instance_id: int
    name: str
    profile_id: int
    instance_id: int
    start: int
    size: int


_LGIP = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+(\d+(?:\.\d*)?)\s")
_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)")
_LGI = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
_LCI = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")


# nvidia-smi's "nothing to list" lines (some versions exit non-zero with them): no rows.
NOTHING_TO_LIST = (
    "No MIG-supported devices found",
    "No MIG-enabled devices found",
    "No GPU instances found",
    "No compute instances found",
)


def _body(text: str, source: str, host: str | None) -> str:
    out = split_exit(text)
    if any(n in out.body for n in NOTHING_TO_LIST):
        return ""
    if not out.ok:
        first = out.body.strip().splitlines()[:1]
        raise ParseError(source, f"exit {out.exit_code}: {first[0] if first else ''}", host=host)
    return out.body


def _rows(
    text: str, option: str, host: str | None, pattern: re.Pattern[str], *, strip: bool = False
) -> list[tuple[str, ...]]:
    """The groups of each line of `nvidia-smi mig <option>` that `pattern` matches."""
    lines = _body(text, f"nvidia-smi mig {option}", host).splitlines()
    return [m.groups() for line in lines if (m := pattern.match(line.strip() if strip else line))]


def parse_lgip(text: str, *, host: str | None = None) -> tuple[GiProfileRow, ...]:
    return tuple(
        GiProfileRow(int(gpu), name, int(pid), int(free), int(total), float(mem))
        for gpu, name, pid, free, total, mem in _rows(text, "-lgip", host, _LGIP)
    )


def parse_lgipp(text: str, *, host: str | None = None) -> tuple[GiPlacementRow, ...]:
    return tuple(
        GiPlacementRow(int(gpu), int(pid), _slots(starts), int(size))
        for gpu, pid, starts, size in _rows(text, "-lgipp", host, _LGIPP, strip=True)
    )


def _slots(starts: str) -> tuple[int, ...]:
    return tuple(int(s) for s in starts.replace(" ", "").split(",") if s)


def parse_lgi(text: str, *, host: str | None = None) -> tuple[GpuInstanceRow, ...]:
    return tuple(
        GpuInstanceRow(int(gpu), name, int(pid), int(iid), int(start), int(size))
        for gpu, name, pid, iid, start, size in _rows(text, "-lgi", host, _LGI)
    )


def parse_lci(text: str, *, host: str | None = None) -> tuple[ComputeInstanceRow, ...]:
    return tuple(
        ComputeInstanceRow(int(gpu), int(gi), name, int(pid), int(iid), int(start), int(size))
        for gpu, gi, name, pid, iid, start, size in _rows(text, "-lci", host, _LCI)
    )
