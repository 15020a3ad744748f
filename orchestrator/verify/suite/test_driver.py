"""Driver state: packages, holds, loaded module, NVML, fabric manager, persistenced."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate

DRIVER_PACKAGE_GLOBS = ("*nvidia*", "cuda-drivers*", "libnvidia*", "nvidia-fabricmanager*")


@pytest.fixture
def driver(expect: Expectation) -> Expectation:
    if not expect.has_role("nvidia_driver"):
        pytest.skip("nvidia_driver is not in this host's plan (gpuprov_roles)")
    return expect


def test_driver_packages_at_planned_version_and_held(host: Any, driver: Expectation) -> None:
    pkgs = hoststate.packages(host, DRIVER_PACKAGE_GLOBS)
    if driver.driver_version is None:
        pytest.skip("the plan pins no driver version (nvidia_driver_version unset)")
    at_version = [p for p in pkgs.values() if p.upstream == driver.driver_version]
    assert at_version, (
        f"no installed package is at the planned driver version {driver.driver_version}; "
        f"installed: {sorted(f'{p.name}={p.version}' for p in pkgs.values())}"
    )
    unheld = sorted(p.name for p in at_version if not p.held)
    assert not unheld, (
        f"driver packages not held (an unattended upgrade could split them): {unheld}; "
        "fix: rerun provision apply, or apt-mark hold them"
    )


def test_loaded_module_matches_plan(host: Any, driver: Expectation) -> None:
    line = hoststate.loaded_driver(host)
    assert line, "no nvidia kernel module is loaded (/proc/driver/nvidia/version is missing)"
    if driver.driver_version:
        assert f" {driver.driver_version} " in line, (
            f"loaded module is not {driver.driver_version}: {line.strip()!r}; "
            "a reboot (or module reload) is needed"
        )
    if driver.driver_flavour == "open":
        assert "Open Kernel Module" in line, f"planned open modules, loaded: {line.strip()!r}"
    elif driver.driver_flavour == "proprietary":
        assert "Open Kernel Module" not in line, f"planned proprietary, loaded: {line.strip()!r}"


def test_nvml_matches_loaded_module(host: Any, driver: Expectation) -> None:
    versions = hoststate.smi_versions(host)
    assert versions, "nvidia-smi is missing or fails (NVML cannot talk to the driver)"
    line = hoststate.loaded_driver(host)
    nvml = versions.get("DRIVER version", "")
    assert nvml and f" {nvml} " in line, (
        f"NVML reports driver {nvml!r} but the loaded module is {line.strip()!r} "
        "(Driver/library version mismatch): reboot or reload the module"
    )


def test_nouveau_blacklisted(host: Any, driver: Expectation) -> None:
    out = host.run(
        "grep -rhsE '^[[:space:]]*blacklist[[:space:]]+nouveau' "
        "/etc/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d"
    ).stdout
    assert out.strip(), "nouveau is not blacklisted in any modprobe.d file"
    modules = host.file("/proc/modules").content_string
    assert not any(line.startswith("nouveau ") for line in modules.splitlines()), (
        "nouveau is loaded: it holds the GPUs; reboot after blacklisting"
    )


def test_persistenced_active_and_enabled(host: Any, driver: Expectation) -> None:
    if not driver.persistenced:
        pytest.skip("nvidia_driver_persistenced is false in the policy")
    svc = host.service("nvidia-persistenced")
    assert svc.is_running, "nvidia-persistenced is not active: systemctl start nvidia-persistenced"
    assert svc.is_enabled, "nvidia-persistenced is not enabled: systemctl enable it"


def test_fabricmanager_iff_planned(host: Any, driver: Expectation) -> None:
    svc = host.service("nvidia-fabricmanager")
    if driver.fabricmanager is None:
        pytest.skip("no plan given: whether this host needs the fabric manager is unknown")
    if not driver.fabricmanager:
        assert not svc.is_running, (
            "nvidia-fabricmanager runs on a host without NVSwitches: stop and disable it"
        )
        return
    assert svc.is_running, "nvidia-fabricmanager is not active on an NVSwitch host"
    assert svc.is_enabled, "nvidia-fabricmanager is not enabled on an NVSwitch host"
    fm = hoststate.packages(host, ("nvidia-fabricmanager*",))
    assert fm, "no nvidia-fabricmanager package is installed"
    versions = {p.name: p.upstream for p in fm.values()}
    line = hoststate.loaded_driver(host)
    mismatched = {n: v for n, v in versions.items() if f" {v} " not in line}
    assert not mismatched, (
        f"fabric manager {mismatched} differs from the loaded driver {line.strip()!r}: "
        "they must be the exact same version"
    )
    assert all(p.held for p in fm.values()), f"fabric manager not held: {sorted(fm)}"


def test_dkms_module_built_for_running_kernel(host: Any, driver: Expectation) -> None:
    if not host.exists("dkms"):
        pytest.skip("no DKMS on this host (prebuilt or packaged modules)")
    status = host.run("dkms status").stdout
    lines = [line for line in status.splitlines() if line.lower().startswith("nvidia")]
    if not lines:
        pytest.skip("DKMS manages no nvidia module here (prebuilt modules)")
    kernel = host.run("uname -r").stdout.strip()
    assert any(kernel in line and "installed" in line for line in lines), (
        f"DKMS has no installed nvidia module for the running kernel {kernel}: {lines}; "
        f"fix: install linux-headers-{kernel} and run dkms autoinstall"
    )
