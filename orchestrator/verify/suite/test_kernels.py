"""Kernel updates (issue 16): every installed kernel has the NVIDIA module for the held
driver, so that no reboot (into the default entry or any other installed kernel) comes back
without GPUs. The facts come from the detection probe's own `kernels` section, run on the
host, and its parser (orchestrator/parsers/kernels.py): one definition of "has the module"."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.parsers.kernels import parse_kernels
from orchestrator.probe import probe_script
from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate


def _kernels_section() -> str:
    script = probe_script()
    start = script.index("kernels() {")
    # up to the line that captures it (`bg cap kernels.txt kernels`: run in the background)
    end = script.rindex("\n", 0, script.index("cap kernels.txt kernels")) + 1
    return 'have() { command -v "$1" >/dev/null 2>&1; }\n' + script[start:end] + "kernels\n"


@pytest.fixture
def driver(expect: Expectation) -> Expectation:
    if not expect.has_role("nvidia_driver"):
        pytest.skip("nvidia_driver is not in this host's plan (gpuprov_roles)")
    return expect


def test_every_installed_kernel_has_the_module(host: Any, driver: Expectation) -> None:
    record = hoststate.driver_record(host, driver.driver_state_file)
    loaded = hoststate.loaded_driver(host)
    version = (
        driver.driver_version
        or (record.version if record is not None else "")
        or (loaded.version if loaded is not None else "")
    )
    if not version:
        pytest.skip("no driver version to check kernels against (none planned, held or loaded)")
    out = host.run("sh -c %s", _kernels_section())
    assert out.rc == 0, f"the kernels probe failed: {out.stderr.strip()}"
    ks = parse_kernels(out.stdout + "# exit=0\n")
    bootable = [k for k in ks.installed if k.vmlinuz or k.release == ks.running]
    if not ks.installed:
        # Seen on the lent H200 VM: no /boot, no /lib/modules; its kernel and driver come from
        # outside the guest (the hypervisor, a read-only mount), so no boot here can lose them.
        pytest.skip(
            f"no kernel is installed on this host's disk (running {ks.running}): the kernel "
            "comes from outside the host, so there is no other kernel it could boot into"
        )
    assert bootable, f"no installed kernel found (running {ks.running})"
    missing = [k.release for k in bootable if not k.has_module(version)]
    nxt = f"; the next boot is {ks.default} ({ks.default_from})" if ks.default else ""
    assert not missing, (
        f"installed kernels without an NVIDIA module for driver {version}: "
        f"{', '.join(missing)}{nxt}: booting one leaves the host without GPUs; fix: rerun "
        "provision apply (the driver role builds or installs it for every installed kernel)"
    )
