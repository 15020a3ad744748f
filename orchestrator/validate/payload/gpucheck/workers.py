"""Workers: one process per GPU, reporting as they go."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from .allreduce import allreduce_sweep
from .measure import copy_check, fp8_check, gemm_check, h2d_buffers, h2d_check
from .numa import bind_numa
from .results import Result, result

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
        self.mark: dict[int, float] = {r: 0.0 for r in range(count)}  # last phase or result

    def apply(self, msg: tuple[Any, ...]) -> None:
        kind, rank, body, at = msg
        if kind == "phase":
            self.phase[rank] = (str(body), float(at))
            self.timing[rank][str(body)] = float(at)
            self.mark[rank] = float(at)
        elif kind == "result":  # its time: since the worker's last phase change or result
            self.results[rank].append({**body, "seconds": round(float(at) - self.mark[rank], 2)})
            self.mark[rank] = float(at)
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
