"""Exact, position-dependent all-reduce values (like nccl-tests -c)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .decisions import busbw, sweep_sizes
from .results import GIB

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
    device: Any = None,
) -> list[dict[str, Any]]:
    """In-place all_reduce(sum) of float32 over the sizes; at every size the values are checked
    exactly, position by position, before the timed loop and again after it.

    `device`: where the buffer lives (default: GPU `rank`, one process per GPU of one host);
    the multi-node check passes the rank's own GPU, or the CPU for gloo in the lab."""
    sizes = sweep_sizes(
        int(cfg.get("min_bytes", 1 << 20)),
        int(cfg.get("max_bytes", 4 * GIB)),
        int(cfg.get("factor", 4)),
    )
    iters, warmup = int(cfg.get("iters", 20)), int(cfg.get("warmup", 5))
    dev = torch.device("cuda", rank) if device is None else device

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    buf = torch.empty(max(sizes) // 4, dtype=torch.float32, device=dev)
    points = []
    for size in sizes:
        view = buf[: size // 4]
        fill_pattern(torch, view, rank)
        dist.all_reduce(view)
        wrong_before = count_wrong(torch, view, ranks)
        for _round in range(warmup):
            dist.all_reduce(view)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _round in range(iters):
            dist.all_reduce(view)
        sync()
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
