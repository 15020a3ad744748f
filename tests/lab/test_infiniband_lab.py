"""The infiniband role (the distribution's stack) and InfiniBand fabric health on a lab host
with SIMULATED InfiniBand HCAs (issue 30).

Lab of its own: one Debian 12 host, profile hgx-h100-ib-bare (issue 47: 8 simulated 400G
ConnectX-7 functions on the PCI bus, and no RDMA device until mlx5_ib is loaded; then
mlx5_ib0..7, tests/lab/gpusim/gpusim/ib.py). The planner finds the HCAs on the PCI bus, fabric
health fails them before the role ran (functions without an RDMA device), the role loads
mlx5_ib (now and at boot), then fabric health passes. Real here: the planner on the probed
host, apt installing
Debian's rdma-core, ibverbs-utils, infiniband-diags and perftest, the role's idempotence, and
Debian's own `ibstatus` reading the simulated ports (its output parsed by gpuprov's parser);
`provision validate` over SSH. DOCA-OFED is not exercised (no repository double); nothing runs
on real InfiniBand."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach
from orchestrator.parsers.fabric import parse_ibstatus

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aptrepo.converge import Run, converge

pytestmark = pytest.mark.lab

PROFILE = "hgx-h100-ib-bare"
BIN = Path(sys.executable).parent
STACK = {"infiniband_stack": "distribution"}


@pytest.fixture(scope="module")
def lab(scratch_lab_name: Any) -> Iterator[RunningLab]:
    name = scratch_lab_name("ib")
    hosts.down(name)
    started = time.monotonic()
    hosts.up(name, PROFILE, 1, "debian12", say=lambda _: None)
    print(f"ib lab up in {time.monotonic() - started:.1f} s")
    try:
        yield attach(name, PROFILE)
    finally:
        hosts.down(name)


def provision(lab: RunningLab, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "inventory.ini"
    extra = "".join(f"{k}={v}\n" for k, v in STACK.items())
    inventory.write_text(lab.inventory.read_text() + "\n[gpu_nodes:vars]\n" + extra)
    report = tmp_path / "report.json"
    argv = [str(BIN / "provision"), *args, "-i", str(inventory), "--report", str(report)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert report.exists(), done.stdout + done.stderr
    return done.returncode, json.loads(report.read_text())


@pytest.fixture(scope="module")
def planned(lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _, report = provision(lab, tmp_path_factory.mktemp("plan"), "plan")
    (entry,) = report["hosts"].values()
    return dict(entry["plan"])


@pytest.fixture(scope="module")
def bare_health(lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Fabric health before the role ran: the HCAs are only on the PCI bus."""
    (host,) = lab.hosts
    _, report = provision(lab, tmp_path_factory.mktemp("bare"), "validate")
    checks = report["hosts"][host]["validation"]["checks"]
    return [c for c in checks if c["name"].startswith("ib_")]


@pytest.fixture(scope="module")
def converged(
    lab: RunningLab,
    planned: dict[str, Any],
    bare_health: list[Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Run, Run]:
    work = tmp_path_factory.mktemp("ib")
    role = next(r for r in planned["roles"] if r["name"] == "infiniband")
    first = converge(lab.inventory, ["infiniband"], role["vars"], work / "first")
    second = converge(lab.inventory, ["infiniband"], role["vars"], work / "second")
    print(f"infiniband role: first run {first.seconds:.0f} s, second {second.seconds:.0f} s")
    return first, second


def test_the_planner_plans_the_role_on_the_probed_hcas(planned: dict[str, Any]) -> None:
    role = next((r for r in planned["roles"] if r["name"] == "infiniband"), None)
    assert role is not None, planned
    assert role["vars"] == {"infiniband_stack": "distribution", "infiniband_gpudirect": "dmabuf"}
    assert role["reason"].startswith("8 InfiniBand HCAs on the PCI bus (0000:30:00.0, "), role
    assert "no RDMA device yet" in role["reason"], role


def test_before_the_role_fabric_health_names_the_hcas_without_a_device(
    lab: RunningLab, bare_health: list[Any]
) -> None:
    (host,) = lab.hosts
    (devices,) = [c for c in bare_health if c["name"] == "ib_devices"]
    assert (devices["status"], devices["value"], devices["limit"]) == ("fail", 0, 8), devices
    assert devices["diagnosis"].startswith(
        f"{host}: 0 of 8 InfiniBand HCAs (InfiniBand functions on the PCI bus): none; PCI "
        "0000:30:00.0"
    ), devices


def test_the_role_loads_mlx5_ib_now_and_at_boot(
    lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    (host,) = lab.hosts
    assert lab.ssh(host, "cat /etc/modules-load.d/gpuprov-mlx5-ib.conf").stdout == "mlx5_ib\n"
    # the lab's kernel has no /proc/modules: the module shows as the devices it registers
    listed = lab.ssh(host, "ls /sys/class/infiniband").stdout.split()
    assert listed == [f"mlx5_ib{n}" for n in range(8)], listed


def test_converges_then_changes_nothing(lab: RunningLab, converged: tuple[Run, Run]) -> None:
    first, second = converged
    assert first.returncode == 0, first.output[-3000:]
    assert second.returncode == 0, second.output[-3000:]
    assert set(second.changed().values()) == {0}, second.output[-3000:]


def test_the_distributions_ibstatus_reads_the_ports_as_the_parser_expects(
    lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    (host,) = lab.hosts
    done = lab.ssh(host, "ibstatus")
    assert done.returncode == 0, done.stderr
    ports = parse_ibstatus(done.stdout + "# exit=0\n")
    assert [p.device for p in ports] == [f"mlx5_ib{n}" for n in range(8)], done.stdout
    assert {(p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports} == {
        ("ACTIVE", "LinkUp", 400.0, "InfiniBand")
    }, done.stdout


def test_fabric_health_passes_then_names_a_port_down(
    lab: RunningLab, converged: tuple[Run, Run], tmp_path: Path
) -> None:
    (host,) = lab.hosts

    def fabric(where: str) -> list[dict[str, Any]]:
        _, report = provision(lab, tmp_path / where, "validate")
        checks = report["hosts"][host]["validation"]["checks"]
        return [c for c in checks if c["name"].startswith(("ib_", "memlock", "gpudirect"))]

    healthy = fabric("healthy")
    assert {c["name"] for c in healthy} >= {"ib_devices", "ib_link"}, healthy
    assert [c for c in healthy if c["status"] == "fail"] == [], healthy
    done = lab.ssh(host, "gpusim ib down on --device 2")
    assert done.returncode == 0, done.stderr
    try:
        faulty = fabric("faulty")
    finally:
        lab.ssh(host, "gpusim ib down off --device 2")
    (bad,) = [c for c in faulty if c["status"] == "fail"]
    assert bad["name"] == "ib_link[mlx5_ib2]"
    assert bad["diagnosis"].startswith(f"{host}: InfiniBand device mlx5_ib2 port 1 is DOWN")
