"""With DOCA-OFED the infiniband role rebuilds NVIDIA's DKMS module after DOCA and records the
reboot DOCA needs (issue 47 item 5; tasks/doca-driver.yml, Azure's order and rebuild command
cited there); a run stopped before the rebuild leaves a marker and the next run rebuilds; and
nvidia_peermem is not loaded while DOCA waits for its reboot, but after openibd at boot
(tasks/peermem.yml, Azure's drop-in).

The role's task file runs with real ansible-playbook on local fake hosts; `dkms` is a
stand-in on PATH that prints one `dkms status` line of NVIDIA's module (the format DKMS 3
prints: "<module>/<version>, <kernel>, <arch>: installed") and logs every call, so the test
sees exactly which DKMS commands the role ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from roleplay import run_plays, work_dirs

pytestmark = pytest.mark.ansible

ROLE = Path(__file__).resolve().parents[2] / "roles" / "infiniband"
KERNEL = "6.8.0-45-generic"
CASES = {"doca_installed": True, "doca_unchanged": False, "rebooted": False, "stopped": False}
MARKER = "infiniband-nvidia-rebuild-pending"
STAND_IN = """#!/bin/sh
echo "$*" >> "$DKMS_LOG"
[ "$1" = status ] && echo "nvidia/580.159.04, {kernel}, x86_64: installed"
exit 0
"""

_RECORD = """\
- name: Record what the role decided
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ {'required': infiniband_reboot_required} | to_json }}"
"""


@pytest.fixture(scope="module")
def ran(
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    work, out = work_dirs(tmp_path_factory, "doca_driver")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "dkms").write_text(STAND_IN.format(kernel=KERNEL))
    (bin_dir / "dkms").chmod(0o755)
    for case in CASES:
        (out / case).mkdir()
    (out / "rebooted" / "reboot").write_text("a-boot-before-this-one\n")  # DOCA installed then
    # a run stopped after doca-ofed changed and before the rebuild, on this boot
    (out / "stopped" / MARKER).write_text("doca-ofed changed\n")
    (out / "stopped" / "reboot").write_text(Path("/proc/sys/kernel/random/boot_id").read_text())
    plays = [
        {
            "name": case,
            "hosts": case,
            "gather_facts": False,
            "vars_files": [str(ROLE / "vars" / "main.yml")],
            "vars": {
                "ansible_facts": {"kernel": KERNEL},
                "out": str(out),
                "infiniband_reboot_required_file": str(out / case / "reboot"),
                "__infiniband_doca_install": {"changed": changed},
            },
            "environment": {
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "DKMS_LOG": str(out / f"{case}.dkms"),
            },
            "tasks": [
                {
                    "name": "Run the role's task file",
                    "ansible.builtin.include_tasks": str(ROLE / "tasks" / "doca-driver.yml"),
                },
                *yaml.safe_load(_RECORD),
            ],
        }
        for case, changed in CASES.items()
    ]
    run_plays(work, CASES, plays)
    return out


REBUILD = ["status -m nvidia", f"install --force -m nvidia -v 580.159.04 -k {KERNEL}"]


def test_a_new_doca_rebuilds_nvidias_module_for_the_running_kernel(ran: Path) -> None:
    assert (ran / "doca_installed.dkms").read_text().splitlines() == REBUILD
    assert not (ran / "doca_installed" / MARKER).exists()  # written before, cleared after


def test_a_run_stopped_before_the_rebuild_is_rebuilt_by_the_next(ran: Path) -> None:
    """doca-ofed shows no change on the next run; the marker makes the rebuild happen."""
    assert (ran / "stopped.dkms").read_text().splitlines() == REBUILD
    assert not (ran / "stopped" / MARKER).exists()
    assert json.loads((ran / "stopped.json").read_text()) == {"required": True}


def test_a_new_doca_is_recorded_as_waiting_for_a_reboot_of_this_boot(ran: Path) -> None:
    boot = Path("/proc/sys/kernel/random/boot_id").read_text()
    assert (ran / "doca_installed" / "reboot").read_text() == boot
    assert json.loads((ran / "doca_installed.json").read_text()) == {"required": True}


def test_an_unchanged_doca_rebuilds_nothing_and_needs_no_reboot(ran: Path) -> None:
    assert not (ran / "doca_unchanged.dkms").exists()
    assert not (ran / "doca_unchanged" / "reboot").exists()
    assert json.loads((ran / "doca_unchanged.json").read_text()) == {"required": False}


def test_the_record_goes_once_the_host_rebooted(ran: Path) -> None:
    assert not (ran / "rebooted" / "reboot").exists()
    assert json.loads((ran / "rebooted.json").read_text()) == {"required": False}


PEERMEM_STAND_INS = {"modprobe": 'echo "$*" >> "$LOG"\n', "systemctl": 'echo "$*" >> "$LOG"\n'}


@pytest.fixture(scope="module")
def peermem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tasks/peermem.yml with DOCA waiting for its reboot, and after it."""
    work, out = work_dirs(tmp_path_factory, "doca_peermem")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for name, body in PEERMEM_STAND_INS.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho {name} >> "$LOG"\n{body}exit 0\n')
        (bin_dir / name).chmod(0o755)
    cases = {"waiting": True, "rebooted": False}
    for case in cases:
        (out / case).mkdir()
    plays = [
        {
            "name": case,
            "hosts": case,
            "gather_facts": False,
            "vars_files": [str(ROLE / "vars" / "main.yml")],
            "vars": {"infiniband_reboot_required": waiting},
            "environment": {
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "LOG": str(out / f"{case}.log"),
            },
            "tasks": [
                {
                    "name": "Run the role's task file",
                    "ansible.builtin.include_tasks": str(ROLE / "tasks" / "peermem.yml"),
                    "vars": {
                        "__infiniband_peermem_conf": str(out / case / "nvidia-peermem.conf"),
                        "__infiniband_peermem_dropin": str(
                            out / case / "openibd.service.d" / "10-gpuprov-nvidia-peermem.conf"
                        ),
                    },
                }
            ],
        }
        for case, waiting in cases.items()
    ]
    run_plays(work, cases, plays)
    return out


def test_nvidia_peermem_waits_for_the_reboot_doca_needs(peermem: Path) -> None:
    assert not Path("/sys/module/nvidia_peermem").exists()  # else the role loads nothing
    calls = (peermem / "waiting.log").read_text().splitlines()
    assert "modprobe" not in calls, calls
    assert (peermem / "waiting" / "nvidia-peermem.conf").read_text() == "nvidia_peermem\n"
    dropin = peermem / "waiting" / "openibd.service.d" / "10-gpuprov-nvidia-peermem.conf"
    assert "ExecStartPost=-/usr/sbin/modprobe nvidia-peermem" in dropin.read_text()


def test_nvidia_peermem_is_loaded_now_once_doca_is_active(peermem: Path) -> None:
    calls = (peermem / "rebooted.log").read_text().splitlines()
    assert "nvidia-peermem" in calls and "modprobe" in calls, calls


def test_the_doca_record_lists_the_rebuild_marker_so_a_stopped_run_is_not_converged() -> None:
    """The role's convergence record (its last task) lists the marker with DOCA: recorded
    missing, a marker a stopped run left makes the role run again instead of being skipped
    as converged (docs/reruns.md), as the docker role does with its restart marker."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def trusted(path: Path) -> dict[str, object]:
        """A role file's strings as Ansible trusts them (templates of the role's own)."""
        data: dict[str, object] = yaml.safe_load(path.read_text())
        return {k: trust_as_template(v) if isinstance(v, str) else v for k, v in data.items()}

    loader = DataLoader()
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    (record,) = [t for t in tasks if "gpuprov.nvidia.converged_record" in t]
    variables = {**trusted(ROLE / "vars" / "main.yml"), **trusted(ROLE / "defaults" / "main.yml")}
    items = trust_as_template(record["gpuprov.nvidia.converged_record"]["items"])
    doca = Templar(loader, variables={**variables, "infiniband_stack": "doca"})
    marker = "file /var/lib/gpuprov/infiniband-nvidia-rebuild-pending"
    assert marker in doca.template(items)
    distribution = Templar(loader, variables=variables)  # the role's default stack
    assert marker not in distribution.template(items)
