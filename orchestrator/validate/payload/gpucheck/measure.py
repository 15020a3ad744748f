"""Per-GPU measurements (one worker process per GPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .results import GIB, Result, at_least, result


def timed(torch: Any, fn: Callable[[], object], iters: int, warmup: int) -> float:
    """Mean seconds per call, by CUDA events after `warmup` untimed calls."""
    for _round in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _round in range(iters):
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
    wrong = (
        f"bf16 GEMM on GPU {gpu} differs from the fp32 reference by {err:.3g}: wrong "
        "results from this GPU; drain it and run dcgmi diag -r 3, check Xid errors "
        "(dmesg | grep Xid) and ECC (nvidia-smi -q -d ECC)"
    )
    return [*out, _correct("gemm_bf16_correct", err, gpu, wrong)]


def _correct(name: str, err: float, gpu: int, wrong: str) -> Result:
    """pass when the relative error against the fp32 reference is at most 2e-2, else fail with
    the diagnosis `wrong`."""
    if err <= 2e-2:
        return result(name, "pass", round(err, 5), 2e-2, "rel. error", "", gpu)
    return result(name, "fail", round(err, 5), 2e-2, "rel. error", wrong, gpu)


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
    wrong = (
        f"FP8 GEMM on GPU {gpu} gives wrong results (error {err:.3g}); drain "
        "the GPU and run dcgmi diag -r 3"
    )
    return [*out, _correct("fp8", err, gpu, wrong)]


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
