"""The dcgm role, verify and `validate --dcgm-level 2` on one Debian 12 lab host of its own,
against the DCGM test doubles of tests/lab/aptrepo (generated from
tests/recorded/reference/dcgm.yaml; not NVIDIA's packages, and the dcgmi there runs no test).

Cheap on purpose: no driver role runs (no DKMS build). The CUDA repository the nvidia_driver
role would add is written by this test instead (the lab's signed double of NVIDIA's debian12
repository, under the role's file name), and DCGM's CUDA flavour is given (dcgm_cuda_major 13,
what the planner takes for R580). DCGM 3 is installed and held first, so the role must replace
it. Then: converge twice (second changed=0), check mode changed=0, `provision verify` passes
the DCGM checks (the exporter's host unit, on port 9500, answers /metrics), and
`provision validate --dcgm-level 2` with the simulator knob
`dcgm-memory-mismatch` on GPU 1 reports a failed memory check naming GPU 1 and DCGM error 58.
What is simulated: the GPUs (gpusim) and DCGM itself (its packages and dcgmi are test doubles);
apt, dpkg holds, systemd and SSH are real. Runs its own lab (group b)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aptrepo import dcgm as doubles
from aptrepo.converge import STATE_DIR, Run, converge, lab_network
from aptrepo.serve import ensure_served

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROFILE = "h200x2-fixture"  # 2 simulated H200s
NAMES = doubles.names()
OLD, NEW = (doubles.deb_version(v) for v in doubles.DCGM4_PUBLISHED)  # pin the older one
PINNED = doubles.DCGM4_PUBLISHED[0]
# the exporter's host unit on a port other than its default, so that the port is seen to apply
POLICY = {
    "dcgm_cuda_major": "13",
    "dcgm_version": PINNED,
    "dcgm_exporter": "host",
    "dcgm_exporter_port": 9500,
}
SOURCES = "/etc/apt/sources.list.d/gpuprov-nvidia-cuda.sources"  # the driver role's name

ADD_CUDA_REPO = """set -e
mkdir -p /etc/apt/keyrings
k=/etc/apt/keyrings/gpuprov-lab-cuda.asc
python3 -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())' \\
  {key} > $k
printf '%s\\n' 'Types: deb' 'URIs: {url}' 'Suites: /' "Signed-By: $k" > {sources}
apt-get update -q >/dev/null
# python3-apt: what Ansible's apt module installs on its first (non-check) use, as the
# nvidia_driver role's run would have done before this role; check mode needs it
DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-apt {dcgm3}={dcgm3_version} >/dev/null
apt-mark hold {dcgm3} >/dev/null
"""


@dataclass(frozen=True)
class DcgmLab:
    lab: RunningLab
    host: str
    fresh_check: Run  # check mode before the first converge (DCGM 3 still there)
    first: Run
    second: Run
    seconds: float

    def sh(self, command: str, *, ok: bool = True, timeout: float = 300) -> str:
        done = self.lab.ssh(self.host, command, timeout=timeout)
        if ok:
            assert done.returncode == 0, f"{self.host}: {command}: {done.stderr or done.stdout}"
        return done.stdout


def provision(lab: RunningLab, *args: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(BIN / "provision"), *args, "--inventory", str(lab.inventory), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.stdout.strip(), f"provision {args} printed no report: {proc.stderr[-4000:]}"
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def dcgm_lab(scratch_lab_name: Callable[[str], str], tmp_path_factory: Any) -> Iterator[DcgmLab]:
    start = time.monotonic()
    name = scratch_lab_name("dcgm")
    hosts.down(name)
    hosts.up(name, PROFILE, 1, "debian12", say=lambda _: None)
    try:
        lab = attach(name, PROFILE)
        host = lab.host_for("debian12")
        repo = ensure_served(STATE_DIR, network=lab_network(name))
        script = ADD_CUDA_REPO.format(
            key=repo.key_url,
            url=f"{repo.base_url}/{doubles.DEBIAN12_REPO}/",
            sources=SOURCES,
            dcgm3=NAMES["dcgm3"],
            dcgm3_version=doubles.dcgm3_version(),
        )
        done = lab.ssh(host, script, timeout=900)
        assert done.returncode == 0, f"{host}: {done.stderr or done.stdout}"
        # the plan's inputs for provision verify / validate (the host has no driver)
        host_vars = lab.inventory.parent / "host_vars"
        host_vars.mkdir(exist_ok=True)
        (host_vars / f"{host}.yml").write_text(
            "---\n" + yaml.safe_dump({"gpuprov_roles": ["dcgm"], **POLICY})
        )
        work = tmp_path_factory.mktemp("dcgm")
        fresh_check = converge(lab.inventory, ["dcgm"], POLICY, work / "check", check=True)
        first = converge(lab.inventory, ["dcgm"], POLICY, work / "first")
        second = converge(lab.inventory, ["dcgm"], POLICY, work / "second")
        yield DcgmLab(lab, host, fresh_check, first, second, time.monotonic() - start)
    finally:
        if os.environ.get("GPUPROV_LAB_KEEP") != "1":
            hosts.down(name)


def test_converges_then_changes_nothing(dcgm_lab: DcgmLab) -> None:
    first, second = dcgm_lab.first, dcgm_lab.second
    assert first.returncode == 0, first.output[-3000:]
    assert first.changed()[dcgm_lab.host] > 0
    assert second.returncode == 0, second.output[-3000:]
    assert second.changed() == {dcgm_lab.host: 0}, second.output[-3000:]
    print(f"dcgm lab: up + converge x2 in {dcgm_lab.seconds:.0f} s")


def test_check_mode_on_the_fresh_host_runs_and_says_what_it_would_change(dcgm_lab: DcgmLab) -> None:
    run = dcgm_lab.fresh_check
    assert run.returncode == 0, run.output[-3000:]
    assert run.changed()[dcgm_lab.host] > 0  # it says what it would change
    # ... among it, DCGM 3's removal (still installed then)
    removal = run.output.split("Remove DCGM 3 (held or not)]", 1)[1].split("TASK [", 1)[0]
    assert "changed:" in removal, removal


def test_check_mode_changes_nothing(dcgm_lab: DcgmLab, tmp_path: Path) -> None:
    run = converge(dcgm_lab.lab.inventory, ["dcgm"], POLICY, tmp_path, check=True)
    assert run.returncode == 0, run.output[-3000:]
    assert run.changed() == {dcgm_lab.host: 0}, run.output[-3000:]


def test_dcgm3_was_replaced_by_pinned_held_dcgm4(dcgm_lab: DcgmLab) -> None:
    query = (
        f"dpkg-query -W -f '${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' {NAMES['dcgm3']}"
    )
    assert "ii" not in dcgm_lab.sh(query + " || true")  # gone (purged: no rc either)
    installed = dcgm_lab.sh(
        f"dpkg-query -W -f '${{Package}} ${{Version}}\\n' {NAMES['core']} {NAMES['cuda13']}"
    ).split()
    assert installed == [NAMES["core"], OLD, NAMES["cuda13"], OLD]  # pinned below NEW
    assert {NAMES["core"], NAMES["cuda13"]} <= set(dcgm_lab.sh("apt-mark showhold").split())
    assert NAMES["cuda12"] not in dcgm_lab.sh("dpkg-query -W -f '${Package}\\n' 'datacenter*'")
    # /usr/bin/dcgmi is DCGM 4's stand-in now, not DCGM 3's leftover
    assert "DCGM 3" not in dcgm_lab.sh("head -3 /usr/bin/dcgmi")
    assert dcgm_lab.sh("systemctl is-active nvidia-dcgm").strip() == "active"
    assert dcgm_lab.sh("systemctl is-enabled nvidia-dcgm").strip() == "enabled"
    assert "DCGM_EXPORTER_LISTEN=:9500" in dcgm_lab.sh(
        "systemctl show -p Environment nvidia-dcgm-exporter"
    )


def test_the_exporter_uses_nvidia_dcgms_host_engine(dcgm_lab: DcgmLab) -> None:
    """dcgm.exporter.remote_hostengine: the exporter connects to the running nv-hostengine
    (the double logs the real exporter's line and exits 1 when none runs) instead of an
    embedded DCGM of its own, which the packaged unit alone would start."""
    log = dcgm_lab.sh("cat /var/log/dcgm-exporter.log")
    assert "Attempting to connect to remote hostengine at localhost:5555" in log
    assert "Attempting to initialize DCGM." not in log
    assert dcgm_lab.sh("systemctl is-active nvidia-dcgm-exporter").strip() == "active"


def test_verify_passes_the_dcgm_checks(dcgm_lab: DcgmLab) -> None:
    _, report = provision(dcgm_lab.lab, "verify")
    verification = report["hosts"][dcgm_lab.host]["verification"]
    assert verification["state"] == "done", verification
    dcgm_checks = {c["name"]: c for c in verification["checks"] if "dcgm" in c["name"]}
    assert len(dcgm_checks) == 3, sorted(dcgm_checks)
    statuses = {n: c["status"] for n, c in dcgm_checks.items()}
    assert set(statuses.values()) == {"pass"}, statuses


def test_validate_dcgm_level_2_names_the_failing_gpu_and_error(
    dcgm_lab: DcgmLab, tmp_path: Path
) -> None:
    dcgm_lab.sh("gpusim fault dcgm-memory-mismatch on --gpu 1")
    try:
        junit = tmp_path / "validate.xml"
        rc, report = provision(dcgm_lab.lab, "validate", "--dcgm-level", "2", "--junit", str(junit))
    finally:
        dcgm_lab.sh("gpusim fault dcgm-memory-mismatch off --gpu 1")
    assert rc == 1
    checks = report["hosts"][dcgm_lab.host]["validation"]["checks"]
    got = {(c["name"], c.get("gpu")): c for c in checks if c["name"].startswith("dcgm_")}
    assert got[("dcgm_memory", 1)]["status"] == "fail"
    assert "error 58 DCGM_FR_MEMORY_MISMATCH" in got[("dcgm_memory", 1)]["diagnosis"]
    assert "GPU 1" in got[("dcgm_memory", 1)]["diagnosis"]
    assert "simulated" in got[("dcgm_memory", 1)]["diagnosis"]
    assert got[("dcgm_memory", 0)]["status"] == "pass"
    assert {got[(t, g)]["status"] for t in ("dcgm_software", "dcgm_pcie") for g in (0, 1)} == {
        "pass"
    }
    assert got[("dcgm_diag", None)]["status"] == "fail"
    assert "exit 205" in got[("dcgm_diag", None)]["diagnosis"]
    # our own checks ran beside DCGM's
    assert any(c["name"] == "gpu_count" for c in checks)
    cases = ET.parse(junit).getroot().iter("testcase")
    failed = [c.get("name", "") for c in cases if c.find("failure") is not None]
    assert any("dcgm_memory[gpu1]" in name for name in failed), failed
