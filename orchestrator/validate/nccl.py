"""The NCCL all-reduce check: judge a bus-bandwidth sweep against the SKU's catalog floors.

Two sources give the same sweep points: our own torch.distributed sweep (one process per
GPU, `payload/gpucheck/`) and nccl-tests' `all_reduce_perf` output (parsed by
`orchestrator.parsers.nccl_tests`). busbw = algbw x 2(n-1)/n; floors apply at messages of
1 GiB and more, where the figure is stable (reference/validation.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..catalog import GpuModel, ValidationFigure
from ..parsers.nccl_tests import NcclResult
from ..result import CheckResult

GIB = 1 << 30
MIN_JUDGED_BYTES = GIB
DEFAULT_MAX_BYTES = 4 * GIB
ALLREDUCE = "allreduce_busbw"
ALLREDUCE_NVLS_OFF = "allreduce_busbw_nvls_off"
NVLS_OFF_ENV: Mapping[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class SweepPoint:
    bytes: int
    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # elements with a wrong reduced value; None: not checked


def busbw(algbw: float, ranks: int) -> float:
    """all_reduce bus bandwidth from algorithm bandwidth (nccl-tests' definition)."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def points_from_payload(sweep: Sequence[Mapping[str, object]]) -> tuple[SweepPoint, ...]:
    """The payload's JSON sweep -> points; a malformed entry raises ValueError."""
    points = []
    for p in sweep:
        wrong = p.get("wrong")
        points.append(
            SweepPoint(
                bytes=int(str(p["bytes"])),
                time_us=float(str(p["time_us"])),
                algbw=float(str(p["algbw"])),
                busbw=float(str(p["busbw"])),
                wrong=int(str(wrong)) if wrong is not None else None,
            )
        )
    return tuple(points)


def points_from_nccl_tests(result: NcclResult) -> tuple[SweepPoint, ...]:
    """Out-of-place figures (the ones nccl-tests users quote); wrong counts both placements."""
    points = []
    for row in result.rows:
        wrongs = [t.wrong for t in (row.out_of_place, row.in_place) if t.wrong is not None]
        points.append(
            SweepPoint(
                bytes=row.size_bytes,
                time_us=row.out_of_place.time_us,
                algbw=row.out_of_place.algbw_gbs,
                busbw=row.out_of_place.busbw_gbs,
                wrong=sum(wrongs) if wrongs else None,
            )
        )
    return tuple(points)


def floor_figures(model: GpuModel | None, ranks: int, nvls: bool) -> tuple[ValidationFigure, ...]:
    """The catalog figures that apply to an all-reduce over `ranks` GPUs of `model`.

    With NVLink multicast off, figures measured with it off are used where the catalog has
    them for this GPU count; otherwise the plain all-reduce figures.
    """
    if model is None:
        return ()
    figures = [f for f in model.validation if f.gpus == ranks]
    if not nvls:
        off = tuple(f for f in figures if f.check == ALLREDUCE_NVLS_OFF)
        if off:
            return off
    return tuple(f for f in figures if f.check == ALLREDUCE)


def sweep_max_bytes(figures: Sequence[ValidationFigure]) -> int:
    """The sweep must reach every size a floor is given for (16 GiB for the 8-GPU floors)."""
    sizes = [f.message_bytes for f in figures if f.message_bytes]
    return max([DEFAULT_MAX_BYTES, *sizes])


def _size(n: int) -> str:
    return f"{n // GIB} GiB" if n >= GIB and n % GIB == 0 else f"{n / 2**20:g} MiB"


def check_allreduce(
    points: Sequence[SweepPoint],
    ranks: int,
    figures: Sequence[ValidationFigure],
    floor_fraction: float,
    *,
    host: str,
    source: str,
) -> list[CheckResult]:
    """Values first (a wrong sum fails whatever the speed), then busbw against each floor."""
    name = "nccl_allreduce"
    if not points:
        return [
            CheckResult(
                name,
                "fail",
                None,
                None,
                "GB/s",
                f"{host}: the all-reduce sweep ({source}) gave no result; rerun with "
                "NCCL_DEBUG=INFO and check nvidia-smi topo -m",
            )
        ]
    wrong = sum(p.wrong or 0 for p in points)
    checked = any(p.wrong is not None for p in points)
    out: list[CheckResult] = []
    if wrong:
        out.append(
            CheckResult(
                f"{name}_values",
                "fail",
                wrong,
                0,
                "wrong elements",
                f"{host}: all_reduce returned {wrong} wrong values ({source}): a GPU or link "
                "corrupts data; drain the host, check Xid and ECC, run dcgmi diag -r 3",
            )
        )
    elif checked:
        out.append(CheckResult(f"{name}_values", "pass", 0, 0, "wrong elements"))
    else:
        out.append(
            CheckResult(
                f"{name}_values",
                "warn",
                None,
                0,
                "wrong elements",
                f"{host}: {source} ran without value checks; rerun with -c 1",
            )
        )
    big = [p for p in points if p.bytes >= MIN_JUDGED_BYTES]
    if not big:
        out.append(
            CheckResult(
                name,
                "fail",
                max(p.bytes for p in points),
                MIN_JUDGED_BYTES,
                "bytes",
                f"{host}: the sweep stopped below 1 GiB, too small to judge bandwidth; "
                "sweep up to at least 1 GiB (all_reduce_perf -e 4G)",
            )
        )
        return out
    peak = max(big, key=lambda p: p.busbw)
    if not figures:
        out.append(
            CheckResult(
                name,
                "warn",
                peak.busbw,
                None,
                "GB/s",
                f"{host}: no all-reduce floor in the catalog for {ranks} GPUs of this model "
                f"(peak {peak.busbw} GB/s at {_size(peak.bytes)}); add one to "
                "orchestrator/catalog.yaml",
            )
        )
        return out
    for fig in figures:
        limit = fig.limit(floor_fraction)
        if fig.message_bytes:
            at = next((p for p in points if p.bytes == fig.message_bytes), None)
            label = f"{name}_{_size(fig.message_bytes).replace(' ', '')}"
        else:
            at, label = peak, name
        if at is None:
            size = _size(fig.message_bytes or 0)
            out.append(
                CheckResult(
                    label,
                    "fail",
                    None,
                    limit,
                    "GB/s",
                    f"{host}: the sweep has no {size} point; sweep up to {size}",
                )
            )
        elif at.busbw >= limit:
            out.append(CheckResult(label, "pass", at.busbw, limit, "GB/s"))
        else:
            out.append(
                CheckResult(
                    label,
                    "fail",
                    at.busbw,
                    limit,
                    "GB/s",
                    f"{host}: all-reduce busbw {at.busbw} GB/s at {_size(at.bytes)} over "
                    f"{ranks} GPUs, below the floor {limit} ({fig.source}); check "
                    "nvidia-smi nvlink -s/-e and topo -m, the fabric manager, and "
                    "NCCL_DEBUG=INFO for the transport (P2P/NVLS vs SHM means no NVLink)",
                )
            )
    return out


def check_nccl_tests(
    result: NcclResult,
    ranks: int,
    figures: Sequence[ValidationFigure],
    floor_fraction: float,
    *,
    host: str,
) -> list[CheckResult]:
    """nccl-tests' output: its own bounds verdict and completeness, then the common judgment."""
    out = check_allreduce(
        points_from_nccl_tests(result),
        ranks,
        figures,
        floor_fraction,
        host=host,
        source="nccl-tests all_reduce_perf",
    )
    if not result.complete:
        out.append(
            CheckResult(
                "nccl_tests_complete",
                "fail",
                "cut short",
                "footer printed",
                "",
                f"{host}: all_reduce_perf stopped before its summary (crash or timeout); "
                "rerun it by hand with NCCL_DEBUG=INFO",
            )
        )
    elif result.bounds_ok is False:
        out.append(
            CheckResult(
                "nccl_tests_complete",
                "fail",
                result.out_of_bounds,
                0,
                "out-of-bounds values",
                f"{host}: all_reduce_perf reports {result.out_of_bounds} out-of-bounds "
                "values; drain the host and run dcgmi diag -r 3",
            )
        )
    return out


def nccl_tests_command(ranks: int, max_bytes: int, *, nvls: bool = False) -> str:
    """One process driving every GPU (-g N), 1 MiB to `max_bytes`, factor 4, values checked."""
    env = "" if nvls else "env " + " ".join(f"{k}={v}" for k, v in NVLS_OFF_ENV.items()) + " "
    return f"{env}all_reduce_perf -b 1M -e {max_bytes} -f 4 -g {ranks} -c 1"
