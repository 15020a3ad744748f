"""`nvidia-smi topo -m`, `nvlink -s` and `nvlink -e`."""

from __future__ import annotations

from collections.abc import Sequence

from gpusim.model import DATA_DIR, Profile
from gpusim.view import GpuView

_LEGEND = (DATA_DIR / "topo-legend.txt").read_text()


def _link(a: GpuView, b: GpuView) -> str:
    if a.index == b.index:
        return " X "
    if a.model.nvlinks and not (a.nvlink_inactive or b.nvlink_inactive):
        return f"NV{a.model.nvlinks}"
    return "NODE" if a.numa_node == b.numa_node else "SYS"


def topo(gpus: Sequence[GpuView], profile: Profile) -> str:
    names = "\t".join(f"GPU{g.index}" for g in gpus)
    lines = [f"\t\x1b[4m{names}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"]
    for g in gpus:
        cells = "\t".join(_link(g, other) for other in gpus)
        numa = max(g.numa_node, 0)
        cpus = profile.numa_cpus[min(numa, len(profile.numa_cpus) - 1)]
        affinity = profile.numa_affinity[g.position]
        lines.append(f"GPU{g.index}\t{cells}\t{cpus}\t{affinity}\t\tN/A")
    return "\n".join(lines) + "\n\n" + _LEGEND


def _gpu_line(g: GpuView) -> str:
    return f"GPU {g.index}: {g.model.name} (UUID: {g.state.uuid})\n"


def nvlink_status(gpus: Sequence[GpuView]) -> str:
    out = ""
    for g in gpus:
        out += _gpu_line(g)
        for link in range(g.model.nvlinks):
            speed = "<inactive>" if g.nvlink_inactive else f"{g.model.nvlink_speed_gbs:.3f} GB/s"
            out += f"\t Link {link}: {speed}\n"
    return out


def nvlink_errors(gpus: Sequence[GpuView]) -> str:
    out = ""
    for g in gpus:
        out += _gpu_line(g)
        for link in range(g.model.nvlinks):
            out += (
                f"\t Link {link}: Replay Errors: 0\n"
                f"\t Link {link}: Recovery Errors: 0\n"
                f"\t Link {link}: CRC Errors: 0\n\n"
            )
    return out
