"""DCGM (the opt-in dcgm role): DCGM 4 at the planned version and CUDA flavour, held, DCGM 3
gone, the nvidia-dcgm host engine running, and the exporter's endpoint when one is planned.
Names, unit and port: tests/recorded/reference/dcgm.yaml (the role's vars/main.yml)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.verify.expect import DcgmExpectation, Expectation, upstream_version
from orchestrator.verify.suite import hoststate

CORE = "datacenter-gpu-manager-4-core"
FLAVOUR = "datacenter-gpu-manager-4-cuda"
DCGM3 = "datacenter-gpu-manager"
UNIT = "nvidia-dcgm"
EXPORTER_UNITS = {"host": "nvidia-dcgm-exporter", "container": "docker.dcgm-exporter"}


@pytest.fixture
def dcgm(expect: Expectation) -> DcgmExpectation:
    if expect.dcgm is None:
        pytest.skip("dcgm is not in this host's plan (gpuprov_roles)")
    return expect.dcgm


def test_dcgm4_at_planned_version_and_flavour_and_held(host: Any, dcgm: DcgmExpectation) -> None:
    pkgs = hoststate.packages(host, (CORE, f"{FLAVOUR}*", DCGM3))
    assert CORE in pkgs, f"{CORE} is not installed: apply the dcgm role"
    flavours = sorted(n for n in pkgs if n.startswith(FLAVOUR))
    wanted = f"{FLAVOUR}{dcgm.cuda_major}" if dcgm.cuda_major else None
    assert flavours, f"no {FLAVOUR}<N> package: DCGM 4 has no CUDA flavour installed"
    if wanted:
        assert wanted in flavours, (
            f"{wanted} (the driver's CUDA major) is not installed, {', '.join(flavours)} is: "
            "rerun the dcgm role"
        )
    core = pkgs[CORE]
    for name in flavours:
        assert pkgs[name].version == core.version, (
            f"{name} {pkgs[name].version} differs from {CORE} {core.version}"
        )
    if dcgm.version:
        got = upstream_version(core.version)
        wanted_version = upstream_version(dcgm.version) if ":" in dcgm.version else dcgm.version
        assert got == wanted_version, f"{CORE} is {core.version}, the plan says {dcgm.version}"
    assert core.held, f"{CORE} is not held: apt-mark hold {CORE}"
    assert DCGM3 not in pkgs, f"DCGM 3 ({DCGM3}) is still installed beside DCGM 4"


def test_nvidia_dcgm_active_and_enabled(host: Any, dcgm: DcgmExpectation) -> None:
    svc = host.service(UNIT)
    assert svc.is_running, f"{UNIT} is not active: systemctl start {UNIT} (journalctl -u {UNIT})"
    assert svc.is_enabled, f"{UNIT} is not enabled at boot: systemctl enable {UNIT}"
    engine = host.run("pgrep -x nv-hostengine")
    assert engine.rc == 0, f"{UNIT} is active but no nv-hostengine process runs"


def test_dcgm_exporter_serves_metrics(host: Any, dcgm: DcgmExpectation) -> None:
    if dcgm.exporter == "none":
        pytest.skip("dcgm_exporter is none: no exporter planned")
    unit = EXPORTER_UNITS[dcgm.exporter]
    assert host.service(unit).is_running, f"{unit} is not active: journalctl -u {unit}"
    url = f"http://127.0.0.1:{dcgm.exporter_port}/metrics"
    result = host.run(
        "python3 -c 'import sys, urllib.request; "
        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' %s",
        url,
    )
    assert result.rc == 0, f"{url} does not answer: {result.stderr.strip()[-300:]}"
    assert "DCGM_FI_" in result.stdout, f"{url} answers without DCGM_FI_* metrics"
