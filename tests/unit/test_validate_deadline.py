"""Nested deadlines: the payload's own deadline fires before the outer kill, reports every
finished check, names the GPU and phase that hung, and kills its workers for sure.

The workers here are stand-ins for gpucheck.workers.worker (no torch, no GPU): they speak the same
Reporter protocol and sleep where a real worker would hang (in the GEMM, in a collective).
They run under the "fork" start method so the test's own functions need no import by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from payloadpkg import FOLDER, load_payload

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.policy import load_policy
from orchestrator.validate import runner

gpucheck = load_payload()

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"


def _finished_gemm(rep: Any, rank: int) -> None:
    rep.phase("gemm_bf16")
    rep.result(gpucheck.results.result("gemm_bf16", "pass", 790.0, 711.0, "TFLOP/s", "", rank))


def hung_gemm_worker(
    rank: int, ranks: int, spec: Any, port: int, q: Any, t0: float, go: Any
) -> None:
    """GPU 1's GEMM never returns; GPU 0 finishes its own checks and waits in nccl_init."""
    rep = gpucheck.workers.Reporter(q, rank, t0)
    rep.phase("torch_import")
    go.wait()
    if rank == 1:
        rep.phase("gemm_bf16")
        time.sleep(600)  # a GEMM that never completes (a hung GPU)
    _finished_gemm(rep, rank)
    rep.phase("copy_d2d")
    rep.result(gpucheck.results.result("copy_d2d", "pass", 4270.0, 3780.0, "GB/s", "", rank))
    rep.phase("nccl_init")
    time.sleep(600)  # init_process_group waits for the rank that never comes


def hung_collective_worker(
    rank: int, ranks: int, spec: Any, port: int, q: Any, t0: float, go: Any
) -> None:
    """Every rank reaches the sweep; the all-reduce never completes (an NCCL hang)."""
    rep = gpucheck.workers.Reporter(q, rank, t0)
    go.wait()
    _finished_gemm(rep, rank)
    rep.phase("allreduce_sweep")
    if rank == 0:
        rep.point({"bytes": 1 << 20, "time_us": 10.0, "algbw": 100.0, "busbw": 100.0, "wrong": 0})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stuck in a CUDA call: SIGTERM is not enough
    time.sleep(600)


def good_worker(rank: int, ranks: int, spec: Any, port: int, q: Any, t0: float, go: Any) -> None:
    rep = gpucheck.workers.Reporter(q, rank, t0)
    go.wait()
    _finished_gemm(rep, rank)
    rep.phase("done")
    rep.done("")


def crashing_worker(
    rank: int, ranks: int, spec: Any, port: int, q: Any, t0: float, go: Any
) -> None:
    rep = gpucheck.workers.Reporter(q, rank, t0)
    go.wait()
    _finished_gemm(rep, rank)
    rep.phase("copy_d2d")
    os._exit(139 if rank == 0 else 0)  # a segfault-like death without an answer


def _run(target: Any, count: int = 2, within: float = 2.0, **kw: Any) -> tuple[Any, float]:
    started = time.monotonic()
    out = gpucheck.workers.run_workers(
        {"deadline_s": within}, count, started + within, target=target, context="fork", **kw
    )
    return out, time.monotonic() - started


def by(results: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in results if r["name"] == name]


def test_a_hung_gemm_is_a_fail_naming_the_gpu_and_phase_and_keeps_the_rest() -> None:
    (results, _, timing, _), took = _run(hung_gemm_worker)
    assert took < 2.0 + 5.0  # the deadline plus at most 2 x 2 s to kill
    # every check that finished is there, GPU 0's copy too
    assert [r["gpu"] for r in by(results, "gemm_bf16")] == [0]
    assert [r["gpu"] for r in by(results, "copy_d2d")] == [0]
    workers = {r["gpu"]: r for r in by(results, "gpu_worker")}
    assert workers[1]["value"] == "stuck in gemm_bf16"
    assert workers[0]["value"] == "stuck in nccl_init"
    assert "waited" in workers[0]["diagnosis"]
    (host,) = by(results, "payload_deadline")
    assert host["status"] == "fail"
    assert "GPU 1 hung in gemm_bf16 while GPU 0 waited for it" in host["diagnosis"]
    assert timing[1]["gemm_bf16"] >= 0


def test_a_collective_hang_names_every_gpu_and_kills_workers_that_ignore_sigterm() -> None:
    (results, sweep, _, _), took = _run(hung_collective_worker)
    assert took < 2.0 + 5.0
    (host,) = by(results, "payload_deadline")
    assert "hung in allreduce_sweep, a collective: an NCCL hang" in host["diagnosis"]
    assert sweep == [
        {"bytes": 1 << 20, "time_us": 10.0, "algbw": 100.0, "busbw": 100.0, "wrong": 0}
    ]
    assert len(by(results, "gemm_bf16")) == 2


def test_no_worker_survives_the_deadline() -> None:
    import multiprocessing as mp

    _run(hung_collective_worker, within=1.0)
    assert [p for p in mp.active_children() if p.is_alive()] == []


def test_healthy_workers_end_before_the_deadline() -> None:
    (results, _, _, stuck), took = _run(good_worker, count=4, within=20.0)
    assert took < 5.0
    assert not by(results, "payload_deadline") and not by(results, "gpu_worker")
    assert len(by(results, "gemm_bf16")) == 4 and not stuck


def test_a_worker_that_dies_is_named_with_its_exit_code_and_phase() -> None:
    (results, _, _, _), took = _run(crashing_worker, within=20.0)
    assert took < 10.0  # no wait for the deadline: every worker is gone
    dead = {r["gpu"]: r["value"] for r in by(results, "gpu_worker")}
    assert dead[0] == "exited with code 139 in phase copy_d2d without an answer"
    assert not by(results, "payload_deadline")


def test_parent_work_before_the_workers_that_hangs_is_reported() -> None:
    def p2p_never_ends() -> list[dict[str, Any]]:
        time.sleep(600)
        return []

    (results, _, _, stuck), _ = _run(good_worker, within=1.5, before_go=p2p_never_ends)
    assert stuck  # the peer copies never returned: the workers never got the go
    assert {r["value"] for r in by(results, "gpu_worker")} == {"stuck in start"}


WATCHDOG = """
import sys, time
sys.path.insert(0, {payload!r})
import gpucheck.entry, gpucheck.results
ok = gpucheck.results.result("cuda_available", "pass", True, True, "")
doc = {{"results": [ok], "sweep": []}}
em = gpucheck.entry.Emitter({out!r})
gpucheck.entry.start_watchdog(doc, em, {{"phase": "host-wide checks", "deadline": "1",
                                   "started": str(time.monotonic())}}, 0.5)
time.sleep(60)  # the parent itself hangs (a CUDA call, a MIG probe)
"""


def test_the_watchdog_reports_a_hung_parent_and_exits(tmp_path: Path) -> None:
    out = tmp_path / "doc.json"
    code = WATCHDOG.format(payload=str(FOLDER), out=str(out))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 15
    assert proc.returncode == 1
    doc = json.loads(out.read_text())
    assert doc["deadline_hit"] is True
    names = [r["name"] for r in doc["results"]]
    assert names == ["cuda_available", "payload_deadline"]
    assert "host-wide checks" in doc["results"][1]["diagnosis"]


def test_the_payload_deadline_ends_well_before_the_outer_kill() -> None:
    raw = dict(load_host(REAL))
    facts = parse_host("h200", raw)
    t = runner.payload_target(
        facts, raw, default_catalog(), load_policy("h200", {}), timeout_s=300, deadline_margin_s=45
    )
    assert t.spec["deadline_s"] == 255 < t.spec["timeout_s"] == 300
    script = runner.stage_script(t.spec, runner.host_command())
    assert '"deadline_s": 255' in script


def test_the_payload_file_has_no_test_code() -> None:
    text = "\n".join(p.read_text() for p in (FOLDER / "gpucheck").glob("*.py"))
    assert "time.sleep(600)" not in text
