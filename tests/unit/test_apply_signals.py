"""A stopped run is stopped: Ctrl-C, SIGTERM and SIGKILL of the process that runs a playbook.

Each case runs `run_playbook` in a child Python (as `provision apply` does) on two local hosts
whose task writes a marker and then sleeps, so both fork workers are mid-task when the signal
comes; a second task would write another marker. Before issue 27's fix, ansible-runner's own
handler turned Ctrl-C into "ended canceled (rc 254)" (exit 1), SIGKILLed only ansible-playbook's
process group (each fork worker has a session of its own, so they ran on), and a SIGKILLed
parent left ansible-playbook running. After: exit 130 through `Interrupted`, and no process of
the run is left (`pgrep -f` of the run's unique token), within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Start, then hang
      ansible.builtin.shell: "touch {out}/{{{{ inventory_hostname }}}}.started; sleep 300 # {token}"
    - name: After the hang
      ansible.builtin.shell: "touch {out}/{{{{ inventory_hostname }}}}.after"
"""

DRIVER = """\
import sys
from pathlib import Path
from orchestrator.apply import Interrupted, new_run_dir, run_playbook
work = Path(sys.argv[1])
try:
    run_playbook(inventories=[work / "inv.ini"], hosts=["a", "b"], host_vars={{}},
                 run_dir=new_run_dir(work / "artifacts"), playbook=work / "play.yml")
except Interrupted as exc:
    print("interrupted", exc.signum, flush=True)
    sys.exit(130)
sys.exit(0)
"""


def _alive(token: str) -> list[str]:
    done = subprocess.run(["pgrep", "-af", token], capture_output=True, text=True, check=False)
    return [ln for ln in done.stdout.splitlines() if "pgrep" not in ln]


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], str, Path]:
    token = f"gpuprov-signal-test-{uuid.uuid4().hex[:12]}"
    out = tmp_path / "out"
    out.mkdir()
    local = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    (tmp_path / "inv.ini").write_text(f"a {local}\nb {local}\n")
    (tmp_path / "play.yml").write_text(PLAY.format(out=out, token=token))
    (tmp_path / "driver.py").write_text(DRIVER.format())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not ((out / "a.started").exists() and (out / "b.started").exists()):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the hosts' first task never started"
        time.sleep(0.5)
    time.sleep(1)
    assert len(_alive(token)) >= 2, "both hosts' tasks are running"
    return proc, token, out


def _gone_within(token: str, seconds: float) -> float:
    start = time.monotonic()
    while _alive(token):
        if time.monotonic() - start > seconds:
            pytest.fail(f"still running after {seconds} s: {_alive(token)}")
        time.sleep(0.2)
    return time.monotonic() - start


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_whole_tree_and_exits_130(tmp_path: Path, signum: int) -> None:
    proc, token, out = _start(tmp_path)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output[-3000:]
    assert f"interrupted {int(signum)}" in output
    assert not _alive(token), "every fork worker's task ended with the run"
    assert not list(out.glob("*.after")), "no host went on to the next task"


def test_sigkill_of_the_parent_stops_ansible(tmp_path: Path) -> None:
    proc, token, out = _start(tmp_path)
    proc.kill()
    proc.wait()
    took = _gone_within(token, 30)
    time.sleep(2)
    assert not list(out.glob("*.after")), "no host went on to the next task"
    assert not _alive("orchestrator.watchdog " + str(tmp_path)), "the watchdog ended too"
    print(f"the run's processes were gone {took:.1f} s after SIGKILL")


def test_watchdog_descendants_reads_proc() -> None:
    from orchestrator.watchdog import descendants

    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        time.sleep(0.5)
        below = descendants(os.getpid())
        assert child.pid in below and len(below) >= 2, below
    finally:
        child.kill()
        child.wait()
