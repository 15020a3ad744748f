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
one process per GPU; each measures its own GPU (bf16/fp8 GEMM, device copy; host-to-device
copies one GPU at a time) and then all join one NCCL all-reduce sweep. Per-GPU work runs in
parallel, so 8 GPUs take about as long as 2.

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
from queue import Empty
from typing import Any

PAYLOAD_VERSION = 1
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
    """A check result with CheckResult's fields (orchestrator/validate/result.py)."""
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


def allreduce_sweep(
    torch: Any, dist: Any, rank: int, ranks: int, cfg: dict[str, Any]
) -> list[dict[str, Any]]:
    """In-place all_reduce(sum) of float32 over the sizes; every size is checked for values."""
    sizes = sweep_sizes(
        int(cfg.get("min_bytes", 1 << 20)),
        int(cfg.get("max_bytes", 4 * GIB)),
        int(cfg.get("factor", 4)),
    )
    iters, warmup = int(cfg.get("iters", 20)), int(cfg.get("warmup", 5))
    dev = torch.device("cuda", rank)
    buf = torch.empty(max(sizes) // 4, dtype=torch.float32, device=dev)
    expected = float(ranks * (ranks + 1) // 2)
    points = []
    for size in sizes:
        view = buf[: size // 4]
        view.fill_(float(rank + 1))
        dist.all_reduce(view)
        wrong = (view != expected).sum()
        dist.all_reduce(wrong)
        view.zero_()
        for _ in range(warmup):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / iters
        algbw = size / sec / 1e9
        points.append(
            {
                "bytes": size,
                "time_us": round(sec * 1e6, 1),
                "algbw": round(algbw, 2),
                "busbw": round(busbw(algbw, ranks), 2),
                "wrong": int(wrong.item()),
            }
        )
    del buf
    return points


def worker(rank: int, ranks: int, spec: dict[str, Any], port: int, queue: Any, t0: float) -> None:
    """One GPU's measurements, then the collective sweep.

    Sends (rank, results, sweep, error, timing); timing marks are seconds since `t0`, the
    parent's start of the workers (time.time(): comparable across processes).
    """
    results: list[Result] = []
    sweep: list[dict[str, Any]] = []
    timing: dict[str, float] = {}

    def mark(what: str) -> None:
        timing[what] = round(time.time() - t0, 2)

    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.set_device(rank)
        mark("torch_ready")
        floors = spec.get("floors", {})
        results += gemm_check(torch, rank, floors)
        results += fp8_check(torch, rank, spec)
        results.append(copy_check(torch, rank, floors))
        torch.cuda.empty_cache()
        mark("gpu_checks")
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
        mark("nccl_init")
        buffers = h2d_buffers(torch, rank)
        for turn in range(ranks):  # PCIe copies one GPU at a time: shared host paths
            if turn == rank:
                results.append(h2d_check(torch, rank, floors, buffers))
            if ranks > 1:
                dist.barrier()
        del buffers
        mark("h2d")
        if ranks > 1 and spec.get("allreduce", {}).get("enabled", True):
            sweep = allreduce_sweep(torch, dist, rank, ranks, spec.get("allreduce", {}))
        mark("sweep")
        if ranks > 1:
            dist.destroy_process_group()
        queue.put((rank, results, sweep, "", timing))
    except Exception as exc:  # a worker must always answer, or the parent waits for nothing
        queue.put((rank, results, sweep, f"{type(exc).__name__}: {exc}", timing))


def run_workers(
    spec: dict[str, Any], count: int, timeout: float
) -> tuple[list[Result], list[dict[str, Any]], dict[int, dict[str, float]]]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    t0 = time.time()
    procs = [
        ctx.Process(target=worker, args=(r, count, spec, port, queue, t0)) for r in range(count)
    ]
    for p in procs:
        p.start()
    replies: dict[int, tuple[list[Result], list[dict[str, Any]], str]] = {}
    timings: dict[int, dict[str, float]] = {}
    deadline = time.monotonic() + timeout
    quiet = 0  # polls with every worker gone and nothing left to read
    while len(replies) < count and time.monotonic() < deadline and quiet < 3:
        try:
            rank, res, sweep, err, timing = queue.get(timeout=1.0)
        except Empty:
            quiet = quiet + 1 if not any(p.is_alive() for p in procs) else 0
            continue
        replies[rank] = (res, sweep, err)
        timings[rank] = timing
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
    results: list[Result] = []
    for rank in range(count):
        code = procs[rank].exitcode
        gone = f"exited with code {code} without an answer" if code else ""
        res, _, err = replies.get(rank, ([], [], gone or f"no answer within {timeout:.0f} s"))
        results += res
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
    sweep = replies.get(0, ([], [], ""))[1]
    return results, sweep, timings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- entry -----------------------------------------------------------------------------------


def run(spec: dict[str, Any], nvls: bool) -> dict[str, Any]:
    started = time.monotonic()
    if not nvls:
        os.environ.update(NVLS_OFF)
    doc: dict[str, Any] = {
        "payload": "gpucheck",
        "version": PAYLOAD_VERSION,
        "results": [],
        "sweep": [],
        "ranks": 0,
    }
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
        return _finish(doc, started)
    doc["torch"] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _nccl_version(torch),
    }
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
        worker_results, sweep, timings = run_workers(spec, count, float(spec.get("timeout_s", 240)))
        doc["worker_timing_s"] = {str(k): v for k, v in sorted(timings.items())}
        doc["results"] += worker_results
        doc["sweep"] = sweep
        doc["ranks"] = count
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
    doc = run(json.loads(text), args.nvls)
    body = json.dumps(doc, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(body + "\n")
    else:  # framed, so stray prints of torch or NCCL cannot break the document
        print(f"{MARKER} begin\n{body}\n{MARKER} end", flush=True)
    print(summary(doc), file=sys.stderr)
    return 1 if any(r["status"] == "fail" for r in doc["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
