"""Check results in CheckResult's fields, and the payload's constants."""

from __future__ import annotations

from typing import Any

PAYLOAD_VERSION = 2  # 2: per-pair peer copies, exact position-dependent values, deadlines


GIB = 1 << 30


NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


SIMULATED_HINT = "/etc/gpusim/profile.yaml"


MARKER = "@@gpuprov-gpucheck@@"


Result = dict[str, Any]


def result(
    name: str,
    status: str,
    value: Any,
    limit: Any,
    unit: str,
    diagnosis: str = "",
    gpu: int | None = None,
) -> Result:
    """A check result with CheckResult's fields (orchestrator/result.py)."""
    return {
        "name": name,
        "status": status,
        "value": value,
        "limit": limit,
        "unit": unit,
        "diagnosis": diagnosis,
        "gpu": gpu,
    }


def at_least(
    name: str, value: float, floor: float | None, unit: str, gpu: int, what: str
) -> Result:
    """pass when value >= floor; no floor known: warn, so a missing limit is never a pass."""
    value = round(value, 1)
    if floor is None:
        return result(
            name,
            "warn",
            value,
            None,
            unit,
            f"no floor for this GPU in the catalog; add one ({what}) to orchestrator/catalog.yaml",
            gpu,
        )
    if value >= floor:
        return result(name, "pass", value, floor, unit, "", gpu)
    return result(
        name,
        "fail",
        value,
        floor,
        unit,
        f"{what} is {value} {unit}, below the floor "
        f"{floor}; check clocks and throttling (nvidia-smi -q -d PERFORMANCE), other "
        "processes on the GPU (nvidia-smi), and the GPU's health (dcgmi diag -r 2)",
        gpu,
    )
