"""validate_host end to end on real outputs: facts from the real 2x H200 capture, the payload
output measured on a real 2x H200 machine, and the payload staged and run here for real."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.policy import load_policy
from orchestrator.result import SIMULATED
from orchestrator.validate import runner
from orchestrator.validate.runner import CommandOutput, SubprocessExecutor, validate_host

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DEVICE_RUN = Path(__file__).resolve().parent / "data" / "gpucheck-h200x2-device.json"
CATALOG = default_catalog()


def real_raw() -> dict[str, str]:
    return dict(load_host(REAL))


class Recorder:
    """An executor that returns a canned answer and keeps the scripts it was given."""

    def __init__(self, answer: CommandOutput) -> None:
        self.answer = answer
        self.scripts: list[str] = []

    def __call__(self, script: str, *, timeout: float) -> CommandOutput:
        self.scripts.append(script)
        return self.answer


def framed(doc_text: str) -> str:
    return f"{runner.MARKER} begin\n{doc_text.strip()}\n{runner.MARKER} end\n"


def test_target_for_the_real_h200_host() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    t = runner.payload_target(facts, raw, CATALOG, load_policy("h200", {}))
    assert t.ranks == 2
    assert t.spec["expected_name"] == "NVIDIA H200"
    assert t.spec["expected_cc"] == "9.0"
    assert t.spec["fp8"] is True
    assert t.spec["nvlink"] is True
    assert t.spec["mig_devices"] == []
    assert t.spec["floors"] == {
        "gemm_bf16_tflops": 711.0,
        "gemm_fp8_tflops": 1305.0,
        "d2d_gbs": 3780.0,
        "h2d_gbs": 48.0,
    }
    assert t.spec["allreduce"]["enabled"] is True
    assert t.spec["allreduce"]["max_bytes"] == 4 << 30


def test_mig_host_lists_mig_devices_and_skips_the_sweep() -> None:
    raw = dict(load_host(Path(__file__).resolve().parent / "fixtures_derived" / "h200x2-mig"))
    facts = parse_host("mig", raw)
    t = runner.payload_target(facts, raw, CATALOG, load_policy("mig", {}))
    assert len(t.spec["mig_devices"]) == 4
    assert t.spec["allreduce"]["enabled"] is False


def test_real_device_output_gives_a_passing_host() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    execute = Recorder(CommandOutput(0, framed(DEVICE_RUN.read_text()), ""))
    results = validate_host(
        facts, raw, catalog=CATALOG, policy=load_policy("h200", {}), execute=execute, runtime="host"
    )
    assert [r.label for r in results if r.status == "fail"] == []
    by = {r.label: r for r in results}
    assert by["gemm_bf16[gpu0]"].status == "pass"
    assert by["nccl_allreduce_4GiB"].status == "pass"
    assert by["nccl_allreduce_values"].value == 0
    assert by["gpu_count"].status == "pass"  # health checks come first
    script = execute.scripts[0]
    assert "GPUPROV_PAYLOAD_EOF" in script
    assert "NCCL_NVLS_ENABLE=0" in script
    assert '"$d/gpucheck.pyz"' in script


def test_simulated_host_skips_cuda_checks_never_passes_them() -> None:
    raw = real_raw()
    raw[names.GPUSIM] = "profile: h200x2\n# exit=0\n"
    facts = parse_host("lab1", raw)
    assert facts.simulated
    execute = Recorder(CommandOutput(0, "", ""))
    results = validate_host(
        facts, raw, catalog=CATALOG, policy=load_policy("lab1", {}), execute=execute
    )
    cuda = {name for name, _ in runner.CUDA_CHECKS}
    for r in results:
        if r.name in cuda:
            assert (r.status, r.diagnosis) == ("skip", SIMULATED)
    assert execute.scripts == []  # nothing ran on the host


def test_docker_without_toolkit_gets_the_toolkit_diagnosis() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    # what Docker 20.10 prints on a host without the NVIDIA Container Toolkit
    stderr = (
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].\n"
    )
    execute = Recorder(CommandOutput(125, "", stderr))
    results = validate_host(
        facts,
        raw,
        catalog=CATALOG,
        policy=load_policy("h200", {}),
        execute=execute,
        runtime="docker",
        image="local/gpucheck:test",
    )
    payload = [r for r in results if r.name == "gpu_payload"]
    assert len(payload) == 1
    assert payload[0].status == "fail"
    assert "NVIDIA Container Toolkit is missing" in payload[0].diagnosis
    assert "systemctl restart docker" in payload[0].diagnosis
    script = execute.scripts[0]
    assert "--gpus all" in script
    assert "--ipc=host" in script
    assert '"$d":/gpuprov:ro' in script
    assert "local/gpucheck:test" in script


@pytest.mark.skipif(shutil.which("python3") is None, reason="needs python3 on PATH")
def test_payload_staged_and_run_here_without_torch() -> None:
    """The real staging script, run by sh here: the payload runs and reports no torch."""
    raw = real_raw()
    facts = parse_host("here", raw)
    target = runner.payload_target(facts, raw, CATALOG, load_policy("here", {}))
    results = runner.run_payload(
        SubprocessExecutor(), target, CATALOG, host="here", runtime="host", image="", timeout_s=60
    )
    assert [(r.name, r.status) for r in results] == [("torch_import", "fail")]


def test_broken_output_is_a_failure_with_the_last_line() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    target = runner.payload_target(facts, raw, CATALOG, load_policy("h200", {}))
    execute = Recorder(CommandOutput(1, "garbage", "Traceback...\nSyntaxError: oops\n"))
    results = runner.run_payload(
        execute, target, CATALOG, host="h200", runtime="host", image="", timeout_s=60
    )
    assert [(r.name, r.status) for r in results] == [("gpu_payload", "fail")]
    assert "SyntaxError: oops" in results[0].diagnosis


def test_runtime_choice() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    assert runner.choose_runtime(facts, load_policy("h200", {}), None) == "host"  # no Docker
    assert runner.choose_runtime(facts, load_policy("h200", {}), "docker") == "docker"


def test_payload_output_framing() -> None:
    doc = {"results": [], "sweep": []}
    assert runner.parse_payload_output("noise\n" + framed(json.dumps(doc)) + "more") == doc
    assert runner.parse_payload_output("no frame") is None
    assert runner.parse_payload_output(framed("{broken")) is None


DEVICE_PROBE = Path(__file__).resolve().parent / "data" / "device-h200x2-probe"


def test_whole_suite_on_the_device_machines_real_outputs() -> None:
    """Facts probed on a real 2x H200 machine and the payload output of the same session
    (docs/validation.md): every check passes, none warns."""
    raw = dict(load_host(DEVICE_PROBE))
    facts = parse_host("vm", raw)
    assert not facts.simulated
    execute = Recorder(CommandOutput(0, framed(DEVICE_RUN.read_text()), ""))
    results = validate_host(
        facts, raw, catalog=CATALOG, policy=load_policy("vm", {}), execute=execute, runtime="host"
    )
    assert [(r.label, r.status) for r in results if r.status in ("fail", "warn")] == []
    by = {r.label: r for r in results}
    assert by["cuda_build_vs_driver"].value == "build 13.0, driver 13.0"
    assert by["driver_coherence"].value == "580.159.04"
    assert by["nccl_allreduce_4GiB"].value == pytest.approx(343.9, rel=0.05)  # nccl-tests
    assert by["nccl_allreduce_1GiB"].value == pytest.approx(330.4, rel=0.05)
    for gpu in (0, 1):  # reference/validation.md's measured figures, within 10 %
        assert by[f"gemm_bf16[gpu{gpu}]"].value == pytest.approx(790, rel=0.10)
        assert by[f"gemm_fp8[gpu{gpu}]"].value == pytest.approx(1450, rel=0.10)
        assert by[f"copy_d2d[gpu{gpu}]"].value == pytest.approx(4200, rel=0.10)
        assert by[f"copy_h2d[gpu{gpu}]"].value == pytest.approx(53, rel=0.10)


def test_subprocess_executor_runs_sh_with_the_script_on_stdin(tmp_path: Path) -> None:
    out = SubprocessExecutor(("env", f"HOME={tmp_path}"))("echo $HOME; exit 3\n", timeout=10)
    assert (out.rc, out.stdout.strip()) == (3, str(tmp_path))
    slow = SubprocessExecutor()("sleep 1\n", timeout=0.2)
    assert slow.rc == 124


def test_nccl_tests_path_judges_the_real_all_reduce_perf_output() -> None:
    raw = real_raw()
    facts = parse_host("h200", raw)
    target = runner.payload_target(facts, raw, CATALOG, load_policy("h200", {}), nccl_tests=True)
    assert target.spec["allreduce"]["enabled"] is False  # the payload skips its own sweep
    text = (REAL / "nccl-tests-all_reduce_perf.txt").read_text()
    execute = Recorder(CommandOutput(0, text, ""))
    results = runner.run_nccl_tests(execute, target, CATALOG, host="h200")
    assert [(r.name, r.status) for r in results] == [
        ("nccl_allreduce_values", "pass"),
        ("nccl_allreduce_1GiB", "pass"),
        ("nccl_allreduce_4GiB", "pass"),
    ]
    assert "all_reduce_perf -b 1M -e 4294967296 -f 4 -g 2 -c 1" in execute.scripts[0]
    absent = Recorder(CommandOutput(127, "", "sh: 1: all_reduce_perf: not found"))
    missing = runner.run_nccl_tests(absent, target, CATALOG, host="h200")
    assert [(r.name, r.status) for r in missing] == [("nccl_allreduce", "fail")]
    assert "install nccl-tests" in missing[0].diagnosis


def test_local_entry_on_this_machine_writes_json(tmp_path: Path) -> None:
    """The real probe on this (GPU-less) machine: the GPU count fails, nothing passes falsely."""
    from orchestrator.validate import local

    out = tmp_path / "v.json"
    code = local.main(["--json", str(out)])
    doc = json.loads(out.read_text())
    by = {c["name"]: c for c in doc["checks"]}
    if by["gpu_count"]["status"] == "pass":  # pragma: no cover - only on a GPU machine
        pytest.skip("this machine has GPUs")
    assert code == 1
    assert doc["ok"] is False
    assert by["gpu_count"]["status"] == "fail"
    assert by["gemm_bf16"]["status"] == "skip"
