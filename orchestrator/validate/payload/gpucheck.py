#!/usr/bin/env python3
"""gpuprov's GPU check payload: CUDA checks and an NCCL all-reduce sweep, where PyTorch is.

Standalone on purpose: it runs inside the user's PyTorch image (mounted read-only) or on the
host (`--runtime host`), with only the standard library and torch. It must not import the
orchestrator. Input: a JSON spec (expected GPUs, floors, sweep sizes; written by
`orchestrator.validate.runner`). Output: one JSON document on stdout (or `--out FILE`) with
per-check results in CheckResult's fields and the raw all-reduce sweep, which the
orchestrator judges (`orchestrator.validate.nccl`). A human summary goes to stderr.

Layout: the parent process checks what is host-wide (CUDA available, device count, names,
compute capability, arch list, CUDA build vs driver, peer access, MIG devices), then starts
one process per GPU and, while they import torch, copies between every ordered GPU pair; each
worker measures its own GPU (bf16/fp8 GEMM, device copy; host-to-device copies one GPU at a
time, pinned to its GPU's NUMA node) and then all join one NCCL all-reduce sweep whose values
are checked exactly. Per-GPU work runs in parallel, so 8 GPUs take about as long as 2.

Deadlines: the payload's own (`deadline_s`) ends well before the outer kill. Workers report
each phase and result as they go; at the deadline the parent kills what is left and reports
every finished check plus the GPUs and phases that did not finish; a watchdog covers the
parent itself.

NVLink multicast (NVLS) stays off unless `--nvls` is given: the floors are for ring/tree
all-reduce, and on shared hosts a multicast program can take GPUs out of service.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
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


# ---- pure decisions (unit-tested without torch) ---------------------------------------------


def arch_covers(arch_list: list[str], cc: tuple[int, int]) -> tuple[str, str]:
    """Does the build carry code for compute capability `cc`? -> (status, diagnosis).

    sm_XY (native code) for the device passes; only PTX (compute_XY <= cc) warns, since the
    driver JIT-compiles it at start (slow, and it fails where the PTX is newer than the driver).
    """
    major, minor = cc
    native = f"sm_{major}{minor}"
    if native in arch_list or f"{native}a" in arch_list:
        return "pass", ""
    ptx = [a for a in arch_list if a.startswith("compute_") and _arch_cc(a) <= major * 10 + minor]
    build = " ".join(arch_list) or "none"
    if ptx:
        return "warn", (
            f"no native {native} kernels in this PyTorch build ({build}); it runs "
            f"from PTX {ptx[-1]} through the driver's JIT; use an image built for "
            f"{native}"
        )
    return "fail", (
        f"this PyTorch build has no kernels for {native} ({build}): every CUDA "
        f"kernel fails with 'no kernel image is available'; use an image whose "
        f"torch.cuda.get_arch_list() includes {native}"
    )


def _arch_cc(arch: str) -> int:
    digits = "".join(ch for ch in arch.split("_", 1)[-1] if ch.isdigit())
    return int(digits) if digits else 0


def cuda_vs_driver(build: str | None, driver: int | None) -> tuple[str, str, str]:
    """Is the image's CUDA build supported by the host driver? -> (status, value, diagnosis).

    `driver` is cuDriverGetVersion's integer (13000 for CUDA 13.0). A build newer than the
    driver within the same major version runs under minor-version compatibility (warn: PTX JIT
    and new APIs fail); a newer major version cannot run (fail: "driver too old").
    """
    if build is None:
        return (
            "fail",
            "cpu-only",
            (
                "this PyTorch is a CPU-only build (torch.version.cuda is "
                "None); use a CUDA build of PyTorch in the image"
            ),
        )
    if driver is None or driver <= 0:
        return "warn", f"build {build}", "could not read the driver's CUDA version"
    dmaj, dmin = driver // 1000, (driver % 1000) // 10
    bmaj, bmin = (int(p) for p in [*build.split("."), "0"][:2])
    value = f"build {bmaj}.{bmin}, driver {dmaj}.{dmin}"
    if (bmaj, bmin) <= (dmaj, dmin):
        return "pass", value, ""
    if bmaj == dmaj:
        return (
            "warn",
            value,
            (
                f"CUDA {bmaj}.{bmin} runs on a {dmaj}.{dmin} driver only "
                "through minor-version compatibility (PTX JIT and newer APIs "
                "fail); upgrade the driver or use an older image"
            ),
        )
    return (
        "fail",
        value,
        (
            f"the host driver supports CUDA {dmaj}.{dmin}, the image needs "
            f"{bmaj}.{bmin} (driver too old); upgrade the driver branch or use "
            f"an image built for CUDA {dmaj}.x"
        ),
    )


def busbw(algbw: float, ranks: int) -> float:
    """all_reduce bus bandwidth: algbw x 2(n-1)/n (nccl-tests' definition)."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


# ---- host-wide checks (parent process) -------------------------------------------------------


def parent_checks(torch: Any, spec: dict[str, Any]) -> tuple[list[Result], int]:
    out: list[Result] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    notes = "; ".join(str(w.message).strip() for w in caught)
    if not available:
        out.append(result("cuda_available", "fail", False, True, "", _no_cuda_diagnosis(notes)))
        return out, 0
    out.append(result("cuda_available", "pass", True, True, ""))

    count = int(torch.cuda.device_count())
    expected = spec.get("expected_count")
    mig = spec.get("mig_devices") or []
    if mig:
        out.append(
            result(
                "device_count",
                "skip",
                count,
                None,
                "GPUs",
                "MIG is on: CUDA enumerates MIG devices; see mig_devices",
            )
        )
    elif expected is None:
        out.append(result("device_count", "warn", count, None, "GPUs", "expected count unknown"))
    elif count == expected:
        out.append(result("device_count", "pass", count, expected, "GPUs"))
    else:
        out.append(
            result(
                "device_count",
                "fail",
                count,
                expected,
                "GPUs",
                (
                    f"PyTorch sees {count} GPUs, the host has {expected}; check "
                    "CUDA_VISIBLE_DEVICES, the container's --gpus/--device option, and "
                    "nvidia-smi -L on the host"
                ),
            )
        )

    build = torch.version.cuda
    driver = _driver_version()
    status, value, diag = cuda_vs_driver(build, driver)
    out.append(result("cuda_build_vs_driver", status, value, "build <= driver", "", diag))

    arch_list = list(torch.cuda.get_arch_list())
    want_name = spec.get("expected_name")
    want_cc = spec.get("expected_cc")
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        cc = (int(props.major), int(props.minor))
        name = str(props.name)
        if want_name and want_name not in name:
            out.append(
                result(
                    "device_name",
                    "fail",
                    name,
                    want_name,
                    "",
                    (
                        f"GPU {i} is {name!r}, the catalog expects {want_name!r} for this "
                        "host's PCI id; check the catalog entry and the GPUs the container "
                        "was given"
                    ),
                    i,
                )
            )
        else:
            out.append(result("device_name", "pass", name, want_name, "", "", i))
        cc_text = f"{cc[0]}.{cc[1]}"
        if want_cc and cc_text != want_cc:
            out.append(
                result(
                    "compute_capability",
                    "fail",
                    cc_text,
                    want_cc,
                    "",
                    (
                        f"GPU {i} reports compute capability {cc_text}, the catalog says "
                        f"{want_cc}; fix the catalog entry or check the GPU model"
                    ),
                    i,
                )
            )
        else:
            out.append(result("compute_capability", "pass", cc_text, want_cc, "", "", i))
        status, diag = arch_covers(arch_list, cc)
        out.append(
            result("arch_list", status, " ".join(arch_list), f"sm_{cc[0]}{cc[1]}", "", diag, i)
        )

    if mig:
        out.append(result("peer_access", "skip", None, None, "", "MIG is on (no peer access)"))
    else:
        out.extend(peer_checks(torch, count, bool(spec.get("nvlink"))))
    out.extend(mig_checks(mig))
    return out, count


def _driver_version() -> int | None:
    """cuDriverGetVersion from libcuda (the host's driver, also inside a container)."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except OSError:
        return None
    return int(version.value)


def _no_cuda_diagnosis(notes: str) -> str:
    low = notes.lower()
    if "too old" in low:
        return (
            f"the host driver is too old for this image's CUDA ({notes}); upgrade the "
            "driver or use an image built for an older CUDA"
        )
    if "no nvidia driver" in low or "found no nvidia driver" in low:
        return (
            f"no NVIDIA driver reachable ({notes}); in a container: start it with --gpus "
            "all or --device nvidia.com/gpu=all; on the host: install and load the driver"
        )
    detail = f" ({notes})" if notes else ""
    return (
        "CUDA is not available to PyTorch" + detail + "; check nvidia-smi, "
        "CUDA_VISIBLE_DEVICES, and that the container was started with GPUs"
    )


def peer_checks(torch: Any, count: int, nvlink: bool) -> list[Result]:
    if count < 2:
        return [result("peer_access", "skip", None, None, "", "fewer than 2 GPUs")]
    missing = [
        f"{i}->{j}"
        for i in range(count)
        for j in range(count)
        if i != j and not torch.cuda.can_device_access_peer(i, j)
    ]
    pairs = count * (count - 1)
    value = f"{pairs - len(missing)}/{pairs} pairs"
    if not missing:
        return [result("peer_access", "pass", value, f"{pairs}/{pairs} pairs", "")]
    if not nvlink:
        return [
            result(
                "peer_access",
                "warn",
                value,
                "none required",
                "",
                "no peer access between some GPUs (PCIe host without NVLink: expected "
                f"on some platforms): {' '.join(missing)}",
            )
        ]
    return [
        result(
            "peer_access",
            "fail",
            value,
            f"{pairs}/{pairs} pairs",
            "",
            (
                f"no CUDA peer access {' '.join(missing)} on an NVLink host; check "
                "nvidia-smi topo -m and nvlink -s, the fabric state (nvidia-smi -q | grep -A2 "
                "Fabric), and that MIG is off (MIG disables peer access)"
            ),
        )
    ]


def mig_checks(mig_devices: list[str]) -> list[Result]:
    """Each expected MIG device must be usable alone (CUDA_VISIBLE_DEVICES=<MIG UUID>)."""
    if not mig_devices:
        return [result("mig_devices", "skip", None, None, "", "MIG is off on this host")]
    probe = (
        "import torch;x=torch.ones(256,256,device='cuda');"
        "print(torch.cuda.device_count(), int((x@x)[0,0].item()))"
    )
    bad = []
    for uuid in mig_devices:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid}
        try:
            proc = subprocess.run(
                [sys.executable, "-c", probe],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            ok = proc.returncode == 0 and proc.stdout.split() == ["1", "256"]
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:
            bad.append(uuid)
    value = f"{len(mig_devices) - len(bad)}/{len(mig_devices)} usable"
    if not bad:
        return [result("mig_devices", "pass", value, f"{len(mig_devices)}/{len(mig_devices)}", "")]
    return [
        result(
            "mig_devices",
            "fail",
            value,
            f"{len(mig_devices)}/{len(mig_devices)}",
            "",
            (
                f"MIG devices not usable from CUDA: {' '.join(bad)}; check nvidia-smi -L and "
                "nvidia-smi mig -lgi/-lci (the layout may be missing after a reboot), and that the "
                "container was given the MIG devices"
            ),
        )
    ]


# ---- per-GPU measurements (one worker process per GPU) ---------------------------------------


def timed(torch: Any, fn: Callable[[], object], iters: int, warmup: int) -> float:
    """Mean seconds per call, by CUDA events after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000.0 / iters


def gemm_check(torch: Any, gpu: int, floors: dict[str, Any], n: int = 8192) -> list[Result]:
    """bf16 GEMM n^3: the result must match an fp32 reference (first rows), and be fast."""
    dev = torch.device("cuda", gpu)
    gen = torch.Generator(device=dev).manual_seed(1234 + gpu)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    sec = timed(torch, lambda: torch.matmul(a, b, out=c), iters=20, warmup=5)
    tflops = 2 * n**3 / sec / 1e12
    out = [
        at_least(
            "gemm_bf16",
            tflops,
            floors.get("gemm_bf16_tflops"),
            "TFLOP/s",
            gpu,
            "bf16 GEMM throughput",
        )
    ]
    ref = a[:128].float() @ b.float()
    err = float(((c[:128].float() - ref).abs().max() / ref.abs().max()).item())
    if err <= 2e-2:
        out.append(result("gemm_bf16_correct", "pass", round(err, 5), 2e-2, "rel. error", "", gpu))
    else:
        out.append(
            result(
                "gemm_bf16_correct",
                "fail",
                round(err, 5),
                2e-2,
                "rel. error",
                (
                    f"bf16 GEMM on GPU {gpu} differs from the fp32 reference by {err:.3g}: wrong "
                    "results from this GPU; drain it and run dcgmi diag -r 3, check Xid errors "
                    "(dmesg | grep Xid) and ECC (nvidia-smi -q -d ECC)"
                ),
                gpu,
            )
        )
    return out


def fp8_check(torch: Any, gpu: int, spec: dict[str, Any], n: int = 8192) -> list[Result]:
    """FP8 GEMM where the GPU has FP8 (catalog); skipped elsewhere, never forced."""
    cc = torch.cuda.get_device_capability(gpu)
    has_fp8 = (cc[0], cc[1]) >= (8, 9)
    if not spec.get("fp8"):
        if has_fp8:
            return [
                result(
                    "fp8",
                    "warn",
                    f"cc {cc[0]}.{cc[1]}",
                    "catalog: no FP8",
                    "",
                    "the GPU reports FP8-capable compute capability but the catalog "
                    "says no FP8; fix the catalog entry",
                    gpu,
                )
            ]
        return [result("fp8", "skip", None, None, "", "this GPU has no FP8 (catalog)", gpu)]
    if not has_fp8:
        return [
            result(
                "fp8",
                "fail",
                f"cc {cc[0]}.{cc[1]}",
                ">= 8.9",
                "",
                (
                    "the catalog says FP8 but the GPU reports compute capability "
                    f"{cc[0]}.{cc[1]} (FP8 needs 8.9 or newer); fix the catalog entry"
                ),
                gpu,
            )
        ]
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return [
            result(
                "fp8",
                "fail",
                torch.__version__,
                "torch with float8",
                "",
                ("this PyTorch has no float8 GEMM (torch._scaled_mm); use PyTorch >= 2.1"),
                gpu,
            )
        ]
    dev = torch.device("cuda", gpu)
    gen = torch.Generator(device=dev).manual_seed(99 + gpu)
    a = torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev, dtype=torch.float32)
    try:
        c = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        sec = timed(
            torch,
            lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
            20,
            5,
        )
    except RuntimeError as exc:
        return [
            result(
                "fp8",
                "fail",
                str(exc).splitlines()[0][:200],
                "works",
                "",
                (
                    "FP8 GEMM failed on an FP8 GPU; the image's PyTorch/cuBLAS may be too old for "
                    "this GPU"
                ),
                gpu,
            )
        ]
    ref = a[:128].float() @ b.float().t()
    err = float(((c[:128].float() - ref).abs().max() / ref.abs().max()).item())
    out = [
        at_least(
            "gemm_fp8",
            2 * n**3 / sec / 1e12,
            spec.get("floors", {}).get("gemm_fp8_tflops"),
            "TFLOP/s",
            gpu,
            "FP8 GEMM throughput",
        )
    ]
    if err <= 2e-2:
        out.append(result("fp8", "pass", round(err, 5), 2e-2, "rel. error", "", gpu))
    else:
        out.append(
            result(
                "fp8",
                "fail",
                round(err, 5),
                2e-2,
                "rel. error",
                (
                    f"FP8 GEMM on GPU {gpu} gives wrong results (error {err:.3g}); drain "
                    "the GPU and run dcgmi diag -r 3"
                ),
                gpu,
            )
        )
    return out


def copy_check(torch: Any, gpu: int, floors: dict[str, Any]) -> Result:
    """Device-to-device copy of 2 GiB; bandwidth counts bytes read + written."""
    dev = torch.device("cuda", gpu)
    src = torch.empty(2 * GIB, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    sec = timed(torch, lambda: dst.copy_(src), iters=20, warmup=3)
    return at_least(
        "copy_d2d",
        2 * 2 * GIB / sec / 1e9,
        floors.get("d2d_gbs"),
        "GB/s",
        gpu,
        "device memory copy bandwidth",
    )


def h2d_buffers(torch: Any, gpu: int) -> tuple[Any, Any]:
    """1 GiB of pinned host memory and its device twin; pinning is the slow part, so every
    GPU does it at once, before the copies are timed one GPU at a time."""
    host = torch.empty(GIB, dtype=torch.uint8, pin_memory=True)
    return host, torch.empty(GIB, dtype=torch.uint8, device=torch.device("cuda", gpu))


def h2d_check(torch: Any, gpu: int, floors: dict[str, Any], buffers: tuple[Any, Any]) -> Result:
    """Host-to-device copy of 1 GiB from pinned memory (PCIe)."""
    host, dst = buffers
    sec = timed(torch, lambda: dst.copy_(host, non_blocking=True), iters=10, warmup=2)
    return at_least(
        "copy_h2d",
        GIB / sec / 1e9,
        floors.get("h2d_gbs"),
        "GB/s",
        gpu,
        "host-to-device (PCIe) bandwidth; a link below its maximum speed or width shows here too",
    )


# ---- exact, position-dependent all-reduce values (like nccl-tests -c) --------------------------

# Element i of rank r holds pattern(i, r): a hash of the position plus a per-rank offset, 12 bits
# wide, so a sum over up to 4096 ranks stays an exact integer in fp32 (< 2^24). A buffer read from
# a wrong offset, a stale buffer or another rank's data gives a different sum at almost every
# element, which a constant fill (every element = rank + 1) cannot show.
PATTERN_MUL = 0x5BD1E995  # < 2^31, so index (< 2^32) x MUL fits in int64 without wrapping
PATTERN_RANK = 0x3C3
PATTERN_MASK = 0xFFF
CHECK_CHUNK = 1 << 26  # elements per chunk of the on-GPU fill and check (int64 temporaries)


def _hash(idx: Any) -> Any:
    """Works on Python ints, numpy and torch int64 arrays alike (no wrapping anywhere)."""
    h = (idx * PATTERN_MUL) & 0xFFFFFFFF
    return h ^ (h >> 13)


def pattern(idx: Any, rank: int) -> Any:
    return (_hash(idx) + rank * PATTERN_RANK) & PATTERN_MASK


def expected_sum(idx: Any, ranks: int) -> Any:
    h = _hash(idx)
    total = (h + 0) & PATTERN_MASK
    for r in range(1, ranks):
        total = total + ((h + r * PATTERN_RANK) & PATTERN_MASK)
    return total


def fill_pattern(torch: Any, view: Any, rank: int) -> None:
    n = int(view.numel())
    for s in range(0, n, CHECK_CHUNK):
        e = min(n, s + CHECK_CHUNK)
        idx = torch.arange(s, e, device=view.device, dtype=torch.int64)
        view[s:e].copy_(pattern(idx, rank))


def count_wrong(torch: Any, view: Any, ranks: int) -> Any:
    """Elements of the reduced buffer that differ from the exact sum (a 0-d tensor on the GPU)."""
    n = int(view.numel())
    wrong = torch.zeros((), dtype=torch.int64, device=view.device)
    for s in range(0, n, CHECK_CHUNK):
        e = min(n, s + CHECK_CHUNK)
        idx = torch.arange(s, e, device=view.device, dtype=torch.int64)
        wrong += (view[s:e] != expected_sum(idx, ranks).to(torch.float32)).sum()
    return wrong


def allreduce_sweep(
    torch: Any,
    dist: Any,
    rank: int,
    ranks: int,
    cfg: dict[str, Any],
    report: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """In-place all_reduce(sum) of float32 over the sizes; at every size the values are checked
    exactly, position by position, before the timed loop and again after it."""
    sizes = sweep_sizes(
        int(cfg.get("min_bytes", 1 << 20)),
        int(cfg.get("max_bytes", 4 * GIB)),
        int(cfg.get("factor", 4)),
    )
    iters, warmup = int(cfg.get("iters", 20)), int(cfg.get("warmup", 5))
    dev = torch.device("cuda", rank)
    buf = torch.empty(max(sizes) // 4, dtype=torch.float32, device=dev)
    points = []
    for size in sizes:
        view = buf[: size // 4]
        fill_pattern(torch, view, rank)
        dist.all_reduce(view)
        wrong_before = count_wrong(torch, view, ranks)
        for _ in range(warmup):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / iters
        fill_pattern(torch, view, rank)  # the communicator after the timed loop: exact again?
        dist.all_reduce(view)
        wrong = torch.stack([wrong_before, count_wrong(torch, view, ranks)])
        dist.all_reduce(wrong)  # every rank's count
        algbw = size / sec / 1e9
        point = {
            "bytes": size,
            "time_us": round(sec * 1e6, 1),
            "algbw": round(algbw, 2),
            "busbw": round(busbw(algbw, ranks), 2),
            "wrong": int(wrong.sum().item()),
            "wrong_after_timed": int(wrong[1].item()),
        }
        points.append(point)
        if report:
            report(point)
    del buf
    return points


# ---- NUMA: each worker runs on its GPU's CPUs and allocates host memory there ------------------

MPOL_PREFERRED = 1
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def parse_cpulist(text: str) -> set[int]:
    """'0-31,64-95' (nvidia-smi topo -m's CPU Affinity, the kernel's cpulist) -> CPU numbers."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
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


# ---- per-pair peer copies (parent process, while the workers start) ----------------------------


def p2p_copies(
    torch: Any, count: int, cfg: dict[str, Any], where: dict[str, str]
) -> list[dict[str, Any]]:
    """Copy bandwidth of every ordered GPU pair, one pair at a time (GB/s, bytes moved once)."""
    nbytes, iters, warmup = int(cfg.get("bytes", 256 << 20)), int(cfg.get("iters", 5)), 2
    src = [
        torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", i)) for i in range(count)
    ]
    dst = [torch.empty_like(s) for s in src]
    out = []
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            where["pair"] = f"{i}->{j}"
            for _ in range(warmup):
                dst[j].copy_(src[i])
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            t0 = time.perf_counter()
            for _ in range(iters):
                dst[j].copy_(src[i])
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            sec = (time.perf_counter() - t0) / iters
            out.append({"src": i, "dst": j, "gbs": round(nbytes / sec / 1e9, 1)})
    where["pair"] = ""
    del src, dst
    torch.cuda.empty_cache()
    return out


# ---- workers: one process per GPU, reporting as they go ---------------------------------------

# The phases a worker goes through, in order; a hang is reported as the phase it never left.
PHASES = (
    "start",
    "torch_import",
    "cuda_context",
    "wait_p2p",
    "gemm_bf16",
    "fp8",
    "copy_d2d",
    "nccl_init",
    "numa_binding",
    "copy_h2d",
    "allreduce_sweep",
    "done",
)
COLLECTIVE = frozenset({"nccl_init", "copy_h2d", "allreduce_sweep"})  # waits on the other ranks


class Reporter:
    """What a worker sends the parent: phase changes and each result the moment it exists, so
    that a hang loses nothing that finished. `conn` is the worker's end of a pipe: send() is
    synchronous, so a worker that dies right after a message has still delivered it."""

    def __init__(self, conn: Any, rank: int, t0: float) -> None:
        self.conn, self.rank, self.t0 = conn, rank, t0

    def _at(self) -> float:
        return round(time.time() - self.t0, 2)

    def phase(self, name: str) -> None:
        self.conn.send(("phase", self.rank, name, self._at()))

    def result(self, res: Result) -> None:
        self.conn.send(("result", self.rank, res, self._at()))

    def point(self, point: dict[str, Any]) -> None:
        self.conn.send(("point", self.rank, point, self._at()))

    def done(self, error: str) -> None:
        self.conn.send(("done", self.rank, error, self._at()))


def worker(
    rank: int, ranks: int, spec: dict[str, Any], port: int, conn: Any, t0: float, go: Any
) -> None:
    """One GPU's measurements, then the collective sweep (see PHASES)."""
    rep = Reporter(conn, rank, t0)
    try:
        rep.phase("torch_import")
        import datetime

        import torch
        import torch.distributed as dist

        rep.phase("cuda_context")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.set_device(rank)
        torch.zeros(1, device=torch.device("cuda", rank))
        rep.phase("wait_p2p")  # the parent's peer copies must not overlap our measurements
        go.wait()
        floors = spec.get("floors", {})
        rep.phase("gemm_bf16")
        for res in gemm_check(torch, rank, floors):
            rep.result(res)
        rep.phase("fp8")
        for res in fp8_check(torch, rank, spec):
            rep.result(res)
        rep.phase("copy_d2d")
        rep.result(copy_check(torch, rank, floors))
        torch.cuda.empty_cache()
        rep.phase("nccl_init")
        if ranks > 1:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            opts: dict[str, Any] = {"timeout": datetime.timedelta(seconds=120)}
            try:  # device_id (torch >= 2.3) binds the communicator to this GPU eagerly
                dist.init_process_group(
                    "nccl",
                    rank=rank,
                    world_size=ranks,
                    device_id=torch.device("cuda", rank),
                    **opts,
                )
            except TypeError:
                dist.init_process_group("nccl", rank=rank, world_size=ranks, **opts)
        rep.phase("numa_binding")
        rep.result(bind_numa(rank, spec.get("numa") or {}))
        rep.phase("copy_h2d")
        buffers = h2d_buffers(torch, rank)
        for turn in range(ranks):  # PCIe copies one GPU at a time: shared host paths
            if turn == rank:
                rep.result(h2d_check(torch, rank, floors, buffers))
            if ranks > 1:
                dist.barrier()
        del buffers
        rep.phase("allreduce_sweep")
        if ranks > 1 and spec.get("allreduce", {}).get("enabled", True):
            allreduce_sweep(
                torch,
                dist,
                rank,
                ranks,
                spec.get("allreduce", {}),
                rep.point if rank == 0 else None,
            )
        if ranks > 1:
            dist.destroy_process_group()
        rep.phase("done")
        rep.done("")
    except Exception as exc:  # a worker must always answer, or the parent waits for nothing
        rep.done(f"{type(exc).__name__}: {exc}")


class Progress:
    """The parent's view of the workers, built from their messages."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.phase: dict[int, tuple[str, float]] = {r: ("start", 0.0) for r in range(count)}
        self.timing: dict[int, dict[str, float]] = {r: {} for r in range(count)}
        self.results: dict[int, list[Result]] = {r: [] for r in range(count)}
        self.sweep: list[dict[str, Any]] = []
        self.done: dict[int, str] = {}

    def apply(self, msg: tuple[Any, ...]) -> None:
        kind, rank, body, at = msg
        if kind == "phase":
            self.phase[rank] = (str(body), float(at))
            self.timing[rank][str(body)] = float(at)
        elif kind == "result":
            self.results[rank].append(body)
        elif kind == "point":
            self.sweep.append(body)
        elif kind == "done":
            self.done[rank] = str(body)

    def unfinished(self) -> list[int]:
        return [r for r in range(self.count) if r not in self.done]


def hang_results(progress: Progress, deadline_s: float, elapsed_s: float) -> list[Result]:
    """What a deadline leaves: one fail per GPU that did not finish (its phase and since when),
    and one for the host naming the GPU(s) that held the others up."""
    late = progress.unfinished()
    if not late:
        return []
    out = []
    order = {p: i for i, p in enumerate(PHASES)}
    earliest = min(order.get(progress.phase[r][0], 0) for r in late)
    stuck = [r for r in late if order.get(progress.phase[r][0], 0) == earliest]
    waiting = [r for r in late if r not in stuck]
    for r in late:
        phase, since = progress.phase[r]
        role = (
            "waited for the GPUs named in payload_deadline"
            if r in waiting and phase in COLLECTIVE
            else "did not finish it"
        )
        out.append(
            result(
                "gpu_worker",
                "fail",
                f"stuck in {phase}",
                "finished",
                "",
                f"GPU {r} was in phase {phase} since {since} s and {role}; its worker was killed "
                f"at the payload's deadline ({deadline_s:.0f} s)",
                r,
            )
        )
    phase = progress.phase[stuck[0]][0]
    names = ", ".join(f"GPU {r}" for r in stuck)
    if phase in COLLECTIVE and not waiting:
        what = (
            f"every unfinished GPU ({names}) hung in {phase}, a collective: an NCCL hang "
            "(a GPU or link that stopped answering); rerun with NCCL_DEBUG=INFO and check "
            "nvidia-smi topo -m, nvlink -s and the fabric state"
        )
    else:
        what = (
            f"{names} hung in {phase}"
            + (f" while {', '.join(f'GPU {r}' for r in waiting)} waited for it" if waiting else "")
            + "; drain the host, check the kernel log for Xid errors and nvidia-smi for the "
            "GPU's state, and run dcgmi diag -r 2 on it"
        )
    out.append(
        result(
            "payload_deadline",
            "fail",
            f"{len(late)}/{progress.count} GPUs unfinished",
            f"{deadline_s:.0f} s",
            "",
            f"the GPU checks hit the payload's own deadline after {elapsed_s:.0f} s: {what}; "
            "the results of every check that finished are reported",
        )
    )
    return out


def _stop(procs: list[Any], grace_s: float = 2.0) -> None:
    """Terminate, then kill: a worker stuck in a CUDA call may ignore SIGTERM. Bounded: at most
    2 x grace_s however many workers there are."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for signal_next in (True, False):
        until = time.monotonic() + grace_s
        for p in procs:
            p.join(timeout=max(0.0, until - time.monotonic()))
        if signal_next:
            for p in procs:
                if p.is_alive():
                    p.kill()


def run_workers(
    spec: dict[str, Any],
    count: int,
    deadline_at: float,
    *,
    target: Callable[..., None] = worker,
    context: str = "spawn",
    before_go: Callable[[], list[Result]] | None = None,
    started: float | None = None,
) -> tuple[list[Result], list[dict[str, Any]], dict[int, dict[str, float]], bool]:
    """Start one worker per GPU, run `before_go` (the peer copies) while they start, and collect
    their messages until all are done or `deadline_at` (time.monotonic()) passes; then kill
    what is left and report it (hang_results). The last item: `before_go` never returned."""
    import multiprocessing as mp
    import threading
    from multiprocessing.connection import wait

    started = time.monotonic() if started is None else started  # the payload's start
    ctx = mp.get_context(context)
    go = ctx.Event()
    port = _free_port()
    t0 = time.time()
    procs: list[Any] = []
    readers: list[Any] = []
    for r in range(count):
        reader, writer = ctx.Pipe(duplex=False)
        procs.append(
            ctx.Process(  # type: ignore[attr-defined]
                target=target, args=(r, count, spec, port, writer, t0, go), daemon=True
            )
        )
        procs[-1].start()
        writer.close()  # the worker holds the only writer: EOF when it is gone
        readers.append(reader)
    parent: list[Result] = []
    helper = None
    if before_go is None:
        go.set()
    else:

        def first() -> None:
            try:
                parent.extend(before_go())
            finally:
                go.set()

        helper = threading.Thread(target=first, daemon=True)
        helper.start()
    progress = Progress(count)
    open_readers: list[Any] = list(readers)
    while open_readers and progress.unfinished() and time.monotonic() < deadline_at:
        ready: list[Any] = wait(
            open_readers, timeout=min(0.5, max(0.01, deadline_at - time.monotonic()))
        )
        for conn in ready:
            try:
                progress.apply(conn.recv())
            except (EOFError, OSError):
                open_readers.remove(conn)
    late = progress.unfinished()
    timed_out = bool(late) and time.monotonic() >= deadline_at
    _stop(procs)
    for conn in readers:
        conn.close()
    results: list[Result] = list(parent)
    for rank in range(count):
        results += progress.results[rank]
        err = progress.done.get(rank, "")
        if rank in late and not timed_out:
            code = procs[rank].exitcode
            phase = progress.phase[rank][0]
            err = f"exited with code {code} in phase {phase} without an answer"
        if err:
            results.append(
                result(
                    "gpu_worker",
                    "fail",
                    err[:300],
                    "no error",
                    "",
                    (
                        f"the checks on GPU {rank} stopped: {err[:300]}; if this is an NCCL "
                        "error or a hang, check nvidia-smi topo -m, nvlink -s and the fabric "
                        "state, and rerun with NCCL_DEBUG=INFO"
                    ),
                    rank,
                )
            )
    if timed_out:
        deadline_s = float(spec.get("deadline_s") or (deadline_at - started))
        results += hang_results(progress, deadline_s, time.monotonic() - started)
    stuck_before = helper is not None and helper.is_alive()
    return results, progress.sweep, progress.timing, stuck_before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- entry -----------------------------------------------------------------------------------

# Seconds kept back from the payload's deadline for killing workers and writing the document.
DEADLINE_RESERVE_S = 5.0
# The watchdog fires this long after the deadline: only when the parent itself is stuck.
WATCHDOG_LATE_S = 3.0


class Emitter:
    """Writes the document once: from the main thread at the end, or from the watchdog when the
    parent itself hangs past its deadline (then it also kills the workers and exits)."""

    def __init__(self, out: str | None) -> None:
        import threading

        self.out = out
        self.lock = threading.Lock()
        self.written = False

    def emit(self, doc: dict[str, Any]) -> bool:
        with self.lock:
            if self.written:
                return False
            self.written = True
            body = json.dumps(doc, indent=1)
            if self.out:
                with open(self.out, "w", encoding="utf-8") as fh:
                    fh.write(body + "\n")
            else:  # framed, so stray prints of torch or NCCL cannot break the document
                print(f"{MARKER} begin\n{body}\n{MARKER} end", flush=True)
            print(summary(doc), file=sys.stderr, flush=True)
            return True


def start_watchdog(doc: dict[str, Any], emitter: Emitter, state: dict[str, str], at: float) -> Any:
    """At `at` seconds from now: the parent itself is stuck (torch import, a CUDA call, a MIG
    probe). Report what finished and the parent's phase, kill the workers, exit 1."""
    import multiprocessing as mp
    import threading

    def fire() -> None:
        snapshot = dict(doc)
        snapshot["results"] = [
            *doc["results"],
            result(
                "payload_deadline",
                "fail",
                f"parent in {state.get('phase', '?')}",
                f"{state.get('deadline', '?')} s",
                "",
                f"the GPU checks hit the payload's own deadline in the parent's phase "
                f"{state.get('phase', '?')} (host-wide checks, before or around the per-GPU "
                "workers); the results of every check that finished are reported; check "
                "nvidia-smi and the kernel log for Xid errors",
            ),
        ]
        snapshot["deadline_hit"] = True
        if emitter.emit(_finish(snapshot, float(state.get("started", "0")))):
            _stop(list(mp.active_children()))
            os._exit(1)

    timer = threading.Timer(at + WATCHDOG_LATE_S, fire)
    timer.daemon = True
    timer.start()
    return timer


def run(spec: dict[str, Any], nvls: bool, emitter: Emitter | None = None) -> dict[str, Any]:
    started = time.monotonic()
    if not nvls:
        os.environ.update(NVLS_OFF)
    # CUDA numbers GPUs fastest-first unless told otherwise; nvidia-smi (and topo -m, whose
    # NUMA affinity the workers use) numbers them in PCI bus order.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    doc: dict[str, Any] = {
        "payload": "gpucheck",
        "version": PAYLOAD_VERSION,
        "results": [],
        "sweep": [],
        "p2p": [],
        "ranks": 0,
    }
    deadline_s = float(spec.get("deadline_s") or spec.get("timeout_s") or 240)
    state = {"phase": "torch_import", "deadline": f"{deadline_s:.0f}", "started": str(started)}
    watchdog = start_watchdog(doc, emitter, state, deadline_s) if emitter else None
    if os.path.exists(SIMULATED_HINT):
        doc["simulated"] = True
    try:
        import torch
    except ImportError as exc:
        doc["results"].append(
            result(
                "torch_import",
                "fail",
                str(exc),
                "torch importable",
                "",
                (
                    "PyTorch is not importable where the payload ran; use an image with PyTorch "
                    "(e.g. the NGC PyTorch image) or install torch on the host for --runtime host"
                ),
            )
        )
        return _done(doc, started, watchdog)
    doc["torch"] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _nccl_version(torch),
    }
    state["phase"] = "host-wide checks"
    results, count = parent_checks(torch, spec)
    doc["results"] += results
    if count and spec.get("mig_devices"):
        doc["results"].append(
            result(
                "performance",
                "skip",
                None,
                None,
                "",
                (
                    "MIG is on: GEMM, copy and NCCL figures of MIG slices are not comparable "
                    "with the whole-GPU floors; validate performance with MIG off"
                ),
            )
        )
    elif count:
        doc["parent_s"] = round(time.monotonic() - started, 2)
        state["phase"] = "per-GPU workers"
        p2p_cfg = spec.get("p2p") or {}
        where: dict[str, str] = {}
        before_go = None
        if count > 1 and p2p_cfg.get("enabled"):

            def before_go() -> list[Result]:
                doc["p2p"] = p2p_copies(torch, count, p2p_cfg, where)
                return []

        deadline_at = started + deadline_s - DEADLINE_RESERVE_S
        worker_results, sweep, timings, p2p_stuck = run_workers(
            spec, count, deadline_at, before_go=before_go, started=started
        )
        if p2p_stuck:
            worker_results.insert(
                0,
                result(
                    "p2p_copy",
                    "fail",
                    f"stuck at {where.get('pair') or '?'}",
                    "finished",
                    "",
                    f"the peer-to-peer copy GPU {where.get('pair') or '?'} did not finish "
                    "before the deadline (the workers waited for it): a GPU or NVLink that "
                    "stopped answering; check nvidia-smi topo -m, nvlink -s and the kernel log",
                ),
            )
        doc["worker_timing_s"] = {str(k): v for k, v in sorted(timings.items())}
        doc["results"] += worker_results
        doc["sweep"] = sweep
        doc["ranks"] = count
    return _done(doc, started, watchdog)


def _done(doc: dict[str, Any], started: float, watchdog: Any) -> dict[str, Any]:
    if watchdog is not None:
        watchdog.cancel()
    return _finish(doc, started)


def _nccl_version(torch: Any) -> str | None:
    try:
        return ".".join(str(p) for p in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError, TypeError):
        return None


def _finish(doc: dict[str, Any], started: float) -> dict[str, Any]:
    doc["elapsed_s"] = round(time.monotonic() - started, 2)
    return doc


def summary(doc: dict[str, Any]) -> str:
    lines = [f"{'check':<28} {'status':<6} {'value':>14} {'limit':>10} unit"]
    for r in doc["results"]:
        name = r["name"] if r["gpu"] is None else f"{r['name']}[gpu{r['gpu']}]"
        lines.append(
            f"{name:<28} {r['status']:<6} {r['value']!s:>14.14} {r['limit']!s:>10.10} "
            f"{r['unit']}" + (f"\n    {r['diagnosis']}" if r["diagnosis"] else "")
        )
    for p in doc.get("p2p", []):
        lines.append(f"p2p GPU {p['src']} -> GPU {p['dst']}: {p['gbs']} GB/s")
    for p in doc["sweep"]:
        lines.append(
            f"all_reduce {p['bytes']:>11} B {p['time_us']:>10} us  algbw "
            f"{p['algbw']:>7}  busbw {p['busbw']:>7} GB/s  wrong {p['wrong']}"
        )
    lines.append(f"elapsed {doc['elapsed_s']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", required=True, help="JSON spec file, or '-' for stdin")
    parser.add_argument("--out", help="write the JSON document here instead of stdout")
    parser.add_argument("--nvls", action="store_true", help="leave NVLink multicast allowed")
    args = parser.parse_args(argv)
    if args.spec == "-":
        text = sys.stdin.read()
    else:
        with open(args.spec, encoding="utf-8") as fh:
            text = fh.read()
    emitter = Emitter(args.out)
    doc = run(json.loads(text), args.nvls, emitter)
    emitter.emit(doc)
    return 1 if any(r["status"] == "fail" for r in doc["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
