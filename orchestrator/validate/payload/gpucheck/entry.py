"""gpuprov's GPU check payload: CUDA checks and an NCCL all-reduce sweep, where PyTorch is.

The entry: the spec in, the framed JSON document out, the deadlines and the watchdog.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from .host_checks import parent_checks
from .p2p import p2p_copies
from .results import MARKER, NVLS_OFF, PAYLOAD_VERSION, SIMULATED_HINT, Result, result
from .workers import _stop, run_workers

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

    def emit_raw(self, doc: dict[str, Any]) -> None:
        """A document without results (the addresses step), framed the same way."""
        with self.lock:
            self.written = True
            print(f"{MARKER} begin\n{json.dumps(doc)}\n{MARKER} end", flush=True)


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


def run_multinode(spec: dict[str, Any], emitter: Emitter | None = None) -> dict[str, Any]:
    """This host's ranks of a multi-node all-reduce (multinode.py); the same deadlines as the
    single-host run: the workers' (run_workers) and the watchdog's for the parent."""
    from . import multinode

    started = time.monotonic()
    mn = spec["multinode"]
    if mn.get("backend") == "nccl" and not spec.get("nvls"):
        os.environ.update(NVLS_OFF)
    env = {str(k): str(v) for k, v in (mn.get("env") or {}).items()}
    if env.get("LD_LIBRARY_PATH") and os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] += ":" + os.environ["LD_LIBRARY_PATH"]  # the fabric's first
    os.environ.update(env)
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    log_dir = multinode.start_nccl_log(env)
    doc: dict[str, Any] = {
        "payload": "gpucheck",
        "mode": "multinode",
        "version": PAYLOAD_VERSION,
        "results": [],
        "sweep": [],
        "p2p": [],
        "ranks": int(mn["count"]),
        "rank_base": int(mn["rank_base"]),
        "world": int(mn["world"]),
        "backend": mn["backend"],
    }
    deadline_s = float(spec.get("deadline_s") or 240)
    state = {"phase": "per-rank workers", "deadline": f"{deadline_s:.0f}", "started": str(started)}
    watchdog = start_watchdog(doc, emitter, state, deadline_s) if emitter else None
    if os.path.exists(SIMULATED_HINT):
        doc["simulated"] = True
    results, sweep, timings, _unused = run_workers(
        spec,
        int(mn["count"]),
        started + deadline_s - DEADLINE_RESERVE_S,
        target=multinode.worker,
        started=started,
    )
    doc["results"] = results
    doc["sweep"] = sweep
    doc["worker_timing_s"] = {str(k): v for k, v in sorted(timings.items())}
    doc["deadline_hit"] = any(r["name"] == "payload_deadline" for r in results)
    if log_dir is not None:
        doc["nccl_log_lines"] = multinode.collect_nccl_log(log_dir, str(mn.get("log_line") or ""))
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
    parser.add_argument(
        "--multinode", action="store_true", help="this host's ranks of a multi-node all-reduce"
    )
    parser.add_argument(
        "--addresses", action="store_true", help="print this host's identity and IPv4 interfaces"
    )
    args = parser.parse_args(argv)
    if args.addresses:
        from .multinode import addresses

        Emitter(args.out).emit_raw(addresses())
        return 0
    if args.spec == "-":
        text = sys.stdin.read()
    else:
        with open(args.spec, encoding="utf-8") as fh:
            text = fh.read()
    emitter = Emitter(args.out)
    spec = json.loads(text)
    doc = run_multinode(spec, emitter) if args.multinode else run(spec, args.nvls, emitter)
    emitter.emit(doc)
    return 1 if any(r["status"] == "fail" for r in doc["results"]) else 0
