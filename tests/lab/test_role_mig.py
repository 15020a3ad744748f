"""Role mig on lab hosts with simulated GPUs (gpusim): H100 80GB (p5), H200 (p5e), A100 40GB
(p4d). Layouts apply, a second run changes nothing, a changed layout converges to exactly the
new one, an invalid layout is refused before any change, the boot unit re-creates the
instances after a restart, and `disabled` tears MIG down. testinfra checks the GPUs' MIG mode
and instances against the layout.

The driver here is a stand-in (files the simulator recognises as an installed driver), so
this test does not depend on the nvidia_driver role: everything about the GPUs is simulated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach
from orchestrator.parsers.mig import parse_lci, parse_lgi

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FLEET = yaml.safe_load((REPO / "inventory" / "group_vars" / "all.yml").read_text())["mig_configs"]

# Lab profile -> (first layout, second layout, a layout that must be refused, what the error
# must name). Layouts are the fleet's, from inventory/group_vars/all.yml.
CASES: Mapping[str, tuple[str, str, dict[str, int], str]] = {
    "p5.48xlarge": ("h100-80gb-mixed", "h100-80gb-all-1g", {"1g.10gb": 8}, "at most 7 fit"),
    "p5e.48xlarge": (
        "h200-mixed",
        "h200-all-3g",
        {"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1},
        "what fits together: 4g.71gb x1, 3g.71gb x1",
    ),
    "p4d.24xlarge": (
        "a100-40gb-mixed",
        "a100-40gb-all-1g",
        {"1g.18gb": 1},  # an H200 profile on an A100 40GB
        "profile 1g.18gb is not offered by this GPU",
    ),
}

# A stand-in for the driver role's result: a built module for the simulated kernel, NVML and
# the package's nvidia-smi, which gpusim detects as an installed driver (test scaffolding).
STAND_IN_DRIVER = r"""
set -e
rel=$(uname -r)
mkdir -p /lib/modules/$rel/updates/dkms /usr/lib/x86_64-linux-gnu /usr/lib/nvidia/current
printf 'gpuprov-test-stand-in\0version=580.159.04\0license=Dual MIT/GPL\0' \
    > /lib/modules/$rel/updates/dkms/nvidia-current.ko
: > /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04
install -m 0755 /dev/null /usr/lib/nvidia/current/nvidia-smi
gpusim sync
modprobe nvidia
nvidia-smi -L
"""


@pytest.fixture(scope="module", params=sorted(CASES))
def mig_lab(request: pytest.FixtureRequest) -> Iterator[RunningLab]:
    profile: str = request.param
    name = f"{os.environ.get('GPUPROV_MIG_LAB', 'h8mig')}-{profile.split('.')[0]}"
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{BIN}{os.pathsep}{path}"  # testinfra runs ansible-inventory
    if not keep:
        hosts.down(name)
    hosts.up(name, profile, 1, "debian12", say=lambda _: None)
    lab = attach(name, profile)
    done = lab.ssh(lab.hosts[0], STAND_IN_DRIVER)
    assert done.returncode == 0, done.stdout + done.stderr
    yield lab
    os.environ["PATH"] = path
    if not keep:
        hosts.down(name)


def play(lab: RunningLab, layout: str, **extra: Any) -> tuple[int, int, str]:
    """Run the site playbook with only the mig role; (exit status, changed count, output)."""
    variables = {"gpuprov_roles": ["mig"], "mig_layout": layout, **extra}
    done = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(lab.inventory),
            str(REPO / "playbooks" / "site.yml"),
            "-e",
            json.dumps(variables),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    out = done.stdout + done.stderr
    recap = re.search(r"changed=(\d+)", out.split("PLAY RECAP", 1)[-1])
    return done.returncode, int(recap.group(1)) if recap else -1, out


def host_of(lab: RunningLab) -> Any:
    return testinfra.get_host(
        f"ansible://{lab.hosts[0]}?ansible_inventory={lab.inventory}", sudo=False
    )


def expected_counts(lab: RunningLab, layout: str) -> dict[int, dict[str, int]]:
    """GPU index -> profile counts, from the fleet layout (`devices: all`)."""
    gpus = int(host_of(lab).check_output("nvidia-smi -L | grep -c '^GPU '"))
    if layout == "disabled":
        return {}
    (spec,) = FLEET[layout]
    return {i: dict(spec["mig-devices"]) for i in range(gpus)}


def verify(lab: RunningLab, layout: str) -> None:
    """testinfra: MIG mode and instances on every GPU are exactly the layout's."""
    host = host_of(lab)
    want = expected_counts(lab, layout)
    modes = host.check_output(
        "nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv,noheader"
    ).splitlines()
    for line in modes:
        index, current, pending = (c.strip() for c in line.split(","))
        state = "Enabled" if int(index) in want else "Disabled"
        assert (current, pending) == (state, state), line
    gis = parse_lgi(host.run("nvidia-smi mig -lgi").stdout + "\n# exit=0\n")
    cis = parse_lci(host.run("nvidia-smi mig -lci").stdout + "\n# exit=0\n")
    have: dict[int, dict[str, int]] = {}
    for gi in gis:
        have.setdefault(gi.gpu, {})
        have[gi.gpu][gi.name] = have[gi.gpu].get(gi.name, 0) + 1
        own = [c for c in cis if c.gpu == gi.gpu and c.gpu_instance_id == gi.instance_id]
        assert [c.name for c in own] == [gi.name], (gi, own)
    assert have == want
    unit = host.service("gpuprov-mig.service")
    assert unit.is_enabled
    assert json.loads(host.file("/etc/gpuprov/mig.json").content_string)["layout"] == layout


def test_layout_applies(mig_lab: RunningLab) -> None:
    first = CASES[mig_lab.profile][0]
    rc, changed, out = play(mig_lab, first)
    assert rc == 0, out
    assert changed > 0
    verify(mig_lab, first)


def test_second_run_changes_nothing(mig_lab: RunningLab) -> None:
    first = CASES[mig_lab.profile][0]
    rc, changed, out = play(mig_lab, first)
    assert (rc, changed) == (0, 0), out
    verify(mig_lab, first)


def test_invalid_layout_is_refused_before_any_change(mig_lab: RunningLab) -> None:
    first, _, bad, needle = CASES[mig_lab.profile]
    host = host_of(mig_lab)
    before = [host.run(c).stdout for c in ("nvidia-smi mig -lgi", "cat /etc/gpuprov/mig.json")]
    configs = {**FLEET, "bad": [{"devices": "all", "mig-enabled": True, "mig-devices": bad}]}
    rc, _, out = play(mig_lab, "bad", mig_configs=configs)
    assert rc != 0
    assert f"{mig_lab.hosts[0]}: layout 'bad' on GPU 0" in out and needle in out, out
    after = [host.run(c).stdout for c in ("nvidia-smi mig -lgi", "cat /etc/gpuprov/mig.json")]
    assert after == before
    verify(mig_lab, first)


def test_changed_layout_converges_to_exactly_the_new_one(mig_lab: RunningLab) -> None:
    second = CASES[mig_lab.profile][1]
    rc, changed, out = play(mig_lab, second)
    assert rc == 0 and changed > 0, out
    verify(mig_lab, second)
    rc, changed, out = play(mig_lab, second)
    assert (rc, changed) == (0, 0), out


def test_boot_unit_recreates_instances_after_a_restart(mig_lab: RunningLab) -> None:
    second = CASES[mig_lab.profile][1]
    boot_id = mig_lab.ssh(mig_lab.hosts[0], "cat /proc/sys/kernel/random/boot_id").stdout
    done = subprocess.run(
        [
            str(BIN / "ansible"),
            "-i",
            str(mig_lab.inventory),
            mig_lab.hosts[0],
            "-m",
            "ansible.builtin.reboot",
            "-a",
            "reboot_timeout=300",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert mig_lab.ssh(mig_lab.hosts[0], "cat /proc/sys/kernel/random/boot_id").stdout != boot_id
    # boot is over once systemd says so (the oneshot may still be running before that)
    mig_lab.ssh(mig_lab.hosts[0], "systemctl is-system-running --wait", timeout=300)
    ran = mig_lab.ssh(mig_lab.hosts[0], "systemctl is-active gpuprov-mig.service")
    assert ran.stdout.strip() == "active", ran.stdout + ran.stderr
    # the restart emptied the GPUs (as on real ones); the unit is what re-created them
    log = mig_lab.ssh(mig_lab.hosts[0], "journalctl -b -o cat -u gpuprov-mig.service").stdout
    assert '"changed": true' in log and "-cgi" in log, log
    verify(mig_lab, second)


def test_disabled_tears_mig_down(mig_lab: RunningLab) -> None:
    rc, changed, out = play(mig_lab, "disabled")
    assert rc == 0 and changed > 0, out
    verify(mig_lab, "disabled")
    rc, changed, out = play(mig_lab, "disabled")
    assert (rc, changed) == (0, 0), out
