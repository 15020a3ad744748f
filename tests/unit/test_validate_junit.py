"""--junit: one testcase per check per host for every stage, and hosts validated in parallel
with a line of progress per host."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from orchestrator import pipeline
from orchestrator import report as rep
from orchestrator.cli import main
from orchestrator.errors import BadInputError
from orchestrator.result import CheckResult
from orchestrator.validate.junit import check_path, junit_xml


def checks() -> tuple[CheckResult, ...]:
    return (
        CheckResult("gpu_count", "pass", 8, 8, "GPUs"),
        CheckResult("ecc_uncorrectable", "fail", 2, 0, "SRAM errors", "RMA it", gpu=3),
        CheckResult("gemm_bf16", "warn", 700.0, None, "TFLOP/s", "no floor", gpu=0),
        CheckResult("mig_devices", "skip", None, None, "", "MIG is off"),
        CheckResult("nccl_allreduce_16GiB", "pass", 370.0, 333.0, "GB/s"),
    )


def report() -> rep.RunReport:
    return rep.RunReport(
        "all",
        (
            rep.HostReport(
                "p5-a",
                validation=rep.StageResult("done", checks()),
                verification=rep.StageResult(
                    "done", (CheckResult("driver_held", "pass", 1, 1, ""),)
                ),
            ),
            rep.HostReport(
                "p5-b", validation=rep.StageResult("not_run", note="host not reachable")
            ),
        ),
    )


def test_one_testcase_per_check_per_host_in_suites_per_stage() -> None:
    root = ET.fromstring(junit_xml(report()))
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {
        "p5-a.health",
        "p5-a.gpu",
        "p5-a.nccl",
        "p5-a.verification",
        "p5-b.health",
        "p5-b.verification",
    }
    health = suites["p5-a.health"]
    assert [c.get("name") for c in health] == ["gpu_count", "ecc_uncorrectable[gpu3]"]
    assert health.get("failures") == "1"
    failure = health.find("testcase[@name='ecc_uncorrectable[gpu3]']/failure")
    assert failure is not None and failure.get("message") == "RMA it"
    gpu = suites["p5-a.gpu"]
    warn = gpu.find("testcase[@name='gemm_bf16[gpu0]']/system-out")
    assert warn is not None and (warn.text or "").startswith("warn: no floor")
    assert gpu.find("testcase[@name='mig_devices']/skipped") is not None
    assert [c.get("name") for c in suites["p5-a.nccl"]] == ["nccl_allreduce_16GiB"]
    unreachable = suites["p5-b.health"].find("testcase/skipped")
    assert unreachable is not None and unreachable.get("message") == "host not reachable"


def test_a_bad_junit_path_is_bad_input_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="directory does not exist"):
        check_path(str(tmp_path / "missing" / "x.xml"))
    with pytest.raises(BadInputError, match="is a directory"):
        check_path(str(tmp_path))
    assert check_path(str(tmp_path / "x.xml")) == tmp_path / "x.xml"
    assert main(["validate", "--junit", str(tmp_path / "no" / "x.xml")]) == 2


def test_hosts_are_validated_in_parallel_with_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    active, peak = [0], [0]
    lock = threading.Lock()

    def fake(fleet: Any, host: str, *args: Any) -> rep.StageResult:
        say = args[4]
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        say("GPU checks on 8 GPUs (host)")
        time.sleep(0.5)
        with lock:
            active[0] -= 1
        return rep.StageResult("done", (CheckResult("gpu_count", "pass", 8, 8, "GPUs"),))

    monkeypatch.setattr(pipeline, "_validate_host", fake)
    monkeypatch.setattr(pipeline.Console, "print", lambda self, *a, **k: seen.append(str(a[0])))
    hosts = [f"n{i}" for i in range(6)] + ["down"]
    detected = SimpleNamespace(facts={h: object() for h in hosts[:-1]}, raw={h: {} for h in hosts})
    plans = {h: SimpleNamespace(blocked=False) for h in hosts}
    out = pipeline._validation(
        None,  # type: ignore[arg-type]
        hosts,
        detected,  # type: ignore[arg-type]
        plans,  # type: ignore[arg-type]
        {h: None for h in hosts},  # type: ignore[misc]
        pipeline.StageOptions(),
    )
    assert peak[0] == 6  # all six at once (a wall-clock bound failed on a loaded machine)
    assert list(out) == hosts and out["down"].state == "not_run"
    assert sorted(seen) == sorted(f"validate n{i}: GPU checks on 8 GPUs (host)" for i in range(6))
