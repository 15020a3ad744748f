"""Reprovisioning after a driver upgrade, on a lab of its own (Debian 12, CUDA-repository path).

Two Debian 12 p5 hosts on the production path (NVIDIA's CUDA repository, open modules,
fabric manager), served by the lab's test double of NVIDIA's debian12/x86_64 repository
(tests/lab/aptrepo, generated from tests/recorded/reference/packages.yaml). The first is
converged through the product (`provision apply`) at 575.57.08, pinned in its host_vars:
the fabric manager is still `nvidia-fabricmanager-575`. The policy then moves the fleet to
580.159.04, across NVIDIA's rename (`nvidia-fabricmanager`, `libnvidia-nscq`, unsuffixed from
580), and `provision apply --serial 1` rolls: drain hook, GPU jobs waited for, clients
stopped, driver + fabric manager + nscq upgraded in lockstep (DKMS builds the double's small
module), re-validated (Fabric State gate), undrain hook. Scenarios, in order:

1. The run is killed while the first host is being re-validated: it stays drained, and its
   state file says where it stopped.
2. A rerun with an Xid in the kernel log (gpusim fault) resumes at the validation, which now
   fails: the host stays drained, the rollout stops (max fail 0) and the second host, next in
   the rollout, is not touched.
3. With the fault cleared, a rerun resumes at the validation again, passes, runs the undrain
   hook, and `provision verify` passes at the new version; the old suffixed fabric manager
   is gone and not held, the new one is held.
4. The policy moves to 595.91.07 and the operator presses Ctrl-C while the upgrade waits
   for a GPU job, after the drain: exit 130, the interrupted report names the host, drained,
   at its step, and no Ansible process is left (issue 27).
5. The pin is backed out (580.159.04 again): the rerun finishes the abandoned upgrade toward
   the current target and undrains the host, instead of leaving it drained, reported ok.
6. The policy moves to 595.91.07, across the pinning scheme: nvidia-driver-pinning-595 is
   installed before the driver, and everything installed is held.

The first host runs a MIG layout (policy `mig_layout`) from its first converge. Reloading the
driver destroys GPU and compute instances (as on real GPUs), so the upgrade run must re-create
them: its mig role reports a change on that host, and verification checks the layout.

Simulated: the GPUs, loading the module DKMS built, nvidia-smi, the kernel log (gpusim). Every
NVIDIA package is a signed test double (tests/lab/aptrepo), not NVIDIA's software.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from provisionrun import ansible_processes as _ansible_of
from provisionrun import env as _env
from provisionrun import provision_cmd, start

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach
from orchestrator.parsers.mig import parse_lgi

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
HOOKS = "/var/log/gpuprov-upgrade-hooks.log"
STATE = "/var/lib/gpuprov/upgrade.json"
# 575: suffixed fabric manager; 580: unsuffixed; 595: the pinning scheme (selection.yaml of
# tests/lab/aptrepo publishes these releases; packages.yaml cuda_apt.branches).
OLD, NEW, PINNED = "575.57.08", "580.159.04", "595.91.07"
FLAVOUR = "open"  # the plan's flavour for an H100 on NVIDIA's repository
FLEET_MIG = yaml.safe_load((REPO / "inventory/group_vars/all.yml").read_text())["mig_configs"]
MIG_LAYOUT = "h100-80gb-mixed"  # p5: H100 80GB
MIG_POLICY: dict[str, Any] = {
    "mig_layout": MIG_LAYOUT,
    "mig_configs": {MIG_LAYOUT: FLEET_MIG[MIG_LAYOUT]},
    # MIG turns NVLink peer-to-peer off: a MIG host cannot be held to the multi-GPU NCCL
    # check (the planner blocks that combination).
    "gpuprov_validation_nccl": False,
}

UPGRADE_POLICY: dict[str, Any] = {
    "nvidia_driver_version": NEW,
    "nvidia_driver_reboot": "allow",
    "driver_upgrade_drain_command": f'echo "drain $(date +%s.%N)" >> {HOOKS}',
    "driver_upgrade_undrain_command": f'echo "undrain $(date +%s.%N)" >> {HOOKS}',
}
FIRST_POLICY: dict[str, Any] = {**UPGRADE_POLICY, **MIG_POLICY}  # the host that upgrades
GPUS = 8  # p5.48xlarge
# GPU index -> GPU instance profile -> count, as the layout asks on every GPU (`devices: all`)
MIG_INSTANCES = {i: dict(FLEET_MIG[MIG_LAYOUT][0]["mig-devices"]) for i in range(GPUS)}


def provision(lab: RunningLab, report: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        provision_cmd(lab, report, *args),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert report.exists(), f"provision {args} wrote no report: {proc.stderr[-4000:]}"
    data: dict[str, Any] = json.loads(report.read_text())
    data["_output"] = proc.stdout + proc.stderr
    return data


class Node:
    def __init__(self, lab: RunningLab, name: str) -> None:
        self.lab, self.name = lab, name

    def sh(self, command: str, *, ok: bool = True) -> str:
        done = self.lab.ssh(self.name, command, timeout=300)
        if ok:
            assert done.returncode == 0, f"{self.name}: {command}: {done.stdout}{done.stderr}"
        return done.stdout

    def state(self) -> dict[str, Any]:
        text = self.sh(f"cat {STATE} 2>/dev/null || echo '{{}}'")
        data: dict[str, Any] = json.loads(text)
        return data

    def hooks(self) -> list[str]:
        text = self.sh(f"cat {HOOKS} 2>/dev/null || true")
        return [line.split()[0] for line in text.splitlines() if line.strip()]

    def loaded(self) -> str:
        return self.sh("cat /proc/driver/nvidia/version 2>/dev/null || true")

    def mig_instances(self) -> dict[int, dict[str, int]]:
        """GPU index -> GPU instance profile -> count, from `nvidia-smi mig -lgi`."""
        done = self.lab.ssh(self.name, "nvidia-smi mig -lgi", timeout=120)
        have: dict[int, dict[str, int]] = {}
        for gi in parse_lgi(f"{done.stdout}\n# exit={done.returncode}\n"):
            counts = have.setdefault(gi.gpu, {})
            counts[gi.name] = counts.get(gi.name, 0) + 1
        return have


def mig_changed_since(started: float, host: str) -> list[str]:
    """Tasks of the mig role that changed `host` in `provision apply` runs started after
    `started` (their ansible-runner events, kept under artifacts/ even when a run is killed)."""
    tasks = []
    for run in (REPO / "artifacts").iterdir():
        if run.stat().st_mtime < started:
            continue
        for path in sorted((run / "ansible" / "job_events").glob("*.json")):
            event = json.loads(path.read_text())
            data = event.get("event_data", {})
            if (
                event.get("event") == "runner_on_ok"
                and data.get("host") == host
                and data.get("role") == "mig"
                and data.get("res", {}).get("changed")
            ):
                tasks.append(str(data.get("task")))
    return tasks


@pytest.fixture(scope="module")
def upgrade(
    scratch_lab_name: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningLab, Node, Node, Path]]:
    name = scratch_lab_name("upgrade")
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    if not keep:
        hosts.down(name)
    hosts.up(name, "p5.48xlarge", 2, "debian12", say=lambda _: None)
    try:  # a failed converge must not leave the lab behind either
        lab = attach(name, "p5.48xlarge")
        work = tmp_path_factory.mktemp("upgrade")
        first, second = (Node(lab, h) for h in lab.hosts)
        host_vars = lab.inventory.parent / "host_vars"
        host_vars.mkdir(exist_ok=True)
        hooks = {k: v for k, v in UPGRADE_POLICY.items() if "drain" in k}
        (host_vars / f"{first.name}.yml").write_text(
            "---\n" + yaml.safe_dump({**hooks, **MIG_POLICY, "nvidia_driver_version": OLD})
        )
        (host_vars / f"{second.name}.yml").write_text("---\n" + yaml.safe_dump(hooks))
        converged = provision(lab, work / "converge.json", "apply", "--limit", first.name)
        assert converged["exit_code"] == 0, converged["_output"][-4000:]
        assert f" {OLD} " in first.loaded(), first.loaded()
        held = first.sh("apt-mark showhold").split()
        assert {"nvidia-fabricmanager-575", "libnvidia-nscq-575"} <= set(held), held
        assert first.mig_instances() == MIG_INSTANCES, "the layout applies at the old version"
        # The fleet's policy moves to the new release (group_vars: every host of the lab).
        (lab.inventory.parent / "group_vars" / "gpu_nodes.yml").write_text(
            "---\n" + yaml.safe_dump({"nvidia_driver_version": NEW})
        )
        (host_vars / f"{first.name}.yml").write_text("---\n" + yaml.safe_dump(FIRST_POLICY))
        yield lab, first, second, work
    finally:
        if not keep:
            hosts.down(name)


def _plan_roles(report: Mapping[str, Any], host: str) -> Mapping[str, Any]:
    roles = report["hosts"][host]["plan"]["roles"]
    return {r["name"]: r for r in roles}


def test_plan_shows_the_upgrade(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, other, work = upgrade
    report = provision(lab, work / "plan.json", "plan")
    driver = _plan_roles(report, old.name)["nvidia_driver"]
    assert driver["change"] is True
    assert f"upgrade {OLD} {FLAVOUR} -> {NEW} {FLAVOUR}" in driver["reason"], driver["reason"]
    # The plan names the packages across the rename: the unsuffixed fabric manager.
    assert driver["packages"]["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    fresh = _plan_roles(report, other.name)["nvidia_driver"]
    assert fresh["reason"].startswith(f"install {NEW} {FLAVOUR}"), fresh["reason"]


def test_killed_during_validation_stays_drained_with_its_state(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, _, work = upgrade
    slow = lab.inventory.parent / "host_vars" / f"{old.name}.yml"
    slow.write_text(
        "---\n" + yaml.safe_dump({**FIRST_POLICY, "driver_upgrade_validate_command": "sleep 900"})
    )
    # A training job holds the GPUs: the upgrade must wait for it before the driver changes.
    old.sh("setsid gpusim job 40 --gpu 2 --name train.py >/dev/null 2>&1 < /dev/null &")
    job_started = time.time()
    proc = start(lab, work / "killed.json", "apply", "--serial", "1", cwd=REPO, output=False)
    try:
        deadline = time.monotonic() + 3000
        while time.monotonic() < deadline:
            if "refresh-runtime" in old.state().get("done", []):
                break
            assert proc.poll() is None, "provision ended before the validation step"
            time.sleep(5)
        else:
            pytest.fail("the upgrade never reached its validation step")
        time.sleep(5)  # the acceptance command (sleep 900) is now running
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    old.sh("pkill -f 'sleep [9]00' || true")  # [9]: the pattern must not match this shell
    slow.write_text("---\n" + yaml.safe_dump(FIRST_POLICY))
    state = old.state()
    assert state["status"] == "in_progress" and state["target"] == f"{NEW} {FLAVOUR}"
    assert state["done"][-1] == "refresh-runtime" and "undrain" not in state["done"]
    assert f" {NEW} " in old.loaded(), "the new driver is installed and loaded"
    assert old.hooks() == ["drain"], "drained once, not undrained"
    # Reloading the driver destroyed the GPU instances; the run re-created them (mig role)
    # before it reached the validation.
    assert mig_changed_since(job_started, old.name), "the mig role changed nothing"
    assert old.mig_instances() == MIG_INSTANCES
    waited = next(h for h in state["history"] if h["step"] == "wait-jobs")
    waited_until = calendar.timegm(time.strptime(waited["at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert waited_until >= job_started + 35, "the driver changed while a GPU job still ran"


def test_rerun_resumes_fails_validation_and_stops_the_rollout(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, other, work = upgrade
    old.sh("gpusim fault xid on")
    report = provision(
        lab, work / "failed.json", "apply", "--serial", "1", "--max-fail-percent", "0"
    )
    assert report["exit_code"] == 1
    state = old.state()
    assert state["status"] == "failed" and state["failed_step"] == "validate", state
    resumed = [h["step"] for h in state["history"]]
    assert resumed.count("drain") == 1 and "install" in state["done"], state
    assert old.hooks() == ["drain"], "still drained"
    host = report["hosts"][old.name]
    assert host["status"] == "failed"
    untouched = report["hosts"][other.name]
    assert untouched["status"] == "not_touched", untouched


def test_rerun_after_the_fix_completes_and_verifies(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, _, work = upgrade
    old.sh("gpusim fault xid off")
    old.sh("dmesg -C 2>/dev/null || true")
    report = provision(lab, work / "done.json", "apply", "--serial", "1", "--limit", old.name)
    assert report["exit_code"] == 0, report["_output"][-4000:]
    state = old.state()
    assert state["status"] == "done" and state["done"][-1] == "undrain", state
    assert old.hooks() == ["drain", "undrain"]
    assert old.mig_instances() == MIG_INSTANCES
    verify = provision(lab, work / "verify.json", "--limit", old.name, "verify")
    assert verify["exit_code"] == 0, verify["_output"][-4000:]


def _held_and_versions(node: Node) -> tuple[set[str], dict[str, str]]:
    held = set(node.sh("apt-mark showhold").split())
    listing = node.sh("dpkg-query -W --showformat='${Package} ${Version} ${db:Status-Status}\\n'")
    versions = {
        line.split()[0]: line.split()[1]
        for line in listing.splitlines()
        if line.split() and line.split()[-1] == "installed"
    }
    return held, versions


def test_the_fabric_manager_crossed_the_rename_in_lockstep_and_held(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    _, old, _, _ = upgrade
    held, versions = _held_and_versions(old)
    for name in ("nvidia-fabricmanager", "libnvidia-nscq"):
        assert versions.get(name, "").startswith(f"{NEW}-"), (name, versions.get(name))
        assert name in held, name
    for gone in ("nvidia-fabricmanager-575", "libnvidia-nscq-575"):
        assert gone not in versions, f"{gone} is still installed"
        assert gone not in held, f"{gone} is still held"
    record = json.loads(old.sh("cat /var/lib/gpuprov/nvidia_driver.json"))
    assert record["version"] == NEW and set(record["held"]) <= held


def _pin(lab: RunningLab, old: Node, version: str) -> None:
    (lab.inventory.parent / "group_vars" / "gpu_nodes.yml").write_text(
        "---\n" + yaml.safe_dump({"nvidia_driver_version": version})
    )
    # The first host's own policy pins the version too (host_vars outrank group_vars).
    (lab.inventory.parent / "host_vars" / f"{old.name}.yml").write_text(
        "---\n" + yaml.safe_dump({**FIRST_POLICY, "nvidia_driver_version": version})
    )


# Added on 2026-12-01 (issues 25 and 27); the whole module passed with them on 2026-12-03
# (9 passed in 28 min beside other lab runs: Ctrl-C 30 s, backed-out pin 130 s, 595 rerun
# 155 s). They add about ten group-minutes to CI's lab on 2 cores, whose 45 minutes they do not
# fit: they are in the extended tier (`make test-lab-extended` sets GPUPROV_LAB_EXTENDED=1),
# in this order, on the same upgrade lab, as the kernel-update and MIG lab tests are.
EXTENDED = pytest.mark.skipif(
    os.environ.get("GPUPROV_LAB_EXTENDED") != "1",
    reason="extended tier (GPUPROV_LAB_EXTENDED=1, make test-lab-extended): the Ctrl-C, "
    "backed-out pin and 595 full-rerun upgrade cases",
)


@EXTENDED
def test_ctrl_c_after_the_drain_names_the_drained_host_and_stops_ansible(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, _, work = upgrade
    _pin(lab, old, PINNED)
    # a GPU job keeps the upgrade waiting (wait-jobs) after the drain
    old.sh("setsid gpusim job 600 --gpu 1 --name train.py >/dev/null 2>&1 < /dev/null &")
    report = work / "ctrl-c.json"
    proc = start(lab, report, "apply", "--serial", "1", "--limit", old.name, cwd=REPO)
    try:
        deadline = time.monotonic() + 1800
        while old.state().get("target") != f"{PINNED} {FLAVOUR}" or "drain" not in old.state().get(
            "done", []
        ):
            assert proc.poll() is None, "provision ended before the drain"
            assert time.monotonic() < deadline, "the upgrade never drained the host"
            time.sleep(3)
        time.sleep(5)  # waiting for the GPU job now
        proc.send_signal(signal.SIGINT)  # the operator's Ctrl-C (provision's own group)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        old.sh("pkill -f 'gpusim [j]ob' || true")
    assert proc.returncode == 130, output[-4000:]
    assert not _ansible_of(lab), f"Ansible runs on: {_ansible_of(lab)}"
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["exit_code"] == 130
    host = data["hosts"][old.name]
    assert host["status"] == "interrupted" and host["drained"] is True, host
    assert host["upgrade_step"] == "wait-jobs", host
    assert f"{old.name} is drained mid-upgrade (step wait-jobs)" in output, output[-3000:]
    state = old.state()
    assert state["status"] == "in_progress" and "drain" in state["done"], state
    assert old.hooks()[-1] == "drain"


@EXTENDED
def test_a_backed_out_pin_finishes_the_abandoned_upgrade(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, _, work = upgrade
    _pin(lab, old, NEW)  # the operator backs the 595 pin out
    report = provision(lab, work / "backed-out.json", "apply", "--serial", "1", "--limit", old.name)
    assert report["exit_code"] == 0, report["_output"][-4000:]
    state = old.state()
    assert state["target"] == f"{NEW} {FLAVOUR}", state
    assert state["status"] == "done" and state["done"][-1] == "undrain", state
    assert any(h["step"] == "retarget" for h in state["history"]), state["history"]
    assert old.hooks()[-2:] == ["drain", "undrain"], "undrained, not left drained"
    assert f" {NEW} " in old.loaded(), old.loaded()


def test_upgrade_across_the_pinning_scheme(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    lab, old, _, work = upgrade
    _pin(lab, old, PINNED)
    report = provision(lab, work / "pinned.json", "apply", "--serial", "1", "--limit", old.name)
    assert report["exit_code"] == 0, report["_output"][-4000:]
    state = old.state()
    assert state["status"] == "done" and state["done"][-1] == "undrain", state
    assert f" {PINNED} " in old.loaded(), old.loaded()
    held, versions = _held_and_versions(old)
    assert "nvidia-driver-pinning-595" in versions and "nvidia-driver-pinning-595" in held
    # dpkg's own log: the pinning package went in before the driver moved to 595.
    log = [
        ln.split() for ln in old.sh("grep -E ' (install|upgrade) ' /var/log/dpkg.log").splitlines()
    ]
    pinning = next(i for i, f in enumerate(log) if f[3].startswith("nvidia-driver-pinning-595"))
    driver = next(
        i for i, f in enumerate(log)
        if f[3].startswith("nvidia-kernel-open-dkms") and f[-1].startswith(PINNED)
    )  # fmt: skip
    assert pinning < driver, log[-20:]
    for name in ("nvidia-fabricmanager", "libnvidia-nscq", "nvidia-kernel-open-dkms"):
        assert versions.get(name, "").startswith(f"{PINNED}-"), (name, versions.get(name))
        assert name in held, name
    verify = provision(lab, work / "verify-pinned.json", "--limit", old.name, "verify")
    assert verify["exit_code"] == 0, verify["_output"][-4000:]


@EXTENDED
def test_at_595_nvidia_smi_is_installed_and_a_full_rerun_changes_nothing(
    upgrade: tuple[RunningLab, Node, Node, Path],
) -> None:
    """Issue 25: the 595 path's package set provides nvidia-smi (here through the debian12
    double's nvidia-driver-cuda), and converging again (every role, --full) changes nothing."""
    lab, old, _, work = upgrade
    # /usr/bin/nvidia-smi: the package's; gpusim's wrapper in /usr/local/bin is first on PATH.
    owner = old.sh("dpkg -S /usr/bin/nvidia-smi").strip()
    assert owner.startswith("nvidia-smi: /usr/bin/nvidia-smi"), owner
    _, versions = _held_and_versions(old)
    assert versions["nvidia-smi"].startswith(f"{PINNED}-"), versions["nvidia-smi"]
    shown = old.sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
    assert shown == [PINNED] * GPUS, shown
    again = provision(lab, work / "again-595.json", "apply", "--full", "--limit", old.name)
    assert again["exit_code"] == 0, again["_output"][-4000:]
    assert again["hosts"][old.name]["apply"]["changed"] == 0, again["_output"][-4000:]
