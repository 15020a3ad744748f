"""Apply wiring: a real (tiny) playbook through ansible-runner on local-connection hosts."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.apply import SITE_PLAYBOOK, check_options, new_run_dir, run_playbook
from orchestrator.errors import BadInputError, HostError
from orchestrator.plandoc import read_plan_document


def _site_plan_task() -> str:
    """site.yml's own first pre-task (the plan as host facts), its file path made absolute."""
    site = yaml.safe_load(SITE_PLAYBOOK.read_text())
    task = dict(site[0]["pre_tasks"][0])
    assert task["name"] == "Take this host's variables from the plan"
    task["ansible.builtin.import_tasks"] = str(
        SITE_PLAYBOOK.parent / task["ansible.builtin.import_tasks"]
    )
    return yaml.safe_dump([task], default_flow_style=True, width=10_000).strip()


PLAYBOOK = """\
- name: Tiny converge
  hosts: all
  gather_facts: false
  serial: "{{ gpuprov_serial | default('100%') }}"
  max_fail_percentage: "{{ gpuprov_max_fail_percent | default(100) }}"
  pre_tasks: __PRE_TASKS__
  tasks:
    - name: Write the planned value
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.txt"
        content: "{{ planned_value }}\\n"
        mode: "0644"
    - name: Record the batch
      ansible.builtin.lineinfile:
        path: "{{ out_dir }}/{{ inventory_hostname }}.batch"
        line: "{{ ansible_play_batch | length }}"
        create: true
        mode: "0644"
    - name: Fail where asked
      ansible.builtin.fail:
        msg: "planned failure on {{ inventory_hostname }}"
      when: fail_here | default(false) | bool
    - name: Recover where asked
      when: rescue_here | default(false) | bool
      block:
        - name: Fail inside a block
          ansible.builtin.fail:
            msg: "recoverable"
      rescue:
        - name: Rescue it
          ansible.builtin.debug:
            msg: "rescued"
""".replace("__PRE_TASKS__", _site_plan_task())


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    out = tmp_path / "out"
    out.mkdir()
    inventory = tmp_path / "inventory.ini"
    lines = [
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}"
        for h in ("node-a", "node-b", "node-c")
    ]
    inventory.write_text(
        "[gpu_nodes]\n" + "\n".join(lines) + f"\n[gpu_nodes:vars]\nout_dir={out}\n"
        "planned_value=from-group-vars\n"
    )
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK)
    return {"out": out, "inventory": inventory, "playbook": playbook, "tmp": tmp_path}


def run(lab: dict[str, Path], host_vars: Mapping[str, Mapping[str, object]], **kw: Any) -> Any:
    return run_playbook(
        inventories=[lab["inventory"]],
        hosts=kw.pop("hosts", sorted(host_vars)),
        host_vars=host_vars,
        run_dir=new_run_dir(lab["tmp"] / "artifacts"),
        playbook=lab["playbook"],
        **kw,
    )


@pytest.mark.ansible
def test_plan_vars_win_and_stats_come_back(lab: dict[str, Path]) -> None:
    host_vars = {"node-a": {"planned_value": "A"}, "node-b": {"planned_value": "B"}}
    result = run(lab, host_vars)
    assert result.status == "successful" and result.rc == 0
    assert (lab["out"] / "node-a.txt").read_text() == "A\n"
    assert (lab["out"] / "node-b.txt").read_text() == "B\n"
    assert not (lab["out"] / "node-c.txt").exists()  # not in the run's host list
    stats = result.hosts["node-a"]
    # 2 plan tasks (check, set facts) + 2 writes
    assert (stats.ok, stats.changed, stats.failed, stats.unreachable) == (4, 2, 0, 0)
    assert stats.changed_tasks == ("Write the planned value", "Record the batch")
    assert stats.skipped == 3  # planning on the host (a plan was passed), fail, rescue
    # artifacts kept: the plan document, the runner's events and stdout; no env/ files
    plan = read_plan_document(result.artifact_dir / "plan.json")
    assert plan == {"node-a": {"planned_value": "A"}, "node-b": {"planned_value": "B"}}
    assert list((result.artifact_dir / "ansible" / "job_events").iterdir())
    assert not (result.artifact_dir / "env").exists()
    command = json.loads((result.artifact_dir / "ansible" / "command").read_text())
    assert command["env"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert "HOME" not in command["env"]  # the process environment is not kept on disk

    # idempotent: a second run changes nothing
    again = run(lab, host_vars)
    assert again.hosts["node-a"].changed == 0 and again.hosts["node-b"].changed == 0


@pytest.mark.ansible
def test_a_rescued_failure_is_not_a_failure(lab: dict[str, Path]) -> None:
    result = run(lab, {"node-a": {"planned_value": "A", "rescue_here": True}})
    stats = result.hosts["node-a"]
    assert result.status == "successful"
    assert (stats.failed, stats.rescued, stats.failed_tasks) == (0, 1, ())
    assert stats.succeeded


@pytest.mark.ansible
def test_check_mode_changes_nothing(lab: dict[str, Path]) -> None:
    result = run(lab, {"node-a": {"planned_value": "A"}}, check=True)
    assert result.check_mode
    assert result.hosts["node-a"].changed_tasks == ("Write the planned value", "Record the batch")
    assert not (lab["out"] / "node-a.txt").exists()


@pytest.mark.ansible
def test_failures_and_serial_batches(lab: dict[str, Path]) -> None:
    host_vars = {
        "node-a": {"planned_value": "A"},
        "node-b": {"planned_value": "B", "fail_here": True},
        "node-c": {"planned_value": "C"},
    }
    events: list[str] = []
    result = run(lab, host_vars, on_event=lambda e: events.append(e["event"]))
    assert result.status == "failed"
    assert result.failed_hosts == ("node-b",)
    assert result.hosts["node-b"].failed_tasks == ("Fail where asked: planned failure on node-b",)
    assert (lab["out"] / "node-c.txt").read_text() == "C\n"  # the others went on
    assert (lab["out"] / "node-a.batch").read_text() == "3\n"  # one batch of three
    assert "runner_on_ok" in events
    # one host per batch: node-b's batch fails, the rollout stops, node-c is not touched
    stopped = run(lab, {**host_vars, "node-c": {"planned_value": "C2"}}, serial="1")
    assert (lab["out"] / "node-a.batch").read_text() == "3\n1\n"
    assert stopped.hosts["node-c"].ok == 0
    assert (lab["out"] / "node-c.txt").read_text() == "C\n"


@pytest.mark.ansible
def test_a_broken_playbook_is_a_host_error(lab: dict[str, Path]) -> None:
    lab["playbook"].write_text("- name: Broken\n  hosts: all\n  tasks:\n    - nosuch.module: {}\n")
    with pytest.raises(HostError, match="ran no task"):
        run(lab, {"node-a": {}})


@pytest.mark.parametrize(
    ("serial", "max_fail"), [("0", None), ("abc", None), ("150%", None), (None, 101)]
)
def test_bad_rollout_options_are_bad_input(serial: str | None, max_fail: int | None) -> None:
    with pytest.raises(BadInputError):
        check_options(serial, max_fail)
    check_options("25%", 0)
    check_options("2", 100)


@pytest.mark.ansible
def test_the_plan_beats_group_vars_and_host_vars(lab: dict[str, Path]) -> None:
    """Inventory group_vars/ and host_vars/ files (above an INI's [group:vars]) lose to the
    plan, whatever type the inventory gives; a variable the plan does not set keeps the
    inventory's value."""
    inv_dir = lab["inventory"].parent
    (inv_dir / "group_vars").mkdir()
    (inv_dir / "host_vars").mkdir()
    (inv_dir / "group_vars" / "gpu_nodes.yml").write_text("planned_value: from-group-vars-file\n")
    (inv_dir / "host_vars" / "node-a.yml").write_text(
        "planned_value: from-host-vars\nfail_here: true\nrescue_here: true\n"
    )
    result = run(lab, {"node-a": {"planned_value": "A", "fail_here": False}})
    assert result.status == "successful", result.hosts
    assert (lab["out"] / "node-a.txt").read_text() == "A\n"
    assert result.hosts["node-a"].rescued == 1  # rescue_here: not planned, host_vars' value


@pytest.mark.ansible
def test_a_host_the_plan_does_not_cover_stops(lab: dict[str, Path]) -> None:
    """A plan document without the running host's entry stops that host before any change."""
    result = run(lab, {"node-b": {"planned_value": "B"}}, hosts=["node-a", "node-b"])
    assert result.failed_hosts == ("node-a",)
    assert "has no entry for this host" in result.hosts["node-a"].failed_tasks[0]
    assert not (lab["out"] / "node-a.txt").exists()
    assert (lab["out"] / "node-b.txt").read_text() == "B\n"
