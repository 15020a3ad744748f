"""nccl-tests output (`all_reduce_perf` and friends) -> rows per message size and the footer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import ParseError

_F = r"\d+(?:\.\d*)?"  # a figure: "12.5", "0", "3." (never "5.5.56")
_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
    rf"(?P<o_time>{_F})\s+(?P<o_alg>{_F})\s+(?P<o_bus>{_F})\s+(?P<o_wrong>\S+)\s+"
    rf"(?P<i_time>{_F})\s+(?P<i_alg>{_F})\s+(?P<i_bus>{_F})\s+(?P<i_wrong>\S+)\s*$"
)
_VERSION = re.compile(r"^# nccl-tests version (?P<v>\S+)(?:.*nccl-library=(?P<lib>\d+))?")
_STARTING = re.compile(r"^# Collective test starting: (?P<name>\S+)")
_NGPUS = re.compile(r"^# nThread (?P<threads>\d+) nGpus (?P<gpus>\d+)")
_RANK = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s.*device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]+)\]\s*(?P<name>.*)$"
)
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<verdict>\w+)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<bw>\d+(?:\.\d*)?)")


@dataclass(frozen=True)
class Timing:
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None  # None: validation off ("N/A")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Timing
    in_place: Timing

    @property
    def busbw_gbs(self) -> float:
        """The better of the two placements, as health checks usually quote it."""
        return max(self.out_of_place.busbw_gbs, self.in_place.busbw_gbs)


@dataclass(frozen=True)
class NcclRank:
    rank: int
    device: int
    bus: str
    name: str


@dataclass(frozen=True)
class NcclResult:
    collective: str | None  # "all_reduce_perf"
    version: str | None
    nccl_library: int | None  # 22803 = 2.28.3
    gpus_per_thread: int | None
    ranks: tuple[NcclRank, ...]
    rows: tuple[NcclRow, ...]
    out_of_bounds: int | None
    bounds_ok: bool | None
    avg_busbw_gbs: float | None

    @property
    def complete(self) -> bool:
        """The footer was printed: the run was not cut short."""
        return self.avg_busbw_gbs is not None and self.bounds_ok is not None

    @property
    def wrong(self) -> int:
        return sum((t.wrong or 0) for r in self.rows for t in (r.out_of_place, r.in_place))

    def row_at(self, size_bytes: int) -> NcclRow | None:
        return next((r for r in self.rows if r.size_bytes == size_bytes), None)

    def largest(self) -> NcclRow | None:
        return max(self.rows, key=lambda r: r.size_bytes, default=None)


def _wrong(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_nccl_tests(text: str) -> NcclResult:
    collective = version = None
    library = gpus = out_of_bounds = None
    bounds_ok: bool | None = None
    avg: float | None = None
    ranks: list[NcclRank] = []
    rows: list[NcclRow] = []
    for line in text.splitlines():
        if m := _ROW.match(line):
            rows.append(
                NcclRow(
                    size_bytes=int(m["size"]),
                    count=int(m["count"]),
                    dtype=m["type"],
                    redop=m["redop"],
                    root=int(m["root"]),
                    out_of_place=Timing(
                        float(m["o_time"]),
                        float(m["o_alg"]),
                        float(m["o_bus"]),
                        _wrong(m["o_wrong"]),
                    ),
                    in_place=Timing(
                        float(m["i_time"]),
                        float(m["i_alg"]),
                        float(m["i_bus"]),
                        _wrong(m["i_wrong"]),
                    ),
                )
            )
        elif m := _VERSION.match(line):
            version, library = m["v"], int(m["lib"]) if m["lib"] else None
        elif m := _STARTING.match(line):
            collective = m["name"]
        elif m := _NGPUS.match(line):
            gpus = int(m["gpus"])
        elif m := _RANK.match(line):
            ranks.append(NcclRank(int(m["rank"]), int(m["dev"]), m["bus"], m["name"].strip()))
        elif m := _OOB.match(line):
            out_of_bounds, bounds_ok = int(m["n"]), m["verdict"] == "OK"
        elif m := _AVG.match(line):
            avg = float(m["bw"])
    if not rows and avg is None and version is None:
        raise ParseError("nccl-tests output", "no nccl-tests header, rows or footer found")
    return NcclResult(
        collective, version, library, gpus, tuple(ranks), tuple(rows), out_of_bounds, bounds_ok, avg
    )
