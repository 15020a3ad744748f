"""The GPU simulator inside real lab hosts (systemd containers reached over SSH)."""

from __future__ import annotations

import json

import pytest

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab


def run(lab: RunningLab, host: str, command: str) -> str:
    result = lab.ssh(host, command)
    assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(params=["debian12", "debian13"])
def host(lab: RunningLab, request: pytest.FixtureRequest) -> str:
    return lab.host_for(str(request.param))


def test_boot_populated_the_pci_bus(lab: RunningLab, host: str) -> None:
    assert run(lab, host, "systemctl is-active gpusim-boot").strip() == "active"
    devices = run(lab, host, "ls /sys/bus/pci/devices").split()
    assert len(devices) == 8 + 4  # p5.48xlarge: 8 GPUs, 4 NVSwitches
    assert run(lab, host, "cat /sys/bus/pci/devices/0000:53:00.0/device").strip() == "0x2330"


def test_kernel_release_is_a_debian_abi(lab: RunningLab, host: str) -> None:
    release = run(lab, host, "uname -r").strip()
    assert release.endswith("-amd64"), release
    status = json.loads(run(lab, host, "gpusim status"))
    assert status["kernel_release"] == release


def test_nvidia_smi_exists_only_with_a_driver(lab: RunningLab, host: str) -> None:
    status = json.loads(run(lab, host, "gpusim status"))
    present = lab.ssh(host, "command -v nvidia-smi").returncode == 0
    has_userspace = lab.ssh(host, "test -e /usr/lib/nvidia/current/nvidia-smi").returncode == 0
    assert present == has_userspace
    if status["installed_module"] is None:
        assert not status["driver_loaded"]


def test_fault_knob_changes_sysfs_and_back(lab: RunningLab, host: str) -> None:
    speed = "cat /sys/bus/pci/devices/0000:64:00.0/current_link_speed"
    try:
        run(lab, host, "gpusim fault pcie-degraded on --gpu 1")
        assert run(lab, host, speed).strip() == "16.0 GT/s PCIe"
    finally:
        run(lab, host, "gpusim fault pcie-degraded off --gpu 1")
    assert run(lab, host, speed).strip() == "32.0 GT/s PCIe"


def test_simulated_marker_is_present(lab: RunningLab, host: str) -> None:
    assert "p5.48xlarge" in run(lab, host, "cat /etc/gpusim/profile.yaml")


def test_nvidia_smi_calls_go_to_the_socket_activated_server(lab: RunningLab, host: str) -> None:
    """gpusim-smi.socket (the image) serves nvidia-smi without a Python import per call, and a
    served call answers as a standalone one (GPUSIM_SMI_SOCKET pointing nowhere)."""
    assert run(lab, host, "systemctl is-active gpusim-smi.socket").strip() == "active"
    smi = "/opt/gpusim/bin/nvidia-smi"
    for args in ("-L", "--query-gpu=index,name,pci.bus_id --format=csv", "topo -m", "--bogus"):
        served = lab.ssh(host, f"{smi} {args}")
        alone = lab.ssh(host, f"GPUSIM_SMI_SOCKET=/nonexistent {smi} {args}")
        assert (served.returncode, served.stdout, served.stderr) == (
            alone.returncode,
            alone.stdout,
            alone.stderr,
        ), args
    traced = lab.ssh(host, f"python3 -S -X importtime {smi} -L")
    assert "_socket" in traced.stderr and "gpusim.smi_cli" not in traced.stderr
    assert run(lab, host, "systemctl is-active gpusim-smi.service").strip() == "active"
