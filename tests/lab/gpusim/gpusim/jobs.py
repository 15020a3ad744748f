"""Simulated GPU compute processes: what `nvidia-smi --query-compute-apps` lists.

`gpusim job SECONDS [--gpu N] [--name NAME]` runs in the foreground as a "CUDA process" on
GPU N for SECONDS: it registers its pid under /run/gpusim/jobs and is listed while it lives
(a killed job disappears, as a real process's context does).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpusim.paths import Paths
from gpusim.view import GpuView

FIELDS = {
    "pid": ("pid", ""),
    "process_name": ("process_name", ""),
    "name": ("process_name", ""),
    "gpu_uuid": ("gpu_uuid", ""),
    "gpu_bus_id": ("gpu_bus_id", ""),
    "used_memory": ("used_gpu_memory [MiB]", " MiB"),
    "used_gpu_memory": ("used_gpu_memory [MiB]", " MiB"),
}


@dataclass(frozen=True)
class Job:
    pid: int
    gpu: int
    name: str
    memory_mib: int


def live_jobs(paths: Paths) -> list[Job]:
    folder = paths.run_dir / "jobs"
    jobs = []
    for entry in sorted(folder.glob("*")) if folder.is_dir() else []:
        pid = int(entry.name)
        if not os.path.exists(f"/proc/{pid}"):
            entry.unlink(missing_ok=True)
            continue
        gpu, name, memory = entry.read_text().split("\t")
        jobs.append(Job(pid, int(gpu), name, int(memory)))
    return jobs


def run_job(paths: Paths, seconds: float, gpu: int, name: str) -> int:
    folder = paths.run_dir / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / str(os.getpid())
    marker.write_text(f"{gpu}\t{name}\t1024")
    try:
        time.sleep(seconds)
    finally:
        marker.unlink(missing_ok=True)
    return 0


class QueryError(ValueError):
    pass


def query(
    fields: Sequence[str], jobs: Sequence[Job], gpus: Sequence[GpuView], header: bool, units: bool
) -> str:
    """`--query-compute-apps=FIELDS --format=csv[,noheader][,nounits]` in the real layout."""
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise QueryError(f'Field "{unknown[0]}" is not a valid field to query.')
    by_slot = {g.index: g for g in gpus}
    lines = []
    if header:
        lines.append(", ".join(FIELDS[f][0] if units else FIELDS[f][0].split(" [")[0]
                               for f in fields))  # fmt: skip
    for job in jobs:
        g = by_slot.get(job.gpu)
        if g is None:
            continue
        values = {
            "pid": str(job.pid),
            "process_name": job.name,
            "name": job.name,
            "gpu_uuid": g.state.uuid,
            "gpu_bus_id": g.nvml_bus_id,
            "used_memory": str(job.memory_mib) + (" MiB" if units else ""),
            "used_gpu_memory": str(job.memory_mib) + (" MiB" if units else ""),
        }
        lines.append(", ".join(values[f] for f in fields))
    return "".join(line + "\n" for line in lines)
