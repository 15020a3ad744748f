"""The plan reaches the roles above everything an inventory sets (lab hosts, real SSH).

An inventory whose host_vars and group_vars contradict the plan: host_vars sets
`nvidia_driver_flavour: auto` (a valid policy value the planner resolves, not a valid role
input: the role's argument check refuses it) and `nvidia_driver_branch: ""`; group_vars
sets `gpuprov_roles` with `mig` (no layout: the planner leaves it out). (A value the plan owns,
such as `nvidia_driver_fabricmanager: false` on a host with NVSwitches, is bad input before
any change since issue 46: tests/unit/test_one_contract.py.)
The real site.yml, through `orchestrator.apply.run_playbook` as `provision apply` runs it, in
check mode and with only the `always` tasks (the plan pre-task and the roles' argument
checks: cheap, no package is installed), then one more play reports every planned variable
as the hosts see it. Each must equal the plan, the argument checks must pass, and mig must
not run.

Runs on the session lab; GPUPROV_TEST_LAB=<name> uses a running lab instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from orchestrator import apply as apply_mod
from orchestrator import pipeline
from orchestrator.catalog import default_catalog
from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

GROUP_VARS = {"gpuprov_roles": ["nvidia_driver", "docker", "nvidia_container_toolkit", "mig"]}
HOST_VARS = {"nvidia_driver_flavour": "auto", "nvidia_driver_branch": ""}

REPORT_PLAY = """\
- name: Run the site playbook
  ansible.builtin.import_playbook: {site}

- name: Report what the hosts hold after the plan pre-task
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Planned variables as the hosts see them
      ansible.builtin.debug:
        msg: "{{{{ dict(__keys | zip(__keys | map('extract', hostvars[inventory_hostname]))) }}}}"
      vars:
        __keys: "{{{{ gpuprov_plan.hosts[inventory_hostname].keys() | list }}}}"
      tags: [always]
"""


@pytest.fixture(scope="module")
def precedence_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def conflicting_inventory(
    precedence_lab: RunningLab, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of the lab's inventory with group_vars and host_vars against the plan."""
    root = tmp_path_factory.mktemp("precedence")
    inventory = root / "inventory.ini"
    shutil.copy(precedence_lab.inventory, inventory)
    group_vars = root / "group_vars"
    group_vars.mkdir()
    for src in sorted((precedence_lab.inventory.parent / "group_vars").iterdir()):
        (group_vars / src.name).symlink_to(src.resolve())
    (group_vars / "gpu_nodes.yml").write_text(yaml.safe_dump(GROUP_VARS))
    (root / "host_vars").mkdir()
    for host in precedence_lab.hosts:
        (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(HOST_VARS))
    return inventory


@pytest.fixture(scope="module")
def applied(
    conflicting_inventory: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Mapping[str, Mapping[str, object]], Mapping[str, Any], list[Mapping[str, Any]]]:
    """Plan as `provision apply` does (detect over SSH, policy from this inventory), then run."""
    fleet = pipeline._load_inventory(str(conflicting_inventory), None)
    detected = pipeline._detect(fleet, Console(quiet=True))
    assert not detected.errors, detected.errors
    _, plans = pipeline._plan(detected.facts, fleet.hostvars, default_catalog())
    planned = pipeline._document_vars(list(fleet.hosts), plans)  # as apply passes it
    work = tmp_path_factory.mktemp("precedence-run")
    playbook = work / "site-and-report.yml"
    playbook.write_text(REPORT_PLAY.format(site=apply_mod.SITE_PLAYBOOK))
    events: list[Mapping[str, Any]] = []
    result = apply_mod.run_playbook(
        inventories=[conflicting_inventory],
        hosts=list(fleet.hosts),
        host_vars=planned,
        run_dir=apply_mod.new_run_dir(work / "artifacts"),
        playbook=playbook,
        check=True,
        tags=["gpuprov-always-only"],  # no task has it: only `always` tasks run
        on_event=events.append,
    )
    return planned, {"result": result, "inventory": fleet.hostvars}, events


def _ok(events: list[Mapping[str, Any]], host: str) -> list[Mapping[str, Any]]:
    return [
        e["event_data"]
        for e in events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("host") == host
    ]


def test_the_inventory_really_contradicts_the_plan(applied: Any) -> None:
    planned, run, _ = applied
    for host, plan in planned.items():
        inventory = run["inventory"][host]
        assert inventory["nvidia_driver_flavour"] == "auto"  # host_vars beat lab.yml's
        assert plan["nvidia_driver_flavour"] in ("open", "proprietary")
        assert inventory["gpuprov_roles"] != plan["gpuprov_roles"]
        assert "mig" not in plan["gpuprov_roles"]
        assert plan["nvidia_driver_fabricmanager"] is True  # NVSwitches on the p5 profile
        assert plan["nvidia_driver_branch"] != ""


def test_the_roles_receive_the_plan(applied: Any) -> None:
    planned, run, events = applied
    result = run["result"]
    assert result.failed_hosts == (), result.hosts
    for host, plan in planned.items():
        seen = [
            e["res"]["msg"]
            for e in _ok(events, host)
            if e.get("task") == "Planned variables as the hosts see them"
        ]
        assert seen == [plan], host
        checked = {
            e.get("role")
            for e in _ok(events, host)
            if str(e.get("task", "")).startswith("Validating arguments against arg spec")
        }
        # every planned role's argument check passed with the plan's values; mig never ran
        assert checked == set(plan["gpuprov_roles"]), host


# --- planning inside Ansible: plain ansible-playbook, the collection, no gpuprov group_vars --

COLLECTION_REPORT_PLAY = """\
- name: Run the collection's site playbook
  ansible.builtin.import_playbook: gpuprov.nvidia.site

- name: Report what the hosts hold after the plan pre-task
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Planned variables as the hosts see them
      ansible.builtin.copy:
        content: "{{ dict(__keys | zip(__keys | map('extract', hostvars[inventory_hostname])))
                     | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      vars:
        __keys: "{{ __gpuprov_planned_here.vars.keys() | list }}"
      delegate_to: localhost
      check_mode: false
      tags: [always]
"""


@pytest.fixture(scope="module")
def bare_inventory(precedence_lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab's inventory with only the lab's own group_vars (lab.yml): no
    inventory/group_vars/all.yml, so no gpuprov_roles and no fleet policy."""
    root = tmp_path_factory.mktemp("bare")
    inventory = root / "inventory.ini"
    shutil.copy(precedence_lab.inventory, inventory)
    (root / "group_vars").mkdir()
    lab_vars = precedence_lab.inventory.parent / "group_vars" / "lab.yml"
    (root / "group_vars" / "lab.yml").symlink_to(lab_vars.resolve())
    return inventory


def _collection_env(work: Path) -> dict[str, str]:
    """The collection built from this checkout and installed under `work`; an ansible.cfg
    without the repository's roles_path, so the roles come from the collection."""
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [str(bin_dir / "ansible-galaxy"), "collection", "build", "--output-path", str(work)],
        cwd=apply_mod.REPO_ROOT,
        check=True,
        capture_output=True,
    )
    (tarball,) = work.glob("gpuprov-nvidia-*.tar.gz")
    collections = work / "collections"
    cfg = work / "ansible.cfg"
    cfg.write_text("[defaults]\nhost_key_checking = True\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    # not the checkout's ansible.cfg: there, gpuprov.nvidia counts as installed (the checkout)
    install = [str(bin_dir / "ansible-galaxy"), "collection", "install", str(tarball)]
    subprocess.run([*install, "-p", str(collections)], env=env, check=True, capture_output=True)
    return env


def test_plain_ansible_playbook_plans_like_provision(
    bare_inventory: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`ansible-playbook gpuprov.nvidia.site` from the installed collection, no plan passed:
    the collection's probe module and planner action plugin plan each host; the variables
    the hosts hold equal the plan document `provision apply` would pass (same roles, same
    values), and every planned role's argument check passes with them (check mode, only the
    `always` tasks: no package is installed)."""
    work = tmp_path_factory.mktemp("collection-run")
    env = _collection_env(work)
    playbook = work / "site-and-report.yml"
    playbook.write_text(COLLECTION_REPORT_PLAY)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(bare_inventory)]
    argv += [str(playbook), "--check", "--tags", "gpuprov-always-only", "-e", f"out_dir={work}"]
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    fleet = pipeline._load_inventory(str(bare_inventory), None)
    detected = pipeline._detect(fleet, Console(quiet=True))
    _, plans = pipeline._plan(detected.facts, fleet.hostvars, default_catalog())
    expected = pipeline._document_vars(list(fleet.hosts), plans)
    seen = {h: json.loads((work / f"{h}.json").read_text()) for h in fleet.hosts}
    assert seen == expected
    # the default callback's output: each planned role's argument check, ok on each host
    checked: dict[str, set[str]] = {h: set() for h in fleet.hosts}
    for block in done.stdout.split("\nTASK [")[1:]:
        header = block.split("]", 1)[0]
        if "Validating arguments" in header:
            for host in fleet.hosts:
                if f"ok: [{host}]" in block:
                    checked[host].add(header.split(" : ")[0])
    for host, plan in expected.items():
        roles = {f"gpuprov.nvidia.{r}" for r in plan["gpuprov_roles"]}  # type: ignore[attr-defined]
        assert checked[host] == roles, (host, done.stdout[-3000:])
