"""The installed wheel, used from outside the checkout: `provision apply --check` against a lab
host with the collection the wheel carries (site-packages/ansible_collections/gpuprov/nvidia),
not the checkout's.

The wheel is built and installed without its dependencies into a folder of its own (this
environment provides them), then run from a scratch directory with that folder first on
sys.path; the run's state goes to a scratch XDG_CACHE_HOME. scripts/wheel-check.sh does the
full install into a fresh virtual environment (no lab there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
# the lab's repositories of test doubles, as tests/lab/test_verify_lab.py passes them
DRIVER_REPO_VARS = {
    "nvidia_driver_cuda_repo_url": "{{ gpuprov_lab_cuda_repo_url }}/",
    "nvidia_driver_cuda_repo_key": "{{ gpuprov_lab_repo_key_url }}",
}
# The roles' own tasks are skipped: in check mode on a bare lab host the driver role stops at
# its first apt task (check mode needs python3-apt, which the offline lab host cannot install).
# What runs: facts gathering and the plan's pre-tasks from the wheel's site playbook, over SSH.
ROLE_TAGS = "nvidia_driver,driver_upgrade,docker,nvidia_container_toolkit,mig"


def test_installed_wheel_applies_in_check_mode_from_another_directory(
    lab: RunningLab, tmp_path: Path
) -> None:
    start = time.monotonic()
    dist, target, elsewhere = tmp_path / "dist", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dist), str(REPO)], check=True)
    (wheel,) = dist.glob("gpuprov-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    where = subprocess.run(
        [sys.executable, "-c", "from orchestrator import paths; print(paths.SITE_PLAYBOOK)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(target), where  # the wheel's collection, not the checkout's
    host = lab.host_for("debian12")
    proc = subprocess.run(
        [
            sys.executable, "-c", "from orchestrator.cli import entry; entry()",
            "apply", "--check", "-i", str(lab.inventory), "--limit", host, "--json",
            "-e", json.dumps(DRIVER_REPO_VARS), "--skip-tags", ROLE_TAGS,
        ],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    assert report["check_mode"] is True
    entry = report["hosts"][host]
    applied = entry["apply"]
    assert applied["touched"] and applied["failed"] == 0 and applied["unreachable"] == 0, applied
    assert applied["ok"] >= 3, applied  # facts, the plan check, the plan's host facts
    run_dir = Path(report["artifact_dir"])
    assert run_dir.is_relative_to(elsewhere)  # artifacts where the user ran it
    command = json.loads((run_dir / "ansible" / "command").read_text())
    assert command["cwd"] == str(elsewhere)
    assert command["env"]["ANSIBLE_ROLES_PATH"].startswith(str(target))
    # site.yml's roles by FQCN: gpuprov.nvidia first on the collections path is the wheel's
    # bundle, with the installed package as its orchestrator/ (the planner its actions import)
    own = Path(command["env"]["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0])
    collection = own.joinpath("ansible_collections", "gpuprov", "nvidia")
    for entry in ("playbooks", "roles", "plugins", "meta"):
        bundle = target / "ansible_collections" / "gpuprov" / "nvidia"
        assert (collection / entry).resolve().is_relative_to(bundle)
    assert (collection / "orchestrator").resolve() == (target / "orchestrator").resolve()
    assert "ANSIBLE_CONFIG" not in command["env"]
    print(f"wheel apply --check: {time.monotonic() - start:.0f} s")
