"""The efa role and fabric health on a 2-host "p5" lab with SIMULATED EFA (issue 30).

Lab of its own (profile p5.48xlarge-efa: the p5.48xlarge GPUs plus 32 simulated EFA devices,
tests/lab/gpusim/gpusim/efa.py), two Debian 12 hosts. The EFA installer is the lab's TEST
DOUBLE (tests/lab/efa: a reproducible tarball generated from tests/recorded/reference/
fabric.yaml, with a tiny DKMS module of ours, stand-ins for fi_info and the aws-ofi-nccl
plugin), served on the lab's network and pinned by its sha256 in the policy. Real here: apt
(the headers and dkms from Debian's archive), DKMS building the module, the role's
idempotence, `provision validate` over SSH with the real probe. Nothing runs on real EFA.

Checked: the role converges, a second run and check mode change nothing; AWS's own pin
refuses a tarball that differs before anything of it runs; fabric health passes; a removed
EFA device, a missing plugin and a link at the wrong rate each fail with one line naming host
and device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aptrepo.converge import Run, converge, lab_network
from efa.build import Installer, build
from efa.serve import served

pytestmark = pytest.mark.lab

PROFILE = "p5.48xlarge-efa"
BIN = Path(sys.executable).parent
PLUGIN_DIR = "/opt/amazon/ofi-nccl"
PLUGIN = f"{PLUGIN_DIR}/lib/x86_64-linux-gnu/libnccl-net-ofi.so"
MANIFEST = "/opt/amazon/efa_installed_packages"
FABRIC = ("efa_", "memlock", "gpudirect")


@pytest.fixture(scope="module")
def lab(scratch_lab_name: Any) -> Iterator[RunningLab]:
    kept = os.environ.get("GPUPROV_TEST_EFA_LAB")  # an EFA lab already up: for iterating
    if kept:
        yield attach(kept, PROFILE)
        return
    name = scratch_lab_name("efa")
    hosts.down(name)
    started = time.monotonic()
    hosts.up(name, PROFILE, 2, "debian12", say=lambda _: None)
    print(f"efa lab up in {time.monotonic() - started:.1f} s")
    try:
        yield attach(name, PROFILE)
    finally:
        hosts.down(name)


@pytest.fixture(scope="module")
def installers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Installer]:
    """The double at the version the role installs, and one at 1.36.0 (which the reference
    also pins, so the role checks it against AWS's sha256)."""
    www = tmp_path_factory.mktemp("efa-www")
    return {v: build(www, v) for v in ("1.41.0", "1.36.0")}


@pytest.fixture(scope="module")
def url(lab: RunningLab, installers: dict[str, Installer]) -> Iterator[str]:
    with served(installers["1.41.0"].path.parent, lab_network(lab.name)) as base:
        yield base


@pytest.fixture(scope="module")
def policy(url: str, installers: dict[str, Installer]) -> dict[str, object]:
    return {"efa_installer_base_url": url, "efa_installer_sha256": installers["1.41.0"].sha256}


@pytest.fixture(scope="module")
def converged(
    lab: RunningLab, policy: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Run, Run]:
    work = tmp_path_factory.mktemp("efa")
    first = converge(lab.inventory, ["efa"], policy, work / "first")
    second = converge(lab.inventory, ["efa"], policy, work / "second")
    print(f"efa role: first run {first.seconds:.0f} s, second {second.seconds:.0f} s")
    return first, second


def sh(lab: RunningLab, host: str, command: str) -> str:
    done = lab.ssh(host, command, timeout=300)
    assert done.returncode == 0, f"{host}: {command}: {done.stderr or done.stdout}"
    return done.stdout


def validate(lab: RunningLab, tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """`provision validate` with the inventory naming the instance type; the fabric checks
    of each host, from its JSON report (the JUnit file's fabric suite is checked too)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        lab.inventory.read_text() + "\n[gpu_nodes:vars]\ngpuprov_fabric_instance_type=p5.48xlarge\n"
    )
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    argv = [str(BIN / "provision"), "validate", "-i", str(inventory)]
    argv += ["--report", str(report), "--junit", str(junit)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    data = json.loads(report.read_text())
    text = junit.read_text()
    checks = {}
    for name, h in data["hosts"].items():
        assert f'testsuite name="{name}.fabric"' in text
        checks[name] = [c for c in h["validation"]["checks"] if c["name"].startswith(FABRIC)]
    return checks


def test_converges_then_changes_nothing(lab: RunningLab, converged: tuple[Run, Run]) -> None:
    first, second = converged
    assert first.returncode == 0, first.output[-3000:]
    assert set(first.recap) == set(lab.hosts)
    assert all(n > 0 for n in first.changed().values()), first.output[-3000:]
    assert second.returncode == 0, second.output[-3000:]
    assert set(second.changed().values()) == {0}, second.output[-3000:]
    for host in lab.hosts:
        manifest = sh(lab, host, f"cat {MANIFEST}")
        assert "EFA installer version: 1.41.0" in manifest
        # without -g, as EKS runs it: efa-nv-peermem comes all the same (issue 47 item 8)
        assert "efa-nv-peermem" in manifest, manifest
        status = sh(lab, host, "dkms status -m efa")
        assert "efa/2.15.0" in status and ": installed" in status, status
        assert "memlock    unlimited" in sh(lab, host, "cat /etc/security/limits.d/01_efa.conf")
        record = json.loads(sh(lab, host, "cat /var/lib/gpuprov/converged/efa.json"))
        assert any(MANIFEST in line for line in record["state"]), record


def test_check_mode_changes_nothing(
    lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    run = converge(lab.inventory, ["efa"], policy, tmp_path, check=True)
    assert run.returncode == 0, run.output[-3000:]
    assert set(run.changed().values()) == {0}, run.output[-3000:]


def test_a_tarball_that_fails_the_pin_is_refused_before_it_runs(
    lab: RunningLab, url: str, converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = lab.hosts[0]
    # 1.36.0 with no sha256 given: the role's pin (AWS's tarball), which the double is not
    run = converge(
        lab.inventory,
        ["efa"],
        {"efa_installer_base_url": url, "efa_installer_version": "1.36.0"},
        tmp_path,
        limit=host,
    )
    assert run.returncode != 0 and run.recap[host].failed == 1, run.output[-3000:]
    tail = run.output.partition("Fetch the EFA installer and verify its sha256")[2]
    pin = "de183f333cfb58aeb7908a67bf9106985ba3ccb7f8638b851d2a0d8dbfacaec4"  # AWS's 1.36.0
    assert f"did not match {pin}" in tail and f"fatal: [{host}]" in tail, tail[:3000]
    assert "TASK [efa : Run the EFA installer]" not in tail
    assert "EFA installer version: 1.41.0" in sh(lab, host, f"cat {MANIFEST}")
    kept = sh(lab, host, "ls /var/cache/gpuprov/efa/ /var/cache/gpuprov/efa/1.36.0")
    assert "aws-efa-installer-1.36.0.tar.gz" not in kept, kept  # never kept...
    assert "aws-efa-installer\n" not in kept.split("1.36.0:")[1], kept  # ...nor unpacked


def test_fabric_health_passes_then_names_each_fault(
    lab: RunningLab, converged: tuple[Run, Run], tmp_path: Path
) -> None:
    healthy = validate(lab, tmp_path / "healthy")
    for checks in healthy.values():
        assert {c["name"] for c in checks} >= {
            "efa_devices",
            "efa_link",
            "efa_provider",
            "efa_plugin",
        }, checks
        assert [c for c in checks if c["status"] == "fail"] == [], checks
        devices = next(c for c in checks if c["name"] == "efa_devices")
        assert (devices["value"], devices["limit"]) == (32, 32)
        # this lab runs no driver role: GPUDirect is not judged here (the plan says it, below)
        gpudirect = next(c for c in checks if c["name"] == "gpudirect")
        assert gpudirect["status"] == "skip", gpudirect
        assert "no NVIDIA driver loaded" in gpudirect["diagnosis"], gpudirect
    one, two = lab.hosts
    sh(lab, one, "gpusim efa missing on --device 31 && gpusim efa rate on --device 7")
    sh(lab, two, f"mv {PLUGIN_DIR} /root/ofi-nccl.saved")  # every plugin library gone
    try:
        faulty = validate(lab, tmp_path / "faulty")
    finally:
        sh(lab, one, "gpusim efa missing off --device 31 && gpusim efa rate off --device 7")
        sh(lab, two, f"mv /root/ofi-nccl.saved {PLUGIN_DIR}")
    lines = {h: [c["diagnosis"] for c in cs if c["status"] == "fail"] for h, cs in faulty.items()}
    assert all("\n" not in line for found in lines.values() for line in found)
    removed = [ln for ln in lines[one] if "EFA devices" in ln]
    assert removed and removed[0].startswith(f"{one}: 31 of 32 EFA devices"), lines[one]
    assert "missing efa_31" in removed[0]
    slow = [ln for ln in lines[one] if "efa_7 port 1 at 25 Gb/s" in ln]
    assert slow and slow[0].startswith(f"{one}: EFA device efa_7"), lines[one]
    assert "expected 100 Gb/s" in slow[0]
    (plugin,) = lines[two]
    assert plugin.startswith(f"{two}: the aws-ofi-nccl plugin is missing"), lines[two]
    # the faults are gone again: the same lab passes
    again = validate(lab, tmp_path / "again")
    assert all(c["status"] != "fail" for cs in again.values() for c in cs), again


def test_the_plan_says_gpudirect_is_not_dmabuf_on_these_devices(
    lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    """Issue 47 item 8, with the real probe over SSH: installer 1.41.0 bundles aws-ofi-nccl
    1.14.2, which keeps DMA-BUF off on the simulated 0xefa1 devices whatever the driver."""
    argv = [str(BIN / "provision"), "plan", "-i", str(lab.inventory), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = (
        "GPUDirect RDMA by peer memory, not DMA-BUF: aws-ofi-nccl 1.14.2 (EFA installer "
        "1.41.0) turns DMA-BUF off on EFA device ids 0xefa0-0xefa2 (EFA generations 1-3), "
        "here 0xefa1"
    )
    assert done.stdout.count(said) == len(lab.hosts), done.stdout[-3000:]


def test_the_double_is_labelled(lab: RunningLab, converged: tuple[Run, Run]) -> None:
    host = lab.hosts[0]
    assert "TEST DOUBLE" in sh(lab, host, "head -3 /opt/amazon/efa/bin/fi_info")
    assert "TEST DOUBLE" in sh(lab, host, f"cat {PLUGIN}")
    module = "$(find /lib/modules -name 'efa.ko*' | head -n 1)"
    assert "TEST DOUBLE" in sh(lab, host, f"modinfo -F description {module}")


def test_a_missing_plugin_is_not_converged_on_rerun(
    lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    """Issue 47 item 8: the convergence record holds the aws-ofi-nccl plugin (a later plan no
    longer finds the host converged once it is gone), and the role's rerun lays it down again
    (it said converged, and changed nothing, with the plugin gone)."""
    host = lab.hosts[0]
    record = json.loads(sh(lab, host, "cat /var/lib/gpuprov/converged/efa.json"))
    assert any(PLUGIN in line for line in record["state"]), record
    sh(lab, host, f"cp {PLUGIN} /root/plugin.keep && rm {PLUGIN}")
    try:
        run = converge(lab.inventory, ["efa"], policy, tmp_path, limit=host)
        assert run.returncode == 0, run.output[-3000:]
        assert run.changed()[host] > 0, run.output[-3000:]  # the installer ran again
        assert "TEST DOUBLE" in sh(lab, host, f"cat {PLUGIN}")
    finally:
        sh(lab, host, f"test -e {PLUGIN} || cp /root/plugin.keep {PLUGIN}")
