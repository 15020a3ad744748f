"""The run lock on each host (issue 27, item 5): playbooks/tasks/run-lock.yml as site.yml
runs it (a play taking the lock, on a local host, the lock directory under tmp_path), and
hostlock's release of what a run left locked (playbooks/lock.yml)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import hostlock
from orchestrator.apply import new_run_dir, run_playbook
from orchestrator.hostlock import Owner, lock_vars, owner_of, release, unreleased

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
PLAY = f"""\
- hosts: all
  gather_facts: false
  tasks:
    - name: Take the lock as site.yml does
      ansible.builtin.include_tasks: {REPO}/playbooks/tasks/run-lock.yml
      vars:
        __gpuprov_lock_action: acquire
"""


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(hostlock, "LOCK_DIR", str(tmp_path / "state" / "run.lock"))
    inventory = tmp_path / "inv.ini"
    inventory.write_text(
        "a ansible_connection=local ansible_become=false "
        f"ansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "take.yml").write_text(PLAY)
    return {"inventories": [inventory]}


def _take(tmp_path: Path, local: dict[str, object]) -> tuple[Owner, Path, object]:
    run_dir = new_run_dir(tmp_path / "artifacts")
    owner = owner_of(run_dir)
    result = run_playbook(
        hosts=["a"],
        host_vars={},
        run_dir=run_dir,
        playbook=tmp_path / "take.yml",
        extra=lock_vars(owner),
        **local,  # type: ignore[arg-type]
    )
    return owner, run_dir, result


def _held_by(tmp_path: Path, owner: Owner) -> None:
    lock = tmp_path / "state" / "run.lock"
    lock.mkdir(parents=True)
    (lock / "run").write_text(owner.run + "\n")
    (lock / "owner").write_text(json.dumps(owner.document()) + "\n")


def test_a_run_takes_the_lock_and_release_gives_it_back(
    tmp_path: Path, local: dict[str, object]
) -> None:
    owner, run_dir, result = _take(tmp_path, local)
    assert result.hosts["a"].succeeded and result.hosts["a"].changed == 0  # type: ignore[attr-defined]
    on_disk = json.loads((tmp_path / "state" / "run.lock" / "owner").read_text())
    assert on_disk["run"] == owner.run and on_disk["since"] == owner.since
    assert unreleased(run_dir) == ["a"]  # the play ended without giving it back
    release(owner, ["a"], run_dir, None, **local)  # type: ignore[arg-type]
    assert not (tmp_path / "state" / "run.lock").exists()


def test_a_lock_held_by_another_run_fails_the_host_and_says_by_whom(
    tmp_path: Path, local: dict[str, object]
) -> None:
    other = Owner("control-b/20261201T170000Z/4242", "ops", "2026-12-01T17:00:00+00:00")
    _held_by(tmp_path, other)
    owner, run_dir, result = _take(tmp_path, local)
    stats = result.hosts["a"]  # type: ignore[attr-defined]
    assert not stats.succeeded
    assert (
        "run lock held by control-b/20261201T170000Z/4242 (user ops) since "
        "2026-12-01T17:00:00+00:00" in stats.failed_tasks[0]
    ), stats.failed_tasks
    assert unreleased(run_dir) == []
    release(owner, ["a"], run_dir, None, **local)  # type: ignore[arg-type]  # not ours: kept
    assert (tmp_path / "state" / "run.lock" / "run").read_text().strip() == other.run


def test_the_lock_of_a_dead_run_of_this_machine_is_taken_over(
    tmp_path: Path, local: dict[str, object]
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that has ended
    _held_by(tmp_path, Owner(f"{socket.gethostname()}/20261201T1700Z/{gone.pid}", "ops", "T"))
    owner, run_dir, result = _take(tmp_path, local)
    assert result.hosts["a"].succeeded, result.hosts["a"].failed_tasks  # type: ignore[attr-defined]
    assert (tmp_path / "state" / "run.lock" / "run").read_text().strip() == owner.run
    assert unreleased(run_dir) == ["a"]
