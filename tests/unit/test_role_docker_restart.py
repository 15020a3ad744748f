"""Issue 48: a Ctrl-C between "Write daemon.json" and Docker's restart left dockerd on the old
configuration for good: the rerun found daemon.json already written, notified nothing, and
recorded the role converged. The role now records the pending restart on the host before it
writes, restarts Docker on a rerun that finds it, and clears it only after the restart.

The role's own task files run here through real Ansible on a local host, with daemon.json and
the marker under tmp_path and a stand-in `systemctl` first on PATH that logs what it is asked
(the real one would act on this machine's Docker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ansible  # real ansible-playbook on this machine

SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$SYSTEMCTL_LOG"
case "$1" in
  show) printf 'Id=docker.service\\nLoadState=loaded\\nActiveState=active\\n'
        printf 'SubState=running\\nUnitFileState=enabled\\n' ;;
  is-enabled) echo enabled ;;
  is-active) echo active ;;
esac
exit 0
"""


def _play(tmp_path: Path, files: list[str], *, interrupted: bool) -> dict[str, object]:
    tasks: list[dict[str, object]] = [
        {
            "name": f"Run the role's {name}",
            "ansible.builtin.include_role": {"name": "docker", "tasks_from": name},
        }
        for name in files
    ]
    if interrupted:  # the run stops here, before its handlers run (Ctrl-C, a lost host)
        tasks.append({"name": "Stop as Ctrl-C would", "ansible.builtin.fail": {"msg": "stop"}})
    return {
        "name": "Docker's daemon configuration",
        "hosts": "all",
        "gather_facts": True,
        "gather_subset": ["!all", "min"],  # ansible_facts.python: daemon-config.yml reads it
        "vars": {"docker_daemon_options": {"log-driver": "local"}},
        "tasks": tasks,
    }


def _paths(tmp_path: Path) -> dict[str, object]:
    """The role's files under tmp_path: extra vars, as only they beat the role's vars/."""
    return {
        "ansible_become": False,
        "__docker_daemon_json": str(tmp_path / "etc" / "daemon.json"),
        "__docker_restart_marker": str(tmp_path / "state" / "docker-restart-pending"),
    }


def _run(tmp_path: Path, play: dict[str, object]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    (tmp_path / "inv.ini").write_text(
        f"h ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SYSTEMCTL_LOG": str(tmp_path / "systemctl.log"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.ini"),
         str(tmp_path / "play.yml"), "-e", json.dumps(_paths(tmp_path))],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _restarts(tmp_path: Path) -> list[str]:
    log = tmp_path / "systemctl.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [ln for ln in lines if ln.startswith("restart")]


def test_an_interrupted_change_restarts_docker_on_the_rerun(tmp_path: Path) -> None:
    marker = tmp_path / "state" / "docker-restart-pending"
    first = _run(tmp_path, _play(tmp_path, ["daemon-config.yml"], interrupted=True))
    assert first.returncode != 0 and "Stop as Ctrl-C would" in first.stdout, first.stdout
    assert json.loads((tmp_path / "etc" / "daemon.json").read_text()) == {"log-driver": "local"}
    assert marker.is_file(), first.stdout  # the restart it still owes, on the host
    assert _restarts(tmp_path) == []

    rerun = _run(tmp_path, _play(tmp_path, ["daemon-config.yml", "service.yml"], interrupted=False))
    assert rerun.returncode == 0, rerun.stdout
    assert _restarts(tmp_path) == ["restart docker"]  # the rerun restarts it, once
    assert not marker.exists()

    again = _run(tmp_path, _play(tmp_path, ["daemon-config.yml", "service.yml"], interrupted=False))
    assert again.returncode == 0 and _restarts(tmp_path) == ["restart docker"]  # nothing owed
