"""A GPU lab host reached only through a jump host, with ProxyJump from the inventory.

The session lab's Debian 12 host is the bastion; the Debian 13 host is the target, named by
its container name on the lab network: this machine cannot resolve that name, the bastion
can (`ssh -W` resolves it there). The bastion's user and key come from an ssh config given
with -F, as users keep them in ~/.ssh/config. Detection, a validation command, apply (check
mode) and verify go through it; an unknown bastion key stops detection with its fingerprint.
The GPUs are simulated (gpusim)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import connection
from orchestrator.detect import detect_hosts
from orchestrator.inventory import load_inventory
from orchestrator.lab.labinventory import DRIVER_POLICY_BY_OS
from orchestrator.lab.running import RunningLab
from orchestrator.parsers import parse_host
from orchestrator.validate.runner import SubprocessExecutor
from orchestrator.verify.runner import run_suite

pytestmark = pytest.mark.lab
BIN = Path(sys.executable).parent
ROLE_TAGS = "nvidia_driver,driver_upgrade,docker,nvidia_container_toolkit,mig"


def _key_line(lab: RunningLab, host: str) -> tuple[str, str]:
    """(type, base64) of a lab host's pinned key."""
    want = f"[127.0.0.1]:{lab.ports[host]}"
    for line in lab.paths.known_hosts.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == want:
            return parts[1], parts[2]
    raise AssertionError(f"no pinned key for {host}")


def _setup(lab: RunningLab, tmp: Path, *, bastion_known: bool = True) -> Path:
    bastion, target = lab.host_for("debian12"), lab.host_for("debian13")
    b_type, b_key = _key_line(lab, bastion)
    t_type, t_key = _key_line(lab, target)
    known = tmp / "known_hosts"
    lines = [f"{target} {t_type} {t_key}"]
    if bastion_known:
        lines.append(f"[127.0.0.1]:{lab.ports[bastion]} {b_type} {b_key}")
    known.write_text("\n".join(lines) + "\n")
    cfg = tmp / "ssh_config"
    cfg.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {lab.ports[bastion]}\n  User root\n"
        f"  IdentityFile {lab.paths.key}\n  IdentitiesOnly yes\n"
    )
    group_vars = tmp / "group_vars"
    if not group_vars.exists():
        group_vars.symlink_to(lab.inventory.parent / "group_vars")
    policy = "".join(f" {k}={v}" for k, v in DRIVER_POLICY_BY_OS.get("debian13", {}).items())
    inv = tmp / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"{target} ansible_host={target} ansible_port=22 gpuprov_lab_os=debian13 "
        f"gpuprov_lab_profile={lab.profile}{policy}\n"
        f"[lab]\n{target}\n[lab:vars]\nansible_user=root\n"
        f"ansible_ssh_private_key_file={lab.paths.key}\n"
        f"ansible_ssh_common_args='-F {cfg} -o UserKnownHostsFile={known} -o ProxyJump=bastion'\n"
    )
    return inv


def test_detect_validate_apply_verify_through_the_bastion(lab: RunningLab, tmp_path: Path) -> None:
    start = time.monotonic()
    inv = _setup(lab, tmp_path)
    inventory = load_inventory(inv)
    (host,) = inventory.hosts
    assert connection.jump_hosts(host) == ("bastion",)
    # detection
    result = detect_hosts(inventory, progress=False)
    assert result.failed == {}, result.failed
    facts = parse_host(host.name, result.raw[host.name])
    assert facts.simulated and facts.os is not None and facts.os.version_id == "13"
    # without the jump host the name does not even resolve here
    direct = load_inventory(inv)
    import dataclasses

    no_jump = dataclasses.replace(direct.hosts[0], vars={}, known_hosts=host.known_hosts)
    failed = detect_hosts(dataclasses.replace(direct, hosts=(no_jump,)), progress=False).failed
    assert host.name in failed
    # validation's executor
    out = SubprocessExecutor(tuple(connection.ssh_argv(host)))("hostname", timeout=60)
    assert (out.rc, out.stdout.strip()) == (0, host.name), out.stderr
    # apply in check mode, with the CLI (roles' own tasks skipped: see test_wheel_lab.py);
    # --full: an earlier test on this shared lab may have converged the host, and a skipped
    # playbook would not go through the bastion
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(BIN / "provision"), "apply", "--check", "--full", "-i", str(inv), "--json",
         "--skip-tags", ROLE_TAGS],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    applied = report["hosts"][host.name]["apply"]
    assert applied["touched"] and applied["ok"] >= 3 and applied["unreachable"] == 0, applied
    run_dir = Path(report["artifact_dir"])
    routes = json.loads((run_dir / "routes.json").read_text())["all"]["hosts"]
    assert "ProxyCommand=" in routes[host.name]["ansible_ssh_common_args"]
    # verify: the suite's one session per host goes through the same checked route
    run = run_suite([host], tmp_path / "verify")
    checks = run.results.get(host.name, ())
    assert checks and any(c.status == "pass" for c in checks), run
    assert all(c.name != "verify.connection" for c in checks), checks
    print(f"bastion lab test: {time.monotonic() - start:.0f} s")


def test_an_unknown_bastion_key_stops_the_run_with_its_fingerprint(
    lab: RunningLab, tmp_path: Path
) -> None:
    inv = _setup(lab, tmp_path, bastion_known=False)
    bastion = lab.host_for("debian12")
    b_type, b_key = _key_line(lab, bastion)
    digest = hashlib.sha256(base64.b64decode(b_key)).digest()
    fp = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    result = detect_hosts(load_inventory(inv), progress=False)
    (error,) = result.failed.values()
    assert f"host key of [127.0.0.1]:{lab.ports[bastion]}" in error.message
    assert f"{b_type} {fp}" in error.message and "unknown" in error.message
