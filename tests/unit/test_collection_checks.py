"""playbooks/validate.yml and playbooks/verify.yml from a checkout (the ansible tier: real
ansible-playbook on this machine, local connection). This machine has no NVIDIA GPU (CI's has
none), so gpuprov's planner blocks it, as `provision` does: each playbook fails the host at its
check task, naming the blocker, and still publishes the host's outcome with set_stats. The
checks' parity with `provision` on hosts that plan: tests/lab/test_collection_checks_lab.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output
from orchestrator.result import CheckResult
from orchestrator.verify.runner import run_ansible_suites

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("playbook", "stats", "done"),
    [
        ("validate", "gpuprov_validation", "validated"),
        ("verify", "gpuprov_verification", "verified"),
    ],
)
def test_a_blocked_host_fails_with_its_blocker_and_its_stats(
    tmp_path: Path, playbook: str, stats: str, done: str
) -> None:
    out = subprocess.run(["sh", "-s"], input=probe_script(), capture_output=True, text=True)
    facts = parse_host("node-1", split_output("node-1", out.stdout))
    expected = plan_host(facts, load_policy("node-1", {}), default_catalog())
    if not expected.blocked:
        pytest.skip(f"this machine plans unblocked ({expected.gpu_summary}): nothing to block")
    (tmp_path / "inv.ini").write_text(
        "[gpu_nodes]\nnode-1 ansible_connection=local "
        f"ansible_python_interpreter={sys.executable}\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_SHOW_CUSTOM_STATS": "True",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    argv = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inv.ini")]
    ran = subprocess.run(
        [*argv, f"playbooks/{playbook}.yml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 2, ran.stdout[-3000:] + ran.stderr[-3000:]
    (line,) = [ln for ln in ran.stdout.splitlines() if ln.strip().startswith("RUN:")]
    host = json.loads(line.split("RUN:", 1)[1])[stats]["node-1"]
    assert host["status"] == "failed" and host["checks"] == {} and host["summary"] == "not run"
    assert host["msg"].startswith(f"node-1: blocked, not {done}: ")
    assert expected.blockers[0][:60] in host["msg"]


def test_one_suite_run_verifies_a_batch_of_hosts_as_it_verifies_one(tmp_path: Path) -> None:
    """The verify playbook's suite step (issue 49: one pytest per host took 638.7 s for 100
    fleet hosts): the hosts of a batch dealt into a few pytest processes, each host's checks
    as the suite gives them for that host alone. Two inventory names for this machine (local
    connection), planned as the recorded 2x H200 host: this machine has no driver, so checks
    fail, with the same names and statuses for each host and for one host alone."""
    planned = plan_host(
        parse_host(
            "node-1", load_host(REPO / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580")
        ),
        load_policy("node-1", {}),
        default_catalog(),
    )
    assert not planned.blocked, planned.blockers
    (tmp_path / "inv.ini").write_text(
        "[gpu_nodes]\nnode-1 ansible_connection=local\nnode-2 ansible_connection=local\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_INVENTORY": str(tmp_path / "inv.ini"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    plan = planned.document_vars()
    both, tail = run_ansible_suites({"node-1": plan, "node-2": plan}, env, 300, processes=2)
    alone, _tail = run_ansible_suites({"node-1": plan}, env, 300, processes=1)

    def statuses(host: dict[str, tuple[CheckResult, ...]], name: str) -> dict[str, str]:
        return {c.label: c.status for c in host[name]}

    assert set(both) == {"node-1", "node-2"}, tail
    assert statuses(both, "node-1") == statuses(both, "node-2") == statuses(alone, "node-1")
    assert "fail" in statuses(alone, "node-1").values()  # no NVIDIA driver on this machine
