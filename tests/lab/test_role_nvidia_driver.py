"""Lab tests of the nvidia_driver role on the session lab's Debian 12 and Debian 13 hosts.

Debian 12 takes the production path, the fleet's default plan for a p5: NVIDIA's CUDA
repository (`nvidia_driver_source: cuda`), open modules, fabric manager. The repository is
the lab's signed test double of NVIDIA's debian12/x86_64 repository (tests/lab/aptrepo,
generated from tests/recorded/reference/packages.yaml: Debian-style names, unsuffixed fabric
manager from 580), whose kernel-module packages carry a tiny DKMS module of our own that DKMS
really builds in seconds. Debian 13 keeps Debian's own packaged driver (550.163.01,
proprietary), from the lab's test double of Debian's archive (tests/lab/aptrepo/debianarchive.py:
trixie's recorded stanzas, relations verbatim, DKMS building our tiny `nvidia-current`), or with
GPUPROV_LAB_DEBIAN_ARCHIVE=real (the extended tier) from Debian's archive: then NVIDIA's real
code is built by DKMS (10-25 minutes).

What is real: the signed repositories and the key check, apt pins and holds, DKMS builds
against the installed kernel headers, the nouveau blacklist, the systemd units. What is
simulated (gpusim): the GPUs, the kernel release the host presents (the uname shim),
loading the built module, nvidia-smi, persistence mode and the fabric state. Every NVIDIA
package on the Debian 12 host is a test double, not NVIDIA's software.

The plan (branch, exact version, flavour, source, fabric manager, package names) comes from
`provision plan --json` on the lab, not from literals.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml
from simkernel import SIMULATOR_KERNEL

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
STATE_FILE = "/var/lib/gpuprov/nvidia_driver.json"
REBOOT_FILE = "/var/lib/gpuprov/reboot-required"
OSES = ("debian12", "debian13")


# Role variables the plan sets, and the lab's test-double repository for NVIDIA packages.
CONVERGE = """\
- name: Converge the NVIDIA driver from the plan
  hosts: gpu_nodes
  gather_facts: true
  become: true
  vars:
    __plan: "{{ nvidia_driver_plan[inventory_hostname] }}"
    nvidia_driver_branch: "{{ __plan.nvidia_driver_branch }}"
    nvidia_driver_version: "{{ __plan.nvidia_driver_version }}"
    nvidia_driver_flavour: "{{ __plan.nvidia_driver_flavour }}"
    nvidia_driver_source: "{{ __plan.nvidia_driver_source }}"
    nvidia_driver_fabricmanager: "{{ __plan.nvidia_driver_fabricmanager }}"
    nvidia_driver_reboot: "{{ __plan.nvidia_driver_reboot }}"
    nvidia_driver_cuda_repo_url: "{{ gpuprov_lab_cuda_repo_url }}/"
    nvidia_driver_cuda_repo_key: "{{ gpuprov_lab_repo_key_url }}"
  roles:
    - role: nvidia_driver
"""

_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class PlaybookRun:
    rc: int
    output: str
    seconds: float

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in _RECAP.finditer(self.output)
        }


@dataclass(frozen=True)
class Converged:
    lab: RunningLab
    plan: Mapping[str, Mapping[str, Any]]
    workdir: Path
    fresh: Mapping[str, bool]  # host had no driver from this role before the first converge
    first: PlaybookRun
    second: PlaybookRun
    check: PlaybookRun
    versions: Mapping[str, str]  # host -> the exact driver version the role resolved
    lab_key_fingerprint: str  # of the lab's throwaway repository key (group_vars/lab.yml)

    def playbook(self, *args: str) -> PlaybookRun:
        return run_playbook(self.lab, self.workdir, *args)


def run_playbook(lab: RunningLab, workdir: Path, *args: str) -> PlaybookRun:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    start = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(lab.inventory), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    return PlaybookRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


def _plan(lab: RunningLab) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [str(BIN / "provision"), "plan", "-i", str(lab.inventory), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    hosts: dict[str, Any] = json.loads(proc.stdout)["hosts"]
    plans = {}
    for name, host in hosts.items():
        driver = next(r for r in host["roles"] if r["name"] == "nvidia_driver")
        plans[name] = {**driver["vars"], "__packages": driver["packages"]}
    return plans


@pytest.fixture(scope="module")
def driver_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    """GPUPROV_DRIVER_LAB=<name>: a lab converged before, without a new DKMS build."""
    return running_or_session_lab("GPUPROV_DRIVER_LAB")


@pytest.fixture(scope="module")
def converged(driver_lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> Converged:
    lab = driver_lab
    fresh = {name: lab.ssh(name, f"test -e {STATE_FILE}").returncode != 0 for name in lab.hosts}
    for name in lab.hosts:
        done = lab.ssh(name, SIMULATOR_KERNEL, timeout=600)
        assert done.returncode == 0, f"{name}: {done.stderr}"
    plan = _plan(lab)
    workdir = tmp_path_factory.mktemp("nvidia_driver")
    (workdir / "converge.yml").write_text(CONVERGE, encoding="utf-8")
    (workdir / "plan.json").write_text(json.dumps({"nvidia_driver_plan": plan}), encoding="utf-8")
    args = (str(workdir / "converge.yml"), "-e", f"@{workdir / 'plan.json'}")
    first = run_playbook(lab, workdir, *args)
    assert first.rc == 0, first.output[-6000:]
    second = run_playbook(lab, workdir, *args)
    check = run_playbook(lab, workdir, *args, "--check", "--diff")
    timings = {"first": first.seconds, "second": second.seconds, "check": check.seconds}
    print(f"nvidia_driver lab converge seconds ({len(lab.hosts)} hosts): {timings}")
    versions = {
        name: json.loads(lab.ssh(name, f"cat {STATE_FILE}").stdout)["version"] for name in lab.hosts
    }
    lab_vars = yaml.safe_load((lab.inventory.parent / "group_vars" / "lab.yml").read_text())
    fingerprint = str(lab_vars["gpuprov_lab_repo_key_fingerprint"])
    return Converged(lab, plan, workdir, fresh, first, second, check, versions, fingerprint)


@pytest.fixture(params=OSES)
def node(
    request: pytest.FixtureRequest, converged: Converged, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, str]]:
    """A testinfra host on the lab's host of that OS, and its name."""
    # testinfra's ansible backend runs `ansible-inventory` from PATH: the venv's.
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    name = converged.lab.host_for(request.param)
    inventory = converged.lab.inventory
    yield testinfra.get_host(f"ansible://{name}?ansible_inventory={inventory}"), name


def _record(host: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(host.file(STATE_FILE).content_string)
    return data


def test_first_converge_installs_on_every_host(converged: Converged) -> None:
    recap = converged.first.recap
    assert sorted(recap) == sorted(converged.lab.hosts)
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, host
        # On a reused lab (GPUPROV_DRIVER_LAB) the driver is already there: nothing to install.
        assert (counts["changed"] > 0) == converged.fresh[host], host


def test_second_converge_changes_nothing(converged: Converged) -> None:
    assert converged.second.rc == 0, converged.second.output[-4000:]
    for host, counts in converged.second.recap.items():
        assert counts["changed"] == 0, f"{host}: {converged.second.output[-4000:]}"


def test_check_mode_changes_nothing(converged: Converged) -> None:
    assert converged.check.rc == 0, converged.check.output[-4000:]
    for host, counts in converged.check.recap.items():
        assert counts["changed"] == 0, f"{host}: {converged.check.output[-4000:]}"


def test_packages_at_the_planned_version_and_held(
    converged: Converged, node: tuple[Any, str]
) -> None:
    host, name = node
    plan = converged.plan[name]
    record = _record(host)
    version = converged.versions[name]
    assert record["version"] == version
    if plan["nvidia_driver_version"]:
        assert version == plan["nvidia_driver_version"]
    else:  # the plan leaves the release to the host: the newest of the branch offered
        offered = host.check_output(
            "apt-cache madison %s | awk -F'|' '{gsub(/ /, \"\", $2); print $2}'",
            plan["__packages"]["driver"][0],
        ).split()
        in_branch = [
            v.split("-")[0] for v in offered if v.startswith(f"{plan['nvidia_driver_branch']}.")
        ]
        assert in_branch and version == in_branch[0], (version, in_branch)
    assert record["flavour"] == plan["nvidia_driver_flavour"]
    # Held: exactly what the plan named (from the role's own OS data) and nothing else.
    packages = plan["__packages"]
    assert record["held"] == packages["held"]
    if plan["nvidia_driver_fabricmanager"]:
        assert packages["fabricmanager"], "a p5 plan installs the fabric manager"
        assert set(packages["fabricmanager"]) <= set(record["held"])
    shown = set(host.check_output("apt-mark showhold").split())
    assert set(record["held"]) <= shown, f"not held: {sorted(set(record['held']) - shown)}"
    for package in [*packages["driver"], *packages["fabricmanager"]]:
        pkg = host.package(package)
        assert pkg.is_installed, package
        assert pkg.version.split("-")[0] == version, (package, pkg.version)
    pin = host.file("/etc/apt/preferences.d/gpuprov-nvidia-driver.pref")
    assert f"Pin: version {version}-*" in pin.content_string


def test_dkms_module_matches_the_installed_headers(
    converged: Converged, node: tuple[Any, str]
) -> None:
    host, name = node
    version = converged.versions[name]
    kernel = host.check_output("uname -r")
    assert host.package(f"linux-headers-{kernel}").is_installed
    status = host.check_output("dkms status -k %s", kernel)
    assert re.search(rf"/{re.escape(version)}, {re.escape(kernel)}, x86_64: installed", status)
    modules = host.check_output(
        "find /lib/modules/%s -name 'nvidia*.ko*' -path '*dkms*'", kernel
    ).split()
    assert modules, f"no DKMS-built nvidia module under /lib/modules/{kernel}"
    utsrelease = f"/lib/modules/{kernel}/build/include/generated/utsrelease.h"
    uts = host.check_output("sed -n 's/.*UTS_RELEASE \"\\(.*\\)\"/\\1/p' %s", utsrelease)
    assert uts == kernel
    for module in modules:
        vermagic = host.check_output("modinfo -F vermagic %s", module).split()[0]
        assert vermagic == uts, module
        assert host.check_output("modinfo -F version %s", module) == version, module


def test_nouveau_blacklisted(node: tuple[Any, str]) -> None:
    host, _ = node
    conf = host.file("/etc/modprobe.d/gpuprov-blacklist-nouveau.conf")
    assert conf.mode == 0o644
    assert "blacklist nouveau" in conf.content_string.splitlines()


def test_services_enabled_and_running(converged: Converged, node: tuple[Any, str]) -> None:
    host, name = node
    units = ["nvidia-persistenced"]
    if converged.plan[name]["nvidia_driver_fabricmanager"]:
        units.append("nvidia-fabricmanager")
    for unit in units:
        service = host.service(unit)
        assert service.is_enabled and service.is_running, unit


def test_driver_loaded_and_fabric_completed(converged: Converged, node: tuple[Any, str]) -> None:
    """Simulated: gpusim loads the module DKMS built and reports the fabric state."""
    host, name = node
    plan = converged.plan[name]
    loaded = host.file("/proc/driver/nvidia/version").content_string
    assert f" {converged.versions[name]} " in loaded
    assert ("Open Kernel Module" in loaded) == (plan["nvidia_driver_flavour"] == "open")
    states = re.findall(r"\n\s+Fabric\s*\n\s+State\s+:\s+(.+)", host.check_output("nvidia-smi -q"))
    assert states and set(states) == {"Completed"}
    assert not host.file(REBOOT_FILE).exists


def test_unavailable_version_fails_before_any_change(converged: Converged) -> None:
    name = converged.lab.host_for("debian12")
    plan = converged.plan[name]
    wanted = f"{plan['nvidia_driver_branch']}.999.99"
    run = converged.playbook(
        str(converged.workdir / "converge.yml"),
        "-e",
        f"@{converged.workdir / 'plan.json'}",
        "-e",
        f"nvidia_driver_version={wanted}",
        "--limit",
        name,
    )
    assert run.rc != 0
    flat = " ".join(run.output.split())  # the callback wraps long messages
    offered = re.search(rf"do not offer driver {re.escape(wanted)}; available: ([0-9., ]+)\.", flat)
    assert offered, run.output[-3000:]
    assert converged.versions[name] in offered[1].replace(",", " ").split()
    assert "Nothing was changed" in flat
    assert run.recap[name]["changed"] == 0


def test_preinstalled_driver_is_left_untouched(converged: Converged) -> None:
    """playbooks/check_driver.yml, as on the real H200 machine: a loaded driver the role did
    not install satisfies the plan, so the role plans no change and refreshes no index."""
    name = converged.lab.host_for("debian13")
    branch = converged.plan[name]["nvidia_driver_branch"]
    lab = converged.lab
    assert lab.ssh(name, f"mv {STATE_FILE} {STATE_FILE}.away").returncode == 0
    try:
        run = converged.playbook(
            str(REPO / "playbooks" / "check_driver.yml"),
            "--check",
            "--limit",
            name,
            "-e",
            f"nvidia_driver_branch={branch}",
            "-e",
            f"nvidia_driver_flavour={converged.plan[name]['nvidia_driver_flavour']}",
        )
    finally:
        lab.ssh(name, f"mv {STATE_FILE}.away {STATE_FILE}")
    assert run.rc == 0, run.output[-4000:]
    assert run.recap[name]["changed"] == 0
    assert "no package change" in run.output
    assert "Refresh the package index" not in run.output


def test_reboot_forbidden_is_recorded_then_cleared(converged: Converged) -> None:
    """A newer installed kernel than the running one means the driver must not be loaded
    into the outgoing kernel: with nvidia_driver_reboot=forbid the role records why."""
    name = converged.lab.host_for("debian13")
    lab = converged.lab
    args = (str(converged.workdir / "converge.yml"), "-e", f"@{converged.workdir / 'plan.json'}")
    newer = "/boot/vmlinuz-99.0.0-1-amd64"
    unload = (
        "systemctl stop nvidia-fabricmanager nvidia-persistenced && modprobe -r nvidia_uvm nvidia"
    )
    assert lab.ssh(name, f"{unload} && touch {newer}").returncode == 0
    try:
        pending = converged.playbook(*args, "--limit", name)
        reasons = lab.ssh(name, f"cat {REBOOT_FILE}").stdout
    finally:
        lab.ssh(name, f"rm -f {newer}")
    assert pending.rc == 0, pending.output[-4000:]
    assert "REBOOT REQUIRED" in pending.output
    kernel = lab.ssh(name, "uname -r").stdout.strip()
    assert f"kernel changed: running {kernel}, newest installed 99.0.0-1-amd64" in reasons
    cleared = converged.playbook(*args, "--limit", name)
    assert cleared.rc == 0, cleared.output[-4000:]
    assert lab.ssh(name, f"test ! -e {REBOOT_FILE}").returncode == 0
    version = converged.versions[name]
    assert version in lab.ssh(name, "cat /proc/driver/nvidia/version").stdout


def test_fabric_not_completed_fails_with_the_fix(converged: Converged) -> None:
    """Simulated fault: the GPUs' Fabric State stays "Not Started" although the fabric
    manager runs; the role must fail naming the state and the fix, not pass."""
    name = converged.lab.host_for("debian12")
    if not converged.plan[name]["nvidia_driver_fabricmanager"]:
        pytest.fail(f"{name}: the plan has no fabric manager; this profile should have NVSwitches")
    lab = converged.lab
    args = (str(converged.workdir / "converge.yml"), "-e", f"@{converged.workdir / 'plan.json'}")
    assert lab.ssh(name, "gpusim fault fabric-not-completed on").returncode == 0
    try:
        run = converged.playbook(
            *args, "--limit", name, "-e", "nvidia_driver_fabricmanager_timeout=10"
        )
    finally:
        lab.ssh(name, "gpusim fault fabric-not-completed off")
    assert run.rc != 0
    assert "Fabric State is Not Started" in run.output
    assert "systemctl status nvidia-fabricmanager" in run.output


# --- known wrong behaviours on real hosts (each failed before its fix) ---------------------

PERSISTENCED_D = "/etc/systemd/system/nvidia-persistenced.service.d"


def _persistence(converged: Converged, name: str) -> set[str]:
    done = converged.lab.ssh(name, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    return {line.strip() for line in done.stdout.splitlines() if line.strip()}


def test_a_unit_started_with_no_persistence_mode_ends_with_persistence_on(
    converged: Converged,
) -> None:
    """Ubuntu's packaged unit (canonical/nvidia-graphics-drivers debian/nvidia-persistenced.
    service @745a97b) runs `nvidia-persistenced --user nvidia-persistenced
    --no-persistence-mode --verbose`: the daemon runs and persistence stays off. Here the
    same flag is added to the lab's unit by a drop-in; the role must end with persistence on
    (and gpuprov's own persistence check passing), and a rerun changes nothing."""
    name = converged.lab.host_for("debian12")
    lab = converged.lab
    exec_start = lab.ssh(
        name, "systemctl show --property=ExecStart --value nvidia-persistenced"
    ).stdout
    argv = re.search(r"argv\[\]=([^;]*)", exec_start)
    assert argv, exec_start
    ubuntu_like = (
        "# test: the command line of Ubuntu's packaged unit (--no-persistence-mode)\n"
        f"[Service]\nExecStart=\nExecStart={argv[1].strip()} --no-persistence-mode\n"
    )
    dropin = f"{PERSISTENCED_D}/ubuntu-packaged.conf"
    setup = (
        f"rm -f {PERSISTENCED_D}/zz-gpuprov-persistence-mode.conf && "
        f"printf '%s' {shlex.quote(ubuntu_like)} > {dropin} && "
        "systemctl daemon-reload && systemctl restart nvidia-persistenced"
    )
    assert lab.ssh(name, setup).returncode == 0
    args = (str(converged.workdir / "converge.yml"), "-e", f"@{converged.workdir / 'plan.json'}")
    try:
        assert _persistence(converged, name) == {"Disabled"}, "the flag must leave it off"
        run = converged.playbook(*args, "--limit", name)
        assert run.rc == 0, run.output[-4000:]
        assert _persistence(converged, name) == {"Enabled"}
        rerun = converged.playbook(*args, "--limit", name)
        assert rerun.rc == 0 and rerun.recap[name]["changed"] == 0, rerun.output[-4000:]
    finally:
        lab.ssh(
            name,
            f"rm -f {dropin} {PERSISTENCED_D}/zz-gpuprov-persistence-mode.conf && "
            "systemctl daemon-reload && systemctl restart nvidia-persistenced",
        )


def test_initramfs_is_rebuilt_before_the_driver_loads_and_a_rerun_does_not_again(
    converged: Converged,
) -> None:
    """The nouveau blacklist must be in the initramfs before any module load or reboot (it
    was a handler, run at the end of the play: after the load or the reboot). The lab's hosts
    have no update-initramfs: a stand-in records when it runs."""
    name = converged.lab.host_for("debian12")
    lab = converged.lab
    log = "/var/log/gpuprov-test-initramfs.log"
    tool = "/usr/sbin/update-initramfs"
    shim = f'#!/bin/sh\necho "update-initramfs $* $(date +%s.%N)" >> {log}\n'
    unload = (
        "systemctl stop nvidia-fabricmanager nvidia-persistenced && modprobe -r nvidia_uvm nvidia"
    )
    setup = (
        f"printf '%s' {shlex.quote(shim)} > {tool} && chmod 755 {tool} && rm -f {log} "
        f"/etc/modprobe.d/gpuprov-blacklist-nouveau.conf "
        f"/var/lib/gpuprov/initramfs-nouveau-blacklist && {unload}"
    )
    assert lab.ssh(name, setup).returncode == 0
    args = (str(converged.workdir / "converge.yml"), "-e", f"@{converged.workdir / 'plan.json'}")
    try:
        run = converged.playbook(*args, "--limit", name)
        rerun = converged.playbook(*args, "--limit", name)
        calls = lab.ssh(name, f"cat {log}").stdout.splitlines()
    finally:
        lab.ssh(name, f"rm -f {tool} {log}")
    assert run.rc == 0, run.output[-4000:]
    order = [
        m[1]
        for m in re.finditer(
            r"^(?:TASK|RUNNING HANDLER) \[nvidia_driver : ([^\]]+)\][^\n]*\n"
            r"(?:(?!TASK |RUNNING HANDLER )[^\n]*\n)*?changed: \[",
            run.output,
            re.MULTILINE,
        )
    ]
    rebuilt = [t for t in order if "initramfs" in t.lower()]
    assert rebuilt and "Load the driver" in order, order
    assert order.index(rebuilt[0]) < order.index("Load the driver"), order
    assert calls == [c for c in calls if c.startswith("update-initramfs -u -k all ")]
    assert len(calls) == 1, f"rebuilt once, not again on the rerun: {calls}"
    assert rerun.rc == 0 and rerun.recap[name]["changed"] == 0, rerun.output[-4000:]
    assert "Reboot to load the driver" not in re.findall(
        r"TASK \[nvidia_driver : ([^\]]+)\][^\n]*\nchanged:", rerun.output
    )


def test_a_key_with_another_fingerprint_stops_the_role_before_any_install(
    converged: Converged, tmp_path: Path
) -> None:
    """The key is fetched again on every run and compared: a mismatch stops the role with
    the key's fingerprint in the message, exit 1 from `provision apply`, nothing installed."""
    name = converged.lab.host_for("debian12")
    lab = converged.lab
    wrong = "0" * 40
    packages = "dpkg-query -W --showformat='${Package} ${Version} ${db:Status-Abbrev}\\n'"
    before = lab.ssh(name, packages).stdout
    host_vars = lab.inventory.parent / "host_vars"
    host_vars.mkdir(exist_ok=True)
    mine = host_vars / f"{name}.yml"
    mine.write_text(f"---\nnvidia_driver_cuda_repo_key_fingerprints: ['{wrong}']\n")
    report = tmp_path / "report.json"
    try:
        proc = subprocess.run(
            [str(BIN / "provision"), "--inventory", str(lab.inventory), "--report", str(report),
             "apply", "--limit", name],
            cwd=REPO,
            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )  # fmt: skip
    finally:
        mine.unlink()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    flat = " ".join((proc.stdout + proc.stderr + report.read_text()).split())
    found = converged.lab_key_fingerprint
    assert f"has fingerprint {found}, expected {wrong}" in flat, flat[-3000:]
    assert "Nothing was installed" in flat
    assert lab.ssh(name, packages).stdout == before, "packages changed"
