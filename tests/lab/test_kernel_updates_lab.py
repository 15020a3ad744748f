"""Kernel updates never cost a host its GPUs (issue 16), on a lab of its own: one Debian 12
p5 host, the production path (NVIDIA's CUDA repository: here the lab's signed test double,
whose DKMS module is a tiny stand-in that builds in seconds), real apt, real DKMS, and real
kernel packages from Debian's archive.

The host presents (gpusim's uname shim) the ABI of bookworm's point release, whose
linux-headers-amd64 depends on an older ABI than bookworm-security's: the security ABI is
"the newer kernel" (both read with apt-cache on the host, never written here). In order:

1. converge at 580.126.20; install the newer kernel's image and headers: DKMS has the module
   for it; `provision plan` says nothing about kernels; `provision verify` passes;
2. remove that module by hand: the plan warns (next boot without a module), verify fails;
   with the newer kernel's headers unavailable (an apt pin, as when the archive no longer
   has them) and the driver unloaded (a reason to reboot), the role with
   `nvidia_driver_reboot: allow` fails naming the kernel and reboots nothing; with the pin
   gone, a converge repairs it: plan clean, verify passes;
3. a driver upgrade to 580.159.04 (driver_upgrade: drain, ..., undrain) prepares both
   kernels: the undrain hook itself records the module version of each kernel.

Simulated: the GPUs and loading the module (gpusim); every NVIDIA package is a test double.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OLD, NEW = "580.126.20", "580.159.04"  # releases of the debian12 test double (aptrepo README)
HOOKS = "/var/log/gpuprov-kernel-hooks.log"
PIN = "/etc/apt/preferences.d/zz-test-no-new-headers.pref"

# The ABI bookworm's point release and the newest suite give linux-headers-amd64 (apt-cache).
ABIS = r"""set -eu
apt-get update -qq
dep() { apt-cache show "linux-headers-amd64=$1" \
  | sed -n 's/^Depends: linux-headers-\([^ ,]*\).*/\1/p' | head -n 1; }
point=$(apt-cache madison linux-headers-amd64 \
  | awk -F'|' 'index($3, " bookworm/main ") {gsub(/ /, "", $2); print $2; exit}')
newest=$(apt-cache policy linux-headers-amd64 | sed -n 's/^ *Candidate: //p')
echo "$(dep "$point") $(dep "$newest")"
"""
MODULE = "find /lib/modules/{k} \\( -name 'nvidia.ko*' -o -name 'nvidia-current.ko*' \\)"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


@dataclass
class Lab:
    lab: RunningLab
    host: str
    work: Path
    running: str  # the ABI the host presents
    newer: str  # the newer ABI installed as a pending kernel
    times: dict[str, float]

    def sh(self, command: str, *, ok: bool = True, timeout: int = 900) -> str:
        done = self.lab.ssh(self.host, command, timeout=timeout)
        if ok:
            assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    def provision(self, *args: str) -> tuple[int, dict[str, Any], str]:
        report = self.work / f"{args[0]}-{time.monotonic_ns()}.json"
        start = time.monotonic()
        proc = subprocess.run(
            [str(BIN / "provision"), "--inventory", str(self.lab.inventory), "--report",
             str(report), *args, "--limit", self.host],
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        self.times[f"provision {args[0]} #{len(self.times)}"] = time.monotonic() - start
        data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
        return proc.returncode, data, proc.stdout + proc.stderr

    def host_vars(self, **values: object) -> None:
        path = self.lab.inventory.parent / "host_vars" / f"{self.host}.yml"
        path.parent.mkdir(exist_ok=True)
        path.write_text("---\n" + yaml.safe_dump(values), encoding="utf-8")

    def module(self, release: str) -> tuple[str, str]:
        """(path, modinfo version) of the NVIDIA module for `release`; ("", "") if none."""
        path = self.sh(MODULE.format(k=release) + " | head -n 1").strip()
        if not path:
            return "", ""
        return path, self.sh(f"modinfo -F version {path}").strip()

    def warnings(self) -> list[str]:
        """The plan's warnings and blockers for the host (`provision plan` report)."""
        _, report, out = self.provision("plan")
        assert report, out[-3000:]
        plan: dict[str, Any] = report["hosts"][self.host]["plan"]
        assert "simulated host: GPU facts come from the lab's GPU simulator" in plan["warnings"]
        return [*plan["warnings"], *plan["blockers"]]


@pytest.fixture(scope="module")
def kl(scratch_lab_name: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    name = scratch_lab_name("kernel")
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    started = time.monotonic()
    if not keep:
        hosts.down(name)
    hosts.up(name, "p5.48xlarge", 1, "debian12", say=lambda _: None)
    try:
        lab = attach(name, "p5.48xlarge")
        (host,) = lab.hosts
        k = Lab(lab, host, tmp_path_factory.mktemp("kernel"), "", "", {})
        k.times["lab up"] = time.monotonic() - started
        k.running, k.newer = k.sh(ABIS).split()
        assert k.running != k.newer, "bookworm and its newest suite carry the same kernel ABI"
        k.sh(f"gpusim kernel {k.running} >/dev/null")
        assert k.sh("uname -r").strip() == k.running
        k.host_vars(gpuprov_roles=["nvidia_driver"], nvidia_driver_version=OLD)
        rc, _, out = k.provision("apply")
        assert rc == 0, out[-4000:]
        yield k
    finally:
        if not keep:
            hosts.down(name)
        print(f"kernel-update lab seconds: {k.times if 'k' in locals() else {}}")
        print(f"kernel-update lab total: {time.monotonic() - started:.0f} s")


def test_a_new_kernel_gets_the_module_plan_clean_verify_passes(kl: Lab) -> None:
    start = time.monotonic()
    kl.sh(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        f"linux-image-{kl.newer} linux-headers-{kl.newer}",
        timeout=1500,
    )
    kl.times["kernel install"] = time.monotonic() - start
    assert kl.sh(f"ls /boot/vmlinuz-{kl.newer}").strip()
    path, version = kl.module(kl.newer)
    assert path and version == OLD, (path, version)
    assert not [w for w in kl.warnings() if "kernel" in w], kl.warnings()
    rc, _, out = kl.provision("verify")
    assert rc == 0, out[-4000:]


def test_a_kernel_without_the_module_warns_fails_refuses_then_is_repaired(kl: Lab) -> None:
    path, _ = kl.module(kl.newer)
    assert path, "the previous test leaves the newer kernel covered"
    kl.sh(f"rm -f {path}")
    every = kl.warnings()
    warnings = [w for w in every if w.startswith("next boot:")]
    seen = kl.sh("find /lib/modules -name 'nvidia*.ko*'; ls /boot")
    assert warnings and warnings[0].startswith(
        f"next boot: kernel {kl.newer} (newest installed; running {kl.running}) has no NVIDIA "
        f"module for driver {OLD}: the host would come back without its GPUs"
    ), (every, seen)
    print("plan warning:", warnings[0])
    rc, _, out = kl.provision("verify")
    assert rc == 1, out[-3000:]
    assert f"installed kernels without an NVIDIA module for driver {OLD}: {kl.newer}" in out

    # The headers of the newer kernel become unavailable; the driver is unloaded.
    kl.sh(
        f"printf 'Package: linux-headers-{kl.newer}\\nPin: release *\\nPin-Priority: -1\\n' "
        f"> {PIN} && DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "
        f"linux-headers-{kl.newer} && systemctl stop nvidia-fabricmanager nvidia-persistenced "
        "&& modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia_peermem nvidia"
    )
    boot_id = kl.sh("cat /proc/sys/kernel/random/boot_id").strip()
    # The plan blocks the (re)install: DKMS cannot build for the next boot without headers.
    assert any(
        w.startswith(
            "the driver change would leave the next boot without GPUs: kernel "
            f"{kl.newer} (newest installed) has no headers"
        )
        for w in kl.warnings()
    ), kl.warnings()
    role = _role_run(kl, reboot="allow")
    assert role.returncode != 0, role.stdout[-3000:]
    assert f"refusing to reboot: kernel {kl.newer}" in role.stdout, role.stdout[-3000:]
    assert f"Fix: install linux-headers-{kl.newer}" in role.stdout
    assert kl.sh("cat /proc/sys/kernel/random/boot_id").strip() == boot_id, "it rebooted"

    kl.sh(f"rm -f {PIN} && apt-get update -qq && modprobe nvidia")
    rc, _, out = kl.provision("apply")
    assert rc == 0, out[-4000:]
    assert kl.module(kl.newer)[1] == OLD
    assert not [w for w in kl.warnings() if "kernel" in w]
    rc, _, out = kl.provision("verify")
    assert rc == 0, out[-4000:]


def test_a_driver_upgrade_prepares_both_kernels_before_the_drain_ends(kl: Lab) -> None:
    record = "; ".join(
        f"echo undrain {k} $(modinfo -F version $({MODULE.format(k=k)} | head -n 1)) >> {HOOKS}"
        for k in (kl.running, kl.newer)
    )
    kl.host_vars(
        gpuprov_roles=["nvidia_driver"],
        nvidia_driver_version=NEW,
        nvidia_driver_reboot="allow",
        driver_upgrade_drain_command=f"echo drain >> {HOOKS}",
        driver_upgrade_undrain_command=record,
    )
    rc, _, out = kl.provision("apply")
    assert rc == 0, out[-4000:]
    assert kl.sh(f"cat {HOOKS}").split("\n")[:3] == [
        "drain",
        f"undrain {kl.running} {NEW}",
        f"undrain {kl.newer} {NEW}",
    ]
    assert kl.module(kl.running)[1] == NEW and kl.module(kl.newer)[1] == NEW
    rc, _, out = kl.provision("verify")
    assert rc == 0, out[-4000:]


def _role_run(kl: Lab, *, reboot: str) -> subprocess.CompletedProcess[str]:
    """The nvidia_driver role alone, with the plan's variables (plain ansible-playbook)."""
    _, report, out = kl.provision("plan")
    assert report, out[-2000:]
    plan = report["hosts"][kl.host]["plan"]
    driver = next(r for r in plan["roles"] if r["name"] == "nvidia_driver")
    play = kl.work / "driver.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The driver role alone",
                    "hosts": kl.host,
                    "become": True,
                    "vars": {**driver["vars"], "nvidia_driver_reboot": reboot},
                    "roles": ["nvidia_driver"],
                }
            ]
        ),
        encoding="utf-8",
    )
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(kl.lab.inventory), str(play)],
        cwd=REPO, env={**_env(), "ANSIBLE_NOCOLOR": "1"}, capture_output=True, text=True,
        timeout=1800, check=False,
    )  # fmt: skip
    kl.times["role run (reboot allow)"] = time.monotonic() - start
    return done
