"""The lab engine on real test hosts: SSH with pinned keys, systemd, reboots, isolation,
the simulator's hooks, and a `lab down` that leaves nothing behind."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import engine, hosts, images
from orchestrator.lab.running import RunningLab as Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CAP_SYS_MODULE = 16
CAP_SYS_TIME = 25


def test_both_debian_releases_answer_over_ssh(lab: Lab) -> None:
    for host, os_name in lab.host_os.items():
        result = lab.ssh(host, ". /etc/os-release && echo $ID $VERSION_ID")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["debian", os_name.removeprefix("debian")]


def test_host_keys_are_pinned_before_first_contact(lab: Lab, tmp_path: Path) -> None:
    host = lab.hosts[0]
    pinned = lab.paths.known_hosts.read_text()
    served = lab.ssh(host, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    assert f"[127.0.0.1]:{lab.ports[host]} {served[0]} {served[1]}" in pinned.splitlines()
    # Without the lab's known_hosts the same connection is refused: no trust on first use.
    empty = tmp_path / "known_hosts"
    empty.touch()
    cmd = [
        f"UserKnownHostsFile={empty}" if a.startswith("UserKnownHostsFile=") else a
        for a in hosts.ssh_command(lab.paths, lab.ports[host], "true")
    ]
    refused = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr


def test_ansible_reaches_every_host_with_strict_host_key_checking(lab: Lab) -> None:
    result = subprocess.run(
        [
            str(BIN / "ansible"),
            "-i",
            str(lab.inventory),
            "gpu_nodes:&lab",
            "-m",
            "ansible.builtin.ping",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(lab.hosts)


def test_systemd_boots_clean_as_pid_1(lab: Lab) -> None:
    for host in lab.hosts:
        result = lab.ssh(host, "cat /proc/1/comm; systemctl is-system-running --wait")
        failed = lab.ssh(host, "systemctl --failed --no-legend --plain").stdout
        assert result.stdout.split() == ["systemd", "running"], (host, result.stdout, failed)


def test_hosts_cannot_load_modules_into_this_kernel_nor_set_its_clock(lab: Lab) -> None:
    for host in lab.hosts:
        caps = dict(
            line.split(":\t")
            for line in lab.ssh(host, "grep ^Cap /proc/1/status").stdout.splitlines()
        )
        for cap in (CAP_SYS_MODULE, CAP_SYS_TIME):
            assert not int(caps["CapBnd"], 16) & (1 << cap), (host, cap)
            assert not int(caps["CapEff"], 16) & (1 << cap), (host, cap)
        assert "Operation not permitted" in lab.ssh(host, "date -s @0").stderr


def test_ssh_is_published_on_loopback_only(lab: Lab) -> None:
    for host in lab.hosts:
        assert engine.docker(["port", host]).split() == [
            "22/tcp",
            "->",
            f"127.0.0.1:{lab.ports[host]}",
        ]


def test_docker_can_run_inside(lab: Lab) -> None:
    """/var/lib/docker is a real file system (a volume), not overlay: Docker's overlay2
    driver cannot stack on the container's own overlay."""
    for host in lab.hosts:
        fs = lab.ssh(host, "stat -f -c %T /var/lib/docker").stdout.strip()
        assert fs not in ("overlayfs", "overlay"), (host, fs)
        assert fs.startswith(("ext", "xfs", "btrfs")), (host, fs)


def test_simulator_hooks_are_in_place(lab: Lab) -> None:
    host = lab.host_for("debian12")
    profile = (REPO / "tests" / "lab" / "profiles" / f"{lab.profile}.yaml").read_text()
    assert lab.ssh(host, "cat /etc/gpusim/profile.yaml").stdout == profile
    mounts = lab.ssh(host, "findmnt -n -o TARGET,OPTIONS /opt/gpusim").stdout
    assert mounts.split()[0] == "/opt/gpusim" and "ro" in mounts.split()[1].split(",")
    assert (
        lab.ssh(
            host, "touch /sys/bus/pci/devices/.probe && rm /sys/bus/pci/devices/.probe"
        ).returncode
        == 0
    )
    assert lab.ssh(host, "systemctl is-enabled gpusim-boot.service").stdout.strip() == "enabled"
    if (REPO / "tests" / "lab" / "gpusim" / "boot").exists():
        assert lab.ssh(host, "systemctl is-active gpusim-boot.service").stdout.strip() == "active"
        assert lab.ssh(host, "ls /sys/bus/pci/devices").stdout.split(), "boot made no PCI devices"


def test_reboot_keeps_port_host_key_and_disk(lab: Lab, tmp_path: Path) -> None:
    """ansible.builtin.reboot, as a role uses it: the host comes back on the same port with
    the same host key (the connection is strict) and its disk, under a new boot id."""
    host = lab.host_for("debian13")
    before = lab.ssh(host, "echo kept > /root/reboot-marker; cat /proc/sys/kernel/random/boot_id")
    restarts = engine.containers({"gpuprov.lab.host": host})[0].restart_count
    playbook = tmp_path / "reboot.yml"
    playbook.write_text(
        "- name: Reboot a lab host\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Reboot\n      ansible.builtin.reboot:\n        reboot_timeout: 120\n"
    )
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(lab.inventory), "--limit", host, str(playbook)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    after = lab.ssh(host, "cat /root/reboot-marker /proc/sys/kernel/random/boot_id").stdout.split()
    assert after[0] == "kept"
    assert after[1] != before.stdout.strip()
    assert engine.containers({"gpuprov.lab.host": host})[0].restart_count == restarts + 1
    assert lab.ssh(host, "systemctl is-system-running --wait").stdout.strip() == "running"


def test_up_is_idempotent_and_down_leaves_nothing(
    scratch_lab_name: Callable[[str], str],
) -> None:
    name = scratch_lab_name("down")
    labels = {hosts.LAB_LABEL: name}
    first = hosts.up(name, "l40s", 1, "debian12", say=lambda _: None)
    port = hosts.status(name)[0].port
    assert hosts.up(name, "l40s", 1, "debian12", say=lambda _: None) == first
    assert [(h.port, h.state) for h in hosts.status(name)] == [(port, "running")]
    facts = subprocess.run(
        [
            str(BIN / "ansible"),
            "-i",
            str(first),
            "lab",
            "-m",
            "ansible.builtin.setup",
            "-a",
            "filter=ansible_hostname",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert facts.returncode == 0, facts.stdout + facts.stderr
    cache = REPO / ".cache" / "facts"
    assert [p for p in cache.iterdir() if p.name.endswith(f"{name}-deb12-1")]
    # Keys lost while the host runs: `up` says so instead of waiting on SSH that cannot work.
    shutil.rmtree(hosts.lab_paths(name).root / "hosts")
    with pytest.raises(LabError, match=r"keys under .* are gone"):
        hosts.up(name, "l40s", 1, "debian12", say=lambda _: None)
    removed = hosts.down(name)
    assert len(removed.containers) == 1 and len(removed.volumes) == 2
    assert len(removed.networks) == 1
    assert engine.containers(labels) == []
    assert engine.volumes(labels) == []
    assert engine.networks(labels) == []
    assert not hosts.lab_paths(name).root.exists()
    assert not [p for p in cache.iterdir() if p.name.endswith(f"{name}-deb12-1")]


def test_port_taken_between_probe_and_start_is_retried(
    monkeypatch: pytest.MonkeyPatch, scratch_lab_name: Callable[[str], str]
) -> None:
    """Two labs starting at once can pick the same free port: the loser retries."""
    name = scratch_lab_name("port")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real = hosts.free_port
        monkeypatch.setattr(hosts, "free_port", lambda: next(ports, None) or real())
        try:
            hosts.up(name, "l40s", 1, "debian12", say=lambda _: None)
            [host] = hosts.status(name)
            assert host.state == "running" and host.port != taken
        finally:
            hosts.down(name)


def test_hosts_reach_the_test_double_repository(lab: Lab) -> None:
    if not (hosts.APTREPO_DIR / "__init__.py").exists():
        pytest.skip("tests/lab/aptrepo/ is not in this checkout: no repository to reach")
    lab_vars = (lab.paths.root / "group_vars" / "lab.yml").read_text()
    [key_url] = [
        line.split(": ", 1)[1]
        for line in lab_vars.splitlines()
        if line.startswith("gpuprov_lab_repo_key_url: ")
    ]
    for host in lab.hosts:
        fetched = lab.ssh(
            host,
            "python3 -c 'import sys, urllib.request; "
            f'print(urllib.request.urlopen("{key_url}", timeout=5).status)\'',
        )
        assert fetched.stdout.strip() == "200", (host, fetched.stderr)


def test_a_host_that_keeps_exiting_fails_fast_with_its_output(
    scratch_lab_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A container whose PID 1 exits at once (as systemd does when it cannot boot) is
    reported within seconds, with what it printed, instead of after the SSH timeout."""
    name = scratch_lab_name("crash")
    image = images.recipe_for("debian12").tag
    engine.docker(
        [
            "run",
            "-d",
            "--name",
            f"{name}-1",
            "--label",
            f"{hosts.LAB_LABEL}={name}",
            "--restart",
            "unless-stopped",
            image,
            "/bin/sh",
            "-c",
            "echo systemd-would-say-why; exit 1",
        ]
    )
    try:
        start = time.monotonic()
        with pytest.raises(LabError, match="keeps exiting") as err:
            hosts.wait_for_ssh(hosts.LabPaths(tmp_path), {f"{name}-1": hosts.free_port()}, 120)
        assert time.monotonic() - start < 60
        assert "systemd-would-say-why" in str(err.value)
    finally:
        hosts.down(name)
