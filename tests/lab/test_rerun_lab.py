"""Fast no-op reruns (issue 20, docs/reruns.md) on converged lab hosts.

After a converge, a rerun of the whole pipeline skips every role of every host as converged
(its record on the host matches the plan's input digest and the live state) and changes
nothing, while validation and verification still run. Then drift makes exactly the owning
role run, on that host only, and restores what drifted: on one host a managed file of the
driver role edited, on the other a hold of the toolkit's removed (one apply for both). A
changed planned variable (the toolkit's default runtime) runs the toolkit alone, and so does
setting it back. The first run is `apply --full`: every role runs whatever was recorded.

The hosts: the session's lab (group a of scripts/lab-tests.sh runs this file last, on the
hosts test_verify_lab.py converged; its converge here is then a no-op run that writes the
records), or a running lab named by GPUPROV_RERUN_LAB (any hosts of profile p5.48xlarge),
prepared and converged here as test_verify_lab.py does. What is simulated: the GPUs (gpusim)
and the NVIDIA-only packages (signed test doubles); apt holds, files, units, dockerd are real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from test_verify_lab import DRIVER_REPO_VARS, SIMULATOR_KERNEL, provision

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

DRIVER_FILE = "/etc/modprobe.d/gpuprov-blacklist-nouveau.conf"  # the driver role's
TOOLKIT_HOLD = "nvidia-container-toolkit"  # held by the toolkit role
DEFAULT_RUNTIME = "docker info --format '{{.DefaultRuntime}}'"


@dataclass(frozen=True)
class Lab:
    lab: RunningLab
    hosts: tuple[str, str]

    def sh(self, host: str, command: str, timeout: float = 300) -> str:
        done = self.lab.ssh(host, command, timeout=timeout)
        assert done.returncode == 0, f"{host}: {command}: {done.stdout}{done.stderr}"
        return done.stdout

    def run(self, *args: str) -> tuple[dict[str, Any], float]:
        start = time.monotonic()
        report = provision(self.lab, *args)
        seconds = time.monotonic() - start
        print(f"provision {' '.join(args) or '(all stages)'}: {seconds:.1f} s")
        return report, seconds


def planned(report: Mapping[str, Any], host: str) -> set[str]:
    return {r["name"] for r in report["hosts"][host]["plan"]["roles"]}


def skipped(report: Mapping[str, Any], host: str) -> set[str]:
    apply = report["hosts"][host]["apply"]
    assert apply is not None, f"{host}: not applied: {report['hosts'][host]}"
    lines = apply["converged"]
    for line in lines:
        assert " skipped: converged, digest " in line, line
    return {line.split(" ", 1)[0] for line in lines}


def assert_ok(report: Mapping[str, Any]) -> None:
    bad = {h: r["status"] for h, r in report["hosts"].items() if r["status"] != "ok"}
    assert not bad, f"hosts not ok: {bad}; {report['hosts']}"


@pytest.fixture(scope="module")
def lab(running_or_session_lab: Callable[[str], RunningLab]) -> Lab:
    running = running_or_session_lab("GPUPROV_RERUN_LAB")
    for name in running.hosts:  # simulator preparation (as test_verify_lab.py's)
        done = running.ssh(name, SIMULATOR_KERNEL, timeout=600)
        assert done.returncode == 0, f"{name}: {done.stderr}"
    extra = running.inventory.parent / "group_vars" / "gpu_nodes.yml"
    extra.write_text("---\n" + yaml.safe_dump(DRIVER_REPO_VARS, default_flow_style=False))
    first, second = sorted(running.hosts)[:2]
    out = Lab(running, (first, second))
    # --full: every role of every host runs, whatever the hosts recorded (on hosts converged
    # before, a no-op walk that writes the records)
    report, seconds = out.run("apply", "--full")
    assert_ok(report)
    for host in out.hosts:
        assert skipped(report, host) == set() and report["hosts"][host]["apply"]["ok"] > 0
    print(f"apply --full, {len(out.hosts)} hosts: {seconds:.1f} s")
    return out


def test_a_noop_rerun_skips_every_role_and_still_verifies(lab: Lab) -> None:
    report, seconds = lab.run()
    assert_ok(report)
    for host in lab.hosts:
        h = report["hosts"][host]
        assert skipped(report, host) == planned(report, host), h["apply"]
        assert h["apply"]["changed"] == 0 and h["apply"]["ok"] == 0  # no playbook ran
        assert h["verification"]["state"] == "done" and h["validation"]["state"] == "done"
        assert not [c for c in h["verification"]["checks"] if c["status"] == "fail"]
    print(f"no-op pipeline, {len(lab.hosts)} hosts: {seconds:.1f} s")


def test_drift_runs_exactly_the_owning_role_and_restores_it(lab: Lab) -> None:
    one, two = lab.hosts
    before = lab.sh(one, f"sha256sum {DRIVER_FILE}")
    lab.sh(one, f"echo '# edited by hand' >> {DRIVER_FILE}")
    lab.sh(two, f"apt-mark unhold {TOOLKIT_HOLD}")
    report, _ = lab.run("apply")
    assert_ok(report)
    assert planned(report, one) - skipped(report, one) == {"nvidia_driver"}
    assert planned(report, two) - skipped(report, two) == {"nvidia_container_toolkit"}
    assert lab.sh(one, f"sha256sum {DRIVER_FILE}") == before
    assert TOOLKIT_HOLD in lab.sh(two, "apt-mark showhold").split()
    again, _ = lab.run("apply")
    for host in lab.hosts:
        assert skipped(again, host) == planned(again, host)


def test_a_changed_variable_runs_exactly_its_role(lab: Lab) -> None:
    one, two = lab.hosts
    host_vars = lab.lab.inventory.parent / "host_vars"
    host_vars.mkdir(exist_ok=True)
    path = host_vars / f"{one}.yml"
    saved = path.read_text() if path.exists() else None
    path.write_text((saved or "---\n") + "nvidia_container_toolkit_default_runtime: true\n")
    try:
        report, _ = lab.run("apply")
        assert_ok(report)
        assert planned(report, one) - skipped(report, one) == {"nvidia_container_toolkit"}
        assert skipped(report, two) == planned(report, two)
        assert lab.sh(one, DEFAULT_RUNTIME).strip() == "nvidia"
    finally:
        if saved is None:
            path.unlink()
        else:
            path.write_text(saved)
    back, _ = lab.run("apply")  # the variable back as it was: the toolkit alone again
    assert_ok(back)
    assert planned(back, one) - skipped(back, one) == {"nvidia_container_toolkit"}
    assert lab.sh(one, DEFAULT_RUNTIME).strip() == "runc"
    after, seconds = lab.run("apply")
    for host in lab.hosts:
        assert skipped(after, host) == planned(after, host)
    print(f"no-op apply, {len(lab.hosts)} hosts: {seconds:.1f} s")
