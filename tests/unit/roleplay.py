"""Render a role's variables on this machine: one local play per case, one JSON file each.

The unit tests of the driver and Docker roles' package and repository choices run the roles'
own task files (preflight, select, install-dnf...) with recorded facts and write what the
tasks decided to ``<out>/<case>.json``. This module runs such a playbook and reads the files
back; each test module builds its own plays.

Plays record with the test-only action ``gpuprov_test_record`` (dest, content; in
ACTION_PLUGINS): it writes the file from Ansible's worker, where ``ansible.builtin.copy``
started two module processes per file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# gpuprov_test_record, for ANSIBLE_ACTION_PLUGINS (tests only: not part of the collection)
ACTION_PLUGINS = Path(__file__).resolve().parent / "ansible_plugins" / "action"


def run_plays(
    work: Path,
    cases: Iterable[str],
    plays: list[dict[str, Any]],
    *,
    hostvars: dict[str, dict[str, Any]] | None = None,
    timeout: int = 300,
    forks: int = 5,
) -> None:
    """Run ``plays`` against one local inventory host per case; fail with Ansible's output.

    ``hostvars`` gives a case's inventory variables, where it has any.
    """
    hosts = {c: dict((hostvars or {}).get(c, {})) for c in cases}
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {name: {**v, **local} for name, v in hosts.items()}}}
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory), "utf-8")
    (work / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False), "utf-8")
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_ACTION_PLUGINS": str(ACTION_PLUGINS),
    }
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "inventory.yml", "play.yml"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def result(out: Path, case: str) -> dict[str, Any]:
    """What one case's play wrote."""
    data: dict[str, Any] = json.loads((out / f"{case}.json").read_text(encoding="utf-8"))
    return data


def work_dirs(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, Path]:
    """A fresh work folder for run_plays, and the empty ``out`` folder in it plays record to."""
    work = tmp_path_factory.mktemp(name)
    (work / "out").mkdir()
    return work, work / "out"


def os_facts(dist: str, version: str, family: str, arch: str = "x86_64") -> dict[str, str]:
    """The ansible_facts a role's OS selection reads."""
    return {
        "distribution": dist,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0],
        "os_family": family,
        "architecture": arch,
    }


def failure(out: Path, case: str) -> str:
    """The message of a case whose play must have recorded a failure."""
    r = result(out, case)
    assert r["failed"]
    return str(r["msg"])
