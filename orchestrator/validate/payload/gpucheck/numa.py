"""NUMA: each worker runs on its GPU's CPUs and allocates host memory there."""

from __future__ import annotations

import os
from typing import Any

from .results import Result, result

MPOL_PREFERRED = 1


_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def parse_cpulist(text: str) -> set[int]:
    """'0-31,64-95' (nvidia-smi topo -m's CPU Affinity, the kernel's cpulist) -> CPU numbers."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _sep, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _prefer_node(node: int) -> str:
    """set_mempolicy(MPOL_PREFERRED, node) for this thread; '' or why it was not possible."""
    import ctypes
    import platform

    number = _SET_MEMPOLICY.get(platform.machine())
    if number is None or not 0 <= node < 64:
        return f"no set_mempolicy for {platform.machine()} node {node}"
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(number, MPOL_PREFERRED, ctypes.byref(mask), 65) != 0:
        return f"set_mempolicy refused ({os.strerror(ctypes.get_errno())})"
    return ""


def bind_numa(gpu: int, numa: dict[str, Any]) -> Result:
    """Pin this process to the GPU's CPUs and prefer its NUMA node for new host memory, from
    `nvidia-smi topo -m` (CPU Affinity, NUMA Affinity) as the orchestrator passed them."""
    info = numa.get(str(gpu)) or {}
    cpus_text, node = info.get("cpus"), info.get("node")
    if not cpus_text:
        return result(
            "numa_binding", "skip", None, None, "", "nvidia-smi topo -m gives no CPU affinity", gpu
        )
    try:
        wanted = parse_cpulist(str(cpus_text))
    except ValueError as exc:
        return result("numa_binding", "warn", str(cpus_text), None, "", str(exc), gpu)
    usable = wanted & os.sched_getaffinity(0)
    if not usable:
        return result(
            "numa_binding",
            "warn",
            str(cpus_text),
            "CPUs of the GPU's node",
            "",
            f"none of GPU {gpu}'s CPUs ({cpus_text}) may be used here (container cpuset?); "
            "host-to-device copies may cross the socket interconnect",
            gpu,
        )
    os.sched_setaffinity(0, usable)
    note = ""
    if node is not None and str(node).isdigit():
        note = _prefer_node(int(node))
    value = f"cpus {cpus_text}" + (f", node {node}" if node is not None else "")
    if note:  # first touch from the pinned CPUs still places the buffers on the node
        value += f" (memory policy: {note})"
    return result("numa_binding", "pass", value, "GPU's node", "", "", gpu)
