"""Every fault knob of the lab's GPU simulator, detected by the health checks with the right
diagnosis. The simulator runs in-process under a temporary root (tests/lab/gpusim, README
"Running it without a container"); tests/lab/test_validate_lab.py repeats this on lab hosts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.parsers import parse_host
from orchestrator.policy import load_policy
from orchestrator.result import SIMULATED, CheckResult
from orchestrator.validate.health import health_input, run_health
from orchestrator.validate.runner import CUDA_CHECKS, CommandOutput, validate_host

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim.testing import SimHost  # noqa: E402


@pytest.fixture
def sim(tmp_path: Path) -> SimHost:
    """2x H200 as in the real fixture: driver 580.159.04 installed and loaded, persistence on."""
    host = SimHost.create(tmp_path, "h200x2-fixture")
    host.install_driver("580.159.04", "open")
    host.boot()
    assert host.smi("-pm", "1").code == 0
    return host


def health(sim: SimHost) -> list[CheckResult]:
    raw = sim.raw()
    facts = parse_host("sim", raw)
    assert facts.simulated
    return run_health(health_input(facts, default_catalog(), expected_gpus=2))


def failing(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.label: r for r in results if r.status == "fail"}


def test_healthy_simulated_host_has_no_failure(sim: SimHost) -> None:
    results = health(sim)
    assert failing(results) == {}
    assert [r.label for r in results if r.status == "warn"] == []


# knob -> (--gpu argument or None, the failing check's label, words its diagnosis must hold)
KNOBS = {
    "gpu-missing": (None, "gpu_count", "on the PCI bus, 2 expected"),
    "nvlink-inactive": ("1", "nvlink_active", "GPU 1 link 0"),
    "xid": (None, "xid_errors", "Xid 79"),
    "row-remap-pending": ("0", "row_remap[gpu0]", "row remap is pending"),
    "pcie-degraded": ("1", "pcie_link[gpu1]", "16 GT/s x16, below its maximum 32 GT/s x16"),
    "fabric-not-completed": (None, "fabric_state", "fabric not Completed"),
}


# knobs that no host health check reads, and where they are tested instead
ELSEWHERE = {
    "dcgm-memory-mismatch": "the dcgmi test double only (tests/lab/test_role_dcgm_lab.py)",
}


def test_the_table_covers_every_knob_the_simulator_has(sim: SimHost) -> None:
    listed = {line.split()[0] for line in sim.gpusim("fault", "list").out.splitlines() if line}
    assert listed == set(KNOBS) | set(ELSEWHERE)


@pytest.mark.parametrize("knob", sorted(ELSEWHERE))
def test_a_knob_of_another_tool_leaves_the_health_checks_passing(sim: SimHost, knob: str) -> None:
    assert sim.gpusim("fault", knob, "on", "--gpu", "1").code == 0
    try:
        assert failing(health(sim)) == {}
    finally:
        assert sim.gpusim("fault", knob, "off", "--gpu", "1").code == 0


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_fault_knob_is_detected_with_its_diagnosis(sim: SimHost, knob: str) -> None:
    gpu, label, words = KNOBS[knob]
    args = ["fault", knob, "on", *(["--gpu", gpu] if gpu else [])]
    assert sim.gpusim(*args).code == 0, sim.gpusim(*args).captured
    bad = failing(health(sim))
    assert label in bad, f"{knob}: failing checks {sorted(bad)}"
    assert words in bad[label].diagnosis
    # and off again: the host is healthy
    assert sim.gpusim("fault", knob, "off", *(["--gpu", gpu] if gpu else [])).code == 0
    assert failing(health(sim)) == {}


def test_simulated_host_skips_every_cuda_check(sim: SimHost) -> None:
    raw = sim.raw()
    facts = parse_host("sim", raw)

    def never(script: str, *, timeout: float) -> CommandOutput:
        raise AssertionError("nothing may run on a simulated host")

    results = validate_host(
        facts, raw, catalog=default_catalog(), policy=load_policy("sim", {}), execute=never
    )
    cuda = [r for r in results if r.name in {n for n, _ in CUDA_CHECKS}]
    assert len(cuda) == len(CUDA_CHECKS)
    assert {(r.status, r.diagnosis) for r in cuda} == {("skip", SIMULATED)}
