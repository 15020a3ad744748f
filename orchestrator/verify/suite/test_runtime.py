"""Container runtime state: Docker, the NVIDIA runtime, the CDI spec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate


@pytest.fixture
def docker(expect: Expectation) -> Expectation:
    if not expect.has_role("docker"):
        pytest.skip("docker is not in this host's plan (gpuprov_roles)")
    return expect


@pytest.fixture
def toolkit(expect: Expectation) -> Expectation:
    if not expect.has_role("nvidia_container_toolkit"):
        pytest.skip("nvidia_container_toolkit is not in this host's plan (gpuprov_roles)")
    return expect


def test_docker_active_and_enabled(host: Any, docker: Expectation) -> None:
    svc = host.service("docker")
    assert svc.is_running, "docker is not active: systemctl start docker (journalctl -u docker)"
    assert svc.is_enabled, "docker is not enabled at boot: systemctl enable docker"


def test_daemon_json_has_nvidia_runtime(host: Any, toolkit: Expectation) -> None:
    data, error = hoststate.json_file(host, toolkit.daemon_json)
    assert data is not None, error
    runtimes = data.get("runtimes", {})
    assert isinstance(runtimes, dict) and "nvidia" in runtimes, (
        f"{toolkit.daemon_json} has no 'nvidia' runtime: run nvidia-ctk runtime configure "
        "--runtime=docker and restart docker"
    )


def test_docker_lists_nvidia_runtime(host: Any, toolkit: Expectation) -> None:
    if not toolkit.has_role("docker"):
        pytest.skip("docker is not in this host's plan")
    result = host.run("docker info --format '{{json .Runtimes}}'")
    assert result.rc == 0, f"docker info failed: {result.stderr.strip()}"
    runtimes = json.loads(result.stdout)
    assert "nvidia" in runtimes, (
        f"dockerd does not know the nvidia runtime (has {sorted(runtimes)}): daemon.json was "
        "changed but docker was not restarted"
    )


def test_toolkit_at_planned_version_and_held(host: Any, toolkit: Expectation) -> None:
    pkgs = hoststate.packages(host, ("nvidia-container-toolkit", "nvidia-container-toolkit-base"))
    assert "nvidia-container-toolkit" in pkgs, "nvidia-container-toolkit is not installed"
    pkg = pkgs["nvidia-container-toolkit"]
    if toolkit.toolkit_version:
        assert pkg.upstream == toolkit.toolkit_version.split("-")[0], (
            f"nvidia-container-toolkit is {pkg.version}, the plan pins {toolkit.toolkit_version}"
        )
    assert pkg.held, "nvidia-container-toolkit is not held: apt-mark hold it"


def test_cdi_spec_lists_every_gpu(host: Any, toolkit: Expectation) -> None:
    names, error = hoststate.cdi_device_names(host, toolkit.cdi_spec)
    assert names is not None, error
    count = hoststate.smi_gpu_count(host)
    assert count is not None, "nvidia-smi -L fails: cannot tell which GPUs the spec must list"
    missing = [str(i) for i in range(count) if str(i) not in names]
    assert not missing, (
        f"CDI spec {toolkit.cdi_spec} lacks GPUs {missing} (stale after a driver or MIG "
        "change): regenerate it with nvidia-ctk cdi generate"
    )
    assert "all" in names, f"CDI spec {toolkit.cdi_spec} has no 'all' device"
