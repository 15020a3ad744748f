"""The run lock on each host (issue 27, item 5): playbooks/tasks/run-lock.yml as site.yml
runs it (a play taking the lock, on a local host, the lock directory under tmp_path), and
hostlock's release of what a run left locked (playbooks/lock.yml)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
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


# --- issue 48: a live run of another user, a full disk, a lock without an owner -------------


def test_a_live_run_of_another_user_is_not_taken_over(tmp_path: Path) -> None:
    """`kill -0` of another user's live process fails with EPERM, which the takeover check
    read as "gone". Made here as it happens: the holder runs as nobody, and ansible-playbook
    runs without CAP_KILL (root keeps it otherwise, so kill -0 would just succeed)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("runuser"):
        pytest.skip("needs root, setpriv and runuser to make a live process of another user")
    holder = subprocess.Popen(["runuser", "-u", "nobody", "--", "sleep", "120"])
    try:
        time.sleep(0.3)
        pid = int(subprocess.check_output(["pgrep", "-u", "nobody", "-P", str(holder.pid)]))
        lock = tmp_path / "state" / "run.lock"
        theirs = Owner(f"{socket.gethostname()}/20261201T170000Z/{pid}", "nobody", "T")
        _held_by(tmp_path, theirs)
        ours = Owner(f"{socket.gethostname()}/20261205T210000Z/1", "root", "T2")
        extra = lock_vars(ours)
        extra["gpuprov_lock"]["dir"] = str(lock)  # type: ignore[index]
        (tmp_path / "vars.json").write_text(json.dumps(extra))
        (tmp_path / "inv.ini").write_text(
            f"a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        )
        (tmp_path / "take.yml").write_text(PLAY)
        done = subprocess.run(
            ["setpriv", "--bounding-set", "-kill", "--inh-caps", "-kill",
             str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.ini"),
             str(tmp_path / "take.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode != 0, done.stdout
        assert f"run lock held by {theirs.run} (user nobody)" in done.stdout, done.stdout
        assert (lock / "run").read_text().strip() == theirs.run  # still theirs
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A filesystem with no space left, where the lock's folder is (a 64 KiB tmpfs, filled)."""
    where = tmp_path / "state"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        with contextlib.suppress(OSError), open(where / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_leaves_no_lock_without_an_owner_and_says_so(
    tmp_path: Path, local: dict[str, object], full_disk: Path
) -> None:
    _owner, _run_dir, result = _take(tmp_path, local)
    stats = result.hosts["a"]  # type: ignore[attr-defined]
    assert not stats.succeeded
    said = " ".join(stats.failed_tasks)
    assert f"the run lock {full_disk / 'run.lock'} cannot be written on a" in said, said
    # the shell's own words: dash's printf says "I/O error", bash's "No space left on device"
    assert ("I/O error" in said or "No space left" in said) and "no lock was left" in said
    assert not list(full_disk.glob("run.lock*"))  # neither the lock nor its staging folder


def test_a_lock_without_an_owner_is_named_with_how_to_remove_it(
    tmp_path: Path, local: dict[str, object]
) -> None:
    lock = tmp_path / "state" / "run.lock"
    lock.mkdir(parents=True)
    (lock / "run").write_text("")  # what an older gpuprov left on a full disk
    _owner, _run_dir, result = _take(tmp_path, local)
    said = " ".join(result.hosts["a"].failed_tasks)  # type: ignore[attr-defined]
    assert f"run lock {lock} on a has no owner" in said, said
    assert f"rm -rf {lock}" in said


def _left_running(run: str, seconds: int) -> subprocess.Popen[bytes]:
    """A command of `run` still running on the host (an apt-get a Ctrl-C left behind): its
    environment carries GPUPROV_RUN, as every task's processes do under site.yml."""
    return subprocess.Popen(["sleep", str(seconds)], env={**os.environ, "GPUPROV_RUN": run})


def test_the_lock_is_given_back_only_once_the_runs_commands_are_gone(
    tmp_path: Path, local: dict[str, object]
) -> None:
    run_dir = new_run_dir(tmp_path / "artifacts")
    owner = owner_of(run_dir)
    _held_by(tmp_path, owner)
    straggler = _left_running(owner.run, 12)
    try:
        release(owner, ["a"], run_dir, None, **local)  # type: ignore[arg-type]
        assert straggler.poll() is not None  # it had ended before the lock went
        assert not (tmp_path / "state" / "run.lock").exists()
    finally:
        straggler.kill()
        straggler.wait()


def test_a_dead_runs_lock_is_not_taken_over_while_its_commands_still_run(
    tmp_path: Path, local: dict[str, object]
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    holder = Owner(f"{socket.gethostname()}/20261201T1700Z/{gone.pid}", "ops", "T")
    _held_by(tmp_path, holder)
    straggler = _left_running(holder.run, 120)
    try:
        _owner, _run_dir, result = _take(tmp_path, local)
        said = " ".join(result.hosts["a"].failed_tasks)  # type: ignore[attr-defined]
        assert "but its commands still run on a" in said and f"{straggler.pid} sleep 120" in said
        assert (tmp_path / "state" / "run.lock" / "run").read_text().strip() == holder.run
    finally:
        straggler.kill()
        straggler.wait()


def test_the_lock_is_taken_and_given_back_whatever_the_tags() -> None:
    """`provision apply --tags X` ran without the run lock: an include's own `always` tag is
    not its tasks' (issue 48, seen on a lab host: the lock's tasks never ran under --tags mig).
    Both includes of site.yml apply `always` to the lock's tasks."""
    import yaml

    play = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())[0]
    tasks = [*play["pre_tasks"], *play["post_tasks"]]
    includes = [
        t["ansible.builtin.include_tasks"]
        for t in tasks
        if isinstance(t.get("ansible.builtin.include_tasks"), dict)
        and t["ansible.builtin.include_tasks"]["file"] == "tasks/run-lock.yml"
    ]
    assert len(includes) == 2, includes
    assert all("always" in i["apply"]["tags"] for i in includes), includes
