"""Per-pair peer copies (parent process, while the workers start)."""

from __future__ import annotations

import time
from typing import Any


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
            for _round in range(warmup):
                dst[j].copy_(src[i])
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            t0 = time.perf_counter()
            for _round in range(iters):
                dst[j].copy_(src[i])
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            sec = (time.perf_counter() - t0) / iters
            out.append({"src": i, "dst": j, "gbs": round(nbytes / sec / 1e9, 1)})
    where["pair"] = ""
    del src, dst
    torch.cuda.empty_cache()
    return out
