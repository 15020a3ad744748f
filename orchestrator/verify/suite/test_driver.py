"""Driver state: packages, holds, loaded module, NVML, fabric manager, persistenced."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.catalog import branch_of
from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate

DRIVER_PACKAGE_GLOBS = ("*nvidia*", "cuda-drivers*", "libnvidia*", "nvidia-fabricmanager*")
# The container toolkit is versioned apart from the driver (test_runtime checks it).
NOT_DRIVER_PREFIXES = ("nvidia-container", "libnvidia-container")


@pytest.fixture
def driver(expect: Expectation) -> Expectation:
    if not expect.has_role("nvidia_driver"):
        pytest.skip("nvidia_driver is not in this host's plan (gpuprov_roles)")
    return expect


def _driver_packages(host: Any, extra: tuple[str, ...] = ()) -> dict[str, hoststate.Package]:
    """Installed driver packages: the globs', and `extra` names (the role's record may hold
    packages no glob matches, e.g. Debian's libcuda1)."""
    found = hoststate.packages(host, DRIVER_PACKAGE_GLOBS + extra)
    return {n: p for n, p in found.items() if not n.startswith(NOT_DRIVER_PREFIXES)}


def test_driver_packages_at_planned_version_and_held(host: Any, driver: Expectation) -> None:
    record = hoststate.driver_record(host, driver.driver_state_file)
    # Unpinned (the CUDA default: the newest complete release, resolved on the host), the
    # version to hold is the one the role resolved and recorded.
    version = driver.driver_version or (record.version if record is not None else None)
    if version is None:
        pytest.skip(
            "the plan pins no driver version (nvidia_driver_version unset) and the role "
            "recorded none on this host"
        )
    pkgs = _driver_packages(host, record.held if record is not None else ())
    loaded = hoststate.loaded_driver(host)
    if not pkgs and record is None and loaded is not None:
        pytest.skip(
            f"the loaded driver ({loaded.version}, {loaded.flavour}) comes "
            "from no package (a runfile, a container image or a custom build): package "
            "version and hold do not apply"
        )
    _assert_planned_branch(driver, version, "the installed driver packages are")
    at_version = [p for p in pkgs.values() if p.upstream == version]
    assert at_version, (
        f"no installed package is at the planned driver version {version}; "
        f"installed: {sorted(f'{p.name}={p.version}' for p in pkgs.values())}"
    )
    recorded = record.held if record is not None else ()
    gone = sorted(n for n in recorded if n not in pkgs)
    assert not gone, (
        f"packages the nvidia_driver role installed and held are gone: {gone}; "
        "fix: rerun provision apply"
    )
    must_hold = {p.name for p in at_version if record is None} | set(recorded)
    unheld = sorted(n for n in must_hold if not pkgs[n].held)
    assert not unheld, (
        f"driver packages not held (an unattended upgrade could split them): {unheld}; "
        "fix: rerun provision apply, or apt-mark hold them"
    )


def _assert_planned_branch(driver: Expectation, version: str, what: str) -> None:
    """An unpinned plan still names its branch: the driver there must be of that branch."""
    if driver.driver_branch is not None:
        assert branch_of(version) == driver.driver_branch, (
            f"{what} {version}, of branch R{branch_of(version)}; the plan wants "
            f"R{driver.driver_branch}: rerun provision apply"
        )


def test_loaded_module_matches_plan(host: Any, driver: Expectation) -> None:
    loaded = hoststate.loaded_driver(host)
    assert loaded, "no nvidia kernel module is loaded (/proc/driver/nvidia/version is missing)"
    _assert_planned_branch(driver, loaded.version, "the loaded module is")
    if driver.driver_version:
        assert loaded.version == driver.driver_version, (
            f"loaded module is {loaded.version}, the plan wants {driver.driver_version} "
            f"({loaded.raw!r}): a reboot (or module reload) is needed"
        )
    if driver.driver_flavour in ("open", "proprietary"):
        assert loaded.flavour == driver.driver_flavour, (
            f"planned {driver.driver_flavour} kernel modules, loaded: {loaded.raw!r}"
        )


def test_nvml_matches_loaded_module(host: Any, driver: Expectation) -> None:
    versions = hoststate.smi_versions(host)
    assert versions, "nvidia-smi is missing or fails (NVML cannot talk to the driver)"
    loaded = hoststate.loaded_driver(host)
    nvml = versions.get("DRIVER version", "")
    assert loaded is not None and nvml == loaded.version, (
        f"NVML reports driver {nvml!r} but the loaded module is "
        f"{loaded.raw if loaded else 'none'!r} (Driver/library version mismatch): reboot or "
        "reload the module"
    )


def test_nouveau_blacklisted(host: Any, driver: Expectation) -> None:
    loaded = hoststate.loaded_modules(host)
    assert loaded is None or "nouveau" not in loaded, (
        "nouveau is loaded: it holds the GPUs; blacklist it and reboot"
    )
    listed = host.run(
        "grep -rhsE '^[[:space:]]*blacklist[[:space:]]+nouveau' "
        "/etc/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d"
    ).stdout
    cmdline = host.file("/proc/cmdline").content_string.split()
    on_cmdline = any(
        arg.startswith(("modprobe.blacklist=", "module_blacklist=", "rd.driver.blacklist="))
        and "nouveau" in arg.split("=", 1)[1].split(",")
        for arg in cmdline
    )
    if listed.strip() or on_cmdline:
        return
    kernel = host.run("uname -r").stdout.strip()
    if host.run("modinfo -k %s nouveau", kernel).rc != 0:
        pytest.skip(f"kernel {kernel} has no nouveau module: there is nothing to blacklist")
    pytest.fail(
        "nouveau is not blacklisted (no modprobe.d file, no modprobe.blacklist= on the kernel "
        f"command line) and kernel {kernel} has it: rerun provision apply",
        pytrace=False,
    )


def test_persistenced_active_and_enabled(host: Any, driver: Expectation) -> None:
    if not driver.persistenced:
        pytest.skip("nvidia_driver_persistenced is false in the policy")
    installed = host.run("systemctl cat nvidia-persistenced.service").rc == 0
    if not installed and not _driver_packages(host):
        # A driver from no package (runfile, image, custom build) may ship no daemon; its GPUs
        # then need the legacy persistence mode on (`nvidia-smi -pm 1`), or each client
        # re-initialises them.
        modes = hoststate.smi_persistence(host)
        assert modes, "nvidia-smi cannot report persistence mode (is the driver loaded?)"
        off = sorted(i for i, on in modes.items() if not on)
        assert not off, (
            f"no nvidia-persistenced unit and persistence mode is off on GPUs {off}: install "
            "nvidia-persistenced with the driver, or run nvidia-smi -pm 1 at boot"
        )
        return
    svc = host.service("nvidia-persistenced")
    assert installed, "nvidia-persistenced is not installed: rerun provision apply"
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
    loaded = hoststate.loaded_driver(host)
    mismatched = {n: v for n, v in versions.items() if not loaded or v != loaded.version}
    assert not mismatched, (
        f"fabric manager {mismatched} differs from the loaded driver "
        f"{loaded.version if loaded else 'none'}: "
        "they must be the exact same version"
    )
    assert all(p.held for p in fm.values()), f"fabric manager not held: {sorted(fm)}"


def test_dkms_module_built_for_running_kernel(host: Any, driver: Expectation) -> None:
    if not host.exists("dkms"):
        pytest.skip("no DKMS on this host (prebuilt or packaged modules)")
    kernel = host.run("uname -r").stdout.strip()
    # the running kernel's entries only: dkms's `status [-k kernel/arch]` (dkms(8), Debian's
    # dkms 3.0.10), half the time of every kernel's (0.15 s against 0.30 on a lab host)
    status = host.run("dkms status -k %s", kernel).stdout
    lines = [line for line in status.splitlines() if line.lower().startswith("nvidia")]
    if not lines:
        pytest.skip(f"DKMS manages no nvidia module for {kernel} here (prebuilt modules)")
    assert any(kernel in line and "installed" in line for line in lines), (
        f"DKMS has no installed nvidia module for the running kernel {kernel}: {lines}; "
        f"fix: install linux-headers-{kernel} and run dkms autoinstall"
    )
