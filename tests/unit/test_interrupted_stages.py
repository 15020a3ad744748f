"""Issue 48: Ctrl-C in validate or verify left `"hosts": {}` and no JUnit (and after an apply
said "mid-change"). Now the report and the JUnit file hold what the stage knew: hosts that
finished keep their results, the others are an `error` result "interrupted"."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from _helpers import H200, write_inventory

from orchestrator import pipeline
from orchestrator import report as rep
from orchestrator.cli import main
from orchestrator.parsers import parse_host
from orchestrator.result import CheckResult

TWO = "[gpu_nodes]\na ansible_connection=local\nb ansible_connection=local\n"


@pytest.fixture(autouse=True)
def _runner_not_left_interrupted() -> Iterator[None]:
    """A Ctrl-C in validate sets the runner's process-wide INTERRUPTED (a real run exits
    after it); later tests in this worker must not inherit it."""
    from orchestrator.validate import runner

    yield
    runner.INTERRUPTED.clear()


def _fixture_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both hosts detected as the real H200 fixture (no probe runs)."""
    raw = {p.name: p.read_text() for p in H200.iterdir() if p.is_file()}

    def detect(fleet: Any, console: Any, *, record: bool = False) -> pipeline.Detected:
        return pipeline.Detected(
            raw={h: raw for h in fleet.hosts},
            facts={h: parse_host(h, raw) for h in fleet.hosts},
            errors={},
        )

    monkeypatch.setattr(pipeline, "_detect", detect)


def _outputs(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    return report, junit, ["--report", str(report), "--junit", str(junit)]


def test_ctrl_c_in_validate_writes_the_report_and_junit_with_what_it_knew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fixture_detection(monkeypatch)

    a_done = threading.Event()

    def validate(fleet: Any, host: str, *args: Any) -> rep.StageResult:
        if host == "b":
            a_done.wait(10)
            time.sleep(0.1)  # a's result handed back to its future
            raise KeyboardInterrupt  # the signal lands while b's checks run
        a_done.set()
        return rep.StageResult("done", (CheckResult("gpu_count", "pass", 2, 2, "GPUs"),))

    monkeypatch.setattr(pipeline, "_validate_host", validate)
    report, junit, argv = _outputs(tmp_path)
    inv = write_inventory(tmp_path, TWO)
    assert main(["validate", "-i", str(inv), *argv]) == 130
    err = capsys.readouterr().err
    assert "interrupted during validate: 1 of 2 host(s) finished it" in err
    assert "mid-change" not in err and "Traceback" not in err
    doc = json.loads(report.read_text())
    assert doc["interrupted"] is True and doc["exit_code"] == 130 and doc["signal"] == "SIGINT"
    assert doc["hosts"]["a"]["validation"]["state"] == "done"
    assert doc["hosts"]["a"]["validation"]["checks"][0]["name"] == "gpu_count"
    assert doc["hosts"]["b"]["validation"] == {
        "state": "error",
        "note": "interrupted (SIGINT) before it finished",
        "checks": [],
    }
    errors = [e.get("message") for e in ET.parse(junit).getroot().iter("error")]
    assert errors == ["interrupted (SIGINT) before it finished"]  # b's, as a JUnit <error>
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert "gpu_count" in names  # a's check, kept


def test_ctrl_c_while_the_first_host_hangs_keeps_the_hosts_that_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hosts' results were read in the inventory's order: a Ctrl-C while the first host
    hung lost the second's finished checks ("0 of 2", found by the lab test
    test_ctrl_c_in_validate_writes_the_report_and_junit)."""
    _fixture_detection(monkeypatch)
    b_done = threading.Event()

    def validate(fleet: Any, host: str, *args: Any) -> rep.StageResult:
        if host == "a":
            b_done.wait(10)
            time.sleep(0.1)  # b's result handed back to its future
            raise KeyboardInterrupt  # a hangs; the signal lands
        b_done.set()
        return rep.StageResult("done", (CheckResult("gpu_count", "pass", 2, 2, "GPUs"),))

    monkeypatch.setattr(pipeline, "_validate_host", validate)
    report, junit, argv = _outputs(tmp_path)
    inv = write_inventory(tmp_path, TWO)
    assert main(["validate", "-i", str(inv), *argv]) == 130
    assert "interrupted during validate: 1 of 2 host(s) finished it" in capsys.readouterr().err
    doc = json.loads(report.read_text())
    assert doc["hosts"]["b"]["validation"]["state"] == "done"
    assert doc["hosts"]["a"]["validation"]["state"] == "error"
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert "gpu_count" in names  # b's check in the JUnit too


def test_ctrl_c_stops_validate_where_sigint_came_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A background job of a non-interactive shell starts with SIGINT ignored (CI's lab
    groups): validate then ran on past a Ctrl-C, to its end (CI, 2026-12-06: the lab test
    test_ctrl_c_in_validate_writes_the_report_and_junit got exit 1 after dcgmi's 300 s).
    provision takes SIGINT back as Python's KeyboardInterrupt."""
    _fixture_detection(monkeypatch)
    seen: list[object] = []

    def validate(fleet: Any, host: str, *args: Any) -> rep.StageResult:
        seen.append(signal.getsignal(signal.SIGINT))
        return rep.StageResult("done", (CheckResult("gpu_count", "pass", 2, 2, "GPUs"),))

    monkeypatch.setattr(pipeline, "_validate_host", validate)
    _report, _junit, argv = _outputs(tmp_path)
    inv = write_inventory(tmp_path, TWO)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert main(["validate", "-i", str(inv), *argv]) == 0
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == [signal.default_int_handler] * 2


def test_ctrl_c_in_verify_writes_the_report_and_junit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fixture_detection(monkeypatch)
    monkeypatch.setattr(pipeline, "_start_suite", lambda *a, **k: None)

    def suite(*args: Any, **kwargs: Any) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr("orchestrator.verify.runner.run_suite", suite)
    report, junit, argv = _outputs(tmp_path)
    inv = write_inventory(tmp_path, TWO)
    arts = tmp_path / "arts"
    assert main(["verify", "-i", str(inv), "--artifacts-dir", str(arts), *argv]) == 130
    err = capsys.readouterr().err
    assert "interrupted during verify: 0 of 2 host(s) finished it" in err
    doc = json.loads(report.read_text())
    assert doc["interrupted"] is True and set(doc["hosts"]) == {"a", "b"}
    for h in ("a", "b"):
        assert doc["hosts"][h]["verification"]["state"] == "error"
        assert doc["hosts"][h]["plan"] is not None  # what detection and planning knew
    errors = [e.get("message") for e in ET.parse(junit).getroot().iter("error")]
    assert errors == ["interrupted (SIGINT) before it finished"] * 2
    run_dirs = [d for d in arts.iterdir() if d.is_dir()]
    assert len(run_dirs) == 1 and json.loads((run_dirs[0] / "report.json").read_text()) == doc
