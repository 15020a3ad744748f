"""`provision verify`'s transport (orchestrator/verify/runner.py + backend.py): the real suite
in a real pytest process over one session per host. Here the hosts are this machine (local
connection: the checks fail or skip, no GPU here) and a port nothing listens on (OpenSSH)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory import load_inventory
from orchestrator.verify.runner import run_suite, start_suite


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_an_unreachable_host_is_one_line_and_the_others_are_checked(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        "here ansible_connection=local\n"
        f"gone ansible_host=127.0.0.1 ansible_port={port} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known}'\n"
    )
    hosts = list(load_inventory(inv).hosts)
    trace = tmp_path / "trace"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPROV_VERIFY_TRACE", str(trace))
        run = run_suite(hosts, tmp_path / "verify", processes=1)
    (gone,) = run.results["gone"]
    assert gone.name == "verify.connection" and gone.status == "fail"
    assert gone.diagnosis.startswith("unreachable: 127.0.0.1:") and "\n" not in gone.diagnosis
    here = {r.name for r in run.results["here"]}
    assert {"verify.gpu_count_matches_detection", "verify.no_xid_since_boot"} <= here
    # the JUnit names as testinfra's ansible backend gave them; none for the unreachable host
    names = [c.get("name", "") for c in ET.parse(run.junit).getroot().iter("testcase")]
    assert names and all(n.endswith("[ansible://here]") for n in names)
    # every distinct command once per host
    commands = [line.split("\t", 2)[2] for line in trace.read_text().splitlines()]
    assert len(commands) == len(set(commands)) and len(commands) > 5


def test_the_suite_starts_before_the_plan_and_checks_only_the_hosts_it_is_given(
    tmp_path: Path,
) -> None:
    """`provision verify` starts the suite's process while it detects and plans; a host
    detection could not reach (or the plan blocks) is then left out: no session, no result."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nhere ansible_connection=local\nleft ansible_connection=local\n")
    hosts = list(load_inventory(inv).hosts)
    trace = tmp_path / "trace"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPROV_VERIFY_TRACE", str(trace))
        suite = start_suite(hosts, tmp_path / "verify", processes=1)
        run = suite.finish(["here"])
    assert set(run.results) == {"here"}
    names = [c.get("name", "") for c in ET.parse(run.junit).getroot().iter("testcase")]
    assert names and all(n.endswith("[ansible://here]") for n in names)
    assert {line.split("\t", 1)[0] for line in trace.read_text().splitlines()} == {"here"}


def test_a_suite_told_nothing_ends_without_checking(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nhere ansible_connection=local\n")
    suite = start_suite(list(load_inventory(inv).hosts), tmp_path / "verify", processes=1)
    suite.cancel()  # detection failed, or bad input: nothing is verified
    assert all(s.proc is not None and s.proc.poll() is not None for s in suite._shards)
    junit = tmp_path / "verify" / "verify-junit-0.xml"
    assert not junit.exists() or not list(ET.parse(junit).getroot().iter("testcase"))


def test_a_suite_process_that_cannot_start_ends_the_ones_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.verify import runner

    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\none ansible_connection=local\ntwo ansible_connection=local\n")
    real = runner.subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def second_fails(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        if started:
            raise OSError("no more processes")
        started.append(real(*args, **kwargs))
        return started[0]

    hosts = list(load_inventory(inv).hosts)
    monkeypatch.setattr(runner.subprocess, "Popen", second_fails)
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="no more processes"):
        start_suite(hosts, tmp_path / "verify", processes=2)
    assert started and started[0].poll() is not None  # told nothing: it ended
    assert set(os.listdir("/proc/self/fd")) <= fds  # neither process's pipe left open


def test_the_plan_reaches_the_suite_over_its_pipe(tmp_path: Path) -> None:
    """The plan document is named in the second pipe message: a role it plans is checked."""
    from orchestrator.plandoc import write_plan_document

    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\nhere ansible_connection=local\n")
    hosts = list(load_inventory(inv).hosts)
    bare = run_suite(hosts, tmp_path / "bare", processes=1).results["here"]
    plan = write_plan_document(tmp_path, {"here": {"gpuprov_roles": ["dcgm"]}})
    planned = run_suite(hosts, tmp_path / "planned", plan, processes=1).results["here"]
    not_planned = "dcgm is not in this host's plan"
    assert any(not_planned in r.diagnosis for r in bare)
    dcgm = [r for r in planned if "dcgm" in r.name]
    assert dcgm and not any(not_planned in r.diagnosis for r in dcgm)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_sessions_opened_early_for_a_host_left_out_leave_no_result(tmp_path: Path) -> None:
    """`provision verify` has the sessions opened while it detects: a host that detection
    then leaves out (here: nothing listens on its port) gets no result, not a failed one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        "here ansible_connection=local\n"
        f"gone ansible_host=127.0.0.1 ansible_port={port} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known}'\n"
    )
    hosts = list(load_inventory(inv).hosts)
    suite = start_suite(hosts, tmp_path / "verify", processes=1, open_early=True)
    run = suite.finish(["here"])
    assert set(run.results) == {"here"}
    assert {"verify.gpu_count_matches_detection"} <= {r.name for r in run.results["here"]}
    assert not (tmp_path / "verify" / "verify-failed-0.json").read_text("utf-8").strip("{}")
