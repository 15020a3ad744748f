"""The role table (orchestrator/roles.yaml) is the one statement of the roles' order,
prefixes and dependencies: playbooks/site.yml runs exactly its rows, in its order, and every
reader (planner, converged-skip, knob table) takes it from there."""

from __future__ import annotations

import copy
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
