"""Faults during real runs (issue 27), on one small lab of its own: two Debian 12 p5 hosts,
never converged (every run here is stopped early, or refused before any change).

1. --max-unavailable counts a host drained outside --limit: the second host carries the state
   file an upgrade interrupted after its drain leaves (written here, as roles/driver_upgrade
   writes it: a simulated interruption, the real one is tests/lab/test_upgrade_lab.py's), and
   `apply --limit first --max-unavailable 1` is refused (exit 2) before any change.
2. SIGKILL of `provision` mid-apply: no ansible-playbook of the run is left within seconds
   (the watchdog, orchestrator/watchdog.py), and the host stops changing (dpkg's log).
3. A host that stops answering mid-apply (`docker pause`): the run ends within the SSH
   keepalive's bound (ServerAliveInterval 15 x 4, ansible.cfg), the host reported
   unreachable, instead of stalling forever.
4. Two `provision apply` on one host: while the first converges it, the second is refused for
   the host ("run lock held by <run> since T", exit 1); Ctrl-C of the first: exit 130, the
   interrupted report naming the host mid-change, no Ansible process left, its lock given back.
   (A Ctrl-C mid-upgrade, the host drained: tests/lab/test_upgrade_lab.py.)
5. A host that reboots under a run: reported unreachable with "the host went away mid-run",
   the run ends, and the host comes back under a new boot id.
6. A host left mid-dpkg (dpkg's journal, issue 48): `plan` says needs_recovery, and an apply
   of only the playbook's always-tagged tasks runs `dpkg --configure -a` (76 s alone,
   2026-12-05).
7. A drain hook stopped by its timeout, then the pin backed out (issue 48): the rerun runs the
   undrain hook (24 s alone, 2026-12-06).
8. Two runs at once, `--limit` one host each, `--max-unavailable 1` (issue 48): one host
   drained, the other run refused by the drain claim (35 s alone, 2026-12-06).
9. A full /var/lib/gpuprov (issue 48; extended tier): the host fails naming the lock, nothing
   is left there (70 s at a load average of ~80, 2026-12-06).
10. Ctrl-C in `provision verify` (issue 48), its host's package query made to hang: exit 130,
    the report and the JUnit file name the host interrupted (9 s alone, 2026-12-06).
11. A host lost mid-verify (issue 48; extended tier): one line, not ten failed checks.

Duration on the shared 2-core machine: about 5 min (2026-12-03: 5 passed in 296 s beside
other lab runs; lab up ~10 s, then runs that are each stopped within ~2 min); 2026-12-06: 10
passed, 1 skipped in 846 s at a load average of 50-85 (the issue 48 cases 7, 8, 9, 10 took
145, 99, 114 and 7 s of it; alone: 24, 35 and 9 s at a lower load, 70 s at ~80). Cases 9 and
11 are in the extended tier (EXTENDED below).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from provisionrun import ansible_processes as _ansible_of
from provisionrun import env as _env
from provisionrun import provision_cmd as _cmd
from provisionrun import start

from orchestrator.lab import engine, hosts
from orchestrator.lab.running import RunningLab, attach

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
STATE = "/var/lib/gpuprov/upgrade.json"
LOCK = "/var/lib/gpuprov/run.lock"  # the host's run lock (orchestrator/hostlock.py)
DRAINED = {  # as roles/driver_upgrade/tasks/record.yml writes it after the drain step
    "target": "595.91.07 open",
    "from": "580.159.04 open",
    "done": ["preflight", "drain"],
    "stopped_services": [],
    "status": "in_progress",
    "failed_step": "",
    "history": [
        {"step": "preflight", "result": "done", "at": "2026-12-01T17:00:00Z"},
        {"step": "drain", "result": "done", "at": "2026-12-01T17:00:05Z"},
    ],
}


# The extended tier (`make test-lab-extended` sets GPUPROV_LAB_EXTENDED=1): lab tests CI's 45
# minutes leave out (scripts/lab-tests.sh).
EXTENDED = pytest.mark.skipif(
    os.environ.get("GPUPROV_LAB_EXTENDED") != "1",
    reason="extended tier (GPUPROV_LAB_EXTENDED=1, make test-lab-extended)",
)


def _sh(lab: RunningLab, host: str, command: str) -> str:
    """`command` on `host`; ssh itself retried (the shared machine's load drops a session)."""
    for _attempt in range(5):
        done = lab.ssh(host, command)
        if done.returncode != 255:
            break
        time.sleep(3)
    assert done.returncode == 0, f"{host}: {command}: {done.stdout}{done.stderr}"
    return done.stdout


def _container(lab: RunningLab, host: str) -> str:
    found = [
        c.name
        for c in engine.containers({hosts.LAB_LABEL: lab.name})
        if hosts.to_lab_host(c).name == host
    ]
    assert found, f"no container for {host}"
    return found[0]


@pytest.fixture(scope="module")
def lab(scratch_lab_name: Any) -> Iterator[RunningLab]:
    name = scratch_lab_name("faults")
    hosts.down(name)
    hosts.up(name, "p5.48xlarge", 2, "debian12", say=lambda _: None)
    try:
        yield attach(name, "p5.48xlarge")
    finally:
        hosts.down(name)


def _in_apply(proc: subprocess.Popen[str], lab: RunningLab, timeout: float = 600) -> None:
    """Wait until ansible-playbook runs tasks on the lab."""
    deadline = time.monotonic() + timeout
    while not _ansible_of(lab):
        assert proc.poll() is None, "provision ended before Ansible started"
        assert time.monotonic() < deadline, "Ansible never started"
        time.sleep(1)
    time.sleep(20)  # gathering facts, the first tasks


def _apply_holding_the_lock(
    lab: RunningLab, host: str, report: Path, cwd: Path
) -> subprocess.Popen[str]:
    """`provision apply --limit host`, returned once it holds the host's run lock (site.yml's
    first task after the plan). An earlier case's run that could not give its lock back (the
    SIGKILL and pause cases) leaves it behind: removed first, so the lock seen is this run's
    (CI, 2026-12-03: the stale one was seen at once, a second run started and took it over
    first, and this run was the one refused)."""
    _sh(lab, host, f"rm -rf {LOCK}")
    proc = start(lab, report, "apply", "--limit", host, cwd=cwd)
    try:
        deadline = time.monotonic() + 600
        while lab.ssh(host, f"test -d {LOCK}").returncode != 0:
            assert proc.poll() is None, "the run ended before it took the host's lock"
            assert time.monotonic() < deadline, "the run never took the host's lock"
            time.sleep(2)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc


def _wait_for_a_change(proc: subprocess.Popen[str], artifacts: Path, host: str) -> None:
    """Until the run has changed something on `host` (a task's ok event with changed, in its
    ansible-runner events): a Ctrl-C then finds the host mid-change, as an operator's would.
    (CI, 2026-12-03 20:40: on a loaded machine the Ctrl-C came 46 s into the run, between two
    read-only tasks, and the report rightly said no host had changed yet.)"""
    deadline = time.monotonic() + 600
    while True:
        for path in artifacts.glob("*/ansible/job_events/*.json"):
            with contextlib.suppress(OSError, ValueError):
                event = json.loads(path.read_text())
                data = event.get("event_data") or {}
                res = data.get("res")
                ok = event.get("event") == "runner_on_ok" and data.get("host") == host
                if ok and isinstance(res, dict) and res.get("changed"):
                    return
        assert proc.poll() is None, "the run ended before it changed the host"
        assert time.monotonic() < deadline, "the run changed nothing on the host in 600 s"
        time.sleep(2)


def test_max_unavailable_counts_a_host_drained_outside_the_limit(
    lab: RunningLab, tmp_path: Path
) -> None:
    first, second = lab.hosts
    put = lab.ssh(second, f"mkdir -p /var/lib/gpuprov && echo '{json.dumps(DRAINED)}' > {STATE}")
    assert put.returncode == 0, put.stderr
    try:
        done = subprocess.run(
            _cmd(lab, tmp_path / "r.json", "apply", "--limit", first, "--max-unavailable", "1"),
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        lab.ssh(second, f"rm -f {STATE}")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert "--max-unavailable 1 is used up" in said and second in said, said[-3000:]
    assert not (tmp_path / "artifacts").exists(), "no playbook ran"


def test_sigkill_of_provision_stops_ansible_and_the_host_stops_changing(
    lab: RunningLab, tmp_path: Path
) -> None:
    first = lab.hosts[0]
    proc = start(lab, tmp_path / "r.json", "apply", "--limit", first, cwd=tmp_path, output=False)
    try:
        _in_apply(proc, lab)
    finally:
        proc.kill()  # SIGKILL: provision cannot clean up; only the watchdog can
        proc.wait()
    killed = time.monotonic()
    while _ansible_of(lab):
        assert time.monotonic() - killed < 30, f"Ansible runs on: {_ansible_of(lab)}"
        time.sleep(0.5)
    took = time.monotonic() - killed
    # what was running on the host finishes by itself (a command Ansible started there: a
    # module, its apt-get and dpkg); then nothing new starts: dpkg's log stands still. Waited
    # for, not a fixed 30 s: in CI (2026-12-06, a loaded machine) the last line of a dpkg
    # run begun before the kill came 30-60 s after it, one line of 1300.
    busy = "pgrep -f '[A]nsiballZ|[a]pt-get|^/usr/bin/[d]pkg|^[d]pkg '"  # [x]: not itself
    settle = time.monotonic()
    while lab.ssh(first, busy).returncode == 0:
        assert time.monotonic() - settle < 600, "the host's apt/dpkg never finished"
        time.sleep(2)
    time.sleep(10)
    before = lab.ssh(first, "wc -l < /var/log/dpkg.log 2>/dev/null || echo 0").stdout
    time.sleep(30)
    after = lab.ssh(first, "wc -l < /var/log/dpkg.log 2>/dev/null || echo 0").stdout
    assert before == after, "the host went on changing after provision was killed"
    print(f"ansible-playbook gone {took:.1f} s after SIGKILL of provision")


def test_a_host_that_stops_answering_ends_the_run_in_bounded_time(
    lab: RunningLab, tmp_path: Path
) -> None:
    second = lab.hosts[1]
    proc = start(lab, tmp_path / "r.json", "apply", "--limit", second, cwd=tmp_path)
    container = _container(lab, second)
    try:
        _in_apply(proc, lab)
        for _attempt in range(10):  # the freezer can refuse while a process is in I/O
            paused = subprocess.run(
                ["docker", "pause", container], capture_output=True, check=False
            )
            if paused.returncode == 0:
                break
            time.sleep(1)
        assert paused.returncode == 0, paused.stderr
        paused = time.monotonic()
        output, _ = proc.communicate(timeout=600)
        took = time.monotonic() - paused
    finally:
        subprocess.run(["docker", "unpause", container], capture_output=True, check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, output[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["hosts"][second]["status"] == "unreachable", report["hosts"][second]
    # 15 s x 4 keepalives, plus the task in flight and Ansible's own teardown
    assert took < 300, f"the run took {took:.0f} s after the host stopped answering"
    print(f"the run ended {took:.0f} s after the host stopped answering")


def test_a_second_apply_is_refused_by_the_host_lock_and_ctrl_c_stops_the_first(
    lab: RunningLab, tmp_path: Path
) -> None:
    """Two `provision apply` on one host: the first converges it (a fresh host: minutes of
    apt and DKMS); the second, started once the first holds the host's lock, is refused for
    it; then the operator's Ctrl-C stops the first. (Until 2026-12-03 the first run took up
    an upgrade written into the state file; on these never-converged hosts its kernel
    preflight fails within seconds, apt having no lists yet, so the first run often ended
    before the second was refused. A Ctrl-C mid-upgrade is test_upgrade_lab.py's.)"""
    first = lab.hosts[0]
    proc = _apply_holding_the_lock(lab, first, tmp_path / "first.json", tmp_path)
    try:
        second = subprocess.run(
            _cmd(lab, tmp_path / "second.json", "apply", "--limit", first),
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert proc.poll() is None, "the first run still runs"
        _wait_for_a_change(proc, tmp_path / "artifacts", first)
        proc.send_signal(signal.SIGINT)  # the operator's Ctrl-C
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = second.stdout + second.stderr
    assert second.returncode == 1, said[-3000:]
    report = json.loads((tmp_path / "second.json").read_text())
    failed = report["hosts"][first]["apply"]["failed_tasks"]
    assert any("run lock held by" in t and " since " in t for t in failed), failed
    assert proc.returncode == 130, output[-3000:]
    interrupted = json.loads((tmp_path / "first.json").read_text())
    assert interrupted["interrupted"] is True and interrupted["exit_code"] == 130
    host = interrupted["hosts"][first]
    assert host["status"] == "interrupted" and host["at"], host
    assert "interrupted; hosts mid-change" in output and first in output, output[-3000:]
    assert not _ansible_of(lab), f"Ansible runs on: {_ansible_of(lab)}"
    gone = lab.ssh(first, f"test -d {LOCK}")
    assert gone.returncode != 0, "the interrupted run gave its lock back"


def test_a_host_rebooted_mid_apply_is_named_gone(lab: RunningLab, tmp_path: Path) -> None:
    """Item 6 of issue 27: a host that reboots under a run is reported unreachable with the
    cause ("the host went away mid-run"), not a bare "unreachable", and the run ends. The
    second host (its earlier run stopped by the pause case) converges: apt and DKMS, minutes;
    it reboots while the run's tasks are on it. That the report also says when the run had
    drained it mid-upgrade: tests/unit/test_rollout.py (rollout.still_drained)."""
    second = lab.hosts[1]
    boot = _sh(lab, second, "cat /proc/sys/kernel/random/boot_id").strip()
    proc = _apply_holding_the_lock(lab, second, tmp_path / "r.json", tmp_path)
    try:
        time.sleep(10)
        # the host reboots (systemd's reboot; the lab's container restarts, as in
        # test_lab_engine.py's reboot test)
        lab.ssh(second, "systemd-run --on-active=1 --no-block systemctl reboot")
        output, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, output[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    host = report["hosts"][second]
    said = " | ".join(host["apply"]["failed_tasks"])
    print(f"{second}: {host['status']}: {said}")
    assert host["status"] == "unreachable", host
    assert "unreachable: " in said and "the host went away mid-run" in said, said
    assert not _ansible_of(lab), f"Ansible runs on: {_ansible_of(lab)}"
    # it was a reboot: the host answers again, under a new boot id
    deadline = time.monotonic() + 300
    while lab.ssh(second, "true").returncode != 0:
        assert time.monotonic() < deadline, f"{second} did not come back after its reboot"
        time.sleep(3)
    assert _sh(lab, second, "cat /proc/sys/kernel/random/boot_id").strip() != boot


JOURNAL = "/var/lib/dpkg/updates/0000"  # dpkg's journal, as a run stopped mid-dpkg leaves it


def test_a_host_left_mid_dpkg_is_planned_needs_recovery_and_the_next_apply_recovers_it(
    lab: RunningLab, tmp_path: Path
) -> None:
    """Issue 48: a host restarted mid-dpkg failed every rerun with "dpkg was interrupted"
    while `plan` showed a plain install. The journal file dpkg keeps while it works is left
    here as such a stop leaves it; apt refuses as on the real host. The apply runs only the
    playbook's always-tagged tasks (`--tags mig`: no MIG layout is planned on these hosts):
    the run lock, the plan, the recovery."""
    first = lab.hosts[0]
    _sh(lab, first, f"touch {JOURNAL}")
    try:
        check = lab.ssh(first, "apt-get check 2>&1")
        assert check.returncode != 0 and "dpkg was interrupted" in check.stdout, check.stdout
        plan = subprocess.run(
            _cmd(lab, tmp_path / "plan.json", "plan", "--limit", first, "--json"),
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        warnings = json.loads(plan.stdout)["hosts"][first]["warnings"]
        assert any(w.startswith("needs_recovery: dpkg was interrupted") for w in warnings), warnings
        done = subprocess.run(
            _cmd(lab, tmp_path / "r.json", "apply", "--limit", first, "--tags", "mig"),
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        said = done.stdout + done.stderr
        assert done.returncode == 0, said[-3000:]
        check = lab.ssh(first, "apt-get check 2>&1")
        assert check.returncode == 0, check.stdout  # apt works again
        assert lab.ssh(first, f"test -e {JOURNAL}").returncode != 0
        assert lab.ssh(first, f"test -e {LOCK}").returncode != 0  # the lock was given back
    finally:
        lab.ssh(first, f"rm -f {JOURNAL}")


HOOKS = "/var/log/gpuprov-upgrade-hooks.log"  # what the drain and undrain hooks ran, in order


def test_a_half_drained_host_whose_pin_is_backed_out_is_undrained(
    lab: RunningLab, tmp_path: Path
) -> None:
    """Issue 48: an upgrade's drain hook stopped by its timeout (the host may be half drained),
    then the pin backed out. The upgrade to 580.159.04 is taken up where its preflight left it
    (the state file as record.yml writes it after the preflight: these hosts have no driver to
    upgrade from), its drain hook hangs past driver_upgrade_hook_timeout: the host fails with
    "may be half drained", and detect says so. The pin then goes to 575.57.08: the rerun runs
    the undrain hook and finishes the record. Before, it did nothing and reported the host ok,
    still (half) drained. Runs only the upgrade's tasks (`--tags driver_upgrade`)."""
    first = lab.hosts[0]
    policy = lab.inventory.parent / "host_vars" / f"{first}.yml"
    policy.parent.mkdir(exist_ok=True)
    hooks = {
        "driver_upgrade_undrain_command": f'echo "undrain $(date +%s)" >> {HOOKS}',
        "driver_upgrade_hook_timeout": 5,
    }
    hang = f'echo "drain $(date +%s)" >> {HOOKS}; sleep 120'
    policy.write_text(
        json.dumps(
            {**hooks, "driver_upgrade_drain_command": hang, "nvidia_driver_version": "580.159.04"}
        )
    )
    state = {
        "target": "580.159.04 open",
        "from": "575.57.08 open",
        "done": ["preflight"],
        "stopped_services": [],
        "status": "in_progress",
        "failed_step": "",
        "history": [{"step": "preflight", "result": "done", "at": "2026-12-06T01:00:00Z"}],
    }
    _sh(lab, first, f"rm -rf {LOCK} {HOOKS}; mkdir -p /var/lib/gpuprov")
    _sh(lab, first, f"echo '{json.dumps(state)}' > {STATE}")

    def apply(report: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _cmd(lab, tmp_path / report, "apply", "--limit", first, "--tags", "driver_upgrade"),
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip

    try:
        timed_out = apply("drain.json")
        said = timed_out.stdout + timed_out.stderr
        assert timed_out.returncode == 1, said[-3000:]
        assert "may be half drained" in said, said[-3000:]
        left = json.loads(_sh(lab, first, f"cat {STATE}"))
        assert left["status"] == "failed" and left["failed_step"] == "drain", left
        detect = subprocess.run(
            _cmd(lab, tmp_path / "detect.json", "detect", "--limit", first, "--json"),
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        drained = json.loads(detect.stdout)["hosts"][first]["facts"]["drained"]
        assert drained and drained.startswith("may be half drained"), drained
        # the operator backs the pin out: the plan's driver is another one again
        policy.write_text(
            json.dumps({**hooks, "driver_upgrade_drain_command": f"echo drain >> {HOOKS}",
                        "nvidia_driver_version": "575.57.08"})
        )  # fmt: skip
        backed_out = apply("backed-out.json")
        said = backed_out.stdout + backed_out.stderr
        assert backed_out.returncode == 0, said[-3000:]
        ran = [ln.split()[0] for ln in _sh(lab, first, f"cat {HOOKS}").splitlines()]
        assert ran == ["drain", "undrain"], f"hooks run: {ran}; not undrained:\n{said[-3000:]}"
        done = json.loads(_sh(lab, first, f"cat {STATE}"))
        assert done["status"] == "done" and done["done"][-1] == "undrain", done
        assert done["history"][-1]["step"] == "undrain", done["history"]
        assert any(h["step"] == "abandon" for h in done["history"]), done["history"]
    finally:
        policy.unlink(missing_ok=True)
        lab.ssh(first, f"rm -f {STATE} {HOOKS}")


CLAIM = "/var/lib/gpuprov/drain-claim.json"  # roles/driver_upgrade's drain claim


def test_two_runs_with_different_limits_do_not_drain_past_the_budget(
    lab: RunningLab, tmp_path: Path
) -> None:
    """Issue 48: two `provision apply --max-unavailable 1` at once, one `--limit` each host,
    drained both (each counted only what it had detected, before either drained). Both hosts
    carry an upgrade to 580.159.04 taken up at its drain (the state file after the preflight,
    as in the half-drain case); the drain hook takes 15 s. At most one host is drained; the
    other run is refused, by the claim the role checks on the hosts (or, when the first drain
    came before the second run's detection, by its budget check). Runs only the upgrade's
    tasks; the run that drains then fails at its install step (these hosts have no driver)."""
    policy = {
        "driver_upgrade_drain_command": f'echo "drain $(date +%s)" >> {HOOKS}; sleep 15',
        "driver_upgrade_undrain_command": f'echo "undrain $(date +%s)" >> {HOOKS}',
        "nvidia_driver_version": "580.159.04",
    }
    state = {
        "target": "580.159.04 open", "from": "575.57.08 open", "done": ["preflight"],
        "stopped_services": [], "status": "in_progress", "failed_step": "",
        "history": [{"step": "preflight", "result": "done", "at": "2026-12-06T01:00:00Z"}],
    }  # fmt: skip
    host_vars = lab.inventory.parent / "host_vars"
    host_vars.mkdir(exist_ok=True)
    for host in lab.hosts:
        (host_vars / f"{host}.yml").write_text(json.dumps(policy))
        _sh(lab, host, f"rm -rf {LOCK} {HOOKS} {CLAIM}; mkdir -p /var/lib/gpuprov")
        _sh(lab, host, f"echo '{json.dumps(state)}' > {STATE}")
    limited = ("--max-unavailable", "1", "--tags", "driver_upgrade")
    runs = {
        host: start(
            lab, tmp_path / f"{host}.json", "apply", "--limit", host, *limited, cwd=tmp_path
        )
        for host in lab.hosts
    }
    try:
        said = {host: proc.communicate(timeout=900)[0] for host, proc in runs.items()}
        drained = [
            h for h in lab.hosts if "drain" in _sh(lab, h, f"cat {HOOKS} 2>/dev/null || true")
        ]
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for host in lab.hosts:
            (host_vars / f"{host}.yml").unlink(missing_ok=True)
            lab.ssh(host, f"rm -f {STATE} {HOOKS} {CLAIM}")
    for host, output in said.items():
        print(f"--- {host}: exit {runs[host].returncode}\n{output[-1500:]}")
    assert len(drained) <= 1, f"both hosts drained with --max-unavailable 1: {drained}"
    refused = [
        h
        for h, output in said.items()
        if "not drained: the fleet's budget of 1 host(s)" in output
        or "--max-unavailable 1 is used up" in output
    ]
    assert refused, "neither run was refused"
    assert set(drained).isdisjoint(refused), (drained, refused)


# 70 s at a load average of ~80, 114 s in the whole file's run at 50-85 (2026-12-06): with
# the other issue 48 cases, past the ~2 minutes CI's group c can add; the extended tier.
@EXTENDED
def test_a_full_state_disk_fails_the_host_naming_the_lock_and_leaves_no_lock(
    lab: RunningLab, tmp_path: Path
) -> None:
    """Issue 48: a full /var/lib/gpuprov (here a 16 KiB tmpfs mounted over it, then filled)
    left a run lock without an owner, and every later run failed without naming it. The run
    now fails the host naming the lock and the shell's words, and leaves nothing there; the
    next run, with space again, takes the lock and gives it back. Runs only the playbook's
    always-tagged tasks (`--tags mig`: no MIG layout is planned on these hosts)."""
    first = lab.hosts[0]
    state = "/var/lib/gpuprov"
    _sh(lab, first, f"rm -rf {LOCK}; mkdir -p {state}")
    _sh(lab, first, f"mount -t tmpfs -o size=16k gpuprov-full {state}")
    try:
        _sh(lab, first, f"dd if=/dev/zero of={state}/filler bs=4k 2>/dev/null || true")

        def apply(report: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                _cmd(lab, tmp_path / report, "apply", "--limit", first, "--tags", "mig"),
                cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900,
                check=False,
            )  # fmt: skip

        full = apply("full.json")
        said = full.stdout + full.stderr
        assert full.returncode == 1, said[-3000:]
        failed = " ".join(
            json.loads((tmp_path / "full.json").read_text())["hosts"][first]["apply"][
                "failed_tasks"
            ]
        )
        assert f"the run lock {LOCK} cannot be written on {first}" in failed, failed
        assert "no lock was left" in failed, failed
        assert _sh(lab, first, f"ls -A {state}").split() == ["filler"], "a lock was left behind"
        _sh(lab, first, f"rm -f {state}/filler")
        freed = apply("freed.json")
        assert freed.returncode == 0, (freed.stdout + freed.stderr)[-3000:]
        assert lab.ssh(first, f"test -e {LOCK}").returncode != 0  # taken, then given back
    finally:
        lab.ssh(first, f"umount {state}")


# A dpkg-query that hangs only for verification's package query (its format names both
# db:Status-Abbrev and Status; the probe's does not), first on the PATH of SSH commands.
SLOW_DPKG = "/usr/local/bin/dpkg-query"
SLOW_DPKG_SCRIPT = """#!/bin/sh
case "$*" in *Status-Abbrev*) sleep 600 ;; esac
exec /usr/bin/dpkg-query "$@"
"""


def _ctrl_c_once(
    proc: subprocess.Popen[str], ready: Callable[[], bool], what: str, settle: float = 0
) -> tuple[str, float]:
    """Once `ready()` (the stage hangs where the test made it hang), `settle` seconds, then
    the operator's Ctrl-C: the run's output and how long it took to end after the signal.
    The run is killed if it is still there when this ends otherwise."""
    try:
        deadline = time.monotonic() + 600
        while not ready():
            assert proc.poll() is None, f"the run ended before {what}"
            assert time.monotonic() < deadline, f"the run never reached {what}"
            time.sleep(1)
        time.sleep(settle)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)  # the operator's Ctrl-C
        output, _ = proc.communicate(timeout=300)
        return output, time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_in_verify_writes_the_report_and_junit(lab: RunningLab, tmp_path: Path) -> None:
    """Issue 48: Ctrl-C in `provision verify` left `"hosts": {}` and no JUnit. On a lab host
    whose verification hangs in its package query (a dpkg-query that sleeps), the operator's
    Ctrl-C: exit 130, and the report and the JUnit file say the host was interrupted."""
    first = lab.hosts[0]
    _sh(lab, first, f"cat > {SLOW_DPKG} <<'EOF'\n{SLOW_DPKG_SCRIPT}EOF\nchmod 755 {SLOW_DPKG}")
    junit = tmp_path / "verify.xml"
    proc = start(
        lab, tmp_path / "r.json", "--limit", first, "--junit", str(junit), "verify", cwd=tmp_path
    )
    try:

        def ready() -> bool:
            return lab.ssh(first, "pgrep -f '^sleep 600'").returncode == 0

        output, took = _ctrl_c_once(proc, ready, "its package query")
    finally:
        lab.ssh(first, f"rm -f {SLOW_DPKG}; pkill -f '^sleep 600' || true")
    print(f"verify ended {took:.1f} s after Ctrl-C")
    assert proc.returncode == 130, output[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] is True and report["exit_code"] == 130, report
    verification = report["hosts"][first]["verification"]
    assert verification["state"] == "error", verification
    assert "interrupted (SIGINT)" in verification["note"], verification
    errors = [e.get("message") for e in ElementTree.parse(junit).getroot().iter("error")]
    assert errors == ["interrupted (SIGINT) before it finished"], errors


SLOW_DCGMI = "/usr/local/bin/dcgmi"  # before /usr/bin on ssh's and sudo's PATH
DCGMI_RAN = "/tmp/gpuprov-test-dcgmi-ran"


def test_ctrl_c_in_validate_writes_the_report_and_junit(lab: RunningLab, tmp_path: Path) -> None:
    """Issue 48: Ctrl-C in `provision validate` left `"hosts": {}` and no JUnit. Two lab
    hosts validated with `--dcgm-level 1`: the first one's `dcgmi diag` hangs (a dcgmi that
    sleeps), the second one's ends at once (a dcgmi that leaves a mark and fails), and its
    validation has finished. The operator's Ctrl-C: exit 130, the
    second host's checks kept, the first an error "interrupted (SIGINT)" in the report and
    the JUnit file, and "1 of 2 host(s) finished it" said."""
    first, second = lab.hosts[0], lab.hosts[1]
    fake = f"printf '#!/bin/sh\\nsleep 600\\n' > {SLOW_DCGMI}; chmod 755 {SLOW_DCGMI}"
    _sh(lab, first, fake)
    quick = (
        f"printf '#!/bin/sh\\ntouch {DCGMI_RAN}\\nexit 1\\n' > {SLOW_DCGMI}; chmod 755 {SLOW_DCGMI}"
    )
    _sh(lab, second, f"rm -f {DCGMI_RAN}; {quick}")
    junit = tmp_path / "validate.xml"
    limit = f"{first},{second}"
    args = ("--limit", limit, "--junit", str(junit), "validate", "--dcgm-level", "1")
    proc = start(lab, tmp_path / "r.json", *args, cwd=tmp_path)
    try:

        def ready() -> bool:
            return (
                lab.ssh(first, "pgrep -f '^sleep 600'").returncode == 0
                and lab.ssh(second, f"test -e {DCGMI_RAN}").returncode == 0
            )

        # settle: the second host's result judged and recorded (a local step)
        output, took = _ctrl_c_once(proc, ready, "dcgmi on both hosts", settle=5)
    finally:
        lab.ssh(first, f"rm -f {SLOW_DCGMI}; pkill -f '^sleep 600' || true")
        lab.ssh(second, f"rm -f {SLOW_DCGMI} {DCGMI_RAN}")
    print(f"validate ended {took:.1f} s after Ctrl-C")
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "1 of 2 host(s) finished it" in output, output[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] is True and report["exit_code"] == 130, report
    hung = report["hosts"][first]["validation"]
    assert hung["state"] == "error", hung
    assert "interrupted (SIGINT)" in hung["note"], hung
    finished = report["hosts"][second]["validation"]
    assert finished["state"] == "done" and finished["checks"], finished
    errors = [e.get("message") for e in ElementTree.parse(junit).getroot().iter("error")]
    assert errors == ["interrupted (SIGINT) before it finished"], errors
    names = {c.get("name") for c in ElementTree.parse(junit).getroot().iter("testcase")}
    labels = {
        c["name"] if c.get("gpu") is None else f"{c['name']}[gpu{c['gpu']}]"
        for c in finished["checks"]
    }
    assert labels <= names, (labels, names)  # the finished host's checks kept in the JUnit


# 80 s alone (2026-12-06), most of it the SSH keepalives' minute: past what CI's group c can
# add, so in the extended tier (`make test-lab-extended` sets GPUPROV_LAB_EXTENDED=1).
@EXTENDED
def test_a_host_lost_mid_verify_is_one_line(lab: RunningLab, tmp_path: Path) -> None:
    """Issue 48: a host lost mid-verify showed as ten failed checks. The host's verification
    hangs in its package query (the dpkg-query that sleeps), then the host stops answering
    (`docker pause`): its verification is an error with one line, "unreachable during
    verification: <ssh's words> (after N check(s); M not finished)", and the checks that ran
    before the loss (on this never-converged host, real failures) stay as they were."""
    second = lab.hosts[1]
    _sh(lab, second, f"cat > {SLOW_DPKG} <<'EOF'\n{SLOW_DPKG_SCRIPT}EOF\nchmod 755 {SLOW_DPKG}")
    container = _container(lab, second)
    proc = start(lab, tmp_path / "r.json", "--limit", second, "verify", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 600
        while lab.ssh(second, "pgrep -f '^sleep 600'").returncode != 0:
            assert proc.poll() is None, "verify ended before its package query"
            assert time.monotonic() < deadline, "verification never reached its package query"
            time.sleep(1)
        paused = subprocess.run(["docker", "pause", container], capture_output=True, check=False)
        assert paused.returncode == 0, paused.stderr
        output, _ = proc.communicate(timeout=900)
    finally:
        subprocess.run(["docker", "unpause", container], capture_output=True, check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        lab.ssh(second, f"rm -f {SLOW_DPKG}; pkill -f '^sleep 600' || true")
    assert proc.returncode == 1, output[-3000:]
    verification = json.loads((tmp_path / "r.json").read_text())["hosts"][second]["verification"]
    checks = verification.get("checks", [])
    lost = [c["name"] for c in checks if "lost the connection" in (c.get("diagnosis") or "")]
    print(f"{second}: {verification['state']}: {verification.get('note')}; {len(checks)} checks")
    assert verification["state"] == "error" and not lost, verification
    assert verification["note"].startswith("unreachable during verification: "), verification
