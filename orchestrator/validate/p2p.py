"""Per-pair peer-to-peer copy bandwidth: judge every ordered GPU pair and name the bad GPU or link.

The payload copies 256 MiB from each GPU to each other GPU, one pair at a time
(`payload/gpucheck/p2p.py: p2p_copies`). A slow ring all-reduce says only that something is slow;
per pair, a GPU whose every pair is slow is a bad GPU (or its NVLinks), a single slow pair a bad
link. Where `nvidia-smi topo -m` says NV# between two GPUs, the pair must reach the catalog's
`p2p_bandwidth` floor (Azure's, nvbandwidth's copy-engine read), and every NVLink pair must
reach `relative_fraction` of the median NVLink pair: that catches an outlier even where no
floor is known. Pairs over PCIe are held to the relative rule only.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..parsers.topo import topology_or_none
from ..result import CheckResult

# A pair below this fraction of the median pair of its kind (NVLink / PCIe) is an outlier.
RELATIVE_FRACTION = 0.8


@dataclass(frozen=True)
class PairCopy:
    src: int
    dst: int
    gbs: float


def pairs_from_payload(doc: Sequence[Mapping[str, object]]) -> tuple[PairCopy, ...]:
    """The payload's `p2p` list -> pairs; a malformed entry raises ValueError."""
    return tuple(
        PairCopy(int(str(p["src"])), int(str(p["dst"])), float(str(p["gbs"]))) for p in doc
    )


def nvlink_pairs(topo_text: str | None) -> dict[tuple[int, int], int]:
    """(gpu a, gpu b) -> bonded NVLinks, from `nvidia-smi topo -m` (PCIe pairs absent)."""
    topo = topology_or_none(topo_text)
    if topo is None:
        return {}
    out = {}
    for a in topo.gpus:
        for b in topo.gpus:
            if a != b and (links := topo.nvlinks(a, b)):
                out[(int(a[3:]), int(b[3:]))] = links
    return out


def _link(nvlinks: Mapping[tuple[int, int], int], p: PairCopy) -> str:
    links = nvlinks.get((p.src, p.dst))
    return f"NV{links}" if links else "PCIe"


def _culprits(slow: Sequence[PairCopy], count: int) -> str:
    """Name a GPU when every pair it takes part in is slow, else the links."""
    gpus = []
    for g in range(count):
        involved = {(p.src, p.dst) for p in slow if g in (p.src, p.dst)}
        if count > 2 and len(involved) == 2 * (count - 1):
            gpus.append(g)
    if gpus:
        return "bad GPU(s) or their NVLinks: " + ", ".join(f"GPU {g}" for g in gpus)
    links = sorted({tuple(sorted((p.src, p.dst))) for p in slow})
    return "bad link(s): " + ", ".join(f"GPU {a} <-> GPU {b}" for a, b in links)


def check_p2p(
    pairs: Sequence[PairCopy],
    count: int,
    nvlinks: Mapping[tuple[int, int], int],
    floor: float | None,
    *,
    host: str,
    floor_source: str = "",
    relative_fraction: float = RELATIVE_FRACTION,
) -> list[CheckResult]:
    """One result per source GPU: the slowest of its outgoing pairs against the floor."""
    if count < 2:
        return [CheckResult("p2p_copy", "skip", None, None, "GB/s", "fewer than 2 GPUs")]
    if not pairs:
        return [
            CheckResult(
                "p2p_copy",
                "fail",
                None,
                None,
                "GB/s",
                f"{host}: the payload measured no peer copies on {count} GPUs; rerun it by hand "
                "and check nvidia-smi topo -m",
            )
        ]
    nv = [p for p in pairs if (p.src, p.dst) in nvlinks]
    pcie = [p for p in pairs if (p.src, p.dst) not in nvlinks]
    medians = {
        kind: statistics.median(p.gbs for p in group)
        for kind, group in (("nv", nv), ("pcie", pcie))
        if group
    }
    slow: list[tuple[PairCopy, str]] = []
    for p in pairs:
        kind = "nv" if p in nv else "pcie"
        need = relative_fraction * medians[kind]
        if kind == "nv" and floor is not None and p.gbs < floor:
            slow.append((p, f"below the floor {floor} GB/s"))
        elif p.gbs < need:
            slow.append(
                (p, f"below {relative_fraction:.0%} of the median {kind} pair {medians[kind]:.1f}")
            )
    culprit = _culprits([p for p, _unused in slow], count) if slow else ""
    out = []
    for g in range(count):
        mine = [p for p in pairs if p.src == g]
        if not mine:
            continue
        worst = min(mine, key=lambda p: p.gbs)
        bad = [(p, why) for p, why in slow if p.src == g]
        on_nv = all((p.src, p.dst) in nvlinks for p in mine)
        limit = (
            floor
            if on_nv and floor is not None
            else round(relative_fraction * medians["nv" if on_nv else "pcie"], 1)
        )
        if bad:
            listed = "; ".join(
                f"GPU {p.src} -> GPU {p.dst} {p.gbs} GB/s ({_link(nvlinks, p)}, {why})"
                for p, why in bad
            )
            out.append(
                CheckResult(
                    "p2p_copy",
                    "fail",
                    worst.gbs,
                    limit,
                    "GB/s",
                    f"{host}: slow peer copies {listed}: {culprit}; check nvidia-smi nvlink -s/-e "
                    "for inactive links and error counters, the fabric state, and reset or "
                    "service the GPU named",
                    gpu=g,
                )
            )
        elif on_nv and floor is not None:
            out.append(CheckResult("p2p_copy", "pass", worst.gbs, limit, "GB/s", gpu=g))
        else:
            why = (
                "no p2p_bandwidth floor for this GPU in the catalog"
                if on_nv
                else "these pairs go over PCIe (no NV# in nvidia-smi topo -m), which has no floor"
            )
            out.append(
                CheckResult(
                    "p2p_copy",
                    "warn",
                    worst.gbs,
                    limit,
                    "GB/s",
                    f"{host}: {why}; only outliers (below {relative_fraction:.0%} of the median "
                    "pair) are caught" + (f" ({floor_source})" if floor_source else ""),
                    gpu=g,
                )
            )
    return out
