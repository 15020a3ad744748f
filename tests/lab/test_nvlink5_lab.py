"""NVLink5 detection on a lab host of profile hgx-b200 (simulated): over real SSH the probe
finds the SW_MNG management port the simulator presents in /sys/class/infiniband (an overlay
of the container's read-only sysfs), the planner plans the fabric manager and the NVLink
subnet manager, and the simulated ib_umad loads. One Debian 12 host of its own (seconds to
start, no converge). The driver role's NVLink5 tasks are not converged here: the lab's
repository has no NVLink subnet manager (nvlsm) test double yet."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.detect import detect_hosts
from orchestrator.inventory import load_inventory
from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

pytestmark = pytest.mark.lab
PROFILE = "hgx-b200"


@pytest.fixture(scope="module")
def b200_lab(scratch_lab_name: Callable[[str], str]) -> Iterator[RunningLab]:
    name = scratch_lab_name("b200")
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    if not keep:
        hosts.down(name)
    hosts.up(name, PROFILE, 1, "debian12", say=lambda _: None)
    yield attach(name, PROFILE)
    if not keep:
        hosts.down(name)


def test_probe_finds_the_nvlink5_fabric_and_the_plan_adds_the_subnet_manager(
    b200_lab: RunningLab,
) -> None:
    inventory = load_inventory(b200_lab.inventory)
    result = detect_hosts(inventory, progress=False)
    assert result.failed == {}
    (host,) = inventory.names
    raw = result.raw[host]
    assert raw[names.INFINIBAND_VPD].splitlines()[0] == "mlx5_0 SW_MNG"
    facts = parse_host(host, raw)
    assert facts.simulated and facts.errors == ()
    assert facts.nvlink5 and facts.nvlink5_ports == ("mlx5_0",)
    assert {g.device_id for g in facts.gpus} == {0x2909} and len(facts.gpus) == 8
    p = plan_host(facts, load_policy(host, {}), default_catalog())
    assert not p.blockers, p.blockers
    driver = next(r for r in p.roles if r.name == "nvidia_driver")
    assert driver.vars["nvidia_driver_nvlink5"] is True
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    assert "NVLink subnet manager (nvlsm, infiniband-diags)" in driver.reason


def test_ib_umad_loads_and_the_rest_of_sysfs_is_intact(b200_lab: RunningLab) -> None:
    (host,) = b200_lab.hosts
    done = b200_lab.ssh(
        host,
        "modprobe mlx5_ib && modprobe ib_umad && "
        "cat /proc/modules /run/gpusim/modules 2>/dev/null; "
        "ls /sys/class/net; systemctl is-system-running || true",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The two modules the driver role loads (tasks/nvlink5.yml), simulated here.
    assert "ib_umad " in done.stdout and "mlx5_core " in done.stdout and "mlx5_ib " in done.stdout
    assert "lo" in done.stdout.split()
    assert done.stdout.split()[-1] in ("running", "degraded")
