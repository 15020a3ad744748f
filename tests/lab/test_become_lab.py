"""Become with a sudo password from vault, on a real lab host with real sudo and OpenSSH.

The session lab's Debian 12 host gets a login user, `gpuadmin`, whose sudo rule asks for a
password (made here over SSH as root; removed at the end). The inventory logs in as that
user with ansible_become and the password as an inline `!vault` value, decrypted with a vault
password file: `provision detect`, `provision validate --runtime host` (what validation can
do on a simulated host: health checks, the CUDA checks skipped as simulated) and `provision
verify` (the testinfra suite, not converged here, so its checks judge a bare host) all run
their commands as root through sudo, the password answered on the SSH channel's stdin. sudo's
own log on the host shows them; the password is nowhere in that log, in the processes' argv
or in the reports. A wrong password fails the host at once (exit 1) with sudo's refusal.
The GPUs are simulated (gpusim)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.labinventory import DRIVER_POLICY_BY_OS
from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab
BIN = Path(sys.executable).parent
USER = "gpuadmin"
PASSWORD = "lab sudo pw: 7f3a"  # spaces and a colon: sent as one line, never split
VAULT_PASSWORD = "lab-vault-pw"

SETUP = f"""set -e
id {USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {USER}
echo '{USER}:{PASSWORD}' | chpasswd
install -d -m 700 -o {USER} -g {USER} /home/{USER}/.ssh
install -m 600 -o {USER} -g {USER} /root/.ssh/authorized_keys /home/{USER}/.ssh/
echo '{USER} ALL=(ALL:ALL) ALL' > /etc/sudoers.d/{USER}
chmod 440 /etc/sudoers.d/{USER}
visudo -cf /etc/sudoers.d/{USER} >/dev/null
"""
CLEANUP = f"rm -f /etc/sudoers.d/{USER}; userdel -r {USER} 2>/dev/null || true"


@pytest.fixture(scope="module")
def sudo_host(lab: RunningLab) -> Any:
    host = lab.host_for("debian12")
    done = lab.ssh(host, SETUP)
    assert done.returncode == 0, done.stderr
    yield host
    lab.ssh(host, CLEANUP)


def _vaulted(tmp: Path, value: str) -> tuple[Path, str]:
    secret = tmp / "vault-pass"
    secret.write_text(VAULT_PASSWORD + "\n")
    done = subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(secret),
         value, "--name", "ansible_become_password"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return secret, done.stdout


def _inventory(lab: RunningLab, host: str, tmp: Path, password_yaml: str) -> Path:
    group_vars = tmp / "group_vars"
    if not group_vars.exists():
        group_vars.symlink_to(lab.inventory.parent / "group_vars")
    knobs = DRIVER_POLICY_BY_OS.get("debian12", {})
    policy = "".join(f"          {k}: {json.dumps(v)}\n" for k, v in knobs.items())
    inv = tmp / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        f"        {host}:\n"
        f"          ansible_host: 127.0.0.1\n          ansible_port: {lab.ports[host]}\n"
        f"          ansible_user: {USER}\n"
        f"          ansible_ssh_private_key_file: {lab.paths.key}\n"
        "          ansible_ssh_common_args: "
        f"'-o UserKnownHostsFile={lab.paths.known_hosts}'\n"
        "          ansible_become: true\n"
        f"          gpuprov_lab_os: debian12\n          gpuprov_lab_profile: {lab.profile}\n"
        + policy
        + "".join(f"          {line}\n" for line in password_yaml.splitlines())
        + "    lab:\n      children:\n        gpu_nodes:\n"
    )
    return inv


def _provision(tmp: Path, *args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(BIN / "provision"), *args, "--json"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _sudo_log(lab: RunningLab, host: str) -> str:
    done = lab.ssh(host, "journalctl --no-pager -o cat _COMM=sudo 2>/dev/null; "
                   "cat /var/log/auth.log 2>/dev/null || true")  # fmt: skip
    return done.stdout


def _logins(lab: RunningLab, host: str) -> int:
    """SSH logins of USER so far, as sshd logs them (one per session gpuprov opened)."""
    done = lab.ssh(host, "journalctl --no-pager -o cat _COMM=sshd 2>/dev/null || true")
    return done.stdout.count(f"Accepted publickey for {USER} ")


def test_detect_validate_verify_become_with_a_vault_password(
    lab: RunningLab, sudo_host: str, tmp_path: Path
) -> None:
    start = time.monotonic()
    secret, vaulted = _vaulted(tmp_path, PASSWORD)
    inv = _inventory(lab, sudo_host, tmp_path, vaulted)
    common = ("-i", str(inv), "--vault-password-file", str(secret))
    before = _sudo_log(lab, sudo_host).count(f"{USER} : ")

    logins = _logins(lab, sudo_host)
    took: dict[str, float] = {}
    t0 = time.monotonic()
    code, report, err = _provision(tmp_path, "detect", *common)
    took["detect"] = time.monotonic() - t0
    assert code == 0, err[-3000:]
    facts = report["hosts"][sudo_host]["facts"]
    assert "12" in facts["os"] and facts["gpu_count"] == 8, facts
    assert _logins(lab, sudo_host) - logins == 1  # detection: still one SSH session
    assert _sudo_log(lab, sudo_host).count(f"{USER} : ") - before == 1  # the probe, as root

    t0 = time.monotonic()
    code, report, err = _provision(tmp_path, "validate", *common, "--runtime", "host")
    took["validate"] = time.monotonic() - t0
    validation = report["hosts"][sudo_host]["validation"]
    assert validation["state"] == "done", validation
    statuses = {c["name"]: c["status"] for c in validation["checks"]}
    assert any(s == "pass" for s in statuses.values()), statuses
    assert all("sudo" not in c["diagnosis"] for c in validation["checks"]), validation

    t0 = time.monotonic()
    code, report, err = _provision(tmp_path, "verify", *common)
    took["verify"] = time.monotonic() - t0
    verification = report["hosts"][sudo_host]["verification"]
    assert verification["state"] == "done", verification
    checks = verification["checks"]
    assert checks and any(c["status"] == "pass" for c in checks), checks
    assert not any("sudo" in c["diagnosis"] for c in checks), checks

    log = _sudo_log(lab, sudo_host)
    ran = log.count(f"{USER} : ") - before  # one sudo line per command run as root
    assert ran >= 3, log[-2000:]
    assert "USER=root" in log and "incorrect password" not in log
    assert PASSWORD not in log and "7f3a" not in log
    assert PASSWORD not in json.dumps(report)
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in took.items())
    print(f"become lab test: {ran} commands through sudo ({stages}), "
          f"{time.monotonic() - start:.0f} s")  # fmt: skip


def test_a_wrong_become_password_fails_the_host_cleanly(
    lab: RunningLab, sudo_host: str, tmp_path: Path
) -> None:
    inv = _inventory(lab, sudo_host, tmp_path, "ansible_become_password: not-the-password")
    start = time.monotonic()
    code, report, err = _provision(tmp_path, "detect", "-i", str(inv), timeout=120)
    took = time.monotonic() - start
    assert code == 1, err
    error = report["hosts"][sudo_host]["detect_error"]
    assert "sudo to root failed: the password was not accepted" in error, error
    assert "not-the-password" not in error + err
    assert took < 60, took
    print(f"wrong become password: host failed in {took:.1f} s")
    # a missing vault password is bad input, before any host is touched
    _, vaulted = _vaulted(tmp_path, PASSWORD)
    inv = _inventory(lab, sudo_host, tmp_path, vaulted)
    proc = subprocess.run(
        [str(BIN / "provision"), "detect", "-i", str(inv)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "--vault-password-file" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
