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
        SimpleNamespace(hostvars={}),  # type: ignore[arg-type]
        hosts,
        detected,  # type: ignore[arg-type]
        plans,  # type: ignore[arg-type]
        {h: None for h in hosts},  # type: ignore[misc]
        pipeline.StageOptions(),
    )
    assert peak[0] == 6  # all six at once (a wall-clock bound failed on a loaded machine)
    assert list(out) == hosts and out["down"].state == "not_run"
    assert sorted(seen) == sorted(f"validate n{i}: GPU checks on 8 GPUs (host)" for i in range(6))


# --- issue 49: each testcase's real duration, and the measured value and limit ----------------


def test_a_testcase_carries_its_duration_value_limit_and_unit() -> None:
    timed = (
        CheckResult("copy_h2d", "pass", 54.3, 40.0, "GB/s", gpu=0, seconds=1.25),
        CheckResult("ecc_uncorrectable", "fail", 2, 0, "SRAM errors", "RMA it", 3, 0.004),
        CheckResult("mig_devices", "skip", None, None, "", "MIG is off"),  # never timed
    )
    host = rep.HostReport("a", validation=rep.StageResult("done", timed))
    report = rep.RunReport("validate", (host,))
    root = ET.fromstring(junit_xml(report))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    copy = cases["copy_h2d[gpu0]"]
    assert copy.get("time") == "1.250000"
    props = {p.get("name"): p.get("value") for p in copy.iterfind("properties/property")}
    assert props == {"status": "pass", "value": "54.3", "limit": "40.0", "unit": "GB/s"}
    assert copy.findtext("system-out") == "pass: value 54.3 GB/s, limit 40.0"
    ecc = cases["ecc_uncorrectable[gpu3]"]
    assert ecc.get("time") == "0.004000"
    assert ecc.findtext("system-out") == "fail: RMA it (value 2 SRAM errors, limit 0)"
    assert "time" not in cases["mig_devices"].attrib  # not measured: no made-up 0
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["a.gpu"].get("time") == "1.250000"
    assert suites["a.health"].get("time") == "0.004000"


def test_health_checks_are_timed_where_they_run() -> None:
    from orchestrator.catalog import default_catalog
    from orchestrator.factsdir import load_host
    from orchestrator.parsers import parse_host
    from orchestrator.validate.health import health_input, run_health

    real = Path(__file__).parents[1] / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
    facts = parse_host("h200-real", dict(load_host(real)))
    results = run_health(health_input(facts, default_catalog(), expected_gpus=2))
    assert results and all(r.seconds is not None and r.seconds >= 0 for r in results)
    assert all(r.to_dict()["seconds"] == r.seconds for r in results)  # into the JSON report


def test_verification_keeps_pytests_own_testcase_time() -> None:
    from orchestrator.verify.runner import parse_junit

    data = Path(__file__).parent / "data" / "verify-junit-localhost.xml"
    by_name = {r.name: r for r in parse_junit(data.read_text())["localhost"]}
    assert by_name["verify.driver_packages_at_planned_version_and_held"].seconds == 0.095
    assert by_name["verify.loaded_module_matches_plan"].seconds == 0.015


def test_a_payload_result_is_timed_from_its_workers_previous_step() -> None:
    from payloadpkg import load_payload

    workers = load_payload().workers
    progress = workers.Progress(2)
    r = lambda name: {"name": name, "status": "pass"}  # noqa: E731
    for msg in (
        ("phase", 0, "gemm_bf16", 10.0),
        ("phase", 1, "gemm_bf16", 10.5),
        ("result", 0, r("gemm_bf16"), 12.25),
        ("phase", 0, "fp8", 12.25),
        ("result", 0, r("fp8_e4m3"), 13.0),
        ("result", 0, r("fp8_e5m2"), 13.5),
        ("result", 1, r("gemm_bf16"), 11.0),
    ):
        progress.apply(msg)
    assert [x["seconds"] for x in progress.results[0]] == [2.25, 0.75, 0.5]
    assert [x["seconds"] for x in progress.results[1]] == [0.5]
    assert CheckResult.from_dict(progress.results[0][0]).seconds == 2.25
