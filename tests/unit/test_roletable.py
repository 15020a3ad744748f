"""The role table (orchestrator/roles.yaml) is the one statement of the roles' order,
prefixes and dependencies: playbooks/site.yml runs exactly its rows, in its order, and every
reader (planner, converged-skip, knob table) takes it from there."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator import converged
from orchestrator.errors import CatalogError
from orchestrator.knobs import ROLE_PREFIXES, default_table
from orchestrator.roletable import RoleTable, default_roles, load_roles

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
FQCN = "gpuprov.nvidia."


def _when(entry: dict[str, Any]) -> list[str]:
    when = entry.get("when") or []
    return [when] if isinstance(when, str) else list(when)


def site_disagreements(play: dict[str, Any], table: RoleTable) -> list[str]:
    """How the site play differs from the table (empty: it runs the table as written)."""
    problems = []
    turns = [str(r["role"]).removeprefix(FQCN) for r in play["roles"]]
    if turns != list(table.order):
        problems.append(f"site.yml runs {turns}, the table's order is {list(table.order)}")
    for entry in play["roles"]:
        name = str(entry["role"]).removeprefix(FQCN)
        gate = [f"'{name}' in gpuprov_roles", f"'{name}' not in gpuprov_skip_roles | default([])"]
        if _when(entry) != gate or entry.get("tags") != [name]:
            problems.append(f"{name}: when {_when(entry)}, tags {entry.get('tags')}")
    for row in (r for r in table.rows if r.runs_with):
        steps = [
            t
            for t in [*play.get("pre_tasks", []), *play.get("post_tasks", [])]
            if t.get("ansible.builtin.include_role", {}).get("name") == FQCN + row.name
        ]
        gate = [
            f"'{row.runs_with}' in gpuprov_roles",
            f"'{row.runs_with}' not in gpuprov_skip_roles | default([])",
        ]
        if not steps or any(_when(t) != gate for t in steps):
            problems.append(f"{row.name}: not run in {row.runs_with}'s turn")
    return problems


def _site_play() -> dict[str, Any]:
    plays = yaml.safe_load(SITE.read_text())
    assert len(plays) == 1
    return dict(plays[0])


def test_site_yml_runs_the_role_table_in_its_order() -> None:
    assert site_disagreements(_site_play(), default_roles()) == []


@pytest.mark.parametrize("change", ["swap", "drop", "ungated"])
def test_a_site_yml_that_disagrees_with_the_table_fails(change: str) -> None:
    play = copy.deepcopy(_site_play())
    if change == "swap":
        play["roles"][1], play["roles"][2] = play["roles"][2], play["roles"][1]
    elif change == "drop":
        del play["roles"][-1]
    else:  # the driver upgrade's prepare step, wherever it sits among the pre-tasks
        step = next(
            t
            for t in play["pre_tasks"]
            if t.get("ansible.builtin.include_role", {}).get("name") == FQCN + "driver_upgrade"
        )
        step["when"] = ["true"]
    assert site_disagreements(play, default_roles()) != []


def test_every_role_folder_is_one_row_and_every_row_a_folder() -> None:
    folders = {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}
    assert folders == {r.name for r in default_roles().rows}
    assert dict(ROLE_PREFIXES) == {r.name: r.prefix for r in default_roles().rows}


def test_the_readers_take_order_and_choices_from_the_table() -> None:
    roles = default_roles()
    knob = default_table()["gpuprov_roles"]
    assert knob.choices == roles.order and tuple(knob.default) == roles.defaults
    toolkit = converged.role_inputs(
        "nvidia_container_toolkit",
        {},
        {"nvidia_driver_branch": "580", "docker_source": "docker", "mig_layout": "x"},
    )
    assert set(toolkit) == {"nvidia_driver_branch", "docker_source"}  # depends_on, not mig


def test_a_row_depending_on_a_later_role_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "orchestrator" / "roles.yaml").read_text())
    data["roles"][0]["depends_on"] = ["docker"]
    path = tmp_path / "roles.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match="role nvidia_driver"):
        load_roles(path)


PASS_THROUGH_ROLE = {  # a role whose inputs the plan does not decide (docs/roles.md)
    "defaults/main.yml": "---\nexample_tool_message: hello\n",
    "meta/argument_specs.yml": (
        "---\nargument_specs:\n  main:\n    short_description: An example\n    options:\n"
        "      example_tool_message:\n        type: str\n        default: hello\n"
        "        description: A message.\n"
    ),
    "tasks/main.yml": "---\n- name: Say it\n  ansible.builtin.debug:\n    msg: hi\n",
    "README.md": "Role `example_tool`\n",
}
SITE_BLOCK = """    - role: gpuprov.nvidia.example_tool
      when:
        - "'example_tool' in gpuprov_roles"
        - "'example_tool' not in gpuprov_skip_roles | default([])"
      tags: [example_tool]
"""
PLAN_IT = """
import sys
from pathlib import Path
from orchestrator.catalog import default_catalog
from orchestrator.errors import PolicyError
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.pipeline import _plan
facts = {"n1": parse_host("n1", load_host(Path(sys.argv[1])))}
roles = ["nvidia_driver", "example_tool"]
_, plans = _plan(facts, {"n1": {"gpuprov_roles": roles}}, default_catalog())
import orchestrator
print(orchestrator.__file__)
print([r.name for r in plans["n1"].roles])
try:
    _plan(facts, {"n1": {"gpuprov_roles": roles, "example_tool_mesage": 1}}, default_catalog())
except PolicyError as e:
    print(e)
"""


def test_a_pass_through_role_is_its_folder_one_row_and_its_site_block(tmp_path: Path) -> None:
    """docs/roles.md's count, run: a copy of the collection with a new role added in those
    three places plans it, checks its inputs' names, and its site.yml agrees with the table."""
    for part in ("orchestrator", "roles", "playbooks"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    role = tmp_path / "roles" / "example_tool"
    for name, text in PASS_THROUGH_ROLE.items():
        (role / name).parent.mkdir(parents=True, exist_ok=True)
        (role / name).write_text(text)
    table = tmp_path / "orchestrator" / "roles.yaml"
    row = "  - name: example_tool\n    prefix: example_tool_\n    depends_on: []\n"
    table.write_text(
        table.read_text().replace("  - name: driver_upgrade\n", row + "  - name: driver_upgrade\n")
    )
    site = tmp_path / "playbooks" / "site.yml"
    site.write_text(
        site.read_text().replace("      tags: [dcgm]\n", "      tags: [dcgm]\n" + SITE_BLOCK, 1)
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    fixture = REPO / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
    done = subprocess.run(
        [sys.executable, "-c", PLAN_IT, str(fixture)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    copy, planned = done.stdout.splitlines()[:2]
    assert copy.startswith(str(tmp_path))  # the copy's planner and table, not the checkout's
    assert planned == "['nvidia_driver', 'example_tool']"
    assert "did you mean example_tool_message?" in done.stdout
    play = yaml.safe_load(site.read_text())[0]
    assert site_disagreements(play, load_roles(table)) == []
