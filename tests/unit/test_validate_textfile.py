"""The Prometheus textfile validation writes for node-exporter (orchestrator/validate/
textfile.py): parsed by prometheus_client's own text parser, written atomically by a real sh
into a real directory, and written by `provision validate` where the knob says."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import pipeline
from orchestrator import report as rep
from orchestrator.result import CheckResult
from orchestrator.validate.runner import SubprocessExecutor
from orchestrator.validate.textfile import FILE_NAME, metrics_text, publish, write_script

CHECKS = (
    CheckResult("gpu_count", "pass", 8, 8, "GPUs", seconds=0.000013),
    CheckResult("copy_h2d", "fail", 21.5, 40.0, "GB/s", "below the floor", gpu=3, seconds=1.5),
    CheckResult("fabric_state", "pass", "Completed", "Completed", ""),  # text: no value sample
    CheckResult("mig_devices", "skip", None, None, "", 'MIG is "off"'),
)


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fam: Any) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in fam.samples}


def test_the_textfile_parses_with_prometheus_clients_parser() -> None:
    got = families(metrics_text('p5-"a"', CHECKS, 1764974400.25))
    assert set(got) == {
        "gpuprov_check_status",
        "gpuprov_check_value",
        "gpuprov_check_limit",
        "gpuprov_check_duration_seconds",
        "gpuprov_validation_checks",
        "gpuprov_validation_success",
        "gpuprov_validation_last_run_timestamp_seconds",
    }
    assert {f.type for f in got.values()} == {"gauge"}
    host = ("host", 'p5-"a"')  # escaped in the file, read back as it was
    status = samples(got["gpuprov_check_status"])
    assert status[(("check", "copy_h2d"), ("gpu", "3"), host, ("status", "fail"))] == 1.0
    assert status[(("check", "copy_h2d"), ("gpu", "3"), host, ("status", "pass"))] == 0.0
    assert len(status) == 4 * len(CHECKS)  # one series per status per check
    value = samples(got["gpuprov_check_value"])
    assert value == {
        (("check", "gpu_count"), host, ("unit", "GPUs")): 8.0,
        (("check", "copy_h2d"), ("gpu", "3"), host, ("unit", "GB/s")): 21.5,
    }
    assert (
        samples(got["gpuprov_check_limit"])[
            (("check", "copy_h2d"), ("gpu", "3"), host, ("unit", "GB/s"))
        ]
        == 40.0
    )
    assert samples(got["gpuprov_check_duration_seconds"]) == {
        (("check", "gpu_count"), host): 0.000013,
        (("check", "copy_h2d"), ("gpu", "3"), host): 1.5,
    }
    counts = samples(got["gpuprov_validation_checks"])
    assert counts[(host, ("status", "pass"))] == 2.0 and counts[(host, ("status", "fail"))] == 1.0
    assert samples(got["gpuprov_validation_success"]) == {(host,): 0.0}
    assert samples(got["gpuprov_validation_last_run_timestamp_seconds"]) == {(host,): 1764974400.25}


def test_written_atomically_into_the_collector_directory(tmp_path: Path) -> None:
    """A real sh runs the script; a `mv` on PATH records the rename: a temporary file in the
    same directory, whose name node-exporter's `*.prom` glob does not match."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "mv.log"
    real_mv = next(p for p in ("/bin/mv", "/usr/bin/mv") if os.path.exists(p))
    (bin_dir / "mv").write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{log}'\nexec {real_mv} \"$@\"\n"
    )
    (bin_dir / "mv").chmod(0o755)
    collector = tmp_path / "textfile collector"  # a space: the directory is quoted
    collector.mkdir()
    (collector / FILE_NAME).write_text("old\n")
    script = write_script(str(collector), metrics_text("a", CHECKS, 1.0))
    run = SubprocessExecutor()

    def with_mv_shim(given: str, *, timeout: float) -> Any:
        assert given == script
        return run(f'PATH="{bin_dir}:$PATH"\n' + given, timeout=timeout)

    assert publish(with_mv_shim, str(collector), "a", CHECKS, 1.0) == []
    written = collector / FILE_NAME
    assert families(written.read_text())["gpuprov_validation_success"].samples[0].value == 0.0
    assert stat.S_IMODE(written.stat().st_mode) == 0o644  # the collector's user reads it
    assert os.listdir(collector) == [FILE_NAME]  # no temporary file left
    source, target = log.read_text().splitlines()[-2:]
    assert Path(source).parent == collector and Path(target) == written
    assert not Path(source).name.endswith(".prom")


def test_a_missing_directory_is_a_warn_never_a_failed_host(tmp_path: Path) -> None:
    got = publish(SubprocessExecutor(), str(tmp_path / "absent"), "a", CHECKS, 1.0)
    assert [(c.name, c.status) for c in got] == [("prometheus_textfile", "warn")]
    assert "is not a directory" in got[0].diagnosis


def test_provision_validate_writes_each_hosts_textfile_where_the_knob_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(fleet: Any, host: str, *args: Any) -> rep.StageResult:
        return rep.StageResult("done", CHECKS)

    monkeypatch.setattr(pipeline, "_validate_host", fake)
    monkeypatch.setattr(pipeline, "_executor", lambda fleet, host: SubprocessExecutor())
    (tmp_path / "a").mkdir()
    hostvars = {
        "a": {"gpuprov_validation_textfile_dir": str(tmp_path / "a")},
        "b": {},  # off: no file, no extra result
        "c": {"gpuprov_validation_textfile_dir": str(tmp_path / "missing")},
    }
    fleet = SimpleNamespace(hostvars=hostvars)
    hosts = list(hostvars)
    detected = SimpleNamespace(facts={h: object() for h in hosts}, raw={h: {} for h in hosts})
    out = pipeline._validation(
        fleet,  # type: ignore[arg-type]
        hosts,
        detected,  # type: ignore[arg-type]
        {h: SimpleNamespace(blocked=False) for h in hosts},  # type: ignore[misc]
        {h: None for h in hosts},  # type: ignore[misc]
        pipeline.StageOptions(),
    )
    text = (tmp_path / "a" / FILE_NAME).read_text()
    assert (
        samples(families(text)["gpuprov_validation_checks"])[(("host", "a"), ("status", "fail"))]
        == 1.0
    )
    assert out["a"].checks == CHECKS and out["b"].checks == CHECKS
    assert [c.name for c in out["c"].checks] == [*(c.name for c in CHECKS), "prometheus_textfile"]
    assert out["c"].failed and not any(c.status == "fail" for c in out["c"].checks[4:])
